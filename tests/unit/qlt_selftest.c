/* The test helpers' own contract, run by tests/e2e/test_harness.sh: a skip exits 77
 * only while no check has failed; after a failed check it exits 1, so that a skip
 * never turns a failure into SKIP in meson's summary.
 * Usage: qlt_selftest skip | fail-then-skip | fail */
#include <string.h>

#include "qltest.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s skip|fail-then-skip|fail\n", argv[0]);
        return 2;
    }
    if (strcmp(argv[1], "skip") == 0) {
        CHECK(1 + 1 == 2);
        qlt_skip("skipped with every check passed");
    }
    if (strcmp(argv[1], "fail-then-skip") == 0) {
        CHECK_MSG(1 + 1 == 3, "a check meant to fail");
        qlt_skip("skipped after a failed check");
    }
    if (strcmp(argv[1], "fail") == 0) {
        CHECK_MSG(1 + 1 == 3, "a check meant to fail");
        return qlt_done();
    }
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
}
