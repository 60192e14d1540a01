/* qlab: calibration statistics of product inputs and the outlier-channel split
 * (LLM.int8()-style).
 *
 * Calibration. A forward pass over a calibration text records, at every product site
 * (model.h: lin[site]), the largest |x| seen on each input channel: per site n_in
 * floats (ql_act_stats). The accumulator is fed through the forward's observer seam
 * (ql_act_stats_observe) or directly (ql_act_stats_add). The calibration pass is the
 * importance matrix's (ql_imatrix_collect, imatrix.h, with ql_act_stats_observe as its
 * `also` observer): one pass over the text gives both, and calib.h keeps both.
 *
 * Selection. With ratio r > 0, a channel is an outlier when its magnitude is strictly
 * above r times the median channel magnitude of its site (for an even count, the mean
 * of the two middle values). At most floor(n_in / 16) channels per site are kept, the
 * largest first (equal magnitudes: the lower channel first). A site whose median is 0
 * (a sparse input) selects its nonzero channels up to the cap.
 *
 * The split product. For a product y = W x with outlier set O:
 *   W_eff = dequant(quant(W with the columns in O set to 0)), then the columns in O
 *           overwritten with their exact f32 values;
 *   x_eff = actquant(x with the channels in O set to 0), then the channels in O
 *           overwritten with their exact values;
 *   y     = W_eff x_eff, one f32 product.
 * Zeroing before quantizing keeps outlier columns out of every block scale (and min) on
 * both sides. This single product equals the two-part product
 *   y = dequant(quant(W_0)) actquant(x_0) + W_O x_O
 * term by term: for j not in O the terms are the same two floats multiplied; for j in O
 * the two-part form has W_O[j] x[j] plus dequant(quant(W_0))[:, j] * 0, which is 0 (a
 * zeroed activation rounds to 0 in every format), while the single product has exactly
 * W_O[j] x[j]. Only the order of the f32 additions differs (tests/unit/test_outliers.c
 * checks the products term by term and the sums against a bound).
 *
 * Size. The outlier columns are stored beside the quantized matrix: n_out f32 values
 * plus one channel index per column, the index 16 bits wide when n_in <= 65536, else
 * 32 bits (ql_outliers_bytes). Q8_0_XC uses the same channel lists differently: the
 * weight keeps them inside standard Q8_0 bytes with outlier-exact scales
 * (core/formats/quant_xc.h), so it adds no bytes; the activation side is split the same way. */
#ifndef QL_OUTLIERS_H
#define QL_OUTLIERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/forward.h"
#include "model/model.h"

/* At most n_in / QL_OUTLIER_CAP_DIV outlier channels per matrix. */
#define QL_OUTLIER_CAP_DIV 16

/* ------------------------------------------------------------------------- */
/* Calibration statistics                                                      */
/* ------------------------------------------------------------------------- */

typedef struct {
    int n_sites;
    int64_t *n_in;   /* (n_sites,) input width of each site */
    float **amax;    /* (n_sites,) each (n_in[s],): max |x| per input channel */
    int64_t *n_rows; /* (n_sites,) rows (tokens) seen */
} ql_act_stats;

/* Zeroed statistics for n_sites sites of the given widths (each > 0). */
ql_status ql_act_stats_alloc(ql_act_stats **out, int n_sites, const int64_t *n_in, ql_error *err);
void ql_act_stats_free(ql_act_stats *s);

/* Clears every maximum and count. */
void ql_act_stats_reset(ql_act_stats *s);

/* Adds x (n_rows, n_in[site]) to the site's maxima. NaN values are ignored. */
void ql_act_stats_add(ql_act_stats *s, int site, const float *x, int64_t n_rows);

/* Folds b into a (same sites and widths, e.g. two calibration shards); QL_EINVAL when
 * the shapes differ. */
ql_status ql_act_stats_merge(ql_act_stats *a, const ql_act_stats *b, ql_error *err);

/* Statistics with one site per product site of a weight set (widths lin[s].n_in). */
ql_status ql_act_stats_alloc_for(ql_act_stats **out, const ql_weights *w, ql_error *err);

/* The forward pass observer (ql_matmul_observer) that feeds st = ctx:
 *   ql_forward_set_observer(fw, ql_act_stats_observe, st). */
void ql_act_stats_observe(void *ctx, int site, const ql_linear *lin, const float *x, int64_t n_tok);

/* ---- the cache file ----
 *
 * A calibration pass is the costliest step of an outlier config, so calib.c keeps its
 * maxima in a file beside the calib: imatrix of the same pass. Layout (little endian,
 * like every qlab file; qlab builds only on little-endian hosts):
 *   header, 256 bytes:
 *     0   char[8]  magic "QLAMAX\0\0\1"
 *     8   u32      version (1)
 *     12  u32      n_sites
 *     16  i64      chunk_size (tokens per chunk)
 *     24  i64      chunk_count (chunks run)
 *     32  char[64] model_sha256 (hex, of the model file)
 *     96  char[64] text_sha256 (hex, of the calibration text)
 *     160 char[64] body_sha256 (hex, of every byte after the header)
 *     224 zero padding
 *   body: i64 n_in[n_sites] | i64 n_rows[n_sites] | per site in order, f32 amax[n_in]
 * A reader trusts nothing: magic, version, the size the widths imply, the checksum,
 * widths > 0, rows >= 0 and every maximum >= 0 (not NaN) are checked, and an error
 * names the file and what differs. */

