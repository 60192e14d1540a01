/* qlab generate: greedy decoding, a sanity tool for the forward pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/data.h"
#include "base/util.h"
#include "cli.h"
#include "commands.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/tokenizer.h"

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab generate MODEL [--prompt TEXT] [-n N] [--threads N] [--ids]\n\n"
           "Greedy decoding (argmax at every step) of N tokens (default 64) after the\n"
           "prompt, which is tokenized with BOS first when the vocabulary adds it; without\n"
           "a prompt, decoding starts from BOS alone. Stops early at EOS. --ids prints the\n"
           "token ids (BOS and prompt included) instead of text.\n\n");
    ql_opt_print_options(stdout, p);
}

static int argmax(const float *v, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

static void print_token(const ql_tokenizer *tok, int32_t id, bool ids, bool first)
{
    if (ids) {
        printf(first ? "%d" : " %d", (int)id);
    } else {
        const char *piece;
        size_t n;
        if (ql_tokenizer_piece(tok, id, &piece, &n, NULL) == QL_OK) /* whole, however long */
            fwrite(piece, 1, n, stdout);
    }
    fflush(stdout);
}

int ql_cmd_generate(int argc, char **argv)
{
    const char *args[1], *prompt = "";
    int n_gen = 64, threads = 0;
    bool ids = false;
    const ql_opt opts[] = {
        ql_cli_model_opt(&args[0]),
        ql_opt_text("prompt", 'p', &prompt, "TEXT", "the prompt (default: none, BOS alone)"),
        ql_opt_alias(
            ql_opt_int("predict", 'n', &n_gen, 0, 1 << 20, "N", "tokens to generate (default 64)"),
            "n-predict"),
        ql_opt_threads(&threads, QL_OPT_THREADS_HELP),
        ql_opt_flag("ids", 0, &ids, "print token ids instead of text"),
    };
    static const char *const names[] = {"MODEL"};
    ql_opt_parser p = {.prog = "qlab generate",
                       .opts = opts,
                       .n_opts = QL_OPT_COUNT(opts),
                       .args = args,
                       .max_args = 1,
                       .arg_names = names,
                       .n_required = 1,
                       .help = help};
    const int prc = ql_opt_parse(&p, argc, argv);
    if (prc != QL_OPT_GO_ON)
        return prc;
    const char *model_arg = args[0];
    ql_threads_set(threads);

    ql_error err;
    ql_error_clear(&err);
    char path[QL_PATH_MAX];
    ql_model *m = NULL;
    ql_tokenizer *tok = NULL;
    ql_forward *fw = NULL;
    int32_t *seq = NULL, *prompt_ids = NULL;
    float *logits = NULL;
    int64_t n_prompt = 0;
    int rc = QL_EXIT_RUNTIME;
    if (ql_data_resolve(model_arg, path, sizeof path, NULL, &err) ||
        ql_model_load(&m, path, &err) || ql_tokenizer_from_gguf(&tok, m->gguf, &err) ||
        ql_tokenize(tok, prompt, strlen(prompt), ql_tokenizer_adds_bos(tok), &prompt_ids, &n_prompt,
                    &err))
        goto fail;
    if (n_prompt == 0) {
        /* empty prompt and no BOS from the vocabulary: start from BOS anyway */
        if (ql_tokenizer_bos(tok) < 0) {
            ql_error_set(&err, QL_EINVAL, "generate: empty prompt and the vocabulary has no BOS");
            goto fail;
        }
        free(prompt_ids);
        prompt_ids = malloc(sizeof *prompt_ids);
        if (!prompt_ids) {
            ql_error_set(&err, QL_ENOMEM, "out of memory");
            goto fail;
        }
        prompt_ids[0] = ql_tokenizer_bos(tok);
        n_prompt = 1;
    }
    const int64_t total = n_prompt + n_gen;
    if (total > (1 << 24)) {
        ql_error_set(&err, QL_EINVAL, "generate: %lld tokens are too many", (long long)total);
        goto fail;
    }
    seq = malloc((size_t)total * sizeof *seq);
    logits = malloc((size_t)m->hp.n_vocab * sizeof *logits);
    if (!seq || !logits) {
        ql_error_set(&err, QL_ENOMEM, "out of memory");
        goto fail;
    }
    if (ql_forward_alloc(&fw, &m->hp, (int)total, &err))
        goto fail;
    memcpy(seq, prompt_ids, (size_t)n_prompt * sizeof *seq);
    for (int64_t i = 0; i < n_prompt; i++)
        if (ids || seq[i] != ql_tokenizer_bos(tok)) /* BOS has no text */
            print_token(tok, seq[i], ids, i == 0);
    /* the prompt as one chunk, then one token at a time against the K/V cache */
    int64_t n = n_prompt;
    if (ql_forward_run(fw, m->weights, seq, (int)n, 0, (int)n - 1, logits, &err))
        goto fail;
    while (n < total) {
        const int32_t next = argmax(logits, m->hp.n_vocab);
        seq[n++] = next;
        print_token(tok, next, ids, false);
        if (next == ql_tokenizer_eos(tok) || n == total)
            break;
        if (ql_forward_run(fw, m->weights, &seq[n - 1], 1, (int)n - 1, 0, logits, &err))
            goto fail;
    }
    printf("\n");
    rc = QL_EXIT_OK;
    goto out;
fail:
    rc = ql_cli_fail(&err);
out:
    free(seq);
    free(prompt_ids);
    free(logits);
    ql_forward_free(fw);
    ql_tokenizer_free(tok);
    ql_model_free(m);
    return rc;
}
