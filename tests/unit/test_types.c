/* The type-traits table (formats/types.h): indexed by id, sizes from the block
 * structs, and the consistency of the columns that replace qlab's former per-type
 * switches (listing order, file type, row-length fallback, activation rounding,
 * weight-type reasons, ladder rank). */
#include <stdio.h>
#include <string.h>

#include "formats/quant_k.h"
#include "formats/quant_legacy.h"
#include "formats/types.h"
#include "qltest.h"

/* Every listing of types (usage texts, qlab bench quant, the fit's per-type totals)
 * comes in this order: it must not move. */
static const char *const listing[] = {
    "F32",     "F16",   "BF16",  "Q4_0",  "Q4_1",     "Q5_0",    "Q5_1",    "Q8_0",   "Q8_1",
    "Q2_K",    "Q3_K",  "Q4_K",  "Q5_K",  "Q6_K",     "Q8_K",    "IQ2_XXS", "IQ2_XS", "IQ2_S",
    "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "IQ4_NL",   "IQ4_XS",  "TQ1_0",   "TQ2_0",  "I8",
    "I16",     "I32",   "I64",   "F64",   "INT8_ROW", "Q8_0_XC",
};
#define N_LISTING ((int)(sizeof listing / sizeof listing[0]))

static void indexed_by_id(void)
{
    int known = 0;
    for (int id = -2; id < QL_TYPE_ID_LIMIT + 2; id++) {
        const ql_type_traits *t = ql_type_get(id);
        if (!t)
            continue;
        known++;
        CHECK_EQ_INT(t->type, id);
        CHECK(ql_type_by_name(t->name) == t);
        CHECK_EQ_INT(strcmp(ql_type_name(id), t->name), 0);
    }
    CHECK_EQ_INT(known, N_LISTING);
    CHECK(ql_type_get(QL_TYPE_ID_LIMIT) == NULL);
    CHECK(ql_type_get(QL_TYPE_INVALID) == NULL);
    CHECK(ql_type_get(4) == NULL); /* ggml's removed Q4_2 */
    CHECK(ql_type_by_name("q4_k") == ql_type_get(QL_TYPE_Q4_K));
    CHECK(ql_type_by_name("Q4_K_M") == NULL);
    CHECK_EQ_INT(strcmp(ql_type_name(12345), "type id 12345"), 0);
}

static void listing_order(void)
{
    const ql_type_traits *all[QL_TYPE_ID_LIMIT];
    const int n = ql_type_list(all, QL_TYPE_ID_LIMIT);
    CHECK_EQ_INT(n, N_LISTING);
    for (int k = 0; k < n && k < N_LISTING; k++) {
        CHECK_MSG(strcmp(all[k]->name, listing[k]) == 0, "listing %d: %s, expected %s", k,
                  all[k]->name, listing[k]);
        CHECK_EQ_INT(all[k]->order, k);
    }
    /* A short buffer takes the first entries. */
    CHECK_EQ_INT(ql_type_list(all, 3), 3);
    CHECK_EQ_INT(strcmp(all[2]->name, "BF16"), 0);
}

/* Sizes come from the block structs (ggml-common.h's numbers). */
static void block_sizes(void)
{
    static const struct {
        int32_t type;
        int64_t block;
        size_t bytes;
    } want[] = {
        {QL_TYPE_F32, 1, 4},        {QL_TYPE_F16, 1, 2},      {QL_TYPE_Q4_0, 32, 18},
        {QL_TYPE_Q5_1, 32, 24},     {QL_TYPE_Q8_1, 32, 36},   {QL_TYPE_Q2_K, 256, 84},
        {QL_TYPE_Q6_K, 256, 210},   {QL_TYPE_Q8_K, 256, 292}, {QL_TYPE_IQ2_XXS, 256, 66},
        {QL_TYPE_IQ3_S, 256, 110},  {QL_TYPE_IQ1_M, 256, 56}, {QL_TYPE_IQ4_NL, 32, 18},
        {QL_TYPE_IQ4_XS, 256, 136}, {QL_TYPE_TQ1_0, 256, 54}, {QL_TYPE_TQ2_0, 256, 66},
        {QL_TYPE_I64, 1, 8},        {QL_TYPE_INT8_ROW, 0, 2}, {QL_TYPE_Q8_0_XC, 32, 34},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const ql_type_traits *t = ql_type_get(want[i].type);
        CHECK_MSG(t->block_size == want[i].block && t->type_size == want[i].bytes,
                  "%s: %lld values in %zu bytes, expected %lld in %zu", t->name,
                  (long long)t->block_size, t->type_size, (long long)want[i].block, want[i].bytes);
    }
    CHECK_EQ_INT(ql_row_size(QL_TYPE_Q4_K, 512), 2 * sizeof(ql_block_q4_K));
    CHECK_EQ_INT(ql_row_size(QL_TYPE_Q4_K, 500), 0);
    CHECK_EQ_INT(ql_row_size(QL_TYPE_INT8_ROW, 100), 102);
    CHECK(ql_type_bpw(QL_TYPE_Q4_0) == 4.5);
}

