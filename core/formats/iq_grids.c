#include "formats/iq_grids.h"

#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/data.h"
#include "base/util.h"

/* ------------------------------------------------------------------------- */
/* Family descriptions                                                         */
/* ------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    const char *decode_table; /* manifest name of the decode grid */
    int decode_bits;          /* element width of the decode grid: 64 (8 bytes) or 32 (4 bytes) */
    const char *code_table;   /* manifest name of the encoder lattice codes */
    int n_points;
    int dim;
    int code_bits;
    int n_levels;
    int n_shells;       /* distinct distances kept per neighbour list (ggml's "nwant") */
    bool signed_values; /* decode bytes are int8 (IQ1), else uint8 magnitudes */
    bool needs_signs;   /* the formats decode signs through ksigns/kmask */
} family_spec;

static const family_spec families[QL_IQ_GRID_COUNT] = {
    [QL_IQ_GRID_IQ2_XXS] = {"IQ2_XXS", "iq-grids/iq2xxs_grid", 64, "iq-grids/kgrid_2bit_256", 256,
                            8, 2, 3, 2, false, true},
    [QL_IQ_GRID_IQ2_XS] = {"IQ2_XS", "iq-grids/iq2xs_grid", 64, "iq-grids/kgrid_2bit_512", 512, 8,
                           2, 3, 2, false, true},
    [QL_IQ_GRID_IQ2_S] = {"IQ2_S", "iq-grids/iq2s_grid", 64, "iq-grids/kgrid_2bit_1024", 1024, 8, 2,
                          3, 1, false, true},
    [QL_IQ_GRID_IQ1_S] = {"IQ1_S/IQ1_M", "iq-grids/iq1s_grid", 64, "iq-grids/kgrid_1bit_2048", 2048,
                          8, 2, 3, 3, true, false},
    [QL_IQ_GRID_IQ3_XXS] = {"IQ3_XXS", "iq-grids/iq3xxs_grid", 32, "iq-grids/kgrid_256", 256, 4, 3,
                            8, 2, false, true},
    [QL_IQ_GRID_IQ3_S] = {"IQ3_S", "iq-grids/iq3s_grid", 32, "iq-grids/kgrid_512", 512, 4, 3, 8, 3,
                          false, true},
};

#define SIGNS_TABLE "iq-grids/ksigns_iq2xs"
#define MASKS_TABLE "iq-grids/kmask_iq2xs"
#define N_SIGNS     128
#define N_MASKS     8

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(const ql_iq_grid *) loaded[QL_IQ_GRID_COUNT];
/* Written only under load_lock, before any grid that points at them is published. */
static uint8_t *sign_table;
static uint8_t *mask_table;

/* ------------------------------------------------------------------------- */
/* Table files: one unsigned value per line (decimal or 0x hex), '#' comments  */
/* ------------------------------------------------------------------------- */

