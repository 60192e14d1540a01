/* qlab: which type each tensor of a config got, by tensor class (a section of
 * `qlab report`, report.h).
 *
 * From the stored tensor records (tensor_errors: requested and used type, fallback
 * reason and the rule that chose the type) of the finished runs of one report
 * group:
 *
 *   report.md         one row per config, one column per tensor class in the order
 *                     of a transformer (token_embd, attn_q, attn_k, attn_v, attn_qkv,
 *                     attn_output, ffn_gate, ffn_up, ffn_down, output, then any other
 *                     class by name), each cell the type its tensors got: "Q4_K" when
 *                     they all got one, "Q4_K ×6 / Q6_K ×2" when the class is mixed
 *                     (most frequent first, ties by name), as llama.cpp's table of
 *                     what llama-quantize wrote per class; and how many tensors fell
 *                     back ("2 of 16": used type other than requested);
 *   tensor-types.csv  one line per tensor of every config: class, layer, requested
 *                     and used type, the rule that chose the requested type and the
 *                     fallback reason.
 * Runs without tensor records are left out; a group with none has no section.
 *
 * The tensor class of a name: "blk.3.attn_q.weight" -> "attn_q", "output.weight"
 * -> "output"; shared with the report's per-tensor plot. */
#ifndef QL_TYPES_TABLE_H
#define QL_TYPES_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/error.h"
#include "base/table.h"
#include "results/store.h"

/* The class of a tensor name into buf (see above). */
void ql_tensor_class(const char *name, char *buf, size_t size);

/* Rank of a class in a transformer block's order (token_embd first, output after
 * the block's classes); classes not in the list share the last rank. */
int ql_tensor_class_rank(const char *cls);

typedef struct ql_types_table ql_types_table;

/* Reads the tensor records of n runs; labels[i] names run i's row in report.md and
 * hashes[i] is its config's hash (both copied). On error *out is NULL. */
ql_status ql_types_table_load(ql_store *s, const int64_t *run_ids, const char *const *labels,
                              const char *const *hashes, size_t n, ql_types_table **out,
                              ql_error *err);

/* Whether any run had tensor records. */
bool ql_types_table_empty(const ql_types_table *t);

/* The report.md section (a sentence, then the table); nothing when empty. null_text
 * is what a missing cell reads. */
ql_status ql_types_table_write_md(const ql_types_table *t, FILE *out, const char *null_text,
                                  ql_error *err);

/* Columns of tensor-types.csv after the caller's n_prefix group columns. */
size_t ql_types_table_csv_columns(const ql_table_column **out);

/* Appends the CSV rows of t to csv (a table of the caller's prefix columns, then
 * ql_types_table_csv_columns); prefix holds n_prefix cells, the same for every row. */
ql_status ql_types_table_csv_rows(const ql_types_table *t, ql_table *csv, const char *const *prefix,
                                  size_t n_prefix, ql_error *err);

void ql_types_table_free(ql_types_table *t); /* NULL is fine */

#endif