/* Weight types, GGUF weight types and the reasons of the others. */
static void weight_columns(void)
{
    const ql_type_traits *all[QL_TYPE_ID_LIMIT];
    const int n = ql_type_list(all, QL_TYPE_ID_LIMIT);
    int n_weight = 0, n_gguf_weight = 0;
    for (int k = 0; k < n; k++) {
        const ql_type_traits *t = all[k];
        n_weight += ql_type_is_weight(t);
        n_gguf_weight += ql_type_is_gguf_weight(t);
        /* A GGUF weight type is stored under its own id, and has a file type. */
        if (ql_type_is_gguf_weight(t)) {
            CHECK_MSG(t->is_gguf && t->storage == t->type && t->block_size > 0 && t->ftype >= 0,
                      "%s: a GGUF weight type", t->name);
        } else {
            CHECK_MSG(t->ftype == -1, "%s: ftype %d, expected -1", t->name, (int)t->ftype);
            CHECK_MSG(t->not_weight || t->not_in_gguf, "%s: no reason given", t->name);
        }
        /* ftype 0 (ALL_F32) is F32's alone: a forgotten column reads 0. */
        CHECK_MSG(t->ftype != 0 || t->type == QL_TYPE_F32, "%s: ftype 0", t->name);
        CHECK_MSG(!t->requires_imatrix || t->llama_imatrix, "%s: ggml needs an imatrix", t->name);
    }
    CHECK_EQ_INT(n_weight, 26);      /* 24 GGUF weight formats + INT8_ROW + Q8_0_XC */
    CHECK_EQ_INT(n_gguf_weight, 24); /* F32 F16 BF16, 6 legacy, 5 K, 9 IQ, 2 ternary */
    CHECK(strstr(ql_type_get(QL_TYPE_Q8_K)->not_weight, "activation-only") != NULL);
    CHECK(strstr(ql_type_get(QL_TYPE_I8)->not_weight, "integer") != NULL);
    CHECK(strstr(ql_type_get(QL_TYPE_INT8_ROW)->not_in_gguf, "not a GGUF type") != NULL);
    CHECK(!ql_type_is_weight(NULL));
}

