/* Writes a test fixture database for the shell tests: the store fixture
 * (store_fixture.h), or with --report the report fixture (report_fixture.h),
 * with --report-nochunks the same without per-chunk sums. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "report_fixture.h"
#include "store_fixture.h"

int main(int argc, char **argv)
{
    bool report = argc == 3 && strcmp(argv[1], "--report") == 0;
    bool nochunks = argc == 3 && strcmp(argv[1], "--report-nochunks") == 0;
    if (argc != 2 && !report && !nochunks) {
        fprintf(stderr, "usage: make_fixture_db [--report|--report-nochunks] OUT.db\n");
        return 2;
    }
    ql_error err;
    ql_error_clear(&err);
    ql_status st = report || nochunks ? qlt_report_fixture(argv[2], report, &err)
                                      : qlt_store_fixture(argv[1], &err);
    if (st != QL_OK) {
        fprintf(stderr, "make_fixture_db: %s\n", err.msg);
        return 1;
    }
    return 0;
}
