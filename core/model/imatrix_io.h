/* qlab: importance matrices in memory and in llama.cpp's two file formats.
 *
 * An importance matrix holds, for every matmul weight W (d_out x d_in, ggml
 * ne = [d_in, d_out, n_mat]), the per-input-column statistics of the activations
 * x that met W during calibration: sums[j] = sum over tokens of x_j^2, and the
 * number of tokens counted. The importance a quantizer gets for column j is
 * sums[j] / count (the mean of x_j^2), exactly what llama-quantize hands to
 * ggml_quantize_chunk.
 *
 * Legacy .dat (little endian, written by llama-imatrix up to b5xxx; --output-format dat):
 *   int32 n_entries
 *   n_entries x { int32 name_len | name bytes | int32 ncall | int32 nval |
 *                 nval x float32 value }      value = sum / count * ncall
 *   int32 chunk_count | int32 dataset_len | dataset bytes   (optional trailer)
 * where ncall = ceil(max count / chunk_size); the chunk size itself is not stored.
 * llama-quantize uses value / ncall.
 *
 * GGUF imatrix (llama-imatrix's default output since mid-2025):
 *   keys    general.type = "imatrix", imatrix.datasets (arr[str]),
 *           imatrix.chunk_count (u32), imatrix.chunk_size (u32)
 *   tensors per entry, F32: <name>.in_sum2 ne = [nval / n_mat, n_mat] (sums of x^2),
 *           <name>.counts ne = [1, n_mat] (tokens per matrix), and optionally
 *           <name>.in_sum (sums of x, same shape as in_sum2; newer llama.cpp).
 *   llama-quantize uses in_sum2 / counts per matrix, 1 where a count is 0.
 *
 * In memory the entries keep the order they were read or added in (so a .dat file
 * round-trips byte for byte); ql_imatrix_sort() gives llama.cpp's sorted order.
 * Counts are in tokens when chunk_size > 0. A legacy .dat read without knowing
 * its chunk size has chunk_size == 0 and counts in chunks (count = ncall, sums =
 * stored values): the importance sums/count is the same either way, and
 * ql_imatrix_set_chunk_size() converts to tokens the way llama-imatrix does when
 * it loads a .dat. */
#ifndef QL_IMATRIX_IO_H
#define QL_IMATRIX_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* ggml tensor names are at most 63 bytes; a GGUF imatrix adds ".in_sum2". */
#define QL_IMATRIX_NAME_MAX 63

/* The importances (sums / count of a column) a quantizer can use. The quantizers
 * weigh column j by I_j sqrt(sigma^2 + w_j^2) and form sums of such weights times
 * squared values, and squares of those sums: below the minimum they underflow,
 * above the maximum they overflow (IQ4_NL writes infinite block scales at 3e38).
 * Between the two, for weights of standard deviation 1e-4 to 300, every quantizer's
 * error stays within 1.25 times its error at importance 1 (test_imatrix_io measures
 * it); real matrices lie between about 1e-8 and 1e8. */
#define QL_IMATRIX_IMPORTANCE_MIN 1e-15f
#define QL_IMATRIX_IMPORTANCE_MAX 1e12f

typedef enum {
    QL_IMATRIX_DAT,  /* legacy binary format */
    QL_IMATRIX_GGUF, /* GGUF imatrix format */
} ql_imatrix_format;

typedef struct {
    char *name;       /* weight tensor name, e.g. "blk.0.attn_q.weight" */
    int64_t n_values; /* ne[0] x n_mat */
    int64_t n_mat;    /* matrices sharing the entry (experts of a 3-D weight); 1 for 2-D */
    float *sums;      /* n_values, [n_mat][n_values / n_mat]: sum of x_j^2 */
    float *in_sum;    /* same layout: sum of x_j; NULL when absent (legacy, older GGUF) */
    int64_t *counts;  /* n_mat: tokens counted (chunks when the imatrix's chunk_size is 0) */
} ql_imatrix_entry;

typedef struct {
    int64_t n_entries;
    ql_imatrix_entry *entries;
    int64_t chunk_count; /* chunks of calibration text behind the statistics (0: unknown) */
    int64_t chunk_size;  /* tokens per chunk; 0: unknown, counts are in chunks */
    int64_t n_datasets;
    char **datasets; /* calibration text names, as llama-imatrix records them */
    char *path;      /* file it was read from (for messages); NULL when built in memory */
    /* Entries left out by ql_imatrix_drop_degenerate() (reading does it): no usable
     * importance, so their tensors are quantized without, as for a missing entry. */
    int64_t n_dropped;
    char **dropped; /* their names, in file order */
    int64_t cap_entries;
} ql_imatrix;

/* ---- lifetime and building (for the collector and for tests) ---- */

ql_status ql_imatrix_alloc(ql_imatrix **out, ql_error *err);
void ql_imatrix_free(ql_imatrix *im); /* NULL is fine */

/* Appends a zeroed entry (n_values must be a positive multiple of n_mat >= 1;
 * names unique, 1..QL_IMATRIX_NAME_MAX bytes). *out points into im and stays
 * valid until the next add or sort. with_in_sum allocates the in_sum array. */
ql_status ql_imatrix_add_entry(ql_imatrix *im, const char *name, int64_t n_values, int64_t n_mat,
                               bool with_in_sum, ql_imatrix_entry **out, ql_error *err);
ql_status ql_imatrix_add_dataset(ql_imatrix *im, const char *name, ql_error *err);

