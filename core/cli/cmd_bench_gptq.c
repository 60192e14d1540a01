/* qlab bench gptq: the time and memory of GPTQ (formats/gptq.h, experiment/gptq_pass.h)
 * against ggml's quantizer, per type, for one block of a model shape, scaled to the
 * model's blocks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cli.h"
#include "commands.h"
#include "experiment/gptq_pass.h"
#include "formats/gptq.h"
#include "formats/quant_split.h"
#include "formats/types.h"
#include "model/model.h"
#include "model/quant.h"
#include "model/synth.h"

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab bench gptq [--shape NAME] [--types T,T,...] [--rows R] [--tokens N]\n"
           "                       [--threads N]\n"
           "\n"
           "Time and memory of GPTQ against ggml's quantizer, per type, on the matrices of one\n"
           "block of a model shape (a synth preset: its q, k, v, output, gate, up and down),\n"
           "scaled to the model's blocks. Weights and inputs are synthetic (heavy-tailed\n"
           "weights; inputs from a low-rank mixture with a few loud channels). Per block:\n"
           "the Hessians of its four distinct inputs summed over N tokens (seconds per 1000\n"
           "tokens; their memory), then each matrix quantized by ggml's quantizer (all rows)\n"
           "and by GPTQ: its factorization, then R rows, extrapolated to all rows (GPTQ's rows\n"
           "are independent given the factor, so the time per row is the same for every row).\n"
           "Both with the Hessians' diagonals as importance, as a sweep gives them.\n"
           "A mixture of experts (qwen3-30b-a3b, mixtral-8x7b): the feed-forward matrices are\n"
           "one expert's, each expert with its own Hessians (its gate and up share one), and\n"
           "their time and memory count once per expert of the block (a shared expert is not\n"
           "timed).\n\n");
    ql_opt_print_options(stdout, p);
}

typedef struct {
    const char *name;
    ql_site_kind kind;
    int64_t n_in, n_out;
    int copies; /* matrices of this shape per block: a mixture's experts, else 1 */
} bench_mat;

static uint64_t rng;


