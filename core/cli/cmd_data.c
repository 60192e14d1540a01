/* qlab data: the named models and texts of datasets/manifest.tsv, where each one
 * was found, and a forced sha256 check. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/data.h"
#include "cli.h"
#include "commands.h"

static void help(void)
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
           "Exit codes: 0 all good, 1 a check failed or a name is unknown, 2 usage.\n");
}

static int cmd_list(void)
{
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

static int cmd_verify(int argc, char **argv)
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
    if (argc == 0) {
        for (int i = 0; i < n; i++, checked++)
            failed += !verify_one(&es[i], false, &missing);
    } else {
        for (int i = 0; i < argc; i++, checked++) {
            const ql_data_entry *e = ql_data_find(argv[i], &err);
            if (!e) {
                printf("FAILED   %s\n", argv[i]);
                fprintf(stderr,
                        "qlab: error: '%s' is not a name in the data manifest (see "
                        "'qlab data list')\n",
                        argv[i]);
                failed++;
                continue;
            }
            failed += !verify_one(e, true, &missing);
        }
    }
    printf("\n%d checked, %d failed, %d missing\n", checked, failed, missing);
    return failed ? QL_EXIT_RUNTIME : QL_EXIT_OK;
}

int ql_cmd_data(int argc, char **argv)
{
    if (argc < 2)
        return ql_cli_usage("data", "missing subcommand (list or verify)");
    const char *sub = argv[1];
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            help();
            return QL_EXIT_OK;
        }
    for (int i = 2; i < argc; i++)
        if (argv[i][0] == '-')
            return ql_cli_usage("data", "unknown option '%s'", argv[i]);
    if (strcmp(sub, "list") == 0) {
        if (argc > 2)
            return ql_cli_usage("data", "'list' takes no arguments");
        return cmd_list();
    }
    if (strcmp(sub, "verify") == 0)
        return cmd_verify(argc - 2, argv + 2);
    return ql_cli_usage("data", "unknown subcommand '%s' (expected list or verify)", sub);
}
