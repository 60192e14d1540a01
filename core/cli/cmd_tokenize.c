/* qlab tokenize: run a model's tokenizer on a text and print the tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/data.h"
#include "base/util.h"
#include "cli.h"
#include "commands.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab tokenize MODEL (--text STRING | --file PATH) [--ids] [--no-bos] "
           "[--stats]\n\n"
           "Tokenizes a text with the tokenizer stored in a GGUF model (a path, or a model\n"
           "name from datasets/manifest.tsv), giving the ids llama.cpp gives.\n"
           "Prints one token per line as \"id<TAB>piece\"; in pieces, \\n \\r \\t \\\\ and\n"
           "\\xNN stand for control bytes, backslashes and bytes that are not valid UTF-8.\n\n");
    ql_opt_print_options(stdout, p);
}

/* Length of a valid UTF-8 sequence of 2..4 bytes at s (n bytes left), or 0. */
static size_t valid_utf8(const unsigned char *s, size_t n)
{
    size_t len = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;
    if (len == 0 || s[0] > 0xF4 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

static void print_piece(const char *p, size_t n)
{
    const unsigned char *s = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\r')
            fputs("\\r", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c == '\\')
            fputs("\\\\", stdout);
        else if (c < 0x20 || c == 0x7F)
            printf("\\x%02X", c);
        else if (c < 0x80)
            putchar(c);
        else {
            size_t l = valid_utf8(s + i, n - i);
            if (l) {
                fwrite(s + i, 1, l, stdout);
                i += l;
                continue;
            }
            printf("\\x%02X", c);
        }
        i++;
    }
}

int ql_cmd_tokenize(int argc, char **argv)
{
    const char *args[1], *text = NULL, *file = NULL;
    bool ids_only = false, no_bos = false, stats = false;
    const ql_opt opts[] = {
        ql_cli_model_opt(&args[0]),
        ql_opt_alias(ql_opt_text("text", 'p', &text, "STRING",
                                 "the text to tokenize (as llama-tokenize's -p, --prompt)"),
                     "prompt"),
        ql_opt_str("file", 'f', &file, "PATH",
                   "a file to tokenize (a path or a text name, e.g. tinystories-valid)"),
        ql_opt_flag("ids", 0, &ids_only,
                    "print only the ids, as [1, 2, 3] (like llama-tokenize --ids)"),
        ql_opt_flag("no-bos", 0, &no_bos, "do not add BOS/EOS even when the model asks for them"),
        ql_opt_flag("stats", 0, &stats, "print the token count and the time taken on stderr"),
    };
    static const char *const names[] = {"MODEL"};
    ql_opt_parser op = {.prog = "qlab tokenize",
                        .opts = opts,
                        .n_opts = QL_OPT_COUNT(opts),
                        .args = args,
                        .max_args = 1,
                        .arg_names = names,
                        .n_required = 1,
                        .help = help};
    const int prc = ql_opt_parse(&op, argc, argv);
    if (prc != QL_OPT_GO_ON)
        return prc;
    const char *model = args[0];
    if (!text == !file)
        return ql_opt_usage(&op, "give exactly one of --text and --file");

    int rc = QL_EXIT_RUNTIME;
    ql_error err;
    ql_error_clear(&err);
    ql_gguf *g = NULL;
    ql_tokenizer *tok = NULL;
    char *buf = NULL;
    int32_t *ids = NULL;
    char path[QL_PATH_MAX];

    if (ql_data_resolve(model, path, sizeof path, NULL, &err) != QL_OK ||
        ql_gguf_open(&g, path, &err) != QL_OK || ql_tokenizer_from_gguf(&tok, g, &err) != QL_OK)
        goto out;
    ql_gguf_close(g);
    g = NULL;
    if (ql_tokenizer_warning(tok))
        fprintf(stderr, "qlab tokenize: warning: %s\n", ql_tokenizer_warning(tok));

    size_t len;
    if (file) {
        if (ql_data_resolve(file, path, sizeof path, NULL, &err) != QL_OK ||
            ql_file_read_all(path, &buf, &len, &err) != QL_OK)
            goto out;
        text = buf;
    } else {
        len = strlen(text);
    }

    int64_t n = 0;
    double t0 = ql_now();
    if (ql_tokenize(tok, text, len, !no_bos, &ids, &n, &err) != QL_OK)
        goto out;
    double dt = ql_now() - t0;

    if (ids_only) {
        putchar('[');
        for (int64_t i = 0; i < n; i++)
            printf(i ? ", %d" : "%d", ids[i]);
        puts("]");
    } else {
        for (int64_t i = 0; i < n; i++) {
            const char *p;
            size_t pl;
            (void)ql_tokenizer_piece(tok, ids[i], &p, &pl, NULL); /* ids come from tok */
            printf("%d\t", ids[i]);
            print_piece(p, pl);
            putchar('\n');
        }
    }
    if (stats)
        fprintf(stderr, "qlab tokenize: %lld tokens from %zu bytes in %.1f ms (%.2f MB/s)\n",
                (long long)n, len, dt * 1e3, dt > 0 ? (double)len / dt / 1e6 : 0.0);
    rc = fflush(stdout) == 0 ? QL_EXIT_OK : QL_EXIT_RUNTIME;

out:
    if (rc == QL_EXIT_RUNTIME && err.status != QL_OK)
        ql_cli_fail(&err);
    free(ids);
    free(buf);
    ql_tokenizer_free(tok);
    ql_gguf_close(g);
    return rc;
}
