/* Writes the test fixture database (store_fixture.h) for the shell tests. */
#include <stdio.h>

#include "store_fixture.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_fixture_db OUT.db\n");
        return 2;
    }
    ql_error err;
    ql_error_clear(&err);
    if (qlt_store_fixture(argv[1], &err) != QL_OK) {
        fprintf(stderr, "make_fixture_db: %s\n", err.msg);
        return 1;
    }
    return 0;
}
