#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"
#include "model/kvcache.h"

int ql_cli_fail(const ql_error *err)
{
    /* Messages quote names and lines from files: escaped, so a hostile string cannot
     * drive the terminal. */
    const char *msg = err->msg[0] ? err->msg : ql_status_name(err->status);
    fputs("qlab: error: ", stderr);
    ql_fwrite_terminal(stderr, msg, strlen(msg));
    fputc('\n', stderr);
    return QL_EXIT_RUNTIME;
}

ql_opt ql_cli_model_opt(const char **slot)
{
    return ql_opt_str("model", 'm', slot, "MODEL",
                      "the model, instead of the MODEL argument (as llama.cpp's -m)");
}

ql_status ql_cli_parse_imatrix_format(void *ctx, const char *val, ql_error *err)
{
    if (!ql_imatrix_format_parse(val, ctx))
        return ql_error_set(err, QL_EINVAL, "expected dat or gguf, got '%s'", val);
    return QL_OK;
}

ql_status ql_cli_best_time(ql_cli_bench_run run, const void *ctx, double min_seconds, double *best,
                           ql_error *err)
{
    double fastest = (double)INFINITY, spent = 0;
    for (int runs = 0; runs < 1 || spent < min_seconds; runs++) {
        const double t0 = ql_now();
        const ql_status st = run(ctx, err);
        if (st)
            return st;
        const double dt = ql_now() - t0;
        spent += dt;
        fastest = dt < fastest ? dt : fastest;
    }
    *best = fastest;
    return QL_OK;
}

void ql_cli_warn_ctx(const ql_model *m, const char *path, int ctx)
{
    char msg[256];
    if (ql_ppl_ctx_beyond_training(&m->hp, ctx, msg, sizeof msg)) {
        fputs("qlab: warning: ", stderr);
        ql_fwrite_terminal(stderr, path, strlen(path));
        fprintf(stderr, ": %s\n", msg);
    }
}

void ql_cli_note_blas_kernel(FILE *out)
{
    const char *forced = getenv("OPENBLAS_CORETYPE");
    static const char *const narrow[] = {"Haswell", "Zen", "SandyBridge", "Nehalem", "Prescott"};
    bool is_narrow = false;
    for (size_t i = 0; forced && i < sizeof narrow / sizeof narrow[0]; i++)
        is_narrow = is_narrow || strcasecmp(forced, narrow[i]) == 0;
    __builtin_cpu_init();
    if (!is_narrow || !__builtin_cpu_supports("avx512f"))
        return;
    fprintf(out,
            "note    OPENBLAS_CORETYPE=%s forces a kernel without AVX-512, which this CPU has: "
            "the products run on half-width vectors; unset it for speed (figures then differ "
            "in their last digits; every run records its blas_kernel)\n",
            forced);
}

ql_status ql_cli_text_run_init(ql_cli_text_run *r, const char *model_arg, const char *text_arg,
                               int ctx, int64_t max_chunks, int32_t kv_type, ql_error *err)
{
    memset(r, 0, sizeof *r);
    ql_status st;
    if ((st = ql_data_resolve(model_arg, r->model_path, sizeof r->model_path, NULL, err)) ||
        (st = ql_data_resolve(text_arg, r->text_path, sizeof r->text_path, NULL, err)) ||
        (st = ql_model_load(&r->model, r->model_path, err)) ||
        (st = ql_tokenizer_from_gguf(&r->tok, r->model->gguf, err)))
        return st;
    ql_cli_warn_ctx(r->model, r->model_path, ctx);
    if ((st = ql_ppl_data_from_file(&r->data, r->tok, r->text_path, ctx, max_chunks, err)) ||
        (st = ql_forward_alloc(&r->fw, &r->model->hp, ctx, err)))
        return st;
    return ql_forward_set_kv_type(r->fw, kv_type, err);
}

void ql_cli_text_run_deinit(ql_cli_text_run *r)
{
    ql_forward_free(r->fw);
    ql_ppl_data_deinit(&r->data);
    ql_tokenizer_free(r->tok);
    ql_model_free(r->model);
    memset(r, 0, sizeof *r);
}

ql_shard_array ql_cli_shard_array(void)
{
    return (ql_shard_array){.task_id = getenv("SLURM_ARRAY_TASK_ID"),
                            .task_count = getenv("SLURM_ARRAY_TASK_COUNT"),
                            .task_min = getenv("SLURM_ARRAY_TASK_MIN"),
                            .task_step = getenv("SLURM_ARRAY_TASK_STEP")};
}
