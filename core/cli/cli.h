/* qlab command line: shared helpers for the subcommands.
 *
 * Exit codes: 0 success, 1 runtime error (bad input file, failed write, ...),
 * 2 usage error (unknown option, missing argument). */
#ifndef QL_CLI_H
#define QL_CLI_H

#include "../error.h"

#define QL_EXIT_OK 0
#define QL_EXIT_RUNTIME 1
#define QL_EXIT_USAGE 2

/* Prints "qlab: error: <msg>" and returns QL_EXIT_RUNTIME. */
int ql_cli_fail(const ql_error *err);

/* Prints "qlab <cmd>: <msg>" and a hint to --help; returns QL_EXIT_USAGE. */
int ql_cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses --threads values etc.: prints a usage error and returns false when bad. */
int ql_cli_parse_int_opt(const char *cmd, const char *opt, const char *val, int min, int max,
                         int *out);

/* One subcommand. */
typedef struct {
    const char *name;
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
    const char *summary;
} ql_cli_command;

#endif
