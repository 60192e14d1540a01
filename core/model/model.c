/* Model loading: every tensor found, checked against the hyper-parameters (hparams.h)
 * and kept in the file's memory map (norms and biases in f32); weight sets, their
 * ownership, and the binding of a block's products to f32. */
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp16.h"
#include "base/gemm.h"
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

/* The sites of block l in ql_site_kind order: the attention's four, then the dense
 * feed-forward's three or the router, the routed experts and the shared expert. */
static int layer_kinds(const ql_hparams *hp, int l, ql_site_kind kinds[QL_SITE_KINDS])
{
    int n = 0;
    for (int k = QL_SITE_Q; k <= QL_SITE_O; k++)
        kinds[n++] = (ql_site_kind)k;
    if (!ql_hparams_moe_layer(hp, l)) {
        kinds[n++] = QL_SITE_GATE;
        kinds[n++] = QL_SITE_UP;
        kinds[n++] = QL_SITE_DOWN;
        return n;
    }
    for (int k = QL_SITE_GATE_INP; k <= QL_SITE_DOWN_EXPS; k++)
        kinds[n++] = (ql_site_kind)k;
    if (hp->n_ff_shexp > 0)
        for (int k = QL_SITE_GATE_INP_SHEXP; k <= QL_SITE_DOWN_SHEXP; k++)
            kinds[n++] = (ql_site_kind)k;
    return n;
}

/* An empty weight set with room for every site of a model of hp's shape: the site
 * tables filled, each linear's layer and kind set. */
static ql_status weights_alloc(ql_weights **out, const ql_hparams *hp, ql_error *err)
{
    ql_weights *w = calloc(1, sizeof *w);
    if (!w)
        return ql_error_set(err, QL_ENOMEM, "out of memory");
    const int n_layer = hp->n_layer;
    w->n_layer = n_layer;
    w->layer_site0 = calloc((size_t)n_layer + 1, sizeof *w->layer_site0);
    w->kind_site = malloc(((size_t)n_layer * QL_SITE_KINDS + 1) * sizeof *w->kind_site);
    w->norms = calloc((size_t)(n_layer > 0 ? n_layer : 1), sizeof *w->norms);
    if (!w->layer_site0 || !w->kind_site || !w->norms) {
        ql_weights_free(w);
        return ql_error_set(err, QL_ENOMEM, "out of memory");
    }
    ql_site_kind kinds[QL_SITE_KINDS];
    int n = 0;
    for (int l = 0; l < n_layer; l++) {
        w->layer_site0[l] = n;
        n += layer_kinds(hp, l, kinds);
    }
    w->layer_site0[n_layer] = n;
    w->n_lin = n + 1;
    w->lin = calloc((size_t)w->n_lin, sizeof *w->lin);
    if (!w->lin) {
        ql_weights_free(w);
        return ql_error_set(err, QL_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < (size_t)n_layer * QL_SITE_KINDS; i++)
        w->kind_site[i] = -1;
    for (int l = 0; l < n_layer; l++) {
        const int nk = layer_kinds(hp, l, kinds);
        for (int i = 0; i < nk; i++) {
            const int s = w->layer_site0[l] + i;
            w->kind_site[l * QL_SITE_KINDS + kinds[i]] = s;
            w->lin[s].layer = l;
            w->lin[s].kind = kinds[i];
        }
    }
    for (int s = 0; s < w->n_lin; s++) {
        w->lin[s].n_expert = 1;
        w->lin[s].expert = -1;
    }
    ql_linear *head = &w->lin[w->n_lin - 1];
    head->layer = -1;
    head->kind = QL_SITE_HEAD;
    w->tok_embd.layer = -1;
    w->tok_embd.kind = QL_SITE_HEAD;
    w->tok_embd.n_expert = 1;
    w->tok_embd.expert = -1;
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
    ql_weights *w = calloc(1, sizeof *w);
    if (!w)
        return ql_error_set(err, QL_ENOMEM, "out of memory");
    const size_t n_layer = (size_t)src->n_layer;
    w->n_layer = src->n_layer;
    w->n_lin = src->n_lin;
    w->lin = calloc((size_t)src->n_lin, sizeof *w->lin);
    w->norms = calloc(n_layer > 0 ? n_layer : 1, sizeof *w->norms);
    w->layer_site0 = malloc((n_layer + 1) * sizeof *w->layer_site0);
    w->kind_site = malloc((n_layer * QL_SITE_KINDS + 1) * sizeof *w->kind_site);
    if (!w->lin || !w->norms || !w->layer_site0 || !w->kind_site) {
        ql_weights_free(w);
        return ql_error_set(err, QL_ENOMEM, "out of memory");
    }
    memcpy(w->layer_site0, src->layer_site0, (n_layer + 1) * sizeof *w->layer_site0);
    memcpy(w->kind_site, src->kind_site, n_layer * QL_SITE_KINDS * sizeof *w->kind_site);
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
    free(w->layer_site0);
    free(w->kind_site);
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
    lin->expert_src = NULL;
    lin->w = src_in_place(src) ? src->data : NULL;
}

void ql_linear_set_expert_srcs(ql_linear *lin, const ql_weight_src *srcs)
{
    const ql_weight_src src = lin->src;
    ql_linear_set_src(lin, &src);
    lin->expert_src = srcs;
    if (srcs)
        lin->w = NULL; /* decoded expert by expert from now on */
}

void ql_linear_set_weights(ql_linear *lin, float *data, bool take_ownership)
{
    const ql_weight_src src = {.type = QL_TYPE_F32, .data = data};
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

/* n 2-byte values (F16/BF16), little endian; memcpy reads them whatever the alignment of
 * the map. */
static void decode_halves(int32_t type, const uint8_t *src, float *out, int64_t n)
{
    if (type == QL_TYPE_F16) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            out[i] = ql_fp16_to_fp32(h); /* a lookup (fp16.h) */
        }
        return;
    }
    /* BF16 is the upper half of an f32: a shift, written so the compiler vectorizes it
     * (ql_bf16_to_fp32 per value is a call each). */
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        const uint32_t bits = (uint32_t)h << 16;
        memcpy(&out[i], &bits, 4);
    }
}

