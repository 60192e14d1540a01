/* qlab data: the named models and texts of datasets/manifest.tsv, where each one
 * was found, and a forced sha256 check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/data.h"
#include "cli.h"
#include "commands.h"

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab data list\n"
           "       qlab data verify [NAME...]\n"
           "\n"
           "The models and texts qlab knows by name (datasets/manifest.tsv). A name is\n"
           "looked for, in this order, at $QLAB_DATA/<file>, $QLAB_DATA/<basename>,\n"
           "<root>/datasets/cache/<file>, <root>/datasets/cache/<basename> and\n"
           "<root>/../shared/<file>, where <root> is $QLAB_ROOT or the source tree.\n"
           "\n"
           "  list     every entry: name, kind, size, status, and the path where it was\n"
           "           found. Status: 'verified' (sha256 checked before and the file is\n"
           "           unchanged), 'unverified' (found, not checked yet), 'size mismatch',\n"
           "           or 'missing'. Only file sizes are read: this is fast.\n"
           "  verify   recompute the sha256 of the named entries (all present ones when\n"
           "           no name is given) and compare with the manifest. A named entry\n"
           "           that is missing is an error; without names, missing entries are\n"
           "           listed but not counted as failures. Verified files are remembered\n"
           "           in datasets/cache/verified.tsv.\n"
           "\n"
           "Missing files: datasets/fetch.sh NAME downloads a direct-URL entry into\n"
           "datasets/cache/ and checks its sha256.\n"
           "Exit codes: 0 all good, 1 a check failed or a name is unknown, 2 usage.\n\n");
    ql_opt_print_options(stdout, p);
}

static int cmd_list(int argc, char **argv)
{
    ql_opt_parser p = {.prog = "qlab data list", .help = help};
    const int rc = ql_opt_parse(&p, argc, argv);
    if (rc != QL_OPT_GO_ON)
        return rc;
    ql_error err;
    ql_error_clear(&err);
    const ql_data_entry *es;
    int n;
    if (ql_data_manifest(&es, &n, &err))
        return ql_cli_fail(&err);
    int wname = 4;
    for (int i = 0; i < n; i++)
        if ((int)strlen(es[i].name) > wname)
            wname = (int)strlen(es[i].name);
    printf("%-*s  %-5s  %10s  %-13s  %s\n", wname, "name", "kind", "bytes", "status", "path");
    int missing = 0;
    for (int i = 0; i < n; i++) {
        const ql_data_entry *e = &es[i];
        char path[QL_PATH_MAX];
        const char *status;
        if (!ql_data_locate(e, path, sizeof path)) {
            status = "missing";
            snprintf(path, sizeof path, "-");
            missing++;
        } else {
            struct stat sb;
            if (stat(path, &sb) != 0 || (int64_t)sb.st_size != e->bytes)
                status = "size mismatch";
            else if (ql_data_is_verified(e, path))
                status = "verified";
            else
                status = "unverified";
        }
        printf("%-*s  %-5s  %10lld  %-13s  %s\n", wname, e->name, e->kind, (long long)e->bytes,
               status, path);
    }
    printf("\n%d entries, %d missing (manifest: %s/datasets/manifest.tsv)\n", n, missing,
           ql_data_root());
    return QL_EXIT_OK;
}

/* Width of the name column in verify's output. */
static int name_width = 20;

/* Verifies one entry and prints one line; returns true when it passed. */
static bool verify_one(const ql_data_entry *e, bool named, int *n_missing)
{
    ql_error err;
    ql_error_clear(&err);
    char path[QL_PATH_MAX];
    ql_status st = ql_data_verify(e, true, path, sizeof path, &err);
    if (st == QL_OK) {
        printf("OK       %-*s  %s\n", name_width, e->name, path);
        return true;
    }
    if (st == QL_ENOTFOUND && !named) {
        printf("missing  %s\n", e->name);
        (*n_missing)++;
        return true;
    }
    printf("FAILED   %s\n", e->name);
    fprintf(stderr, "qlab: error: %s\n", err.msg);
    return false;
}

/* Verifies the named entries, or every one when n == 0. */
static int verify_names(const char *const *names, size_t n_names)
{
    ql_error err;
    ql_error_clear(&err);
    const ql_data_entry *es;
    int n;
    if (ql_data_manifest(&es, &n, &err))
        return ql_cli_fail(&err);
    int failed = 0, checked = 0, missing = 0;
    for (int i = 0; i < n; i++)
        if ((int)strlen(es[i].name) > name_width)
            name_width = (int)strlen(es[i].name);
    if (n_names == 0) {
        for (int i = 0; i < n; i++, checked++)
            failed += !verify_one(&es[i], false, &missing);
    } else {
        for (size_t i = 0; i < n_names; i++, checked++) {
            const ql_data_entry *e = ql_data_find(names[i], &err);
            if (!e) {
                printf("FAILED   %s\n", names[i]);
                fprintf(stderr,
                        "qlab: error: '%s' is not a name in the data manifest (see "
                        "'qlab data list')\n",
                        names[i]);
                failed++;
                continue;
            }
            failed += !verify_one(e, true, &missing);
        }
    }
    printf("\n%d checked, %d failed, %d missing\n", checked, failed, missing);
    return failed ? QL_EXIT_RUNTIME : QL_EXIT_OK;
}

static int cmd_verify(int argc, char **argv)
{
    const char **names = calloc((size_t)argc, sizeof *names);
    if (!names) {
        fprintf(stderr, "qlab: error: out of memory\n");
        return QL_EXIT_RUNTIME;
    }
    ql_opt_parser p = {
        .prog = "qlab data verify", .args = names, .max_args = (size_t)argc, .help = help};
    int rc = ql_opt_parse(&p, argc, argv);
    if (rc == QL_OPT_GO_ON)
        rc = verify_names(names, p.n_args);
    free(names);
    return rc;
}

int ql_cmd_data(int argc, char **argv)
{
    const char *args[1];
    static const char *const names[] = {"the subcommand (list or verify)"};
    ql_opt_parser p = {.prog = "qlab data",
                       .args = args,
                       .max_args = 1,
                       .arg_names = names,
                       .n_required = 1,
                       .stop_at_arg = true,
                       .help = help};
    const int rc = ql_opt_parse(&p, argc, argv);
    if (rc != QL_OPT_GO_ON)
        return rc;
    if (strcmp(args[0], "list") == 0)
        return cmd_list(argc - p.next, argv + p.next);
    if (strcmp(args[0], "verify") == 0)
        return cmd_verify(argc - p.next, argv + p.next);
    return ql_opt_usage(&p, "unknown subcommand '%s' (expected list or verify)", args[0]);
}
