/* qlab: quantizing a tensor and a whole GGUF model file (what `qlab quantize` runs).
 *
 * ql_quant_tensor_rows is the one way qlab turns a tensor's rows into a type's bytes.
 * ql_quant_model reads a GGUF model whose tensors are F32, F16 or BF16, decides every
 * tensor's type with the type policy (quant_policy.h: a pure weight type or one of
 * llama-quantize's mixes), quantizes tensor by tensor (multi-threaded over rows) and
 * writes a GGUF file llama.cpp can load: all metadata copied,
 * general.quantization_version = 2 and general.file_type set to llama.cpp's
 * LLAMA_FTYPE of the mix or the weight type. Peak memory: about three float copies of
 * the largest tensor plus its quantized bytes. Optionally measures each tensor's
 * error (dequantized vs source), weighted per input column by an importance vector.
 * Non-finite weights in a tensor to be quantized are an error naming its position. */
#ifndef QL_QUANT_MODEL_H
#define QL_QUANT_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "formats/gptq.h"
#include "model/gguf.h"
#include "model/quant.h"

/* ---------------------------------------------------------------------------
 * One tensor: the single quantization entry point
 *
 * Every command that quantizes a tensor calls ql_quant_tensor_rows: qlab quantize
 * (ql_quant_model below), qlab fit's error table and its writer. It splits the rows
 * as llama-quantize does: each 2-D matrix (one expert of a 3-D tensor) on its own,
 * with its own importance vector, cut into chunks of ql_quant_chunk_rows(n_per_row)
 * rows counted from the matrix's first row, one quantizer call per chunk
 * (ql_quant_tensor). A format with row state (the traits' row_state column: IQ1_S,
 * IQ1_M) gives a row bytes that depend on the rows before it in its chunk, so a
 * range that starts inside a chunk is quantized from the chunk's first row on: any
 * range of rows gets the bytes the whole tensor has there, whichever command asks. */

/* A tensor to quantize: its shape, where its f32 rows come from, its importance. */
typedef struct {
    int64_t n_per_row;    /* ne[0] */
    int64_t rows_per_mat; /* ne[1]: rows of one 2-D matrix */
    int64_t n_mats;       /* ne[2] * ne[3] */
    /* Rows [rows_first, rows_first + rows_n) of the tensor as f32, or NULL. */
    const float *rows;
    int64_t rows_first, rows_n;
    /* Decodes the rows that are not in `rows` (NULL: the rows asked for, and for a
     * row_state type the rows before them in their chunk, must all be there). Its
     * type must decode (a dequantize function). */
    const ql_gguf_tensor *gt;
    /* Importance for the quantizer: NULL, n_per_row values for every matrix, or
     * n_mats vectors of n_per_row values (imatrix_per_mat). */
    const float *imatrix;
    bool imatrix_per_mat;
    /* GPTQ instead of ggml's rounding (formats/gptq.h): the factors of the n_mats
     * matrices' Hessians (with GPTQ's options); NULL: ggml's quantizer. GPTQ's rows are
     * independent given the factor, so any range of rows gets the bytes the whole tensor
     * has there. */
    const ql_gptq_factor *const *gptq;
} ql_quant_src;

/* The shape of gt, its rows decoded from it, no importance. */
void ql_quant_src_from_gguf(ql_quant_src *s, const ql_gguf_tensor *gt);

/* Shape ne (ggml order, unused dimensions 1) with every row in f32 (row-major), no
 * importance. */
void ql_quant_src_from_f32(ql_quant_src *s, const int64_t ne[QL_GGUF_MAX_DIMS], const float *f32);

/* Quantizes rows [row0, row0 + nrows) of s (rows over the whole tensor, matrix after
 * matrix) to type into dst, at least nrows * ql_row_size(type, n_per_row) bytes of
 * dst_size. Errors: those of ql_quant_tensor, a range outside the tensor, a row that
 * is neither in s->rows nor decodable. Non-finite weights give blocks of unspecified
 * contents (ql_quant_model refuses them first). Allocates only to decode rows or to
 * start inside a chunk of a row_state type; distinct ranges may be quantized from
 * several threads at once. */
ql_status ql_quant_tensor_rows(const ql_quant_src *s, int32_t type, int64_t row0, int64_t nrows,
                               void *dst, size_t dst_size, ql_error *err);

/* ---------------------------------------------------------------------------
 * A whole model */

/* general.quantization_version llama-quantize writes (ggml's GGML_QNT_VERSION). */
#define QL_GGML_QNT_VERSION 2

/* Importance weights of a tensor: returns n_mats * n_per_row floats (one vector per
 * 2-D matrix of the tensor, n_mats = ne[2] * ne[3]) or NULL when there are none.
 * The pointer must stay valid until the model is written. */
typedef const float *(*ql_imatrix_lookup_fn)(void *ctx, const char *tensor, int64_t n_per_row,
                                             int64_t n_mats);

/* What llama-quantize records about the importance matrix it used, written as the
 * keys quantize.imatrix.file, .dataset (when not NULL), .entries_count and
 * .chunks_count (when > 0), as llama-quantize writes them (str, str, i32, i32). */