/* Whether one source can be decoded at this row length. */
static ql_status prepare_src(const ql_linear *lin, const ql_weight_src *s, ql_error *err)
{
    if (!s->data || !decodable(s->type, lin->n_in))
        return ql_error_set(err, QL_EUNSUPPORTED,
                            "tensor '%s' (%lldx%lld): qlab cannot decode type %s", lin->name,
                            (long long)lin->n_in, (long long)lin->n_out, ql_type_name(s->type));
    ql_status st = ql_type_prepare(s->type, err);
    if (st)
        return ql_error_prefix(err, "tensor '%s': ", lin->name);
    return QL_OK;
}

ql_status ql_linear_prepare(const ql_linear *lin, ql_error *err)
{
    if (lin->w)
        return QL_OK;
    ql_status st = prepare_src(lin, &lin->src, err);
    for (int e = 0; !st && lin->expert_src && e < lin->n_expert; e++)
        if (lin->expert_src[e].data)
            st = prepare_src(lin, &lin->expert_src[e], err);
    return st;
}

/* Rows row0 .. row0 + n_rows - 1 of one source (a whole matrix's or stacked one's rows
 * numbered from its first), exact columns written back. */
static void decode_src(const ql_weight_src *s, int64_t n_in, int64_t row0, int64_t n_rows,
                       float *out)
{
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

/* Expert e's own source, rows numbered from the expert's first. */
static bool expert_own_src(const ql_linear *lin, int e, ql_weight_src *out)
{
    if (!lin->expert_src || !lin->expert_src[e].data)
        return false;
    *out = lin->expert_src[e];
    return true;
}

void ql_linear_decode_prepared(const ql_linear *lin, int64_t row0, int64_t n_rows, float *out)
{
    const int64_t n_in = lin->n_in;
    if (lin->w) { /* bound or in place: the values are there */
        memcpy(out, lin->w + row0 * n_in, (size_t)(n_rows * n_in) * sizeof *out);
        return;
    }
    if (!lin->expert_src) {
        decode_src(&lin->src, n_in, row0, n_rows, out);
        return;
    }
    /* Experts with sources of their own: piece by piece, each from its source. */
    const int64_t rows = ql_linear_matrix_rows(lin);
    for (int64_t r = row0; r < row0 + n_rows;) {
        const int e = (int)(r / rows);
        const int64_t end =
            (int64_t)(e + 1) * rows < row0 + n_rows ? (int64_t)(e + 1) * rows : row0 + n_rows;
        ql_weight_src own_src;
        if (expert_own_src(lin, e, &own_src))
            decode_src(&own_src, n_in, r - (int64_t)e * rows, end - r, out + (r - row0) * n_in);
        else
            decode_src(&lin->src, n_in, r, end - r, out + (r - row0) * n_in);
        r = end;
    }
}

void ql_linear_expert(const ql_linear *lin, int e, ql_linear *view)
{
    QL_ASSERT(e >= 0 && e < lin->n_expert);
    const int64_t rows = ql_linear_matrix_rows(lin);
    *view = *lin;
    view->n_out = rows;
    view->n_expert = 1;
    view->expert = e;
    view->row0 = (int64_t)e * rows;
    view->expert_src = NULL;
    view->w_owned = NULL;
    view->b_owned = NULL;
    view->bound = false;
    if (lin->w)
        view->w = lin->w + view->row0 * lin->n_in;
    if (lin->b)
        view->b = lin->b + view->row0;
    if (!expert_own_src(lin, e, &view->src)) {
        view->src.data = lin->src.data
                             ? (const uint8_t *)lin->src.data +
                                   (size_t)view->row0 * ql_row_size(lin->src.type, lin->n_in)
                             : NULL;
        if (lin->src.n_exact > 0)
            view->src.exact_vals = lin->src.exact_vals + view->row0 * lin->src.n_exact;
    }
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
    size_t most = 0;
    for (int l = 0; l < w->n_layer; l++) {
        size_t n = 0;
        for (int s = w->layer_site0[l]; s < w->layer_site0[l + 1]; s++)
            n += (size_t)(w->lin[s].n_in * w->lin[s].n_out);
        if (n > most)
            most = n;
    }
    return most;
}

/* Value bad (row-major) of lin is a NaN or an infinity: the error naming it. */
static ql_status nonfinite(const ql_linear *lin, int64_t bad, bool nan, ql_error *err)
{
    return ql_error_set(err, QL_EFORMAT,
                        "tensor '%s' (%s): the value at row %lld, column %lld is %s; a model "
                        "with non-finite weights cannot be evaluated",
                        lin->name, ql_type_name(lin->src.type), (long long)(bad / lin->n_in),
                        (long long)(bad % lin->n_in), nan ? "NaN" : "infinite");
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
    return bad == n ? QL_OK : nonfinite(lin, bad, isnan(w[bad]), err);
}

bool ql_linear_direct(const ql_linear *lin, ql_dot_wtype *wt)
{
    const ql_weight_src *s = &lin->src;
    if (ql_gemm_selected() == QL_GEMM_BLAS || s->n_exact != 0 || !s->data || lin->n_expert != 1 ||
        lin->expert >= 0 || lin->expert_src || (s->type != QL_TYPE_F16 && s->type != QL_TYPE_BF16))
        return false;
    if (wt)
        *wt = s->type == QL_TYPE_F16 ? QL_DOT_F16 : QL_DOT_BF16;
    return true;
}

/* check_finite on the half-precision rows of a directly read linear: an exponent of all
 * ones is an infinity or a NaN. */
static ql_status check_finite_half(const ql_linear *lin, ql_error *err)
{
    const uint16_t *h = lin->src.data;
    const uint16_t exp = lin->src.type == QL_TYPE_F16 ? 0x7c00u : 0x7f80u;
    const int64_t n = lin->n_in * lin->n_out;
    int64_t bad = n;
#pragma omp parallel for schedule(static) reduction(min : bad) if (n >= DECODE_VALUES_PER_TASK)
    for (int64_t i = 0; i < n; i++)
        if ((h[i] & exp) == exp && i < bad)
            bad = i;
    return bad == n ? QL_OK : nonfinite(lin, bad, (h[bad] & ~exp & 0x7fffu) != 0, err);
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
    if (ql_linear_direct(lin, NULL)) { /* the product reads the rows themselves */
        ql_status st = lin->finite ? QL_OK : check_finite_half(lin, err);
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
    static const char *const names[QL_SITE_KINDS + 1] = {
        "attn_q",         "attn_k",       "attn_v",         "attn_output",
        "ffn_gate",       "ffn_up",       "ffn_down",       "ffn_gate_inp",
        "ffn_gate_exps",  "ffn_up_exps",  "ffn_down_exps",  "ffn_gate_inp_shexp",
        "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp", "output"};
    QL_ASSERT(kind >= 0 && kind <= QL_SITE_KINDS);
    return names[kind];
}

ql_status ql_weights_bind_layer(ql_weights *w, int layer, float *buf, size_t buf_floats,
                                ql_error *err)
{
    QL_ASSERT(layer >= 0 && layer < w->n_layer);
    size_t used = 0;
    for (int s = w->layer_site0[layer]; s < w->layer_site0[layer + 1]; s++) {
        ql_status st = bind_linear(&w->lin[s], buf, buf_floats, &used, err);
        if (st) {
            ql_weights_unbind_layer(w, layer);
            return st;
        }
    }
    return QL_OK;
}

void ql_weights_unbind_layer(ql_weights *w, int layer)
{
    for (int s = w->layer_site0[layer]; s < w->layer_site0[layer + 1]; s++)
        unbind_linear(&w->lin[s]);
}

bool ql_weights_layer_bound(const ql_weights *w, int layer)
{
    for (int s = w->layer_site0[layer]; s < w->layer_site0[layer + 1]; s++) {
        const ql_linear *lin = &w->lin[s];
        if (!lin->w && !(lin->finite && ql_linear_direct(lin, NULL)))
            return false;
    }
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
/* Tensors from the file                                                      */

/* A load in progress: the file, and which of its tensors the model has taken (a
 * tensor left over is an error: the forward pass would ignore it). */
typedef struct {
    const ql_gguf *g;
    bool *used; /* (g->n_tensors,) */
} loader;

static void shape_text(const ql_gguf_tensor *t, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%lld", (long long)t->ne[0]);
    for (uint32_t d = 1; d < t->n_dims && n > 0 && (size_t)n < size; d++)
        n += snprintf(buf + n, size - (size_t)n, "x%lld", (long long)t->ne[d]);
}

/* Finds a tensor and checks its shape is ne[0..n_dims) (missing trailing dimensions of
 * the file's count as 1, as llama.cpp compares them); *out = NULL when it is missing and
 * not required. */
static ql_status find_tensor(loader *ld, const char *name, int n_dims, const int64_t *ne,
                             bool required, const ql_gguf_tensor **out, ql_error *err)
{
    const ql_gguf *g = ld->g;
    *out = NULL;
    const ql_gguf_tensor *t = ql_gguf_find_tensor(g, name);
    if (!t) {
        if (!required)
            return QL_OK;
        return ql_error_set(err, QL_EFORMAT, "%s: tensor '%s' is missing", g->path, name);
    }
    bool ok = true;
    for (int d = 0; d < QL_GGUF_MAX_DIMS; d++) {
        const int64_t want = d < n_dims ? ne[d] : 1;
        const int64_t got = d < (int)t->n_dims ? t->ne[d] : 1;
        ok = ok && want == got;
    }
    if (!ok) {
        char got[96], want[96];
        shape_text(t, got, sizeof got);
        int n = snprintf(want, sizeof want, "%lld", (long long)ne[0]);
        for (int d = 1; d < n_dims && n > 0 && (size_t)n < sizeof want; d++)
            n += snprintf(want + n, sizeof want - (size_t)n, "x%lld", (long long)ne[d]);
        return ql_error_set(err, QL_EFORMAT, "%s: tensor '%s' has shape %s, expected %s%s", g->path,
                            name, got, want, n_dims > 1 ? " (ggml ne)" : "");
    }
    ld->used[t - g->tensors] = true;
    *out = t;
    return QL_OK;
}

/* A 1-D tensor as f32: borrowed from the map for F32, else converted into a heap array
 * (*owned). */
static ql_status tensor_f32(loader *ld, const char *name, int64_t n, bool required,
                            const float **data, float **owned, ql_error *err)
{
    const ql_gguf *g = ld->g;
    *data = NULL;
    *owned = NULL;
    const ql_gguf_tensor *t;
    ql_status fst = find_tensor(ld, name, 1, &n, required, &t, err);
    if (fst || !t)
        return fst;
    if (t->type == QL_TYPE_F32) {
        *data = t->data;
        return QL_OK;
    }
    const ql_type_traits *tr = ql_type_get(t->type);
    bool direct = t->type == QL_TYPE_F16 || t->type == QL_TYPE_BF16;
    if (!t->data || !tr || (!direct && !tr->dequantize) ||
        (!direct && ql_row_size(t->type, n) == 0))
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
        tr->dequantize(t->data, f, 1, n);
    }
    *data = f;
    *owned = f;
    return QL_OK;
}

/* Whether a product's bias is required, optional (llama.cpp loads it when the file has
 * it: llama's q/k/v/o and feed-forward products) or not read at all. */
typedef enum { BIAS_NONE, BIAS_OPTIONAL, BIAS_REQUIRED } bias_rule;

/* A product weight (and its bias) into a linear: the weight stays in the map as its
 * source; the bias is turned into f32. n_expert > 1: a 3-D tensor {n_in, rows,
 * n_expert}, its experts stacked in the rows. */
static ql_status load_linear(loader *ld, ql_linear *lin, const char *name, int64_t n_in,
                             int64_t rows, int n_expert, bias_rule bias, ql_error *err)
{
    const ql_gguf *g = ld->g;
    snprintf(lin->name, sizeof lin->name, "%s.weight", name);
    lin->n_in = n_in;
    lin->n_out = rows * n_expert;
    lin->n_expert = n_expert;
    const int64_t ne[3] = {n_in, rows, n_expert};
    const ql_gguf_tensor *t;
    ql_status st = find_tensor(ld, lin->name, n_expert > 1 ? 3 : 2, ne, true, &t, err);
    if (st)
        return st;
    if (!t->data || !decodable(t->type, n_in))
        return ql_error_set(err, QL_EUNSUPPORTED,
                            "%s: tensor '%s' has type %s which qlab cannot read yet", g->path,
                            lin->name, ql_type_name(t->type));
    const ql_weight_src src = {.type = t->type, .data = t->data};
    ql_linear_set_src(lin, &src);
    lin->src_type = t->type;
    if (bias == BIAS_NONE)
        return QL_OK;
    char bname[112];
    snprintf(bname, sizeof bname, "%s.bias", name);
    return tensor_f32(ld, bname, lin->n_out, bias == BIAS_REQUIRED, &lin->b, &lin->b_owned, err);
}

/* A 1-D tensor owned by the weight set. */
static ql_status load_vector(loader *ld, ql_weights *w, const char *name, int64_t n, bool required,
                             const float **out, ql_error *err)
{
    float *owned;
    ql_status st = tensor_f32(ld, name, n, required, out, &owned, err);
    if (st == QL_OK && owned)
        st = own(w, owned, err);
    return st;
}

/* Shape (n_in, rows per matrix, matrices) and bias rule of a site kind. */
typedef struct {
    int64_t n_in, rows;
    int n_expert;
    bias_rule bias;
} site_shape;

static site_shape shape_of(const ql_hparams *hp, ql_site_kind kind)
{
    site_shape sh;
    ql_site_dims(hp, kind, &sh.n_in, &sh.rows, &sh.n_expert);
    const bias_rule llama = hp->arch == QL_ARCH_LLAMA ? BIAS_OPTIONAL : BIAS_NONE;
    switch (kind) {
    case QL_SITE_Q:
    case QL_SITE_K:
    case QL_SITE_V:
        sh.bias = hp->has_qkv_bias ? BIAS_REQUIRED : llama;
        break;
    case QL_SITE_O:
    case QL_SITE_GATE:
    case QL_SITE_UP:
    case QL_SITE_DOWN:
        sh.bias = llama;
        break;
    default:
        sh.bias = BIAS_NONE;
    }
    return sh;
}

void ql_site_dims(const ql_hparams *hp, ql_site_kind kind, int64_t *n_in, int64_t *rows,
                  int *n_expert)
{
    const int64_t E = hp->n_embd, D = hp->head_dim;
    const int64_t QD = (int64_t)hp->n_head * D, KD = (int64_t)hp->n_head_kv * D;
    int64_t in = E, out = E;
    int ne = 1;
    switch (kind) {
    case QL_SITE_Q:
        out = QD;
        break;
    case QL_SITE_K:
    case QL_SITE_V:
        out = KD;
        break;
    case QL_SITE_O:
        in = QD;
        break;
    case QL_SITE_GATE:
    case QL_SITE_UP:
        out = hp->n_ff;
        break;
    case QL_SITE_DOWN:
        in = hp->n_ff;
        break;
    case QL_SITE_GATE_INP:
        out = hp->n_expert;
        break;
    case QL_SITE_GATE_EXPS:
    case QL_SITE_UP_EXPS:
        out = hp->n_ff_exp;
        ne = hp->n_expert;
        break;
    case QL_SITE_DOWN_EXPS:
        in = hp->n_ff_exp;
        ne = hp->n_expert;
        break;
    case QL_SITE_GATE_INP_SHEXP:
        out = 1;
        break;
    case QL_SITE_GATE_SHEXP:
    case QL_SITE_UP_SHEXP:
        out = hp->n_ff_shexp;
        break;
    case QL_SITE_DOWN_SHEXP:
        in = hp->n_ff_shexp;
        break;
    case QL_SITE_HEAD:
        out = hp->n_vocab;
        break;
    default:
        QL_ASSERT(!"not a site kind");
    }
    *n_in = in;
    *rows = out;
    *n_expert = ne;
}

static ql_status load_weights(loader *ld, const ql_hparams *hp, ql_weights *w, ql_error *err)
{
    const int64_t E = hp->n_embd, D = hp->head_dim;
    ql_status st;
    if ((st = load_linear(ld, &w->tok_embd, "token_embd", E, hp->n_vocab, 1, BIAS_NONE, err)) ||
        (st = load_vector(ld, w, "output_norm.weight", E, true, &w->output_norm, err)) ||
        (st = load_vector(ld, w, "rope_freqs.weight", hp->n_rot / 2, false, &w->rope_freqs, err)))
        return st;
    for (int l = 0; l < hp->n_layer; l++) {
        char n[64];
        for (int s = w->layer_site0[l]; s < w->layer_site0[l + 1]; s++) {
            ql_linear *lin = &w->lin[s];
            const site_shape sh = shape_of(hp, lin->kind);
            snprintf(n, sizeof n, "blk.%d.%s", l, ql_site_kind_name(lin->kind));
            if ((st = load_linear(ld, lin, n, sh.n_in, sh.rows, sh.n_expert, sh.bias, err)))
                return st;
        }
        ql_layer_norms *nm = &w->norms[l];
        snprintf(n, sizeof n, "blk.%d.attn_norm.weight", l);
        if ((st = load_vector(ld, w, n, E, true, &nm->attn_norm, err)))
            return st;
        snprintf(n, sizeof n, "blk.%d.ffn_norm.weight", l);
        if ((st = load_vector(ld, w, n, E, true, &nm->ffn_norm, err)))
            return st;
        if (hp->has_qk_norm) {
            snprintf(n, sizeof n, "blk.%d.attn_q_norm.weight", l);
            if ((st = load_vector(ld, w, n, D, true, &nm->q_norm, err)))
                return st;
            snprintf(n, sizeof n, "blk.%d.attn_k_norm.weight", l);
            if ((st = load_vector(ld, w, n, D, true, &nm->k_norm, err)))
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
    if ((st = load_linear(ld, head, "output", E, hp->n_vocab, 1, BIAS_NONE, err)))
        return st;
    head->layer = -1;
    head->kind = QL_SITE_HEAD;
    return QL_OK;
}

/* Every tensor of the file must have been taken: one the forward pass does not read
 * would be ignored without a word (llama.cpp refuses such a file too: "wrong number of
 * tensors"). With unused, the first such tensor's name is given instead. */
static ql_status check_all_used(const loader *ld, const ql_hparams *hp, const char **unused,
                                ql_error *err)
{
    const ql_gguf *g = ld->g;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        if (ld->used[i])
            continue;
        if (unused) {
            if (!*unused)
                *unused = g->tensors[i].name;
            continue;
        }
        const ql_gguf_tensor *t = &g->tensors[i];
        char shape[96];
        shape_text(t, shape, sizeof shape);
        return ql_error_set(err, QL_EUNSUPPORTED,
                            "%s: tensor '%s' (%s, %s) is not part of a %s model as qlab "
                            "computes it: evaluating the model without it would give figures "
                            "for another model",
                            g->path, t->name, shape, ql_type_name(t->type), hp->arch_name);
    }
    return QL_OK;
}

static ql_status model_from_gguf(ql_model **out, ql_gguf *g, const char **unused, ql_error *err)
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
    loader ld = {g, calloc((size_t)g->n_tensors + 1, sizeof(bool))};
    if (!ld.used) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory");
        goto fail;
    }
    if ((st = weights_alloc(&m->weights, &m->hp, err)) ||
        (st = load_weights(&ld, &m->hp, m->weights, err)) ||
        (st = check_all_used(&ld, &m->hp, unused, err))) {
        free(ld.used);
        goto fail;
    }
    free(ld.used);
    m->n_params = ql_weights_n_params(m->weights, &m->hp);
    *out = m;
    return QL_OK;
fail:
    ql_model_free(m);
    return st;
}

ql_status ql_model_from_gguf(ql_model **out, ql_gguf *g, ql_error *err)
{
    return model_from_gguf(out, g, NULL, err);
}

ql_status ql_model_load(ql_model **out, const char *path, ql_error *err)
{
    *out = NULL;
    ql_gguf *g;
    ql_status st = ql_gguf_open(&g, path, err);
    if (st)
        return st;
    return model_from_gguf(out, g, NULL, err);
}

ql_status ql_model_load_for_rewrite(ql_model **out, const char *path, const char **unused,
                                    ql_error *err)
{
    *out = NULL;
    const char *first = NULL;
    ql_gguf *g;
    ql_status st = ql_gguf_open(&g, path, err);
    if (st)
        return st;
    st = model_from_gguf(out, g, &first, err);
    if (unused)
        *unused = st ? NULL : first;
    return st;
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
                {"vocabulary size", a->n_vocab, b->n_vocab},
                {"expert_count", a->n_expert, b->n_expert},
                {"expert_used_count", a->n_expert_used, b->n_expert_used},
                {"expert width", a->n_ff_exp, b->n_ff_exp},
                {"shared expert width", a->n_ff_shexp, b->n_ff_shexp}};
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
