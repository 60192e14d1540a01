/* Model loading: every tensor turned into f32 and checked against the
 * hyper-parameters (hparams.h); weight sets and their ownership. */
#include "model/model.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp16.h"
#include "base/util.h"
#include "formats/types.h"

/* ------------------------------------------------------------------------ */
/* Weight sets                                                                */

static ql_status own(ql_weights *w, void *p, ql_error *err)
{
    if (w->n_owned == w->cap_owned) {
        int cap = w->cap_owned ? 2 * w->cap_owned : 16;
        void **o = realloc(w->owned, (size_t)cap * sizeof *o);
        if (!o) {
            free(p);
            return ql_error_set(err, QL_ENOMEM, "out of memory");
        }
        w->owned = o;
        w->cap_owned = cap;
    }
    w->owned[w->n_owned++] = p;
    return QL_OK;
}

static ql_status weights_alloc(ql_weights **out, int n_layer, ql_error *err)
{
    ql_weights *w = calloc(1, sizeof *w);
    if (!w)
        return ql_error_set(err, QL_ENOMEM, "out of memory");
    w->n_layer = n_layer;
    w->n_lin = n_layer * QL_SITES_PER_LAYER + 1;
    w->lin = calloc((size_t)w->n_lin, sizeof *w->lin);
    w->norms = calloc((size_t)(n_layer > 0 ? n_layer : 1), sizeof *w->norms);
    if (!w->lin || !w->norms) {
        ql_weights_free(w);
        return ql_error_set(err, QL_ENOMEM, "out of memory");
    }
    *out = w;
    return QL_OK;
}

static void linear_borrow(ql_linear *dst, const ql_linear *src)
{
    *dst = *src;
    dst->act = NULL;
    dst->act_ctx = NULL;
    dst->act_post = NULL;
    dst->product = NULL;
    dst->w_owned = NULL;
    dst->b_owned = NULL;
    /* Values bound into someone's buffer are transient: the copy binds its own. */
    if (src->bound) {
        dst->w = NULL;
        dst->bound = false;
    }
}

ql_status ql_weights_copy(ql_weights **out, const ql_weights *src, ql_error *err)
{
    *out = NULL;
    ql_weights *w;
    ql_status st = weights_alloc(&w, src->n_layer, err);
    if (st)
        return st;
    for (int i = 0; i < src->n_lin; i++)
        linear_borrow(&w->lin[i], &src->lin[i]);
    linear_borrow(&w->tok_embd, &src->tok_embd);
    memcpy(w->norms, src->norms, (size_t)src->n_layer * sizeof *w->norms);
    w->output_norm = src->output_norm;
    w->rope_freqs = src->rope_freqs;
    *out = w;
    return QL_OK;
}

static void linear_release(ql_linear *l)
{
    free(l->w_owned);
    free(l->b_owned);
    l->w_owned = NULL;
    l->b_owned = NULL;
}

void ql_weights_free(ql_weights *w)
{
    if (!w)
        return;
    if (w->lin)
        for (int i = 0; i < w->n_lin; i++)
            linear_release(&w->lin[i]);
    linear_release(&w->tok_embd);
    for (int i = 0; i < w->n_owned; i++)
        free(w->owned[i]);
    free(w->owned);
    free(w->lin);
    free(w->norms);
    free(w);
}

ql_linear *ql_weights_find(ql_weights *w, const char *name)
{
    if (strcmp(w->tok_embd.name, name) == 0)
        return &w->tok_embd;
    for (int i = 0; i < w->n_lin; i++)
        if (strcmp(w->lin[i].name, name) == 0)
            return &w->lin[i];
    return NULL;
}

/* An F32 source without exact columns needs no decoding: its rows are the values. */
static bool src_in_place(const ql_weight_src *s)
{
    return s->type == QL_TYPE_F32 && s->n_exact == 0 && s->data != NULL;
}

void ql_linear_set_src(ql_linear *lin, const ql_weight_src *src)
{
    free(lin->w_owned);
    lin->w_owned = NULL;
    lin->bound = false;
    lin->finite = false;
    lin->src = *src;
    lin->w = src_in_place(src) ? src->data : NULL;
}

void ql_linear_set_weights(ql_linear *lin, float *data, bool take_ownership)
{
    const ql_weight_src src = {QL_TYPE_F32, data, 0, NULL, NULL};
    if (lin->w_owned == data)
        lin->w_owned = NULL; /* replaced by itself: keep it */
    ql_linear_set_src(lin, &src);
    lin->w_owned = take_ownership ? data : NULL;
}

