/* qlab command line: shared helpers for the subcommands, whose options go through
 * opt.h.
 *
 * Exit codes: 0 success, 1 runtime error (bad input file, failed write, ...),
 * 2 usage error (unknown option, missing argument). */
#ifndef QL_CLI_H
#define QL_CLI_H

#include <stdio.h>

#include "base/data.h"
#include "base/error.h"
#include "experiment/sweep.h"
#include "model/forward.h"
#include "model/imatrix_io.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/tokenizer.h"
#include "opt.h"

#define QL_EXIT_OK      0
#define QL_EXIT_RUNTIME 1
#define QL_EXIT_USAGE   2

/* Slurm's job-array variables from the environment, for --shard auto (the one place
 * the program reads them: the environment is the command line's). */
ql_shard_array ql_cli_shard_array(void);

/* Prints "qlab: error: <msg>" and returns QL_EXIT_RUNTIME. */
int ql_cli_fail(const ql_error *err);

/* -m, --model MODEL: the model argument given as an option (llama.cpp's -m); slot is
 * the parser's args[k] that MODEL fills. */
ql_opt ql_cli_model_opt(const char **slot);

/* --format of the imatrix commands: dat or gguf into the ql_imatrix_format ctx. */
ql_status ql_cli_parse_imatrix_format(void *ctx, const char *val, ql_error *err);

/* One run of a benchmark on ctx: QL_OK, or a failure that ends the measurement. */
typedef ql_status (*ql_cli_bench_run)(const void *ctx, ql_error *err);

/* The benchmarks' timing: *best = the fastest of repeated runs of run(ctx), in
 * seconds, repeated until they last min_seconds in total (at least one run). Returns
 * the status of the first failing run. */
ql_status ql_cli_best_time(ql_cli_bench_run run, const void *ctx, double min_seconds, double *best,
                           ql_error *err);

/* What qlab eval and qlab imatrix start from: MODEL and --text resolved (paths or
 * names from datasets/manifest.tsv), the model loaded with its tokenizer, the text
 * cut into chunks of ctx tokens, and a forward pass for ctx tokens whose K/V cache
 * rounds to kv_type. */
typedef struct {
    char model_path[QL_PATH_MAX];
    char text_path[QL_PATH_MAX];
    ql_model *model;
    ql_tokenizer *tok;
    ql_ppl_data data;
    ql_forward *fw;
} ql_cli_text_run;

/* Warns on stderr when ctx is beyond m's training context (ql_ppl_ctx_beyond_training);
 * ql_cli_text_run_init does it for its model. */
void ql_cli_warn_ctx(const ql_model *m, const char *path, int ctx);

/* Says on out when OPENBLAS_CORETYPE forces a kernel narrower than this CPU's vectors
 * (Haswell's AVX2 on an AVX-512 CPU, as some machines set it): the products, most of a
 * pass, then run at about half their speed. The environment is the user's to change. */
void ql_cli_note_blas_kernel(FILE *out);

/* Fills r in that order; on failure r holds what was loaded (free it with
 * ql_cli_text_run_deinit) and err names the file. max_chunks <= 0 means all. */
ql_status ql_cli_text_run_init(ql_cli_text_run *r, const char *model_arg, const char *text_arg,
                               int ctx, int64_t max_chunks, int32_t kv_type, ql_error *err);
void ql_cli_text_run_deinit(ql_cli_text_run *r);

/* One subcommand. */
typedef struct {
    const char *name;
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
    const char *summary;
} ql_cli_command;

#endif