/* Entry by weight tensor name, or NULL. */
const ql_imatrix_entry *ql_imatrix_find(const ql_imatrix *im, const char *tensor_name);

/* Removes the entries that counted no token in any of their matrices (llama-imatrix
 * leaves them out of its files); the others keep their order. */
void ql_imatrix_drop_empty(ql_imatrix *im);

/* Checks every entry's importances: QL_EFORMAT (naming the file, entry, matrix and
 * column) for one that is not a finite number >= 0 or exceeds
 * QL_IMATRIX_IMPORTANCE_MAX. Then drops the degenerate entries: those that counted
 * tokens but none of whose counted matrices reaches QL_IMATRIX_IMPORTANCE_MIN (all
 * zero, denormal). Quantized with such weights, a model is destroyed (every block
 * scale 0: Q4_0 stories260K at PPL 2e10); without them it is quantized as llama-quantize
 * quantizes a tensor the imatrix has no entry for. Their names go to im->dropped. */
ql_status ql_imatrix_drop_degenerate(ql_imatrix *im, ql_error *err);

/* A one-line warning about the dropped entries ("<file>: 3 entries carry no usable
 * importance ...: a, b, c"), or false when none was dropped. */
bool ql_imatrix_dropped_warning(const ql_imatrix *im, char *buf, size_t size);

/* Sorts the entries by name (llama-imatrix's output order). */
void ql_imatrix_sort(ql_imatrix *im);

/* Converts chunk-unit counts (chunk_size == 0, from a .dat) into token counts:
 * sums and counts are multiplied by chunk_size, as llama-imatrix does when it
 * loads a .dat. QL_EINVAL when chunk_size < 1 or the counts are already tokens
 * with another chunk size; a no-op when it is the same. */
ql_status ql_imatrix_set_chunk_size(ql_imatrix *im, int64_t chunk_size, ql_error *err);

/* Adds the statistics of in to acc, as llama-imatrix --in-file A --in-file B combines
 * files (IMatrixCollector::load_imatrix, b4747): per entry the sums of x^2 (and of x
 * when both have them) are added in single precision and the counts added, so the
 * importance sums / count is the counts-weighted mean of the inputs'; an entry of one
 * input only is taken as it is; chunk counts add up and dataset names are kept once
 * each. Counts in chunks (a .dat, chunk_size 0) are converted to tokens when the
 * other side knows its chunk size (ql_imatrix_set_chunk_size, on in or acc).
 * QL_EINVAL, naming both files, for an entry whose length or matrix count differs or
 * two different chunk sizes. in may be converted; acc keeps its entry order, with
 * in's new entries after. */
ql_status ql_imatrix_merge(ql_imatrix *acc, ql_imatrix *in, ql_error *err);

/* What llama-imatrix's save does to a combination in chunk units (a .dat's): every
 * stored value becomes (sum / count) * count in single precision, the form its
 * save_imatrix writes, so that a combination of .dat files is byte for byte
 * llama-imatrix's. A no-op for token counts. */
void ql_imatrix_merge_finish(ql_imatrix *im);

/* ---- files ---- */

/* Reads either format; GGUF is recognised by its magic, anything else is parsed
 * as .dat. Errors name the file, the byte offset (for .dat; the GGUF reader's
 * own for the container), the entry, and expected vs actual. The importances are
 * checked and the degenerate entries dropped (ql_imatrix_drop_degenerate). */
ql_status ql_imatrix_read(const char *path, ql_imatrix **out, ql_error *err);

/* The same over a caller's buffer; name is used in messages. */
ql_status ql_imatrix_read_buffer(const void *buf, size_t size, const char *name, ql_imatrix **out,
                                 ql_error *err);

/* Writes im to path (atomically: temporary file, then rename). GGUF needs the
 * chunk size (call ql_imatrix_set_chunk_size() for a .dat-born imatrix). .dat
 * drops in_sum and keeps only the last dataset name, as llama-imatrix does. */
ql_status ql_imatrix_write(const ql_imatrix *im, const char *path, ql_imatrix_format format,
                           ql_error *err);

/* Format from a file name: ".dat" is legacy, ".gguf" is GGUF; false otherwise. */
bool ql_imatrix_format_from_name(const char *path, ql_imatrix_format *out);
const char *ql_imatrix_format_name(ql_imatrix_format format);
/* The format ql_imatrix_format_name() calls s ("dat" or "gguf"); false for any other. */
bool ql_imatrix_format_parse(const char *s, ql_imatrix_format *out);

/* ---- what a quantizer gets ---- */

/* Fills out[n_cols] with the importance of each input column of tensor_name:
 * sums / count for each matrix (1 where a matrix has count 0, or no importance of
 * at least QL_IMATRIX_IMPORTANCE_MIN), as llama-quantize computes it from either
 * format. n_cols is ne[0] x n_mat of the weight (ne[0] for a 2-D weight).
 * QL_ENOTFOUND when the imatrix has no entry for the tensor, or a degenerate one
 * (llama-quantize then quantizes without importance weights); QL_EFORMAT when the
 * entry has another length (message names the tensor, both lengths) or an
 * importance that is not finite, negative or beyond QL_IMATRIX_IMPORTANCE_MAX. */
ql_status ql_imatrix_weights(const ql_imatrix *im, const char *tensor_name, int64_t n_cols,
                             float *out, ql_error *err);

#endif
