/* Writes a test fixture database for the shell tests:
 *   make_fixture_db OUT.db                     the store fixture (store_fixture.h)
 *   make_fixture_db --report OUT.db            the report fixture (report_fixture.h)
 *   make_fixture_db --report-nochunks OUT.db   the same without per-chunk sums
 *   make_fixture_db --report-crowded OUT.db    the crowded report fixture (report_fixture.h)
 *   make_fixture_db --shard K/N [--model-b] [--text-b] [--ctx N] [--metrics-version N]
 *                   [--perturb I] [--fail I] OUT.db
 *                                              shard K/N of the merge fixture
 *                                              (merge_fixture.h); added to OUT.db */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "merge_fixture.h"
#include "report_fixture.h"
#include "store_fixture.h"

static int usage(void)
{
    fprintf(stderr, "usage: make_fixture_db [--report|--report-nochunks|--report-crowded] OUT.db\n"
                    "       make_fixture_db --shard K/N [--model-b] [--text-b] [--ctx N]\n"
                    "                       [--metrics-version N] [--perturb I] [--fail I] "
                    "OUT.db\n");
    return 2;
}

static int shard_fixture(int argc, char **argv)
{
    qlt_shard_spec spec;
    qlt_shard_spec_init(&spec);
    ql_error err;
    ql_error_clear(&err);
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        if (strcmp(a, "--shard") == 0 && has_value) {
            if (ql_shard_parse(argv[++i], NULL, &spec.shard, &err) != QL_OK) {
                fprintf(stderr, "make_fixture_db: %s\n", err.msg);
                return 2;
            }
        } else if (strcmp(a, "--model-b") == 0) {
            spec.model_sha = QLT_SHARD_MODEL_SHA_B;
            spec.model_name = "fixture-model-b";
        } else if (strcmp(a, "--text-b") == 0) {
            spec.text_sha = QLT_SHARD_TEXT_SHA_B;
        } else if (strcmp(a, "--ctx") == 0 && has_value) {
            if (!ql_parse_int(argv[++i], &spec.ctx))
                return usage();
        } else if (strcmp(a, "--metrics-version") == 0 && has_value) {
            if (!ql_parse_int(argv[++i], &spec.metrics_version))
                return usage();
        } else if (strcmp(a, "--perturb") == 0 && has_value) {
            if (!ql_parse_int(argv[++i], &spec.perturb))
                return usage();
        } else if (strcmp(a, "--fail") == 0 && has_value) {
            if (!ql_parse_int(argv[++i], &spec.fail))
                return usage();
        } else if (a[0] != '-' && !out) {
            out = a;
        } else {
            return usage();
        }
    }
    if (!out)
        return usage();
    if (qlt_shard_fixture(out, &spec, &err) != QL_OK) {
        fprintf(stderr, "make_fixture_db: %s\n", err.msg);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--shard") == 0)
        return shard_fixture(argc, argv);
    ql_error err;
    ql_error_clear(&err);
    if (argc == 3 && strcmp(argv[1], "--report-crowded") == 0) {
        if (qlt_report_fixture_crowded(argv[2], &err) != QL_OK) {
            fprintf(stderr, "make_fixture_db: %s\n", err.msg);
            return 1;
        }
        return 0;
    }
    bool report = argc == 3 && strcmp(argv[1], "--report") == 0;
    bool nochunks = argc == 3 && strcmp(argv[1], "--report-nochunks") == 0;
    if (argc != 2 && !report && !nochunks)
        return usage();
    ql_status st = report || nochunks ? qlt_report_fixture(argv[2], report, &err)
                                      : qlt_store_fixture(argv[1], &err);
    if (st != QL_OK) {
        fprintf(stderr, "make_fixture_db: %s\n", err.msg);
        return 1;
    }
    return 0;
}
