/* qlab: the IQ lattice codebooks (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S).
 *
 * Each lattice format decodes through a fixed table of grid points that is part
 * of the GGUF format, and its encoder searches the lattice those points were
 * taken from. Both are data, not code: they are resolved at run time through the
 * data manifest (datasets/manifest.tsv, names "iq-grids/...", sha256-verified)
 * and never compiled into qlab.
 *
 * Per codebook (a "family"; IQ1_S and IQ1_M share one) qlab keeps
 *   values      n_points x dim decode bytes exactly as the GGUF table stores
 *               them (IQ2: magnitudes 8/25/43, IQ3: odd magnitudes, IQ1: int8
 *               -1/0/1 as two's-complement bytes);
 *   lattice     n_points x dim lattice coordinates 2l+1 (l = 0 .. n_levels-1)
 *               from the encoder-side code table (kgrid_*), which ggml packs as
 *               code = sum_i l_i << (code_bits * i);
 *   map         for every code 0 .. map_size-1: the grid index (>= 0) when the
 *               code is a grid point, else -(1 + offset) of its neighbour list;
 *               codes with a coordinate >= n_levels cannot arise in the encoder
 *               and hold QL_IQ_MAP_UNREACHABLE;
 *   neighbours  at each offset: a count n, then n grid indices: the grid points
 *               within the n_shells smallest squared distances of the code's
 *               lattice point, ordered by (distance, index). This is the list
 *               ggml's iq2xs_init_impl / iq3xs_init_impl build; its order
 *               decides ties in the encoder, so it is part of bit-exactness.
 *
 * Loading is thread-safe and happens once per family per process; a failed load
 * is not cached, so a later call reports the same error again. */
#ifndef QL_IQ_GRIDS_H
#define QL_IQ_GRIDS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

typedef enum {
    QL_IQ_GRID_IQ2_XXS, /* 256 points, 8-dim, 2-bit lattice codes */
    QL_IQ_GRID_IQ2_XS,  /* 512 points */
    QL_IQ_GRID_IQ2_S,   /* 1024 points */
    QL_IQ_GRID_IQ1_S,   /* 2048 points, used by IQ1_S and IQ1_M */
    QL_IQ_GRID_IQ3_XXS, /* 256 points, 4-dim, 3-bit lattice codes */
    QL_IQ_GRID_IQ3_S,   /* 512 points */
    QL_IQ_GRID_COUNT,
} ql_iq_grid_id;

#define QL_IQ_MAP_UNREACHABLE INT32_MIN

typedef struct {
    const char *name;           /* "IQ2_XXS", for messages */
    int n_points;               /* grid points */
    int dim;                    /* coordinates per point: 8 or 4 */
    int code_bits;              /* bits per coordinate in a lattice code: 2 or 3 */
    int n_levels;               /* lattice levels per coordinate: 3 or 8 */
    int32_t map_size;           /* codes 0 .. map_size-1 */
    const uint8_t *values;      /* n_points x dim decode bytes (see above) */
    const uint8_t *lattice;     /* n_points x dim coordinates 2l+1 */
    const int32_t *map;         /* map_size entries */
    const uint16_t *neighbours; /* count, indices, count, indices, ... */
    const uint8_t *signs;       /* ksigns_iq2xs: 128 entries, 7 sign bits + parity; NULL for IQ1 */
    const uint8_t *masks;       /* kmask_iq2xs: 8 entries, 1 << i; NULL for IQ1 */
} ql_iq_grid;

/* Loads a codebook (and the sign tables its formats use) unless already loaded.
 * Errors name the table, the file, the line and what was wrong. Thread-safe. */
ql_status ql_iq_grid_load(ql_iq_grid_id id, ql_error *err);

/* The loaded codebook, or NULL when ql_iq_grid_load has not succeeded yet.
 * Lock-free; safe to call from any thread. */
const ql_iq_grid *ql_iq_grid_get(ql_iq_grid_id id);

#endif
