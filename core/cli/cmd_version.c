/* qlab version: the version and the commit qlab was built from. */
#include <stdio.h>

#include "cli.h"
#include "commands.h"
#include "base/commit.h"
#include "ql_config.h"

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab version\n\nPrints the qlab version and the git commit it was built "
           "from.\n\n");
    ql_opt_print_options(stdout, p);
}

int ql_cmd_version(int argc, char **argv)
{
    ql_opt_parser p = {.prog = "qlab version", .help = help};
    const int rc = ql_opt_parse(&p, argc, argv);
    if (rc != QL_OPT_GO_ON)
        return rc;
    printf("qlab %s (commit %s)\n", QL_VERSION, ql_commit);
    return QL_EXIT_OK;
}
