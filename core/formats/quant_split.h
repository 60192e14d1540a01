/* qlab: ggml's scalar quantizers split into their two halves: choosing a block's
 * parameters, and rounding one value given them.
 *
 * ggml's quantizer for a block format does two things: a scale search picks the
 * block's parameters (its fp16 scale and min, its sub-block scales, a K-quant's
 * super-block scales) from the block's values and importance weights, then every
 * value is given a level under those parameters. An error-compensating quantizer
 * (GPTQ, formats/gptq.h) needs the halves apart: the parameters are chosen once, at
 * the block's first column, from weights that are then changed column by column
 * before each is rounded. Here:
 *
 *   ql_split_choose   the block's parameters from (current) values, with ggml's own
 *                     search for the type and the importance weights it would get;
 *   ql_split_level    the level of one value x at position j given them, by ggml's
 *                     own final rounding for that type (which is the nearest level of
 *                     the block's grid for the K-quants and IQ4; the legacy types
 *                     round with the unrounded inverse scale of the search, as ggml
 *                     does, which can differ from the fp16 grid's nearest by a tie);
 *   ql_split_value    what the decoder makes of a level at position j (bit for bit
 *                     the type's dequantizer);
 *   ql_split_pack     the block's bytes: the parameters and the levels.
 *
 * Used in sequence on the block's values (choose, then level of each value, then
 * pack), they give exactly ggml's bytes (tests/unit/test_gptq.c checks it against
 * the existing quantizers, which the golden suite checks against ggml).
 *
 * The types: every type whose decoding is scalar given its block parameters, those
 * of ql_split_applies(): Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL
 * IQ4_XS. The lattice codebooks (IQ1-IQ3) decode groups of values jointly and the
 * ternary types have no scale search: ql_split_why_not() says so.
 *
 * Levels are the stored integers, 0-based (Q8_0: q + 128, q in [-127, 127]). A value
 * outside the block's range clamps to the end level. No allocation; thread-safe. */
#ifndef QL_QUANT_SPLIT_H
#define QL_QUANT_SPLIT_H

#include <stdbool.h>
#include <stdint.h>

#define QL_SPLIT_MAX_VALUES 256 /* values of the largest block (the K super-block) */
#define QL_SPLIT_MAX_SUB    16  /* sub-blocks of a block, at most (Q2_K/Q3_K/Q6_K) */
#define QL_SPLIT_MAX_BYTES  210 /* bytes of the largest block (Q6_K) */

/* How a sub-block's values are rounded (ggml's final level assignment per type). */
typedef enum {
    QL_SPLIT_TRUNC_SYM,    /* (int)(x * ri + ro), ro = nmax + 0.5 (Q4_0/Q5_0 reference) */
    QL_SPLIT_TRUNC_AFFINE, /* (int)((x - ro) * ri + 0.5) (Q4_1/Q5_1 reference) */
    QL_SPLIT_ROUND,        /* roundf(x * ri) + 128 (Q8_0) */
    QL_SPLIT_NEAREST_SYM,  /* nearest_int(ri * x) + nmax (weighted legacy search) */
    QL_SPLIT_NEAREST_AFF,  /* nearest_int(ri * (x - ro)) (weighted Q4_1/Q5_1 search) */
    QL_SPLIT_DIV_SYM,      /* nearest_int(x / ri) + nmax (Q3_K, Q6_K) */
    QL_SPLIT_DIV_AFFINE,   /* nearest_int((x + ro) / ri) (Q2_K, Q4_K, Q5_K) */
    QL_SPLIT_TABLE,        /* nearest IQ4 table entry to ri * x (IQ4_NL, IQ4_XS) */
} ql_split_rule;

/* One block's parameters, as ql_split_choose leaves them. */
typedef struct {
    int32_t type;
    int n;         /* values in the block */
    int sub;       /* values per sub-block */
    int nlev;      /* levels: 0 .. nlev - 1 */
    int nmax;      /* the rule's offset (levels below it are negative multiples) */
    ql_split_rule rule;
    float ri[QL_SPLIT_MAX_SUB]; /* the rounding's inverse scale (or divisor) per sub-block */
    float ro[QL_SPLIT_MAX_SUB]; /* its offset (the min, 8.5, ...) per sub-block */
    /* A sub-block whose decoder scale is 0 (every level decodes alike): ggml keeps the
     * levels of the search there, L0. */
    bool keep[QL_SPLIT_MAX_SUB];
    uint8_t L0[QL_SPLIT_MAX_VALUES];
    /* Decoding, per sub-block: value = da * (level - doff) - db, or da * table[level]. */
    float da[QL_SPLIT_MAX_SUB];
    float db[QL_SPLIT_MAX_SUB];
    int doff;
    bool table;
    uint8_t bytes[QL_SPLIT_MAX_BYTES]; /* the block's parameter fields, levels zero */
    int nbytes;
} ql_split_block;

/* Whether the type's quantizer splits (see above). */
bool ql_split_applies(int32_t type);

/* Why it does not (a sentence), or NULL when it does. */
const char *ql_split_why_not(int32_t type);

/* Chooses block ib's parameters of a row of n_per_row values (a multiple of the
 * type's block size) by ggml's search. row: the values to choose from (the block's
 * are row[ib * block .. ]); sigma_row: the row ggml's weighted legacy search takes
 * its sigma^2 from (the whole original row, as llama-quantize sees it; may be row);
 * qw: the row's n_per_row importance weights, or NULL for ggml's reference search. */
void ql_split_choose(int32_t type, const float *row, const float *sigma_row, int64_t n_per_row,
                     int64_t ib, const float *qw, ql_split_block *b);

/* The level ggml gives value x at position j (0 .. b->n - 1) of the block. */
int ql_split_level(const ql_split_block *b, int j, float x);

/* The value the type's decoder gives level at position j. */
float ql_split_value(const ql_split_block *b, int j, int level);

/* Writes the block (b->nbytes bytes) with levels L[0 .. b->n - 1] to out. */
void ql_split_pack(const ql_split_block *b, const uint8_t *L, void *out);

#endif