/* ------------------------------------------------------------------------ */
/* Decoding and binding                                                       */

/* Rows decoded per task: a task of a few hundred KB keeps the threads busy without
 * making small tensors pay for a parallel region. */
#define DECODE_VALUES_PER_TASK (64 * 1024)

/* Whether qlab can decode rows of this type and length. */
static bool decodable(int32_t type, int64_t n_in)
{
    const ql_type_traits *tr = ql_type_get(type);
    return tr && tr->dequantize && ql_row_size(type, n_in) > 0;
}

/* Every half as f32: decoding an F16 weight is then a lookup per value (the layers and
 * heads of F16 models are decoded once per chunk group, the heads once per chunk). */
static float half_table[1 << 16];
static pthread_once_t half_table_once = PTHREAD_ONCE_INIT;

static void fill_half_table(void)
{
    for (uint32_t h = 0; h < (1u << 16); h++)
        half_table[h] = ql_fp16_to_fp32((uint16_t)h);
}

/* n 2-byte values (F16/BF16), little endian; memcpy reads them whatever the alignment of
 * the map. */
static void decode_halves(int32_t type, const uint8_t *src, float *out, int64_t n)
{
    if (type == QL_TYPE_F16) {
        pthread_once(&half_table_once, fill_half_table);
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            out[i] = half_table[h];
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        out[i] = ql_bf16_to_fp32(h);
    }
}

ql_status ql_linear_prepare(const ql_linear *lin, ql_error *err)
{
    if (lin->w)
        return QL_OK;
    const ql_weight_src *s = &lin->src;
    if (!s->data || !decodable(s->type, lin->n_in))
        return ql_error_set(err, QL_EUNSUPPORTED,
                            "tensor '%s' (%lldx%lld): qlab cannot decode type %s", lin->name,
                            (long long)lin->n_in, (long long)lin->n_out, ql_type_name(s->type));
    ql_status st = ql_type_prepare(s->type, err);
    if (st)
        return ql_error_prefix(err, "tensor '%s': ", lin->name);
    return QL_OK;
}

void ql_linear_decode_prepared(const ql_linear *lin, int64_t row0, int64_t n_rows, float *out)
{
    const ql_weight_src *s = &lin->src;
    const int64_t n_in = lin->n_in;
    if (lin->w) { /* bound or in place: the values are there */
        memcpy(out, lin->w + row0 * n_in, (size_t)(n_rows * n_in) * sizeof *out);
        return;
    }
    const size_t row_bytes = ql_row_size(s->type, n_in);
    const uint8_t *src = (const uint8_t *)s->data + (size_t)row0 * row_bytes;
    if (s->type == QL_TYPE_F16 || s->type == QL_TYPE_BF16)
        decode_halves(s->type, src, out, n_rows * n_in);
    else if (s->type == QL_TYPE_F32)
        memcpy(out, src, (size_t)(n_rows * n_in) * sizeof *out);
    else
        ql_type_get(s->type)->dequantize(src, out, n_rows, n_in);
    for (int64_t i = 0; i < n_rows; i++)
        for (int64_t j = 0; j < s->n_exact; j++)
            out[i * n_in + s->exact_cols[j]] = s->exact_vals[(row0 + i) * s->n_exact + j];
}

ql_status ql_linear_decode_rows(const ql_linear *lin, int64_t row0, int64_t n_rows, float *out,
                                ql_error *err)
{
    QL_ASSERT(row0 >= 0 && n_rows >= 0 && row0 + n_rows <= lin->n_out);
    ql_status st = ql_linear_prepare(lin, err);
    if (st)
        return st;
    int64_t per_task = DECODE_VALUES_PER_TASK / lin->n_in;
    if (per_task < 1)
        per_task = 1;
    const int64_t tasks = (n_rows + per_task - 1) / per_task;
#pragma omp parallel for schedule(static) if (tasks > 1)
    for (int64_t t = 0; t < tasks; t++) {
        const int64_t r = t * per_task;
        const int64_t nr = n_rows - r < per_task ? n_rows - r : per_task;
        ql_linear_decode_prepared(lin, row0 + r, nr, out + r * lin->n_in);
    }
    return QL_OK;
}

size_t ql_weights_layer_floats(const ql_weights *w)
{
    size_t n = 0;
    for (int k = 0; k < QL_SITES_PER_LAYER && w->n_layer > 0; k++) {
        const ql_linear *l = &w->lin[k];
        n += (size_t)(l->n_in * l->n_out);
    }
    return n;
}