/* What a set of maxima was computed from. */
typedef struct {
    char model_sha256[65]; /* hex SHA-256 of the model file */
    char text_sha256[65];  /* hex SHA-256 of the calibration text */
    int64_t chunk_size;    /* tokens per chunk (>= 1) */
    int64_t chunk_count;   /* chunks run (>= 1) */
} ql_act_stats_origin;

/* Writes s and its origin to path atomically (temporary file, then rename). */
ql_status ql_act_stats_write(const ql_act_stats *s, const ql_act_stats_origin *origin,
                             const char *path, ql_error *err);

/* Reads a file ql_act_stats_write wrote: *out (free with ql_act_stats_free) and its
 * origin. QL_EIO when the file cannot be read, QL_EFORMAT when it is not a valid
 * maxima file (the message says why). The caller checks that the origin and the
 * widths are the ones it expects. */
ql_status ql_act_stats_read(const char *path, ql_act_stats **out, ql_act_stats_origin *origin,
                            ql_error *err);

/* ------------------------------------------------------------------------- */
/* Selection                                                                   */
/* ------------------------------------------------------------------------- */

/* The outlier channels of one matrix. */
typedef struct {
    int64_t n_in;     /* width of the matrix input */
    int64_t n;        /* number of outlier channels */
    int64_t *cols;    /* (n,) ascending channel indices (heap; NULL when n == 0) */
    double median;    /* median channel magnitude */
    double threshold; /* ratio * median */
    int64_t n_above;  /* channels above the threshold before the cap */
} ql_outlier_cols;

/* Selects the outliers of one site from its channel magnitudes amax (n_in values).
 * ratio <= 0 selects nothing. Fills *out (free its columns with ql_outlier_cols_deinit). */
ql_status ql_outliers_select(const float *amax, int64_t n_in, double ratio, ql_outlier_cols *out,
                             ql_error *err);
void ql_outlier_cols_deinit(ql_outlier_cols *c);

/* Channel lists for every site of a weight set. */
typedef struct {
    int n_sites;
    double ratio;
    ql_outlier_cols *site; /* (n_sites,) */
    int64_t n_total;       /* outlier channels over all sites */
} ql_outlier_set;

/* Selects every site of st at ratio. */
ql_status ql_outlier_set_build(const ql_act_stats *st, double ratio, ql_outlier_set **out,
                               ql_error *err);
void ql_outlier_set_free(ql_outlier_set *s);

/* ------------------------------------------------------------------------- */
/* The weight side of the split                                                */
/* ------------------------------------------------------------------------- */

/* Bytes the f32 outlier columns add to a matrix of n_out rows and n_in columns:
 * n_cols * (4 * n_out + index width), index width 2 when n_in <= 65536, else 4. */
uint64_t ql_outliers_bytes(int64_t n_out, int64_t n_in, int64_t n_cols);

/* Sets the listed columns of w (n_out, n_in) to 0. */
void ql_outliers_zero_cols(float *w, int64_t n_out, int64_t n_in, const int64_t *cols, int64_t n);

/* Copies the listed columns of src (n_out, n_in) into dst. */
void ql_outliers_copy_cols(float *dst, const float *src, int64_t n_out, int64_t n_in,
                           const int64_t *cols, int64_t n);

/* The effective weight of a product with an outlier split (header comment), for a
 * weight of type `type` (the type actually used; any type ql_quant_tensor accepts, or
 * Q8_0_XC):
 *   Q8_0_XC: the Q8_0 bytes of ql_quant_q8_0_xc with these columns, decoded; no f32
 *            columns (the bytes hold them), outlier_bytes = 0;
 *   others:  the columns are zeroed (and their importance weights, when imatrix is
 *            given, so the quantizer spends nothing on values that are replaced),
 *            quantized, decoded, and the exact columns written back.
 * w (n_out, n_in) is not modified; w_eff receives (n_out, n_in) floats. q (q_size
 * bytes, at least n_out * ql_row_size(storage type, n_in)) receives the quantized bytes;
 * q == NULL uses a temporary buffer. oc == NULL or oc->n == 0 is a plain quantization.
 * *q_bytes and *outlier_bytes (each may be NULL) receive the two sizes. */
ql_status ql_outliers_quant_weight(int32_t type, const float *w, int64_t n_out, int64_t n_in,
                                   const float *imatrix, const ql_outlier_cols *oc, float *w_eff,
                                   void *q, size_t q_size, uint64_t *q_bytes,
                                   uint64_t *outlier_bytes, ql_error *err);

#endif