int ql_bench_gptq(int argc, char **argv)
{
    const char *shape = "qwen2.5-0.5b", *types_arg = NULL;
    int rows = 32, tokens = 512, threads = 0;
    const ql_opt table[] = {
        ql_opt_str("shape", 0, &shape, "NAME", "model shape, a synth preset (default qwen2.5-0.5b)"),
        ql_opt_str("types", 0, &types_arg, "T,T,...",
                   "types to time (default: every type GPTQ applies to)"),
        ql_opt_int("rows", 0, &rows, 1, 1 << 20, "R", "GPTQ rows timed per matrix (default 32)"),
        ql_opt_int("tokens", 0, &tokens, 1, 1 << 20, "N",
                   "tokens the Hessians are summed over (default 512)"),
        ql_opt_threads(&threads, QL_OPT_THREADS_HELP),
    };
    ql_opt_parser p = {.prog = "qlab bench gptq",
                       .opts = table,
                       .n_opts = QL_OPT_COUNT(table),
                       .help = help};
    const int prc = ql_opt_parse(&p, argc, argv);
    if (prc != QL_OPT_GO_ON)
        return prc;
    ql_synth_opts so;
    ql_synth_defaults(&so);
    if (!ql_synth_preset(shape, &so))
        return ql_opt_usage(&p, "unknown shape '%s' (%s)", shape, ql_synth_presets());
    ql_threads_set(threads);
    /* A mixture's feed-forward: one expert's matrices, counted once per expert. */
    const int64_t dim = so.dim, ff = so.experts ? so.expert_ff : so.ff;
    const int per_block = so.experts ? so.experts : 1;
    const int64_t hd = so.head_dim ? so.head_dim : so.dim / so.heads;
    const int64_t q_out = hd * so.heads, kv = hd * so.kv_heads;
    const bench_mat mats[] = {
        {"attn_q", QL_SITE_Q, dim, q_out, 1},
        {"attn_k", QL_SITE_K, dim, kv, 1},
        {"attn_v", QL_SITE_V, dim, kv, 1},
        {"attn_output", QL_SITE_O, q_out, dim, 1},
        {so.experts ? "ffn_gate_exps" : "ffn_gate", QL_SITE_GATE, dim, ff, per_block},
        {so.experts ? "ffn_up_exps" : "ffn_up", QL_SITE_UP, dim, ff, per_block},
        {so.experts ? "ffn_down_exps" : "ffn_down", QL_SITE_DOWN, ff, dim, per_block},
    };
    const int n_mats = (int)(sizeof mats / sizeof mats[0]);
    /* One block's weight set, for the Hessian collector. */
    ql_linear lin[7];
    int site0[2] = {0, n_mats}, kind_site[QL_SITE_KINDS];
    for (int k = 0; k < QL_SITE_KINDS; k++)
        kind_site[k] = -1;
    memset(lin, 0, sizeof lin);
    for (int i = 0; i < n_mats; i++) {
        snprintf(lin[i].name, sizeof lin[i].name, "blk.0.%s.weight", mats[i].name);
        lin[i].n_in = mats[i].n_in;
        lin[i].n_out = mats[i].n_out;
        lin[i].kind = mats[i].kind;
        lin[i].layer = 0;
        lin[i].n_expert = 1;
        kind_site[mats[i].kind] = i;
    }
    ql_weights w = {.n_layer = 1, .n_lin = n_mats + 1, .lin = lin, .layer_site0 = site0,
                    .kind_site = kind_site};
    ql_error err;
    ql_hessians *h = NULL;
    int rc = QL_EXIT_OK;
    float *x = NULL, *wts = NULL, *imat = NULL;
    void *q = NULL;
    if (ql_hessians_alloc(&h, &w, 0, &err)) {
        rc = ql_cli_fail(&err);
        goto out;
    }
    /* The widest input and output of the block's matrices (attn_output reads q_out, which
     * may exceed dim: qwen3-30b-a3b). */
    int64_t max_in = 0, max_out = 0;
    for (int i = 0; i < n_mats; i++) {
        max_in = mats[i].n_in > max_in ? mats[i].n_in : max_in;
        max_out = mats[i].n_out > max_out ? mats[i].n_out : max_out;
    }
    x = malloc((size_t)tokens * (size_t)max_in * sizeof *x);
    wts = malloc((size_t)max_in * (size_t)max_out * sizeof *wts);
    imat = malloc((size_t)max_in * sizeof *imat);
    q = malloc(ql_row_size(QL_TYPE_Q8_0, max_in) * (size_t)max_out + 4096);
    if (!x || !wts || !imat || !q) {
        fprintf(stderr, "qlab: error: out of memory\n");
        rc = QL_EXIT_RUNTIME;
        goto out;
    }
    /* The Hessians: inputs from a low-rank mixture plus noise, loud channels. */
    double t_hess = 0;
    for (int i = 0; i < n_mats; i++) {
        if (ql_hess_input_of(mats[i].kind) < 0)
            continue;
        const int64_t n = mats[i].n_in;
        rng = 7 + (uint64_t)i;
        for (int64_t t = 0; t < tokens; t++) {
            double z[8];
            for (int r = 0; r < 8; r++)
                z[r] = ql_rng_gauss(&rng);
            for (int64_t j = 0; j < n; j++) {
                double v = 0.3 * ql_rng_gauss(&rng) + z[j % 8] * 0.5;
                x[t * n + j] = (float)(j % 61 == 7 ? 8.0 * v : v);
            }
        }
        const double t0 = ql_now();
        ql_hessians_observe(h, i, &lin[i], x, tokens);
        /* A token is summed into the Hessians of each expert it is routed to. */
        t_hess += (ql_now() - t0) * (mats[i].copies > 1 ? so.experts_used : 1);
    }
    /* Each distinct input's Hessian, once per expert for a mixture's feed-forward. */
    size_t hess_bytes = 0;
    for (int i = 0; i < n_mats; i++)
        if (i == 0 || ql_hess_input_of(mats[i - 1].kind) != ql_hess_input_of(mats[i].kind))
            hess_bytes += (size_t)mats[i].n_in * (size_t)mats[i].n_in * sizeof(double) *
                          (size_t)mats[i].copies;
    char widths[96];
    if (so.experts)
        snprintf(widths, sizeof widths, "dim %lld, %d experts of %lld, %d used", (long long)dim,
                 so.experts, (long long)ff, so.experts_used);
    else
        snprintf(widths, sizeof widths, "dim %lld, ff %lld", (long long)dim, (long long)ff);
    printf("qlab bench gptq: shape %s (%s, %d blocks), %d threads; one block's "
           "Hessians: %.1f MiB (double), summed at %.2f s per 1000 tokens; GPTQ's work for the "
           "widest input (%lld): %.1f MiB\n",
           shape, widths, so.layers, ql_threads_get(),
           (double)hess_bytes / 1048576.0, t_hess / tokens * 1000.0, (long long)max_in,
           (double)ql_gptq_work_bytes(max_in, ql_threads_get()) / 1048576.0);
    printf("%-7s %12s %12s %12s %8s   (seconds for the model's %d blocks; GPTQ: a "
           "factorization per input + %d rows per matrix timed, scaled to all rows)\n",
           "type", "ggml s", "gptq s", "of it factor", "ratio", so.layers, rows);
    for (int ti = 0; ti < QL_TYPE_ID_LIMIT; ti++) {
        const ql_type_traits *tr = ql_type_get(ti);
        if (!tr || !ql_split_applies(ti))
            continue;
        if (types_arg) {
            char pad[256];
            snprintf(pad, sizeof pad, ",%s,", types_arg);
            char key[32];
            snprintf(key, sizeof key, ",%s,", tr->name);
            if (!strstr(pad, key))
                continue;
        }
        double t_ggml = 0, t_gptq = 0, t_fact = 0;
        bool skipped = false;
        for (int i = 0; i < n_mats && rc == QL_EXIT_OK; i++) {
            const int64_t n = mats[i].n_in, m = mats[i].n_out;
            if (n % tr->block_size) {
                skipped = true;
                continue;
            }
            rng = 99 + (uint64_t)i;
            for (int64_t k = 0; k < n * m; k++)
                wts[k] = (float)(0.02 * ql_rng_gauss(&rng));
            int64_t nn = 0;
            const double *H = ql_hessians_get(h, mats[i].kind, &nn, NULL);
            for (int64_t j = 0; j < n; j++)
                imat[j] = (float)H[j * n + j];
            double t0 = ql_now();
            if (ql_quant_tensor(ti, wts, m, n, imat, q, ql_row_size(ti, n) * (size_t)m, NULL,
                                &err)) {
                rc = ql_cli_fail(&err);
                break;
            }
            t_ggml += (ql_now() - t0) * mats[i].copies;
            const int64_t r = rows < m ? rows : m;
            /* The factor once per input, as the pass shares it (q, k, v; gate, up). */
            const bool first = i == 0 || ql_hess_input_of(mats[i - 1].kind) !=
                                             ql_hess_input_of(mats[i].kind);
            ql_gptq_opts o;
            ql_gptq_opts_default(&o);
            ql_gptq_factor *f = NULL;
            t0 = ql_now();
            ql_status st = ql_gptq_factor_alloc(&f, H, n, &o, &err);
            const double t_factor = ql_now() - t0;
            t0 = ql_now();
            if (!st)
                st = ql_gptq_quantize_rows(f, ti, wts, q, r, imat, &err);
            const double t_rows = ql_now() - t0;
            ql_gptq_factor_free(f);
            if (st) {
                rc = ql_cli_fail(&err);
                break;
            }
            t_gptq += ((first ? t_factor : 0.0) + t_rows / (double)r * (double)m) * mats[i].copies;
            t_fact += (first ? t_factor : 0.0) * mats[i].copies;
        }
        if (rc != QL_EXIT_OK)
            break;
        printf("%-7s %12.2f %12.2f %12.2f %7.1fx%s\n", tr->name, t_ggml * so.layers,
               t_gptq * so.layers, t_fact * so.layers, t_gptq / t_ggml,
               skipped ? "  (rows that do not split skipped)" : "");
        fflush(stdout);
    }
out:
    ql_hessians_free(h);
    free(x);
    free(wts);
    free(imat);
    free(q);
    return rc;
}
