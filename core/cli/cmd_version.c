#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "ql_config.h"

int ql_cmd_version(int argc, char **argv)
{
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: qlab version\n\nPrints the qlab version and the git commit it was built "
               "from.\n");
        return 0;
    }
    printf("qlab %s (commit %s)\n", QL_VERSION, QL_COMMIT);
    return 0;
}
