/* Regenerates the malformed GGUF corpus in tests/malformed/ (and the few valid
 * edge cases in tests/malformed/valid/).
 *
 *   build/tests/gen_malformed tests/malformed
 *
 * Each file starts from one small valid GGUF v3 file (3 keys, 2 tensors, 32-byte
 * alignment) and breaks exactly one thing, so each must fail with one specific
 * error (tests/malformed/expected.tsv). The committed files are the corpus; this
 * program documents how they were made and is not run by the tests. Files found
 * by the fuzzer are committed as they were found and are not generated here. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ========================================================================= */
/* Byte buffer                                                                */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *np = realloc(b->p, cap);
        if (!np) {
            fprintf(stderr, "gen_malformed: out of memory\n");
            exit(1);
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_u8(buf *b, uint8_t v)
{
    put(b, &v, 1);
}

static void put_u32(buf *b, uint32_t v)
{
    put(b, &v, 4);
}

static void put_u64(buf *b, uint64_t v)
{
    put(b, &v, 8);
}

static void put_str(buf *b, const char *s)
{
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

static void pad_to(buf *b, size_t align)
{
    while (b->n % align)
        put_u8(b, 0);
}

/* ========================================================================= */
/* The file description each case edits                                       */

enum { V_U8 = 0, V_U32 = 4, V_I32 = 5, V_F32 = 6, V_BOOL = 7, V_STR = 8, V_ARR = 9 };
enum { T_F32 = 0, T_Q8_0 = 8 };

#define MAX_KV 8
#define MAX_T  4

typedef struct {
    char name[80];
    size_t name_len; /* 0: strlen(name) */
    uint32_t n_dims;
    uint64_t ne[6];
    uint32_t type;
    uint64_t offset;
} tinfo;

typedef struct {
    uint32_t magic;
    uint32_t version;
    uint64_t n_kv_field, n_t_field; /* as written; 0 = the real counts */
    bool counts_literal;            /* write the fields even when 0 */
    buf kv[MAX_KV];                 /* each a complete encoded key/value record */
    int n_kv;
    tinfo t[MAX_T];
    int n_t;
    uint64_t align; /* padding used after the tensor table */
    size_t data_bytes;
    size_t truncate_at; /* 0: no truncation */
} spec;

static buf kv_begin(const char *key, uint32_t vtype)
{
    buf b = {0};
    put_str(&b, key);
    put_u32(&b, vtype);
    return b;
}

static buf kv_u32(const char *key, uint32_t v)
{
    buf b = kv_begin(key, V_U32);
    put_u32(&b, v);
    return b;
}

static buf kv_str(const char *key, const char *v)
{
    buf b = kv_begin(key, V_STR);
    put_str(&b, v);
    return b;
}

static buf kv_f32_array(const char *key)
{
    buf b = kv_begin(key, V_ARR);
    put_u32(&b, V_F32);
    put_u64(&b, 3);
    float v[3] = {1.0f, 2.0f, 3.0f};
    put(&b, v, sizeof v);
    return b;
}

/* The valid base: 3 keys; a.weight F32 4x2 (32 bytes) at 0, b.weight Q8_0 32
 * (34 bytes) at 32; 96 bytes of data after padding. */
static spec base(void)
{
    spec s;
    memset(&s, 0, sizeof s);
    memcpy(&s.magic, "GGUF", 4);
    s.version = 3;
    s.kv[s.n_kv++] = kv_str("general.architecture", "llama");
    s.kv[s.n_kv++] = kv_u32("general.alignment", 32);
    s.kv[s.n_kv++] = kv_f32_array("test.values");
    s.t[s.n_t++] = (tinfo){"a.weight", 0, 2, {4, 2}, T_F32, 0};
    s.t[s.n_t++] = (tinfo){"b.weight", 0, 1, {32}, T_Q8_0, 32};
    s.align = 32;
    s.data_bytes = 96;
    return s;
}

static void set_kv(spec *s, int i, buf b)
{
    free(s->kv[i].p);
    s->kv[i] = b;
}

static buf encode(const spec *s)
{
    buf b = {0};
    put_u32(&b, s->magic);
    put_u32(&b, s->version);
    put_u64(&b, s->n_t_field || s->counts_literal ? s->n_t_field : (uint64_t)s->n_t);
    put_u64(&b, s->n_kv_field || s->counts_literal ? s->n_kv_field : (uint64_t)s->n_kv);
    for (int i = 0; i < s->n_kv; i++)
        put(&b, s->kv[i].p, s->kv[i].n);
    for (int i = 0; i < s->n_t; i++) {
        const tinfo *t = &s->t[i];
        size_t len = t->name_len ? t->name_len : strlen(t->name);
        put_u64(&b, len);
        put(&b, t->name, len);
        put_u32(&b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims && d < 6; d++)
            put_u64(&b, t->ne[d]);
        put_u32(&b, t->type);
        put_u64(&b, t->offset);
    }
    pad_to(&b, s->align);
    /* Recognisable data: byte i of the data section is i mod 251. */
    for (size_t i = 0; i < s->data_bytes; i++)
        put_u8(&b, (uint8_t)(i % 251));
    if (s->truncate_at && s->truncate_at < b.n)
        b.n = s->truncate_at;
    return b;
}

static void spec_free(spec *s)
{
    for (int i = 0; i < MAX_KV; i++)
        free(s->kv[i].p);
}

/* ========================================================================= */

static const char *out_dir;
static int n_written;

static void write_file(const char *name, const buf *b)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (b->n && fwrite(b->p, 1, b->n, f) != b->n) || fclose(f) != 0) {
        fprintf(stderr, "gen_malformed: cannot write %s\n", path);
        exit(1);
    }
    n_written++;
}

