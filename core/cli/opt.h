/* The command-line options of every qlab subcommand and notebook program: one
 * parser over a table of typed options (getopt_long's conventions; its own code, so
 * that it knows aliases, internal options and suggestions).
 *
 * What every program gets from it:
 * - "--name=value" and "--name value"; short aliases "-t 4" and "-t4", flags
 *   clustered ("-qt 4");
 * - options before, between or after the positional arguments, which keep their
 *   order; "--" ends the options (what follows is positional even if it starts
 *   with '-');
 * - long names abbreviated to any unique prefix ("--thr 2"), as getopt_long does (an
 *   exact name wins over longer ones);
 * - other long names of an option (llama.cpp's: --ctx-size for --ctx), which are
 *   names like the first one, exact or abbreviated;
 * - internal options (a parent process's word to its children): not listed in
 *   --help, taken only when spelled in full, so "--job 2" never runs into
 *   "--job-of";
 * - "-h" and "--help", which print the program's help on stdout;
 * - one error style: "PROG: error: WHAT" and "Try 'PROG --help'." on stderr and
 *   exit code 2, for an unknown or ambiguous option, a missing or malformed value,
 *   a value given to a flag, a missing or surplus positional argument. An unknown
 *   long option gets base/suggest.h's "did you mean" among the listed names.
 *
 * Values are checked as they are parsed (integers and numbers against a range,
 * sizes with units, type names), so a program starts from valid values only. A
 * value the table does not give keeps what its variable held (the default). */
#ifndef QL_CLI_OPT_H
#define QL_CLI_OPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/error.h"

/* Options one program may have (the parser's bookkeeping is fixed-size). */
#define QL_OPT_MAX 64

/* Entries of an array (an option table). */
#define QL_OPT_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ql_opt_parse's result when the program goes on. */
#define QL_OPT_GO_ON (-1)

/* The thread count option's range. */
#define QL_OPT_THREADS_MAX 4096

typedef enum {
    QL_OPT_FLAG,    /* no value: sets a bool */
    QL_OPT_SET,     /* no value: stores a constant into an int */
    QL_OPT_STR,     /* a non-empty string */
    QL_OPT_TEXT,    /* any string, the empty one too */
    QL_OPT_INT,     /* an int in [lo, hi] */
    QL_OPT_I64,     /* an int64_t in [lo, hi] */
    QL_OPT_DOUBLE,  /* a finite double in [dlo, dhi] */
    QL_OPT_SIZE,    /* bytes: a number with an optional unit (4.5GiB, 1200MB, 123456) */
    QL_OPT_TYPE,    /* a type name (any case), one of the allowed ones */
    QL_OPT_FUNC,    /* a value parsed by the program's own function */
    QL_OPT_SECTION, /* no option: a heading in the --help listing */
} ql_opt_kind;

/* Parses one value of a QL_OPT_FUNC option; on failure err says what is wrong with
 * val (the parser puts the option's name in front). */
typedef ql_status (*ql_opt_fn)(void *ctx, const char *val, ql_error *err);

/* One option. Build it with the constructors below rather than by hand. */
typedef struct {
    const char *name; /* long name without "--" (QL_OPT_SECTION: the heading) */
    /* Other long names, space-separated ("ctx-size", "output output-file"), or NULL. */
    const char *aliases;
    int key;          /* short alias, a letter or digit; 0 when none */
    ql_opt_kind kind;
    void *dest;           /* what the value is stored in, typed by kind */
    int64_t lo, hi;       /* INT, I64: the range; SET: lo is the constant */
    double dlo, dhi;      /* DOUBLE: the range */
    const int32_t *types; /* TYPE: the allowed type ids (n_types of them; 0 = any type) */
    size_t n_types;
    ql_opt_fn fn; /* FUNC: the parser and its context */
    void *ctx;
    const char *env;  /* a variable whose value counts when the option is not given */
    const char *arg;  /* the value's name in --help and messages ("N", "PATH") */
    const char *help; /* one line per '\n' in the listing */
    bool required;    /* leaving it out is a usage error */
    bool hidden;      /* internal: not in --help, no abbreviation */
} ql_opt;

ql_opt ql_opt_flag(const char *name, int key, bool *dest, const char *help);
ql_opt ql_opt_set(const char *name, int key, int *dest, int value, const char *help);
ql_opt ql_opt_str(const char *name, int key, const char **dest, const char *arg, const char *help);
ql_opt ql_opt_text(const char *name, int key, const char **dest, const char *arg, const char *help);
ql_opt ql_opt_int(const char *name, int key, int *dest, int lo, int hi, const char *arg,
                  const char *help);