/* The first value of w (n_out, n_in) that is not finite, as an error. */
static ql_status check_finite(const ql_linear *lin, const float *w, ql_error *err)
{
    const int64_t n = lin->n_in * lin->n_out;
    int64_t bad = n;
#pragma omp parallel for schedule(static) reduction(min : bad) if (n >= DECODE_VALUES_PER_TASK)
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(w[i]) && i < bad)
            bad = i;
    if (bad == n)
        return QL_OK;
    return ql_error_set(err, QL_EFORMAT,
                        "tensor '%s' (%s): the value at row %lld, column %lld is %s; a model "
                        "with non-finite weights cannot be evaluated",
                        lin->name, ql_type_name(lin->src.type), (long long)(bad / lin->n_in),
                        (long long)(bad % lin->n_in), isnan(w[bad]) ? "NaN" : "infinite");
}

/* Binds one linear into buf at *used floats (nothing when it has values already). */
static ql_status bind_linear(ql_linear *lin, float *buf, size_t buf_floats, size_t *used,
                             ql_error *err)
{
    if (lin->w) {
        ql_status st = lin->finite ? QL_OK : check_finite(lin, lin->w, err);
        lin->finite = st == QL_OK;
        return st;
    }
    const size_t n = (size_t)(lin->n_in * lin->n_out);
    QL_ASSERT(*used + n <= buf_floats);
    float *dst = buf + *used;
    ql_status st = ql_linear_decode_rows(lin, 0, lin->n_out, dst, err);
    if (!st && !lin->finite)
        st = check_finite(lin, dst, err);
    if (st)
        return st;
    lin->finite = true;
    lin->w = dst;
    lin->bound = true;
    *used += n;
    return QL_OK;
}

static void unbind_linear(ql_linear *lin)
{
    if (lin->bound) {
        lin->w = NULL;
        lin->bound = false;
    }
}