typedef struct {
    const char *file;
    const char *dataset;
    int64_t n_entries;
    int64_t n_chunks;
} ql_quant_imatrix_meta;

/* Writes m's keys (nothing when m is NULL), as llama-quantize does after
 * general.file_type. Errors: counts beyond int32, a failed write. */
ql_status ql_quant_write_imatrix_keys(ql_gguf_writer *w, const ql_quant_imatrix_meta *m,
                                      ql_error *err);

/* One --override-kv KEY=TYPE:VALUE (llama.cpp's syntax): int (written as i32),
 * float (f32), bool (true/false) or str (at most 127 bytes). */
#define QL_QUANT_KV_KEY_MAX 128
typedef struct {
    char key[QL_QUANT_KV_KEY_MAX];
    ql_gguf_value value; /* a str value points into the parsed text */
} ql_quant_kv_override;

/* Parses text as llama.cpp's string_parse_kv_override does, but strictly: an int
 * must be an integer in the i32 range, a float a finite number, a key 1..127 bytes.
 * Errors quote the text and say what was expected. */
ql_status ql_quant_kv_override_parse(const char *text, ql_quant_kv_override *out, ql_error *err);

/* Bytes a tensor already has in the plan's type (nbytes of them: a quantization made
 * elsewhere, e.g. GPTQ's layer-by-layer pass, experiment/gptq_pass.h), or NULL for
 * qlab to quantize it. The pointer must stay valid until the model is written. */
typedef const void *(*ql_prequant_lookup_fn)(void *ctx, const char *tensor, int32_t type,
                                             uint64_t nbytes);

typedef struct {
    ql_quant_config cfg;
    ql_prequant_lookup_fn prequant; /* NULL: every tensor quantized here */
    void *prequant_ctx;
    ql_imatrix_lookup_fn imatrix; /* NULL: no importance weights (ggml's reference path) */
    void *imatrix_ctx;
    bool stats; /* measure the per-tensor weight error */
    bool quiet; /* no progress line */
    /* Importance that weighs the stats' imatrix_err (e.g. to compare a file quantized
     * without an imatrix on the same scale); NULL: the quantization's own imatrix. */
    ql_imatrix_lookup_fn stats_imatrix;
    void *stats_imatrix_ctx;
    const ql_quant_imatrix_meta *imatrix_meta; /* NULL: no quantize.imatrix.* keys */
    /* llama-quantize --allow-requantize: a quantized source tensor is quantized again
     * from its dequantized values (else such a source is refused, as llama-quantize
     * refuses it). */
    bool allow_requantize;
    /* llama-quantize --override-kv: written after every other key (so they win). */
    const ql_quant_kv_override *kv_overrides;
    int n_kv_overrides;
    /* llama-quantize --keep-split: a split input is written as a split set of as many
     * files, each with the tensors of its input file (ql_quant_out_path names them);
     * else one file. */
    bool keep_split;
} ql_quant_model_opts;

/* Path of output file k of n for the OUT a user gave: OUT itself when n is 1; else
 * the split set's name NAME-0000k-of-0000n.gguf, NAME being OUT without ".gguf" (or
 * without its own -00001-of-0000N.gguf). Returns false when it does not fit. */
bool ql_quant_out_path(const char *out, int k, int n, char *buf, size_t size);

typedef struct {
    ql_quant_plan *plan;     /* one entry per tensor, file order */
    ql_weight_error *errors; /* per tensor when opts.stats, else NULL */
    ql_weight_error total;   /* all tensors (when opts.stats) */
    ql_weight_error body;    /* all but the head and the embeddings (when opts.stats) */
    bool *has_imatrix;       /* per tensor: importance weights were used to quantize it */
    uint32_t file_type;      /* general.file_type written */
    uint64_t file_size;      /* bytes of the written file (all files of a split set) */
    int32_t n_files;         /* files written: 1, or a split set's count (keep_split) */
    int64_t n_requantized;   /* quantized source tensors quantized again */
    double seconds;
} ql_quant_model_report;

/* LLAMA_FTYPE value for a model whose weights are of type (llama.h, b4747): Q4_0 -> 2,
 * Q8_0 -> 7, Q4_K -> 14 (Q4_K_S), ... Returns false for types with no GGUF ftype. */
bool ql_quant_llama_ftype(int32_t type, uint32_t *ftype);

/* Whether ql_quant_model can write type as the `what` type ("weight", "head",
 * "embedding"): QL_OK for a GGUF weight type and for QL_TYPE_INVALID (the weight
 * type); otherwise QL_EINVAL with the reason (INT8_ROW and Q8_0_XC are not GGUF
 * types, Q8_1 and Q8_K not weight types). */
ql_status ql_quant_model_check_type(int32_t type, const char *what, ql_error *err);

/* Quantizes in_path (a file or a split set's first file) into out_path. Errors
 * name the file and tensor. INT8_ROW and Q8_0_XC are refused (they are not GGUF
 * types); so is a quantized source tensor without allow_requantize. On success *report (free with
 * ql_quant_model_report_free) describes what was written. */
ql_status ql_quant_model(const char *in_path, const char *out_path, const ql_quant_model_opts *opts,
                         ql_quant_model_report **report, ql_error *err);

void ql_quant_model_report_free(ql_quant_model_report *r);

#endif