ql_opt ql_opt_i64(const char *name, int key, int64_t *dest, int64_t lo, int64_t hi, const char *arg,
                  const char *help);
ql_opt ql_opt_double(const char *name, int key, double *dest, double lo, double hi, const char *arg,
                     const char *help);
ql_opt ql_opt_size(const char *name, int key, uint64_t *dest, const char *arg, const char *help);
/* allowed: n type ids (ql_type_*), NULL/0 for every known type. */
ql_opt ql_opt_type(const char *name, int key, int32_t *dest, const int32_t *allowed, size_t n,
                   const char *arg, const char *help);
ql_opt ql_opt_func(const char *name, int key, ql_opt_fn fn, void *ctx, const char *arg,
                   const char *help);
ql_opt ql_opt_section(const char *heading);
/* The same option, which must be given. */
ql_opt ql_opt_required(ql_opt o);
/* The same option, also called by the space-separated names of aliases (llama.cpp's
 * spellings); --help lists them after the option's help. */
ql_opt ql_opt_alias(ql_opt o, const char *aliases);
/* The same option, internal: left out of --help and taken only when spelled in full. */
ql_opt ql_opt_hidden(ql_opt o);

/* -t, --threads N (1..QL_OPT_THREADS_MAX), defaulting to OMP_NUM_THREADS: when the
 * option is not given and OMP_NUM_THREADS is set (not empty), its first number
 * counts (OpenMP allows a list, one per nesting level). *dest keeps 0 when neither
 * is given, which ql_threads_set takes as all cores. help states the precedence. */
ql_opt ql_opt_threads(int *dest, const char *help);
/* The precedence most programs have. */
#define QL_OPT_THREADS_HELP "threads (default: $OMP_NUM_THREADS, else all cores)"

/* A program's options and positional arguments, and what ql_opt_parse found. */
typedef struct ql_opt_parser {
    const char *prog; /* "qlab eval", "pareto": starts every message */
    const ql_opt *opts;
    size_t n_opts;
    /* Positional arguments land in args[0..max_args) in order; one more is an error.
     * A QL_OPT_STR option whose dest is &args[k] gives the k-th argument another way
     * (-m MODEL): giving both is an error. arg_names[k] names args[k] in messages;
     * args[0..n_required) must be given. */
    const char **args;
    size_t max_args;
    const char *const *arg_names;
    size_t n_required;
    /* The first positional argument ends the options (a dispatcher such as qlab
     * or qlab bench: the rest is the subcommand's). */
    bool stop_at_arg;
    /* Prints the program's --help on stdout (ql_opt_print_options for the table). */
    void (*help)(const struct ql_opt_parser *p);
    const void *help_ctx; /* for help's own use */
    FILE *err;            /* where usage errors go; NULL: stderr */

    /* Filled by ql_opt_parse. */
    size_t n_args;          /* positional arguments given (-m counts) */
    int next;               /* stop_at_arg: argv index of the first positional one */
    bool given[QL_OPT_MAX]; /* which options were given (command line or environment) */
} ql_opt_parser;

/* Parses argv[1..argc) (argv[0] is the program or subcommand name). Returns
 * QL_OPT_GO_ON, or the exit code to end with: 0 after --help, 2 after a usage
 * error it printed. A broken table (a name or key twice) aborts. */
int ql_opt_parse(ql_opt_parser *p, int argc, char **argv);

/* Whether the option of that long name was given (on the command line, or by its
 * environment variable). */
bool ql_opt_given(const ql_opt_parser *p, const char *name);

/* Prints "PROG: error: <fmt...>" and "Try 'PROG --help'." to p->err (stderr);
 * returns 2, the usage exit code. */
int ql_opt_usage(const ql_opt_parser *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The same for a program that has no parser at hand (a dispatcher). */
int ql_opt_usage_prog(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints the options as "  -t, --threads N   help", sections as headings, and -h;
 * an option's aliases as a last help line "(also --ctx-size)"; hidden options not. */
void ql_opt_print_options(FILE *out, const ql_opt_parser *p);

/* The value checks the parser uses, for values that come some other way (a
 * positional argument, a list item). On failure err says what was expected and
 * what was given ("expected an integer in 4..1048576, got '2'"). */
ql_status ql_opt_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out, ql_error *err);
ql_status ql_opt_parse_double(const char *s, double lo, double hi, double *out, ql_error *err);
/* allowed as in ql_opt_type. */
ql_status ql_opt_parse_type(const char *s, const int32_t *allowed, size_t n, int32_t *out,
                            ql_error *err);

#endif
