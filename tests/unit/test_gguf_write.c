/* GGUF writer: every metadata value type (nested arrays included), a non-default
 * alignment, tensors of several types, the typed getters on what comes back, and
 * every error path of the writer API. */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "formats/types.h"
#include "model/gguf.h"
#include "qltest.h"

#define ALIGN 64

static ql_gguf_value scalar(ql_gguf_vtype t)
{
    ql_gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = t;
    return v;
}

static ql_gguf_value array_of(ql_gguf_vtype elem, void *data, uint64_t n)
{
    ql_gguf_value v = scalar(QL_GGUF_ARRAY);
    v.v.arr.elem_type = elem;
    v.v.arr.data = data;
    v.v.arr.n = n;
    return v;
}

/* Key -> value pairs written and then compared with what the reader returns. */
typedef struct {
    const char *key;
    ql_gguf_value v;
} kv_case;

int main(void)
{
    ql_error err;
    ql_gguf_writer *w = NULL;
    char path[512];
    snprintf(path, sizeof path, "%s/all_types.gguf", qlt_tmpdir());

    /* ---- every value type ---- */
    static uint8_t u8s[] = {0, 1, 255};
    static int8_t i8s[] = {-128, 0, 127};
    static uint16_t u16s[] = {0, 65535};
    static int16_t i16s[] = {-32768, 32767};
    static uint32_t u32s[] = {0, 4294967295u};
    static int32_t i32s[] = {-2147483647 - 1, 7, 2147483647};
    static float f32s[] = {0.0f, -0.0f, 1.5f, 3.4e38f};
    static uint8_t bools[] = {1, 0, 1};
    static uint64_t u64s[] = {0, UINT64_MAX};
    static int64_t i64s[] = {INT64_MIN, INT64_MAX};
    static double f64s[] = {2.718281828459045, -1e-300};
    static ql_gguf_str strs[] = {{(char *)"alpha", 5}, {(char *)"", 0}, {(char *)"nul\0in", 6}};
    /* [[1, 2, 3], [], [4]] and [[["a"], []], [["b", "c"]]] */
    static int32_t row0[] = {1, 2, 3}, row2[] = {4};
    ql_gguf_value nested_i32[3] = {array_of(QL_GGUF_INT32, row0, 3),
                                   array_of(QL_GGUF_INT32, NULL, 0),
                                   array_of(QL_GGUF_INT32, row2, 1)};
    static ql_gguf_str sa[] = {{(char *)"a", 1}}, sbc[] = {{(char *)"b", 1}, {(char *)"c", 1}};
    ql_gguf_value lvl2a[2] = {array_of(QL_GGUF_STRING, sa, 1), array_of(QL_GGUF_STRING, NULL, 0)};
    ql_gguf_value lvl2b[1] = {array_of(QL_GGUF_STRING, sbc, 2)};
    ql_gguf_value lvl1[2] = {array_of(QL_GGUF_ARRAY, lvl2a, 2), array_of(QL_GGUF_ARRAY, lvl2b, 1)};

    kv_case cases[32];
    int nc = 0;
    ql_gguf_value v;
    v = scalar(QL_GGUF_UINT8), v.v.u8 = 200, cases[nc++] = (kv_case){"t.u8", v};
    v = scalar(QL_GGUF_INT8), v.v.i8 = -100, cases[nc++] = (kv_case){"t.i8", v};
    v = scalar(QL_GGUF_UINT16), v.v.u16 = 60000, cases[nc++] = (kv_case){"t.u16", v};
    v = scalar(QL_GGUF_INT16), v.v.i16 = -30000, cases[nc++] = (kv_case){"t.i16", v};
    v = scalar(QL_GGUF_UINT32), v.v.u32 = 4000000000u, cases[nc++] = (kv_case){"t.u32", v};
    v = scalar(QL_GGUF_INT32), v.v.i32 = -2000000000, cases[nc++] = (kv_case){"t.i32", v};
    v = scalar(QL_GGUF_FLOAT32), v.v.f32 = 0.1f, cases[nc++] = (kv_case){"t.f32", v};
    v = scalar(QL_GGUF_BOOL), v.v.b = true, cases[nc++] = (kv_case){"t.bool", v};
    v = scalar(QL_GGUF_STRING), v.v.str = (ql_gguf_str){(char *)"h\xc3\xa9llo \"q\"", 11},
    cases[nc++] = (kv_case){"t.str", v};
    v = scalar(QL_GGUF_STRING), v.v.str = (ql_gguf_str){(char *)"", 0},
    cases[nc++] = (kv_case){"t.str_empty", v};
    v = scalar(QL_GGUF_UINT64), v.v.u64 = UINT64_MAX - 1, cases[nc++] = (kv_case){"t.u64", v};
    v = scalar(QL_GGUF_INT64), v.v.i64 = INT64_MIN, cases[nc++] = (kv_case){"t.i64", v};
    v = scalar(QL_GGUF_FLOAT64), v.v.f64 = -1.25e300, cases[nc++] = (kv_case){"t.f64", v};
    cases[nc++] = (kv_case){"a.u8", array_of(QL_GGUF_UINT8, u8s, 3)};
    cases[nc++] = (kv_case){"a.i8", array_of(QL_GGUF_INT8, i8s, 3)};
    cases[nc++] = (kv_case){"a.u16", array_of(QL_GGUF_UINT16, u16s, 2)};
    cases[nc++] = (kv_case){"a.i16", array_of(QL_GGUF_INT16, i16s, 2)};
    cases[nc++] = (kv_case){"a.u32", array_of(QL_GGUF_UINT32, u32s, 2)};
    cases[nc++] = (kv_case){"a.i32", array_of(QL_GGUF_INT32, i32s, 3)};
    cases[nc++] = (kv_case){"a.f32", array_of(QL_GGUF_FLOAT32, f32s, 4)};
    cases[nc++] = (kv_case){"a.bool", array_of(QL_GGUF_BOOL, bools, 3)};
    cases[nc++] = (kv_case){"a.str", array_of(QL_GGUF_STRING, strs, 3)};
    cases[nc++] = (kv_case){"a.u64", array_of(QL_GGUF_UINT64, u64s, 2)};
    cases[nc++] = (kv_case){"a.i64", array_of(QL_GGUF_INT64, i64s, 2)};
    cases[nc++] = (kv_case){"a.f64", array_of(QL_GGUF_FLOAT64, f64s, 2)};
    cases[nc++] = (kv_case){"a.empty", array_of(QL_GGUF_FLOAT32, NULL, 0)};
    cases[nc++] = (kv_case){"a.nested", array_of(QL_GGUF_ARRAY, nested_i32, 3)};
    cases[nc++] = (kv_case){"a.nested3", array_of(QL_GGUF_ARRAY, lvl1, 2)};

    CHECK_OK(ql_gguf_writer_alloc(&w, &err), &err);
    CHECK_OK(ql_gguf_writer_set_alignment(w, ALIGN, &err), &err);
    for (int i = 0; i < nc; i++)
        CHECK_OK(ql_gguf_writer_set_kv(w, cases[i].key, &cases[i].v, &err), &err);
    /* The convenience setters, a replacement, a removal, an ignored general.alignment. */
    CHECK_OK(ql_gguf_writer_set_u32(w, "c.u32", 17, &err), &err);
    CHECK_OK(ql_gguf_writer_set_i32(w, "c.i32", -17, &err), &err);
    CHECK_OK(ql_gguf_writer_set_f32(w, "c.f32", 2.5f, &err), &err);
    CHECK_OK(ql_gguf_writer_set_bool(w, "c.bool", false, &err), &err);
    CHECK_OK(ql_gguf_writer_set_str(w, "c.str", "first", &err), &err);
    CHECK_OK(ql_gguf_writer_set_str(w, "c.str", "second", &err), &err);
    const char *names[] = {"x", "yy"};
    CHECK_OK(ql_gguf_writer_set_str_arr(w, "c.strs", names, 2, &err), &err);
    float fa[] = {1, 2, 3};
    CHECK_OK(ql_gguf_writer_set_arr(w, "c.gone", QL_GGUF_FLOAT32, fa, 3, &err), &err);
    CHECK(ql_gguf_writer_remove_kv(w, "c.gone"));
    CHECK(!ql_gguf_writer_remove_kv(w, "c.gone"));
    CHECK_OK(ql_gguf_writer_set_u32(w, "general.alignment", 8, &err), &err);

    /* Tensors: F32, F16, Q8_0 (34-byte blocks), Q4_K (144-byte blocks), an empty
     * one, and an id qlab does not know (5, the retired Q4_2), stored verbatim. */
    float f32data[6] = {1, -2, 3.5f, 0, 1e-3f, 7};
    uint16_t f16data[4] = {0x3c00, 0xbc00, 0, 0x7bff};
    uint8_t q8data[2 * 34], qkdata[144], unknown[40];
    for (size_t i = 0; i < sizeof q8data; i++)
        q8data[i] = (uint8_t)(i * 7 + 1);
    for (size_t i = 0; i < sizeof qkdata; i++)
        qkdata[i] = (uint8_t)(i * 13 + 5);
    memset(unknown, 0xab, sizeof unknown);
    struct {
        const char *name;
        uint32_t n_dims;
        int64_t ne[4];
        int32_t type;
        const void *data;
        uint64_t nbytes;
    } ts[] = {
        {"f32.weight", 2, {3, 2}, QL_TYPE_F32, f32data, sizeof f32data},
        {"f16.weight", 3, {2, 1, 2}, QL_TYPE_F16, f16data, sizeof f16data},
        {"q8.weight", 2, {32, 2}, QL_TYPE_Q8_0, q8data, sizeof q8data},
        {"qk.weight", 4, {256, 1, 1, 1}, QL_TYPE_Q4_K, qkdata, sizeof qkdata},
        {"empty", 2, {0, 5}, QL_TYPE_F32, NULL, 0},
        {"unknown.type", 1, {10}, 5, unknown, sizeof unknown},
    };
    int n_ts = (int)(sizeof ts / sizeof ts[0]);
    for (int i = 0; i < n_ts; i++)
        CHECK_OK(ql_gguf_writer_add_tensor(w, ts[i].name, ts[i].n_dims, ts[i].ne, ts[i].type,
                                           ts[i].nbytes, &err),
                 &err);
    uint64_t predicted = ql_gguf_writer_file_size(w);
    CHECK_OK(ql_gguf_writer_begin(w, path, &err), &err);
    /* Metadata and tensors are frozen once the header is out. */
    CHECK(ql_gguf_writer_set_u32(w, "late", 1, &err) == QL_EINVAL);
    CHECK(ql_gguf_writer_add_tensor(w, "late", 1, ts[0].ne, QL_TYPE_F32, 12, &err) == QL_EINVAL);
    CHECK(ql_gguf_writer_set_alignment(w, 128, &err) == QL_EINVAL);
    CHECK(ql_gguf_writer_begin(w, path, &err) == QL_EINVAL);
    CHECK(ql_gguf_writer_finish(w, &err) == QL_EINVAL && strstr(err.msg, "0 of 6"));
    CHECK(ql_gguf_writer_write_tensor(w, f32data, 20, &err) == QL_EINVAL &&
          strstr(err.msg, "'f32.weight': 20 bytes given, 24 declared"));
    for (int i = 0; i < n_ts; i++)
        CHECK_OK(ql_gguf_writer_write_tensor(w, ts[i].data, ts[i].nbytes, &err), &err);
    CHECK(ql_gguf_writer_write_tensor(w, f32data, 24, &err) == QL_EINVAL &&
          strstr(err.msg, "more tensors written than declared"));
    CHECK_OK(ql_gguf_writer_finish(w, &err), &err);
    ql_gguf_writer_free(w);

    /* ---- read back ---- */
    ql_gguf *g = NULL;
    ql_status st = ql_gguf_open(&g, path, &err);
    CHECK_OK(st, &err);
    if (st)
        return qlt_done();
    CHECK_EQ_INT(g->file_size, predicted);
    CHECK_EQ_INT(g->alignment, ALIGN);
    CHECK_EQ_INT(g->data_offset % ALIGN, 0);
    uint32_t a32 = 0;
    CHECK(ql_gguf_get_u32(g, "general.alignment", &a32, &err) && a32 == ALIGN);
    CHECK_EQ_INT(g->n_kv, 1 + nc + 6);
    for (int i = 0; i < nc; i++) {
        const ql_gguf_kv *kv = ql_gguf_find_kv(g, cases[i].key);
        CHECK_MSG(kv != NULL, "key '%s' missing", cases[i].key);
        if (kv)
            CHECK_MSG(ql_gguf_value_equal(&kv->value, &cases[i].v), "key '%s' differs",
                      cases[i].key);
    }
    CHECK(ql_gguf_find_kv(g, "c.gone") == NULL);
    const char *s = ql_gguf_get_str(g, "c.str", &err);
    CHECK(s && strcmp(s, "second") == 0);
    const ql_gguf_array *sarr = ql_gguf_get_arr(g, "c.strs", QL_GGUF_STRING, &err);
    CHECK(sarr && sarr->n == 2 && strcmp(((ql_gguf_str *)sarr->data)[1].ptr, "yy") == 0);
    const ql_gguf_array *emb = ql_gguf_get_arr(g, "a.str", QL_GGUF_STRING, &err);
    CHECK(emb && ((ql_gguf_str *)emb->data)[2].len == 6 &&
          memcmp(((ql_gguf_str *)emb->data)[2].ptr, "nul\0in", 6) == 0);

    /* Typed getters: conversions that fit, refusals that name the key. */
    int64_t i64 = 0;
    CHECK(ql_gguf_get_i64(g, "t.i64", &i64, &err) && i64 == INT64_MIN);
    CHECK(ql_gguf_get_i64(g, "c.i32", &i64, &err) && i64 == -17);
    CHECK(!ql_gguf_get_i64(g, "t.u64", &i64, &err) && strstr(err.msg, "'t.u64'") &&
          strstr(err.msg, "out of range"));
    uint32_t u32 = 0;
    CHECK(ql_gguf_get_u32(g, "t.u16", &u32, &err) && u32 == 60000);
    CHECK(!ql_gguf_get_u32(g, "c.i32", &u32, &err) && strstr(err.msg, "out of range for u32"));
    CHECK(!ql_gguf_get_u32(g, "t.str", &u32, &err) && strstr(err.msg, "has type str"));
    CHECK(!ql_gguf_get_u32(g, "no.such.key", &u32, &err));
    float f = 0;
    CHECK(ql_gguf_get_f32(g, "t.f32", &f, &err) && f == 0.1f);
    CHECK(ql_gguf_get_f32(g, "t.i8", &f, &err) && f == -100.0f);
    CHECK(ql_gguf_get_f32(g, "t.f64", &f, &err) && isinf(f));
    CHECK(!ql_gguf_get_f32(g, "a.f32", &f, &err) && strstr(err.msg, "expected a number"));
    bool b = false;
    CHECK(ql_gguf_get_bool(g, "t.bool", &b, &err) && b);
    CHECK(!ql_gguf_get_bool(g, "t.u8", &b, &err) && strstr(err.msg, "expected bool"));
    CHECK(ql_gguf_get_str(g, "t.u8", &err) == NULL && strstr(err.msg, "expected str"));
    CHECK(ql_gguf_get_arr(g, "a.f32", QL_GGUF_INT32, &err) == NULL &&
          strstr(err.msg, "array of f32, expected an array of i32"));
    CHECK(ql_gguf_get_arr(g, "t.u8", QL_GGUF_UINT8, &err) == NULL);

    CHECK_EQ_INT(g->n_tensors, n_ts);
    for (int i = 0; i < n_ts && i < g->n_tensors; i++) {
        const ql_gguf_tensor *t = &g->tensors[i];
        CHECK(strcmp(t->name, ts[i].name) == 0);
        CHECK_EQ_INT(t->type, ts[i].type);
        CHECK_EQ_INT(t->n_dims, ts[i].n_dims);
        for (uint32_t d = 0; d < ts[i].n_dims; d++)
            CHECK_EQ_INT(t->ne[d], ts[i].ne[d]);
        CHECK_EQ_INT(t->offset % ALIGN, 0);
        if (ql_gguf_type_known(t->type)) {
            CHECK_EQ_INT(t->nbytes, ts[i].nbytes);
            CHECK(ts[i].nbytes == 0 || memcmp(t->data, ts[i].data, ts[i].nbytes) == 0);
        } else {
            /* Unknown type: kept, listed, no size and no data pointer. */
            CHECK(t->nbytes == 0 && t->data == NULL);
            CHECK(memcmp((const char *)g->map + g->data_offset + t->offset, unknown,
                         sizeof unknown) == 0);
        }
    }
    int64_t shape[4];
    CHECK_EQ_INT(ql_gguf_tensor_shape(&g->tensors[1], shape), 3);
    CHECK(shape[0] == 2 && shape[1] == 1 && shape[2] == 2);
    CHECK_EQ_INT(ql_gguf_tensor_nelements(&g->tensors[3]), 256);
    ql_gguf_close(g);

    /* ---- writer error paths ---- */
    CHECK_OK(ql_gguf_writer_alloc(&w, &err), &err);
    CHECK(ql_gguf_writer_set_alignment(w, 48, &err) == QL_EINVAL && strstr(err.msg, "48"));
    CHECK(ql_gguf_writer_set_alignment(w, 0, &err) == QL_EINVAL);
    CHECK(ql_gguf_writer_set_alignment(w, 1ull << 33, &err) == QL_EINVAL);
    CHECK(ql_gguf_writer_set_u32(w, "", 1, &err) == QL_EINVAL);
    v = scalar((ql_gguf_vtype)13);
    CHECK(ql_gguf_writer_set_kv(w, "bad.type", &v, &err) == QL_EINVAL &&
          strstr(err.msg, "'bad.type'") && strstr(err.msg, "value type 13"));
    v = array_of((ql_gguf_vtype)20, u8s, 3);
    CHECK(ql_gguf_writer_set_kv(w, "bad.elem", &v, &err) == QL_EINVAL &&
          strstr(err.msg, "element type 20"));
    ql_gguf_value not_arrays[2] = {array_of(QL_GGUF_UINT8, u8s, 3), scalar(QL_GGUF_UINT8)};
    v = array_of(QL_GGUF_ARRAY, not_arrays, 2);
    CHECK(ql_gguf_writer_set_kv(w, "bad.nest", &v, &err) == QL_EINVAL &&
          strstr(err.msg, "element 1") && strstr(err.msg, "expected arr"));
    static uint8_t bad_bools[] = {0, 2};
    CHECK(ql_gguf_writer_set_arr(w, "bad.bool", QL_GGUF_BOOL, bad_bools, 2, &err) == QL_EINVAL &&
          strstr(err.msg, "bool array element 1 is 2"));
    CHECK(ql_gguf_writer_set_arr(w, "bad.str", QL_GGUF_STRING, strs, 3, &err) == QL_EINVAL);
    /* Nine levels of arrays: one more than the reader accepts. */
    ql_gguf_value deep[9];
    deep[8] = array_of(QL_GGUF_UINT8, u8s, 1);
    for (int i = 7; i >= 0; i--)
        deep[i] = array_of(QL_GGUF_ARRAY, &deep[i + 1], 1);
    CHECK(ql_gguf_writer_set_kv(w, "bad.deep", &deep[0], &err) == QL_EINVAL &&
          strstr(err.msg, "nested deeper than 8"));
    CHECK_OK(ql_gguf_writer_set_kv(w, "ok.deep8", &deep[1], &err), &err);

    int64_t ne[4] = {32, 2, 1, 1};
    char long_name[80];
    memset(long_name, 'n', 64);
    long_name[64] = '\0';
    CHECK(ql_gguf_writer_add_tensor(w, "", 1, ne, QL_TYPE_F32, 128, &err) == QL_EINVAL);
    CHECK(ql_gguf_writer_add_tensor(w, long_name, 1, ne, QL_TYPE_F32, 128, &err) == QL_EINVAL &&
          strstr(err.msg, "64 bytes"));
    CHECK(ql_gguf_writer_add_tensor(w, "d0", 0, ne, QL_TYPE_F32, 0, &err) == QL_EINVAL);
    CHECK(ql_gguf_writer_add_tensor(w, "d5", 5, ne, QL_TYPE_F32, 0, &err) == QL_EINVAL);
    CHECK(ql_gguf_writer_add_tensor(w, "neg.type", 1, ne, -1, 128, &err) == QL_EINVAL);
    CHECK(ql_gguf_writer_add_tensor(w, "int8row", 2, ne, QL_TYPE_INT8_ROW, 68, &err) == QL_EINVAL &&
          strstr(err.msg, "not a GGUF type"));
    CHECK(ql_gguf_writer_add_tensor(w, "bytes", 2, ne, QL_TYPE_F32, 255, &err) == QL_EINVAL &&
          strstr(err.msg, "255 bytes given, the shape needs 256"));
    int64_t ne33[1] = {33};
    CHECK(ql_gguf_writer_add_tensor(w, "row", 1, ne33, QL_TYPE_Q4_0, 18, &err) == QL_EINVAL &&
          strstr(err.msg, "not a multiple of 32"));
    int64_t neg[2] = {4, -1};
    CHECK(ql_gguf_writer_add_tensor(w, "neg", 2, neg, QL_TYPE_F32, 16, &err) == QL_EINVAL &&
          strstr(err.msg, "negative"));
    int64_t huge[3] = {1ll << 40, 1ll << 20, 1ll << 10};
    CHECK(ql_gguf_writer_add_tensor(w, "huge", 3, huge, QL_TYPE_F32, 0, &err) == QL_EINVAL &&
          strstr(err.msg, "overflows int64"));
    CHECK_OK(ql_gguf_writer_add_tensor(w, "ok", 2, ne, QL_TYPE_F32, 256, &err), &err);
    CHECK(ql_gguf_writer_add_tensor(w, "ok", 2, ne, QL_TYPE_F32, 256, &err) == QL_EINVAL &&
          strstr(err.msg, "duplicate"));
    CHECK(ql_gguf_writer_write_tensor(w, f32data, 256, &err) == QL_EINVAL &&
          strstr(err.msg, "before begin"));
    CHECK(ql_gguf_writer_finish(w, &err) == QL_EINVAL);
    CHECK(ql_gguf_writer_begin(w, "/nonexistent-dir/x.gguf", &err) == QL_EIO &&
          strstr(err.msg, "/nonexistent-dir/x.gguf"));
    /* A failed begin can be retried; an unfinished writer leaves no file behind. */
    char path2[512];
    snprintf(path2, sizeof path2, "%s/unfinished.gguf", qlt_tmpdir());
    CHECK_OK(ql_gguf_writer_begin(w, path2, &err), &err);
    ql_gguf_writer_free(w);
    CHECK(access(path2, F_OK) != 0);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path2, (long)getpid());
    CHECK(access(tmp, F_OK) != 0);
    ql_gguf_writer_free(NULL);

    remove(path);
    return qlt_done();
}