const char *ql_site_kind_name(ql_site_kind kind)
{
    static const char *const names[QL_SITES_PER_LAYER] = {
        "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    QL_ASSERT(kind >= 0 && kind < QL_SITES_PER_LAYER);
    return names[kind];
}

ql_status ql_weights_bind_layer(ql_weights *w, int layer, float *buf, size_t buf_floats,
                                ql_error *err)
{
    QL_ASSERT(layer >= 0 && layer < w->n_layer);
    size_t used = 0;
    for (int k = 0; k < QL_SITES_PER_LAYER; k++) {
        ql_status st =
            bind_linear(&w->lin[ql_site(layer, (ql_site_kind)k)], buf, buf_floats, &used, err);
        if (st) {
            ql_weights_unbind_layer(w, layer);
            return st;
        }
    }
    return QL_OK;
}

void ql_weights_unbind_layer(ql_weights *w, int layer)
{
    for (int k = 0; k < QL_SITES_PER_LAYER; k++)
        unbind_linear(&w->lin[ql_site(layer, (ql_site_kind)k)]);
}

bool ql_weights_layer_bound(const ql_weights *w, int layer)
{
    for (int k = 0; k < QL_SITES_PER_LAYER; k++)
        if (!w->lin[ql_site(layer, (ql_site_kind)k)].w)
            return false;
    return true;
}

ql_status ql_weights_bind_all(ql_weights *w, ql_error *err)
{
    for (int i = 0; i < w->n_lin; i++) {
        ql_linear *lin = &w->lin[i];
        if (lin->w && !lin->bound)
            continue;
        unbind_linear(lin);
        float *f = malloc((size_t)(lin->n_in * lin->n_out) * sizeof *f);
        if (!f)
            return ql_error_set(err, QL_ENOMEM,
                                "out of memory for tensor '%s' in f32 (%lld values)", lin->name,
                                (long long)(lin->n_in * lin->n_out));
        ql_status st = ql_linear_decode_rows(lin, 0, lin->n_out, f, err);
        if (st) {
            free(f);
            return st;
        }
        lin->w = f;
        lin->w_owned = f;
    }
    return QL_OK;
}

int64_t ql_weights_n_params(const ql_weights *w, const ql_hparams *hp)
{
    int64_t n = w->tok_embd.n_in * w->tok_embd.n_out + hp->n_embd;
    for (int i = 0; i < w->n_lin; i++) {
        const ql_linear *l = &w->lin[i];
        if (i == w->n_lin - 1 && hp->tied_output)
            continue;
        n += l->n_in * l->n_out + (l->b ? l->n_out : 0);
    }
    n += (int64_t)w->n_layer * 2 * hp->n_embd;
    if (hp->has_qk_norm)
        n += (int64_t)w->n_layer * 2 * hp->head_dim;
    return n;
}

/* ------------------------------------------------------------------------ */
/* Tensors to f32                                                             */

/* Finds a tensor and checks its shape is {ne0} (ne1 == 0) or {ne0, ne1}; *out = NULL
 * when it is missing and not required. */
static ql_status find_tensor(const ql_gguf *g, const char *name, int64_t ne0, int64_t ne1,
                             bool required, const ql_gguf_tensor **out, ql_error *err)
{
    *out = NULL;
    const ql_gguf_tensor *t = ql_gguf_find_tensor(g, name);
    if (!t) {
        if (!required)
            return QL_OK;
        return ql_error_set(err, QL_EFORMAT, "%s: tensor '%s' is missing", g->path, name);
    }
    uint32_t want_dims = ne1 > 0 ? 2 : 1;
    bool ok = t->n_dims == want_dims && t->ne[0] == ne0 && (ne1 == 0 || t->ne[1] == ne1);
    if (!ok) {
        char got[96];
        if (t->n_dims == 1)
            snprintf(got, sizeof got, "%lld", (long long)t->ne[0]);
        else if (t->n_dims == 2)
            snprintf(got, sizeof got, "%lldx%lld", (long long)t->ne[0], (long long)t->ne[1]);
        else
            snprintf(got, sizeof got, "%lldx%lldx%lldx%lld", (long long)t->ne[0],
                     (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
        if (ne1 > 0)
            return ql_error_set(err, QL_EFORMAT,
                                "%s: tensor '%s' has shape %s, expected %lldx%lld (ggml ne)",
                                g->path, name, got, (long long)ne0, (long long)ne1);
        return ql_error_set(err, QL_EFORMAT, "%s: tensor '%s' has shape %s, expected %lld", g->path,
                            name, got, (long long)ne0);
    }
    *out = t;
    return QL_OK;
}

/* A 1-D or 2-D tensor as f32: borrowed from the map for F32, else converted into a heap
 * array (*owned). */
static ql_status tensor_f32(const ql_gguf *g, const char *name, int64_t ne0, int64_t ne1,
                            bool required, const float **data, float **owned, int32_t *type,
                            ql_error *err)
{
    *data = NULL;
    *owned = NULL;
    const ql_gguf_tensor *t;
    ql_status fst = find_tensor(g, name, ne0, ne1, required, &t, err);
    if (fst || !t)
        return fst;
    *type = t->type;
    int64_t rows = ne1 > 0 ? ne1 : 1;
    int64_t n = ne0 * rows;
    if (t->type == QL_TYPE_F32) {
        *data = t->data;
        return QL_OK;
    }
    const ql_type_traits *tr = ql_type_get(t->type);
    bool direct = t->type == QL_TYPE_F16 || t->type == QL_TYPE_BF16;
    if (!t->data || !tr || (!direct && !tr->dequantize))
        return ql_error_set(err, QL_EUNSUPPORTED,
                            "%s: tensor '%s' has type %s which qlab cannot read yet", g->path, name,
                            ql_type_name(t->type));
    float *f = malloc((size_t)n * sizeof *f);
    if (!f)
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory for tensor '%s' (%lld values)",
                            g->path, name, (long long)n);
    if (direct) {
        decode_halves(t->type, t->data, f, n);
    } else {
        ql_status st = ql_type_prepare(t->type, err);
        if (st) {
            free(f);
            return ql_error_prefix(err, "%s: tensor '%s': ", g->path, name);
        }
        tr->dequantize(t->data, f, rows, ne0);
    }
    *data = f;
    *owned = f;
    return QL_OK;
}

/* A 2-D product weight (and optional bias) into a linear: the weight stays in the map
 * as its source; the bias is turned into f32. */
static ql_status load_linear(const ql_gguf *g, ql_linear *lin, const char *name, int64_t n_in,
                             int64_t n_out, bool bias, ql_error *err)
{
    snprintf(lin->name, sizeof lin->name, "%s.weight", name);
    lin->n_in = n_in;
    lin->n_out = n_out;
    const ql_gguf_tensor *t;
    ql_status st = find_tensor(g, lin->name, n_in, n_out, true, &t, err);
    if (st)
        return st;
    if (!t->data || !decodable(t->type, n_in))
        return ql_error_set(err, QL_EUNSUPPORTED,
                            "%s: tensor '%s' has type %s which qlab cannot read yet", g->path,
                            lin->name, ql_type_name(t->type));
    const ql_weight_src src = {t->type, t->data, 0, NULL, NULL};
    ql_linear_set_src(lin, &src);
    lin->src_type = t->type;
    if (!bias)
        return QL_OK;
    char bname[112];
    int32_t btype;
    snprintf(bname, sizeof bname, "%s.bias", name);
    return tensor_f32(g, bname, n_out, 0, true, &lin->b, &lin->b_owned, &btype, err);
}

/* A 1-D tensor owned by the weight set. */
static ql_status load_vector(const ql_gguf *g, ql_weights *w, const char *name, int64_t n,
                             bool required, const float **out, ql_error *err)
{
    float *owned;
    int32_t type;
    ql_status st = tensor_f32(g, name, n, 0, required, out, &owned, &type, err);
    if (st == QL_OK && owned)
        st = own(w, owned, err);
    return st;
}

static ql_status load_weights(const ql_gguf *g, const ql_hparams *hp, ql_weights *w, ql_error *err)
{
    const int64_t E = hp->n_embd, F = hp->n_ff, D = hp->head_dim;
    const int64_t QD = (int64_t)hp->n_head * D, KD = (int64_t)hp->n_head_kv * D;
    ql_status st;
    if ((st = load_linear(g, &w->tok_embd, "token_embd", E, hp->n_vocab, false, err)) ||
        (st = load_vector(g, w, "output_norm.weight", E, true, &w->output_norm, err)) ||
        (st = load_vector(g, w, "rope_freqs.weight", hp->n_rot / 2, false, &w->rope_freqs, err)))
        return st;
    for (int l = 0; l < hp->n_layer; l++) {
        char n[64];
        ql_layer_norms *nm = &w->norms[l];
        struct {
            ql_site_kind kind;
            int64_t n_in, n_out;
            bool bias;
        } sites[] = {
            {QL_SITE_Q, E, QD, hp->has_qkv_bias}, {QL_SITE_K, E, KD, hp->has_qkv_bias},
            {QL_SITE_V, E, KD, hp->has_qkv_bias}, {QL_SITE_O, QD, E, false},
            {QL_SITE_GATE, E, F, false},          {QL_SITE_UP, E, F, false},
            {QL_SITE_DOWN, F, E, false},
        };
        for (size_t s = 0; s < sizeof sites / sizeof sites[0]; s++) {
            snprintf(n, sizeof n, "blk.%d.%s", l, ql_site_kind_name(sites[s].kind));
            if ((st = load_linear(g, &w->lin[ql_site(l, sites[s].kind)], n, sites[s].n_in,
                                  sites[s].n_out, sites[s].bias, err)))
                return st;
        }
        snprintf(n, sizeof n, "blk.%d.attn_norm.weight", l);
        if ((st = load_vector(g, w, n, E, true, &nm->attn_norm, err)))
            return st;
        snprintf(n, sizeof n, "blk.%d.ffn_norm.weight", l);
        if ((st = load_vector(g, w, n, E, true, &nm->ffn_norm, err)))
            return st;
        if (hp->has_qk_norm) {
            snprintf(n, sizeof n, "blk.%d.attn_q_norm.weight", l);
            if ((st = load_vector(g, w, n, D, true, &nm->q_norm, err)))
                return st;
            snprintf(n, sizeof n, "blk.%d.attn_k_norm.weight", l);
            if ((st = load_vector(g, w, n, D, true, &nm->k_norm, err)))
                return st;
        }
    }
    ql_linear *head = &w->lin[w->n_lin - 1];
    if (hp->tied_output) {
        /* The head reads the embedding table; a separate linear so a configuration can
         * give the head and the lookup different types. */
        linear_borrow(head, &w->tok_embd);
        return QL_OK;
    }
    return load_linear(g, head, "output", E, hp->n_vocab, false, err);
}

ql_status ql_model_from_gguf(ql_model **out, ql_gguf *g, ql_error *err)
{
    *out = NULL;
    ql_model *m = calloc(1, sizeof *m);
    if (!m) {
        ql_gguf_close(g);
        return ql_error_set(err, QL_ENOMEM, "out of memory");
    }
    m->gguf = g;
    m->path = ql_strdup(g->path);
    ql_status st = QL_ENOMEM;
    if (!m->path) {
        ql_error_set(err, st, "out of memory");
        goto fail;
    }
    if ((st = ql_hparams_read(g, &m->hp, err)))
        goto fail;
    if ((st = weights_alloc(&m->weights, m->hp.n_layer, err)) ||
        (st = load_weights(g, &m->hp, m->weights, err)))
        goto fail;
    m->n_params = ql_weights_n_params(m->weights, &m->hp);
    *out = m;
    return QL_OK;
fail:
    ql_model_free(m);
    return st;
}

ql_status ql_model_load(ql_model **out, const char *path, ql_error *err)
{
    *out = NULL;
    ql_gguf *g;
    ql_status st = ql_gguf_open(&g, path, err);
    if (st)
        return st;
    return ql_model_from_gguf(out, g, err);
}

void ql_model_free(ql_model *m)
{
    if (!m)
        return;
    ql_weights_free(m->weights);
    ql_gguf_close(m->gguf);
    free(m->path);
    free(m);
}

/* ------------------------------------------------------------------------ */
/* Another file of the same model                                             */

static void shape_text(const ql_gguf_tensor *t, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%lld", (long long)t->ne[0]);
    for (uint32_t d = 1; d < t->n_dims && n > 0 && (size_t)n < size; d++)
        n += snprintf(buf + n, size - (size_t)n, "x%lld", (long long)t->ne[d]);
}

static bool same_shape(const ql_gguf_tensor *a, const ql_gguf_tensor *b)
{
    if (a->n_dims != b->n_dims)
        return false;
    for (uint32_t d = 0; d < a->n_dims; d++)
        if (a->ne[d] != b->ne[d])
            return false;
    return true;
}

ql_status ql_model_check_same_shape(const ql_model *ref, const ql_model *other, ql_error *err)
{
    const ql_hparams *a = &ref->hp, *b = &other->hp;
    if (strcmp(a->arch_name, b->arch_name) != 0)
        return ql_error_set(err, QL_EINVAL, "%s: architecture %s, the reference %s is %s",
                            other->path, b->arch_name, ref->path, a->arch_name);
    const struct {
        const char *name;
        int x, y;
    } dims[] = {{"block_count", a->n_layer, b->n_layer},
                {"embedding_length", a->n_embd, b->n_embd},
                {"feed_forward_length", a->n_ff, b->n_ff},
                {"attention.head_count", a->n_head, b->n_head},
                {"attention.head_count_kv", a->n_head_kv, b->n_head_kv},
                {"attention.key_length", a->head_dim, b->head_dim},
                {"rope.dimension_count", a->n_rot, b->n_rot},
                {"vocabulary size", a->n_vocab, b->n_vocab}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].x != dims[i].y)
            return ql_error_set(err, QL_EINVAL, "%s: %s %d, the reference %s has %d", other->path,
                                dims[i].name, dims[i].y, ref->path, dims[i].x);
    const ql_gguf *ga = ref->gguf, *gb = other->gguf;
    for (int64_t i = 0; i < ga->n_tensors; i++) {
        const ql_gguf_tensor *t = &ga->tensors[i];
        const ql_gguf_tensor *u = ql_gguf_find_tensor(gb, t->name);
        char sa[64], sb[64];
        if (!u)
            return ql_error_set(err, QL_EINVAL, "%s: tensor '%s' of the reference %s is missing",
                                other->path, t->name, ref->path);
        shape_text(t, sa, sizeof sa);
        shape_text(u, sb, sizeof sb);
        if (!same_shape(t, u))
            return ql_error_set(err, QL_EINVAL,
                                "%s: tensor '%s' is %s, in the reference %s it is %s", other->path,
                                t->name, sb, ref->path, sa);
    }
    for (int64_t i = 0; i < gb->n_tensors; i++)
        if (!ql_gguf_find_tensor(ga, gb->tensors[i].name))
            return ql_error_set(err, QL_EINVAL, "%s: tensor '%s' is not in the reference %s",
                                other->path, gb->tensors[i].name, ref->path);
    return QL_OK;
}

const ql_linear *ql_model_first_quantized(const ql_model *m)
{
    const ql_weights *w = m->weights;
    for (int i = -1; i < w->n_lin; i++) {
        const ql_linear *l = i < 0 ? &w->tok_embd : &w->lin[i];
        if (l->src_type != QL_TYPE_F32 && l->src_type != QL_TYPE_F16 && l->src_type != QL_TYPE_BF16)
            return l;
    }
    return NULL;
}