static void emit(const char *name, spec *s)
{
    buf b = encode(s);
    write_file(name, &b);
    free(b.p);
    spec_free(s);
}

/* Offset where the tensor table starts in the base file. */
static size_t base_table_offset(void)
{
    spec s = base();
    size_t off = 24;
    for (int i = 0; i < s.n_kv; i++)
        off += s.kv[i].n;
    spec_free(&s);
    return off;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_malformed OUTDIR (normally tests/malformed)\n");
        return 2;
    }
    out_dir = argv[1];
    spec s;
    buf b = {0};

    /* ---- header ---- */
    write_file("empty.gguf", &b);
    s = base(), memcpy(&s.magic, "GGML", 4), emit("bad_magic.gguf", &s);
    s = base(), s.version = 1, emit("version_1.gguf", &s);
    s = base(), s.version = 99, emit("version_99.gguf", &s);
    s = base(), s.version = 0x03000000u, emit("big_endian.gguf", &s);
    s = base(), s.truncate_at = 2, emit("trunc_magic.gguf", &s);
    s = base(), s.truncate_at = 14, emit("trunc_header.gguf", &s);
    s = base(), s.n_kv_field = 1ull << 40, emit("huge_kv_count.gguf", &s);
    s = base(), s.n_t_field = 0xffffffffffffffffull, emit("huge_tensor_count.gguf", &s);
    /* Each count alone fits, together they do not. */
    s = base(), s.n_t_field = 9, s.n_kv_field = 20, emit("counts_too_big_together.gguf", &s);

    /* ---- truncation inside the metadata, the tensor table and the data ---- */
    /* Early cuts are caught by the count check (the records cannot fit); the
     * tensor-less variants reach the record that is cut. */
    s = base(), s.truncate_at = 24 + 8 + 5, emit("trunc_in_first_key.gguf", &s);
    {
        spec t = base();
        size_t kv0 = t.kv[0].n, kv1 = t.kv[1].n;
        spec_free(&t);
        s = base(), s.n_t = 0, s.data_bytes = 0, s.align = 1;
        s.truncate_at = 24 + kv0 + kv1 + 8 + 4, emit("trunc_in_key.gguf", &s);
        /* Cut inside general.alignment's u32 value. */
        s = base(), s.n_t = 0, s.data_bytes = 0, s.align = 1;
        s.truncate_at = 24 + kv0 + kv1 - 2, emit("trunc_in_value.gguf", &s);
        /* Cut inside the f32 array of test.values (3 elements, 12 bytes). */
        s = base(), s.truncate_at = base_table_offset() - 9, emit("trunc_in_array.gguf", &s);
    }
    {
        size_t at = base_table_offset();
        s = base(), s.truncate_at = at + 8 + 8 + 4 + 8 + 3, emit("trunc_in_tensor_info.gguf", &s);
        s = base(), s.truncate_at = at + 48 + 40 - 5, emit("trunc_in_tensor_offset.gguf", &s);
    }
    s = base(), s.data_bytes = 50, emit("trunc_in_data.gguf", &s);

    /* ---- metadata values ---- */
    {
        buf k = {0};
        put_u64(&k, 1ull << 63); /* key length */
        put(&k, "general.x", 9);
        s = base(), set_kv(&s, 2, k), emit("huge_key_length.gguf", &s);
    }
    {
        buf k = kv_begin("general.name", V_STR);
        put_u64(&k, 1000000);
        put(&k, "abc", 3);
        s = base(), set_kv(&s, 0, k), emit("huge_string_length.gguf", &s);
    }
    {
        buf k = kv_begin("test.values", V_ARR);
        put_u32(&k, V_F32);
        put_u64(&k, 1ull << 60);
        s = base(), set_kv(&s, 2, k), emit("huge_array_length.gguf", &s);
    }
    {
        buf k = kv_begin("test.strings", V_ARR);
        put_u32(&k, V_STR);
        put_u64(&k, 2);
        put_str(&k, "ok");
        put_u64(&k, 500); /* second string runs past the end of the file */
        put(&k, "xy", 2);
        s = base(), set_kv(&s, 2, k), s.n_t = 0, s.data_bytes = 0, s.align = 1;
        emit("string_array_overrun.gguf", &s);
    }
    s = base(), set_kv(&s, 2, kv_u32("general.alignment", 64)), emit("duplicate_key.gguf", &s);
    s = base(), set_kv(&s, 2, kv_u32("", 1)), emit("empty_key.gguf", &s);
    {
        buf k = {0};
        put_u64(&k, 7);
        put(&k, "bad\0key", 7);
        put_u32(&k, V_U32);
        put_u32(&k, 1);
        s = base(), set_kv(&s, 2, k), emit("key_with_nul.gguf", &s);
    }
    {
        buf k = kv_begin("test.value", 13);
        put_u32(&k, 0);
        s = base(), set_kv(&s, 2, k), emit("unknown_value_type.gguf", &s);
    }
    {
        buf k = kv_begin("test.values", V_ARR);
        put_u32(&k, 13);
        put_u64(&k, 1);
        put_u32(&k, 0);
        s = base(), set_kv(&s, 2, k), emit("unknown_array_type.gguf", &s);
    }
    {
        /* Nine levels of arrays: [[[[[[[[[1]]]]]]]]]. */
        buf k = kv_begin("test.deep", V_ARR);
        for (int i = 0; i < 8; i++) {
            put_u32(&k, V_ARR);
            put_u64(&k, 1);
        }
        put_u32(&k, V_U8);
        put_u64(&k, 1);
        put_u8(&k, 1);
        s = base(), set_kv(&s, 2, k), emit("deep_nesting.gguf", &s);
    }
    {
        buf k = kv_begin("test.flag", V_BOOL);
        put_u8(&k, 2);
        s = base(), set_kv(&s, 2, k), emit("bad_bool.gguf", &s);
    }
    {
        buf k = kv_begin("test.flags", V_ARR);
        put_u32(&k, V_BOOL);
        put_u64(&k, 3);
        put_u8(&k, 1), put_u8(&k, 7), put_u8(&k, 0);
        s = base(), set_kv(&s, 2, k), emit("bad_bool_array.gguf", &s);
    }

    /* ---- alignment ---- */
    s = base(), set_kv(&s, 1, kv_u32("general.alignment", 48)), emit("alignment_48.gguf", &s);
    s = base(), set_kv(&s, 1, kv_u32("general.alignment", 0)), emit("alignment_0.gguf", &s);
    {
        buf k = kv_begin("general.alignment", V_I32);
        put_u32(&k, 32);
        s = base(), set_kv(&s, 1, k), emit("alignment_wrong_type.gguf", &s);
    }

    /* ---- tensor infos ---- */
    s = base(), s.t[1].offset = 40, emit("misaligned_offset.gguf", &s);
    s = base(), s.t[1].offset = 0, emit("overlapping_data.gguf", &s);
    s = base(), s.t[1].offset = 4096, emit("data_outside_file.gguf", &s);
    s = base(), s.t[0].ne[1] = 1ull << 40, emit("tensor_too_big.gguf", &s);
    s = base(), strcpy(s.t[1].name, "a.weight"), emit("duplicate_tensor.gguf", &s);
    s = base(), s.t[0].name[0] = '\0', s.t[0].name_len = 0, emit("empty_tensor_name.gguf", &s);
    s = base(), memset(s.t[0].name, 'n', 64), s.t[0].name[64] = '\0';
    emit("long_tensor_name.gguf", &s);
    s = base(), s.t[0].n_dims = 5, s.t[0].ne[2] = s.t[0].ne[3] = s.t[0].ne[4] = 1;
    emit("five_dims.gguf", &s);
    s = base(), s.t[0].n_dims = 0, emit("zero_dims.gguf", &s);
    s = base(), s.t[0].ne[1] = 0xffffffffffffffffull, emit("negative_dim.gguf", &s);
    s = base(), s.t[0].n_dims = 3, s.t[0].ne[0] = 1ull << 32, s.t[0].ne[1] = 1ull << 31;
    s.t[0].ne[2] = 4, emit("dim_overflow.gguf", &s);
    /* Element count 2^62 fits in int64, its F32 byte size 2^64 does not fit in 64 bits. */
    s = base(), s.t[0].n_dims = 1, s.t[0].ne[0] = 1ull << 62, emit("byte_size_overflow.gguf", &s);
    s = base(), s.t[1].ne[0] = 33, emit("row_not_block_multiple.gguf", &s);
    s = base(), s.t[0].type = 0x80000000u, emit("type_id_out_of_range.gguf", &s);
    /* Alignment 2^20: the padded start of the data lies beyond the end of the file. */
    s = base(), set_kv(&s, 1, kv_u32("general.alignment", 1u << 20)), s.align = 1;
    s.n_t = 1, s.data_bytes = 32;
    emit("data_start_past_eof.gguf", &s);

    /* ---- valid edge cases: must be accepted ---- */
    char valid_dir[4096];
    snprintf(valid_dir, sizeof valid_dir, "%s/valid", argv[1]);
    mkdir(valid_dir, 0755);
    out_dir = valid_dir;
    /* A tensor type qlab does not know (5, the retired Q4_2): listed as "type id 5". */
    s = base(), s.t[1].type = 5, emit("unknown_tensor_type.gguf", &s);
    s = base(), s.version = 2, emit("version_2.gguf", &s);
    /* No tensors and no keys at all. */
    s = base(), s.n_kv = 0, s.n_t = 0, s.data_bytes = 0, s.align = 1;
    for (int i = 0; i < MAX_KV; i++)
        free(s.kv[i].p), s.kv[i].p = NULL;
    emit("no_tensors.gguf", &s);
    {
        /* Two levels of nested arrays, strings with escapes, an empty tensor. */
        buf k = kv_begin("test.nested", V_ARR);
        put_u32(&k, V_ARR);
        put_u64(&k, 2);
        put_u32(&k, V_STR);
        put_u64(&k, 2);
        put_str(&k, "tab\there");
        put_str(&k, "quote\"");
        put_u32(&k, V_U32);
        put_u64(&k, 0);
        s = base(), set_kv(&s, 2, k);
        s.t[s.n_t++] = (tinfo){"empty.weight", 0, 2, {0, 3}, T_F32, 96};
        emit("nested_and_empty.gguf", &s);
    }

    printf("gen_malformed: wrote %d files\n", n_written);
    return 0;
}