/* llama.cpp's ftype values of the pure types (llama.h): the S mix of the K types. */
static void file_types(void)
{
    static const struct {
        int32_t type, ftype;
    } want[] = {
        {QL_TYPE_F32, 0},      {QL_TYPE_F16, 1},     {QL_TYPE_Q4_0, 2},     {QL_TYPE_Q4_1, 3},
        {QL_TYPE_Q8_0, 7},     {QL_TYPE_Q5_0, 8},    {QL_TYPE_Q5_1, 9},     {QL_TYPE_Q2_K, 10},
        {QL_TYPE_Q3_K, 11},    {QL_TYPE_Q4_K, 14},   {QL_TYPE_Q5_K, 16},    {QL_TYPE_Q6_K, 18},
        {QL_TYPE_IQ2_XXS, 19}, {QL_TYPE_IQ2_XS, 20}, {QL_TYPE_IQ3_XXS, 23}, {QL_TYPE_IQ1_S, 24},
        {QL_TYPE_IQ4_NL, 25},  {QL_TYPE_IQ3_S, 26},  {QL_TYPE_IQ2_S, 29},   {QL_TYPE_IQ4_XS, 30},
        {QL_TYPE_IQ1_M, 31},   {QL_TYPE_BF16, 32},   {QL_TYPE_TQ1_0, 36},   {QL_TYPE_TQ2_0, 37},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK_MSG(ql_type_get(want[i].type)->ftype == want[i].ftype, "%s: ftype %d, expected %d",
                  ql_type_name(want[i].type), (int)ql_type_get(want[i].type)->ftype,
                  (int)want[i].ftype);
}

/* llama_tensor_get_type's fallback switch (b4747), and F16 for the 32-block types. */
static void row_fallbacks(void)
{
    const ql_type_traits *all[QL_TYPE_ID_LIMIT];
    const int n = ql_type_list(all, QL_TYPE_ID_LIMIT);
    for (int k = 0; k < n; k++) {
        const ql_type_traits *t = all[k];
        if (!ql_type_is_weight(t) || t->block_size <= 1)
            continue;
        const ql_type_traits *f = ql_type_get(t->row_fallback);
        CHECK_MSG(f && f->block_size < t->block_size && ql_type_is_gguf_weight(f) &&
                      f->type != QL_TYPE_F32,
                  "%s: falls back to %s", t->name, ql_type_name(t->row_fallback));
    }
    static const struct {
        int32_t type, fallback;
    } want[] = {
        {QL_TYPE_TQ1_0, QL_TYPE_Q4_0},     {QL_TYPE_TQ2_0, QL_TYPE_Q4_0},
        {QL_TYPE_IQ2_XXS, QL_TYPE_IQ4_NL}, {QL_TYPE_IQ2_XS, QL_TYPE_IQ4_NL},
        {QL_TYPE_IQ2_S, QL_TYPE_IQ4_NL},   {QL_TYPE_IQ3_XXS, QL_TYPE_IQ4_NL},
        {QL_TYPE_IQ3_S, QL_TYPE_IQ4_NL},   {QL_TYPE_IQ1_S, QL_TYPE_IQ4_NL},
        {QL_TYPE_IQ1_M, QL_TYPE_IQ4_NL},   {QL_TYPE_Q2_K, QL_TYPE_IQ4_NL},
        {QL_TYPE_Q3_K, QL_TYPE_IQ4_NL},    {QL_TYPE_IQ4_XS, QL_TYPE_IQ4_NL},
        {QL_TYPE_Q4_K, QL_TYPE_Q5_0},      {QL_TYPE_Q5_K, QL_TYPE_Q5_1},
        {QL_TYPE_Q6_K, QL_TYPE_Q8_0},      {QL_TYPE_Q4_0, QL_TYPE_F16},
        {QL_TYPE_IQ4_NL, QL_TYPE_F16},     {QL_TYPE_Q8_0_XC, QL_TYPE_F16},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK_MSG(ql_type_get(want[i].type)->row_fallback == want[i].fallback,
                  "%s: falls back to %s, expected %s", ql_type_name(want[i].type),
                  ql_type_name(ql_type_get(want[i].type)->row_fallback),
                  ql_type_name(want[i].fallback));
}

/* Ladder ranks are 1..N without gaps or repeats, on GGUF weight types. */
static void ladder_ranks(void)
{
    const ql_type_traits *all[QL_TYPE_ID_LIMIT];
    const int n = ql_type_list(all, QL_TYPE_ID_LIMIT);
    int count[QL_TYPE_ID_LIMIT + 1] = {0}, max_rank = 0;
    for (int k = 0; k < n; k++) {
        const int r = all[k]->ladder_rank;
        CHECK(r >= 0 && r <= QL_TYPE_ID_LIMIT);
        if (r <= 0 || r > QL_TYPE_ID_LIMIT)
            continue;
        count[r]++;
        max_rank = r > max_rank ? r : max_rank;
        CHECK_MSG(ql_type_is_gguf_weight(all[k]), "%s: in the ladder", all[k]->name);
    }
    CHECK_EQ_INT(max_rank, 18);
    for (int r = 1; r <= max_rank; r++)
        CHECK_MSG(count[r] == 1, "ladder rank %d: %d types", r, count[r]);
}

/* The row_state column: a type has it exactly when quantizing two rows in one call
 * gives the second row other bytes than quantizing it alone. The second row is
 * zero but for one 32-group per super-block: IQ1_S and IQ1_M give its zero groups
 * the first row's shifts, every other format has no memory of earlier rows. */
static void row_state(void)
{
    enum { N = 1024 };
    static float x[2 * N], ones[N];
    static unsigned char both[2 * N * 4], alone[N * 4];
    for (int j = 0; j < N; j++) {
        x[j] = (float)(((j * 7919) % 201) - 100) / 100.0f;
        x[N + j] = j % 256 < 32 ? (float)((j % 13) - 6) / 10.0f : 0.0f;
        ones[j] = 1.0f;
    }
    const ql_type_traits *all[QL_TYPE_ID_LIMIT];
    const int n = ql_type_list(all, QL_TYPE_ID_LIMIT);
    int n_checked = 0;
    for (int k = 0; k < n; k++) {
        const ql_type_traits *t = all[k];
        const size_t rs = ql_row_size((int32_t)t->type, N);
        ql_error err;
        if (!t->quantize || rs == 0 || rs > sizeof alone)
            continue;
        CHECK_OK(ql_type_prepare((int32_t)t->type, &err), &err);
        t->quantize(x, both, 2, N, ones);
        t->quantize(x + N, alone, 1, N, ones);
        const bool differs = memcmp(both + rs, alone, rs) != 0;
        CHECK_MSG(differs == t->row_state, "%s: row_state %d, but the second row's bytes %s",
                  t->name, (int)t->row_state, differs ? "differ" : "do not differ");
        n_checked++;
    }
    CHECK_MSG(n_checked >= 24, "only %d types checked", n_checked);
}

int main(void)
{
    indexed_by_id();
    listing_order();
    block_sizes();
    weight_columns();
    file_types();
    row_fallbacks();
    ladder_ranks();
    row_state();
    return qlt_done();
}
