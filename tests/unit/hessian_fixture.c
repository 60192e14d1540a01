#include "hessian_fixture.h"

#include <stdlib.h>

#include "model/model.h"
#include "qltest.h"

void qlt_random_ppl_data(ql_ppl_data *d, int n_vocab, int64_t n, int ctx, int64_t chunks,
                         uint32_t seed)
{
    int32_t *t = malloc((size_t)n * sizeof *t);
    uint32_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        t[i] = (int32_t)((s >> 8) % (uint32_t)n_vocab);
    }
    ql_error err;
    CHECK_OK(ql_ppl_data_from_tokens(d, t, n, 1, ctx, chunks, &err), &err);
    free(t);
}

void qlt_observe_all(void *ctx, int site, const ql_linear *lin, const float *x, int64_t n_tok)
{
    qlt_all_layers *a = ctx;
    if (lin->layer >= 0 && lin->layer < a->n_layer)
        ql_hessians_observe(a->h[lin->layer], site, lin, x, n_tok);
}
