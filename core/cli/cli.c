#include "cli.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "model/kvcache.h"

int ql_cli_fail(const ql_error *err)
{
    fprintf(stderr, "qlab: error: %s\n", err->msg[0] ? err->msg : ql_status_name(err->status));
    return QL_EXIT_RUNTIME;
}

int ql_cli_usage(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "qlab %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'qlab %s --help'.\n", cmd);
    va_end(ap);
    return QL_EXIT_USAGE;
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

ql_status ql_cli_text_run_init(ql_cli_text_run *r, const char *model_arg, const char *text_arg,
                               int ctx, int64_t max_chunks, int32_t kv_type, ql_error *err)
{
    memset(r, 0, sizeof *r);
    ql_status st;
    if ((st = ql_data_resolve(model_arg, r->model_path, sizeof r->model_path, NULL, err)) ||
        (st = ql_data_resolve(text_arg, r->text_path, sizeof r->text_path, NULL, err)) ||
        (st = ql_model_load(&r->model, r->model_path, err)) ||
        (st = ql_tokenizer_from_gguf(&r->tok, r->model->gguf, err)) ||
        (st = ql_ppl_data_from_file(&r->data, r->tok, r->text_path, ctx, max_chunks, err)) ||
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

int ql_cli_parse_int_opt(const char *cmd, const char *opt, const char *val, int min, int max,
                         int *out)
{
    int v;
    if (!ql_parse_int(val, &v) || v < min || v > max) {
        ql_cli_usage(cmd, "%s expects an integer in %d..%d, got '%s'", opt, min, max, val);
        return 0;
    }
    *out = v;
    return 1;
}
