#include "cli.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>

#include "../util.h"

int ql_cli_fail(const ql_error *err)
{
    fprintf(stderr, "qlab: error: %s\n", err->msg[0] ? err->msg : ql_status_name(err->status));
    return QL_EXIT_RUNTIME;
}

int ql_cli_usage(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "qlab %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'qlab %s --help'.\n", cmd);
    va_end(ap);
    return QL_EXIT_USAGE;
}

int ql_cli_parse_int_opt(const char *cmd, const char *opt, const char *val, int min, int max,
                         int *out)
{
    int v;
    if (!ql_parse_int(val, &v) || v < min || v > max) {
        ql_cli_usage(cmd, "%s expects an integer in %d..%d, got '%s'", opt, min, max, val);
        return 0;
    }
    *out = v;
    return 1;
}