/* Strict unsigned parse of a whole token; no sign, no spaces, no overflow. */
static bool parse_u64(const char *s, size_t len, uint64_t *out)
{
    uint64_t v = 0;
    int base = 10;
    size_t i = 0;
    if (len > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        i = 2;
    }
    if (i == len)
        return false;
    for (; i < len; i++) {
        int c = (unsigned char)s[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (base == 16 && c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (base == 16 && c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return false;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
            return false;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    *out = v;
    return true;
}

/* Resolves a table by manifest name and reads exactly `count` values of at most
 * `bits` bits into out. */
static ql_status read_table(const char *name, int count, int bits, uint64_t *out, ql_error *err)
{
    char path[QL_PATH_MAX];
    ql_status st = ql_data_resolve(name, path, sizeof path, NULL, err);
    if (st)
        return st;
    char *text;
    size_t len;
    st = ql_file_read_all(path, &text, &len, err);
    if (st)
        return st;
    uint64_t max = bits == 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1;
    int n = 0, lineno = 0;
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        lineno++;
        const char *a = p, *b = eol;
        while (a < b && isspace((unsigned char)*a))
            a++;
        while (b > a && isspace((unsigned char)b[-1]))
            b--;
        p = eol + 1;
        if (a == b || *a == '#')
            continue;
        uint64_t v;
        if (!parse_u64(a, (size_t)(b - a), &v) || v > max) {
            int shown = (int)(b - a) > 40 ? 40 : (int)(b - a);
            st = ql_error_set(err, QL_EFORMAT,
                              "%s:%d: table %s: '%.*s' is not an unsigned %d-bit value", path,
                              lineno, name, shown, a, bits);
            goto out;
        }
        if (n == count) {
            st = ql_error_set(err, QL_EFORMAT,
                              "%s:%d: table %s has more than the expected %d values", path, lineno,
                              name, count);
            goto out;
        }
        out[n++] = v;
    }
    if (n != count)
        st = ql_error_set(err, QL_EFORMAT, "%s: table %s has %d values, expected %d", path, name, n,
                          count);
out:
    free(text);
    return st;
}

/* ------------------------------------------------------------------------- */
/* Sign tables                                                                 */
/* ------------------------------------------------------------------------- */

/* ksigns_iq2xs[i] is i's seven sign bits plus an eighth bit making the number
 * of set bits even; kmask_iq2xs[i] = 1 << i. Both tables are checked against
 * that definition, so a damaged file is reported instead of decoding wrongly. */
static ql_status load_sign_tables(ql_error *err)
{
    if (sign_table)
        return QL_OK;
    uint64_t s[N_SIGNS], m[N_MASKS];
    ql_status st = read_table(SIGNS_TABLE, N_SIGNS, 8, s, err);
    if (!st)
        st = read_table(MASKS_TABLE, N_MASKS, 8, m, err);
    if (st)
        return st;
    for (int i = 0; i < N_SIGNS; i++) {
        uint64_t want = (uint64_t)i | ((uint64_t)(__builtin_popcount((unsigned)i) & 1) << 7);
        if (s[i] != want)
            return ql_error_set(err, QL_EFORMAT,
                                "table %s: entry %d is %llu, expected %llu (7 sign bits + parity)",
                                SIGNS_TABLE, i, (unsigned long long)s[i], (unsigned long long)want);
    }
    for (int i = 0; i < N_MASKS; i++)
        if (m[i] != (1u << i))
            return ql_error_set(err, QL_EFORMAT, "table %s: entry %d is %llu, expected %u",
                                MASKS_TABLE, i, (unsigned long long)m[i], 1u << i);
    uint8_t *signs = malloc(N_SIGNS), *masks = malloc(N_MASKS);
    if (!signs || !masks) {
        free(signs);
        free(masks);
        return ql_error_set(err, QL_ENOMEM, "IQ sign tables: out of memory");
    }
    for (int i = 0; i < N_SIGNS; i++)
        signs[i] = (uint8_t)s[i];
    for (int i = 0; i < N_MASKS; i++)
        masks[i] = (uint8_t)m[i];
    sign_table = signs;
    mask_table = masks;
    return QL_OK;
}

/* ------------------------------------------------------------------------- */
/* Encoder maps                                                                */
/* ------------------------------------------------------------------------- */

/* Largest squared distance between two lattice points: dim * (2 (n_levels-1))^2
 * is at most 8 * 4^2 = 128 (2-bit) or 4 * 14^2 = 784 (3-bit). */
#define MAX_DIST2 1024

typedef struct {
    uint16_t *v;
    size_t n, cap;
} u16_vec;

static bool u16_push(u16_vec *a, uint16_t x)
{
    if (a->n == a->cap && !ql_grow((void **)&a->v, &a->cap, a->n + 1, sizeof *a->v))
        return false;
    a->v[a->n++] = x;
    return true;
}

/* For every reachable code that is not a grid point, lists the grid points in
 * the n_shells nearest distance shells of its lattice point, ordered by
 * (squared distance, grid index): the same lists ggml obtains by sorting all
 * (distance, index) pairs. A histogram of the distances finds the shells
 * without sorting. */
static ql_status build_neighbours(const family_spec *f, const uint8_t *lattice, int32_t *map,
                                  int32_t map_size, uint16_t **out, ql_error *err)
{
    u16_vec list = {0};
    int *d2 = malloc((size_t)f->n_points * sizeof *d2);
    if (!d2)
        return ql_error_set(err, QL_ENOMEM, "%s codebook: out of memory", f->name);
    int hist[MAX_DIST2];
    int shells[8];
    uint32_t digit_mask = (1u << f->code_bits) - 1;
    for (int32_t code = 0; code < map_size; code++) {
        if (map[code] >= 0)
            continue;
        int pos[8];
        bool reachable = true;
        for (int k = 0; k < f->dim; k++) {
            int l = (int)(((uint32_t)code >> (f->code_bits * k)) & digit_mask);
            reachable = reachable && l < f->n_levels;
            pos[k] = 2 * l + 1;
        }
        if (!reachable) {
            map[code] = QL_IQ_MAP_UNREACHABLE;
            continue;
        }
        memset(hist, 0, sizeof hist);
        for (int j = 0; j < f->n_points; j++) {
            const uint8_t *pg = lattice + (size_t)j * (size_t)f->dim;
            int s = 0;
            for (int k = 0; k < f->dim; k++)
                s += (pg[k] - pos[k]) * (pg[k] - pos[k]);
            d2[j] = s;
            hist[s]++;
        }
        int n_sh = 0, count = 0;
        for (int s = 0; s < MAX_DIST2 && n_sh < f->n_shells; s++)
            if (hist[s]) {
                shells[n_sh++] = s;
                count += hist[s];
            }
        size_t start = list.n;
        map[code] = -(int32_t)(start + 1);
        bool ok = u16_push(&list, (uint16_t)count);
        for (int s = 0; s < n_sh && ok; s++)
            for (int j = 0; j < f->n_points && ok; j++)
                if (d2[j] == shells[s])
                    ok = u16_push(&list, (uint16_t)j);
        if (!ok || list.n > (size_t)INT32_MAX) {
            free(d2);
            free(list.v);
            return ql_error_set(err, QL_ENOMEM, "%s codebook: out of memory", f->name);
        }
    }
    free(d2);
    *out = list.v;
    return QL_OK;
}

/* Lattice points from the codes (coordinate level l at 2l + 1) and the map from
 * code to point; every code must be a valid, distinct point. */
static ql_status lattice_from_codes(const family_spec *f, const uint64_t *codes, int32_t map_size,
                                    uint8_t *lattice, int32_t *map, ql_error *err)
{
    const int dim = f->dim;
    for (int32_t c = 0; c < map_size; c++)
        map[c] = -1;
    const uint32_t digit_mask = (1u << f->code_bits) - 1;
    for (int j = 0; j < f->n_points; j++) {
        if (codes[j] >= (uint64_t)map_size)
            return ql_error_set(err, QL_EFORMAT,
                                "table %s: entry %d (code %llu) is outside the lattice (codes < "
                                "%d)",
                                f->code_table, j, (unsigned long long)codes[j], (int)map_size);
        for (int k = 0; k < dim; k++) {
            const unsigned l = (unsigned)(codes[j] >> (f->code_bits * k)) & digit_mask;
            if (l >= (unsigned)f->n_levels)
                return ql_error_set(err, QL_EFORMAT,
                                    "table %s: entry %d (code %llu): coordinate %d has level %u, "
                                    "the lattice has %d levels",
                                    f->code_table, j, (unsigned long long)codes[j], k, l,
                                    f->n_levels);
            lattice[(size_t)j * (size_t)dim + (size_t)k] = (uint8_t)(2 * l + 1);
        }
        if (map[codes[j]] >= 0)
            return ql_error_set(err, QL_EFORMAT,
                                "table %s: entries %d and %d are the same code %llu", f->code_table,
                                (int)map[codes[j]], j, (unsigned long long)codes[j]);
        map[codes[j]] = j;
    }
    return QL_OK;
}

/* The decode grid must be the same points, one byte per coordinate
 * (little-endian), every lattice level always decoding to the same byte and
 * larger levels to larger values. This catches a shuffled or damaged table. The
 * bytes go to values. */
static ql_status check_decode_grid(const family_spec *f, const uint64_t *dec,
                                   const uint8_t *lattice, uint8_t *values, ql_error *err)
{
    const int dim = f->dim;
    int level_byte[8];
    for (int l = 0; l < 8; l++)
        level_byte[l] = -1000;
    for (int j = 0; j < f->n_points; j++) {
        for (int k = 0; k < dim; k++) {
            const unsigned byte = (unsigned)(dec[j] >> (8 * k)) & 0xffu;
            const int v = f->signed_values ? (int)byte - (int)((byte & 0x80u) << 1) : (int)byte;
            const int l = (lattice[(size_t)j * (size_t)dim + (size_t)k] - 1) / 2;
            if (level_byte[l] == -1000)
                level_byte[l] = v;
            if (level_byte[l] != v)
                return ql_error_set(err, QL_EFORMAT,
                                    "table %s: entry %d (0x%0*llx), byte %d is %d, but lattice "
                                    "level %d (from %s) decodes to %d elsewhere",
                                    f->decode_table, j, f->decode_bits / 4,
                                    (unsigned long long)dec[j], k, v, l, f->code_table,
                                    level_byte[l]);
            values[(size_t)j * (size_t)dim + (size_t)k] = (uint8_t)byte;
        }
        if (f->decode_bits < 64 && (dec[j] >> f->decode_bits) != 0)
            return ql_error_set(err, QL_EFORMAT, "table %s: entry %d does not fit %d bits",
                                f->decode_table, j, f->decode_bits);
    }
    for (int l = 1; l < f->n_levels; l++)
        if (level_byte[l] != -1000 && level_byte[l - 1] != -1000 &&
            level_byte[l] <= level_byte[l - 1])
            return ql_error_set(err, QL_EFORMAT,
                                "table %s: lattice level %d decodes to %d, not above level %d (%d)",
                                f->decode_table, l, level_byte[l], l - 1, level_byte[l - 1]);
    return QL_OK;
}

/* Builds one family from its two tables; err names the table and entry on a
 * malformed input. */
static ql_status build_family(const family_spec *f, ql_iq_grid **out, ql_error *err)
{
    ql_status st;
    const int np = f->n_points, dim = f->dim;
    uint64_t *dec = malloc((size_t)np * sizeof *dec), *codes = malloc((size_t)np * sizeof *codes);
    ql_iq_grid *g = calloc(1, sizeof *g);
    uint8_t *values = malloc((size_t)np * (size_t)dim);
    uint8_t *lattice = malloc((size_t)np * (size_t)dim);
    int32_t map_size = 1;
    for (int k = 0; k < dim; k++)
        map_size += (f->n_levels - 1) << (f->code_bits * k);
    int32_t *map = malloc((size_t)map_size * sizeof *map);
    uint16_t *neighbours = NULL;
    if (!dec || !codes || !g || !values || !lattice || !map) {
        st = ql_error_set(err, QL_ENOMEM, "%s codebook: out of memory", f->name);
        goto fail;
    }
    if ((st = read_table(f->decode_table, np, f->decode_bits, dec, err)) ||
        (st = read_table(f->code_table, np, 16, codes, err)) ||
        (st = lattice_from_codes(f, codes, map_size, lattice, map, err)) ||
        (st = check_decode_grid(f, dec, lattice, values, err)) ||
        (st = build_neighbours(f, lattice, map, map_size, &neighbours, err)) ||
        (f->needs_signs && (st = load_sign_tables(err))))
        goto fail;
    free(dec);
    free(codes);
    g->name = f->name;
    g->n_points = np;
    g->dim = dim;
    g->code_bits = f->code_bits;
    g->n_levels = f->n_levels;
    g->map_size = map_size;
    g->values = values;
    g->lattice = lattice;
    g->map = map;
    g->neighbours = neighbours;
    g->signs = f->needs_signs ? sign_table : NULL;
    g->masks = f->needs_signs ? mask_table : NULL;
    *out = g;
    return QL_OK;
fail:
    free(dec);
    free(codes);
    free(g);
    free(values);
    free(lattice);
    free(map);
    free(neighbours);
    return st;
}

/* ------------------------------------------------------------------------- */
/* Public API                                                                  */
/* ------------------------------------------------------------------------- */

const ql_iq_grid *ql_iq_grid_get(ql_iq_grid_id id)
{
    QL_ASSERT((int)id >= 0 && id < QL_IQ_GRID_COUNT);
    return atomic_load_explicit(&loaded[id], memory_order_acquire);
}

ql_status ql_iq_grid_load(ql_iq_grid_id id, ql_error *err)
{
    QL_ASSERT((int)id >= 0 && id < QL_IQ_GRID_COUNT);
    if (ql_iq_grid_get(id))
        return QL_OK;
    ql_status st = QL_OK;
    pthread_mutex_lock(&load_lock);
    if (!atomic_load_explicit(&loaded[id], memory_order_relaxed)) {
        ql_iq_grid *g = NULL;
        st = build_family(&families[id], &g, err);
        if (st)
            ql_error_prefix(err, "loading the %s codebook: ", families[id].name);
        else
            atomic_store_explicit(&loaded[id], g, memory_order_release);
    }
    pthread_mutex_unlock(&load_lock);
    return st;
}
