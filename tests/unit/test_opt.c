/* cli/opt.h: the option parser every qlab subcommand and notebook program uses, on a
 * table with one option of every kind; every usage error class with its message. */
#include <stdlib.h>
#include <string.h>

#include "cli/opt.h"
#include "formats/types.h"
#include "qltest.h"

/* What one program's options hold after a parse. */
typedef struct {
    const char *args[2]; /* MODEL [OUT] */
    const char *text, *prompt;
    int ctx, threads, fmt, jobs, job_of;
    int64_t seed;
    double ratio;
    uint64_t mem;
    int32_t kv;
    bool quiet, stats, stats_more;
    int odd_calls;
} vals;

static int help_calls;
static void help(const ql_opt_parser *p)
{
    (void)p;
    help_calls++;
}

/* A QL_OPT_FUNC value: an odd integer. */
static ql_status odd(void *ctx, const char *val, ql_error *err)
{
    vals *v = ctx;
    int64_t n;
    if (ql_opt_parse_int(val, 1, 99, &n, err) != QL_OK)
        return QL_EINVAL;
    if (n % 2 == 0)
        return ql_error_set(err, QL_EINVAL, "%lld is even", (long long)n);
    v->odd_calls++;
    return QL_OK;
}

static const int32_t kv_types[] = {QL_TYPE_F32, QL_TYPE_F16};

/* Result of one parse: its return value and what it printed on the error stream. */
typedef struct {
    int rc;
    char err[1024];
    vals v;
    ql_opt_parser p;
} run;

/* Parses the NULL-terminated words (argv[0] is added) with the test table. */
static run parse_words(const char *const *words, bool stop_at_arg)
{
    static char *argv[32];
    static run r; /* the parser keeps pointers into r.v */
    memset(&r, 0, sizeof r);
    r.v.ctx = 512;
    int argc = 0;
    argv[argc++] = (char *)"prog";
    for (; *words; words++)
        argv[argc++] = (char *)*words;
    argv[argc] = NULL;
    const ql_opt opts[] = {
        ql_opt_str("model", 'm', &r.v.args[0], "MODEL", "the model"),
        ql_opt_required(ql_opt_str("text", 'f', &r.v.text, "FILE", "the text")),
        ql_opt_text("prompt", 'p', &r.v.prompt, "TEXT", "a prompt, empty allowed"),
        ql_opt_section("numbers:"),
        ql_opt_alias(ql_opt_int("ctx", 'c', &r.v.ctx, 4, 1 << 20, "N", "context\nsecond help line"),
                     "ctx-size context-length"),
        ql_opt_threads(&r.v.threads, QL_OPT_THREADS_HELP),
        ql_opt_i64("seed", 's', &r.v.seed, 0, INT64_MAX, "S", "seed"),
        ql_opt_double("ratio", 0, &r.v.ratio, 0, 10, "R", "a ratio"),
        ql_opt_size("mem", 0, &r.v.mem, "SIZE", "memory"),
        ql_opt_type("kv-type", 0, &r.v.kv, kv_types, 2, "T", "K/V type"),
        ql_opt_func("odd", 0, odd, &r.v, "N", "an odd number"),
        ql_opt_flag("quiet", 'q', &r.v.quiet, "quiet"),
        ql_opt_flag("stats", 0, &r.v.stats, "statistics"),
        ql_opt_flag("stats-more", 0, &r.v.stats_more, "more statistics"),
        ql_opt_set("csv", 0, &r.v.fmt, 2, "CSV"),
        ql_opt_int("jobs", 'j', &r.v.jobs, 1, 8, "N", "jobs"),
        ql_opt_hidden(ql_opt_int("job-of", 0, &r.v.job_of, 1, 8, "K", "internal")),
        ql_opt_alias(ql_opt_str("output", 'o', &r.v.args[1], "OUT", NULL), "output-file"),
    };
    static const char *const names[] = {"MODEL", "OUT"};
    static ql_opt table[QL_OPT_MAX];
    memcpy(table, opts, sizeof opts);
    FILE *err = fmemopen(r.err, sizeof r.err - 1, "w");
    QL_ASSERT(err);
    r.p = (ql_opt_parser){.prog = "qlab test",
                          .opts = table,
                          .n_opts = sizeof opts / sizeof opts[0],
                          .args = r.v.args,
                          .max_args = 2,
                          .arg_names = names,
                          .n_required = 1,
                          .stop_at_arg = stop_at_arg,
                          .help = help,
                          .err = err};
    r.rc = ql_opt_parse(&r.p, argc, argv);
    fclose(err);
    return r;
}

#define WORDS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define PARSE(...) parse_words(WORDS(__VA_ARGS__), false)

/* The parse failed with exit code 2 and printed exactly the message and the hint. */
static void expect_usage(const run *r, const char *msg)
{
    char want[1024];
    snprintf(want, sizeof want, "qlab test: error: %s\nTry 'qlab test --help'.\n", msg);
    CHECK_EQ_INT(r->rc, 2);
    CHECK_MSG(strcmp(r->err, want) == 0, "got '%s', expected '%s'", r->err, want);
}

static void values(void)
{
    ql_error err;
    int64_t i;
    CHECK(ql_opt_parse_int("42", 0, 100, &i, &err) == QL_OK && i == 42);
    CHECK(ql_opt_parse_int("101", 0, 100, &i, &err) == QL_EINVAL);
    CHECK(strcmp(err.msg, "expected an integer in 0..100, got '101'") == 0);
    CHECK(ql_opt_parse_int("12x", 0, INT64_MAX, &i, &err) == QL_EINVAL);
    CHECK(strcmp(err.msg, "expected a non-negative integer, got '12x'") == 0);
    CHECK(ql_opt_parse_int("", 1, INT64_MAX, &i, &err) == QL_EINVAL);
    CHECK(strcmp(err.msg, "expected an integer >= 1, got ''") == 0);
    CHECK(ql_opt_parse_int("99999999999999999999", 0, INT64_MAX, &i, &err) == QL_EINVAL);
    double d;
    CHECK(ql_opt_parse_double("2.5", 0, 3, &d, &err) == QL_OK && d == 2.5);
    CHECK(ql_opt_parse_double("nan", 0, 3, &d, &err) == QL_EINVAL);
    CHECK(ql_opt_parse_double("4", 0, 3, &d, &err) == QL_EINVAL);
    CHECK(strcmp(err.msg, "expected a number in 0..3, got '4'") == 0);
    int32_t t;
    CHECK(ql_opt_parse_type("q4_k", NULL, 0, &t, &err) == QL_OK && t == QL_TYPE_Q4_K);
    CHECK(ql_opt_parse_type("WXYZ", NULL, 0, &t, &err) == QL_EINVAL);
    CHECK_MSG(strcmp(err.msg, "unknown type 'WXYZ'") == 0, "%s", err.msg);
    CHECK(ql_opt_parse_type("Q4_O", NULL, 0, &t, &err) == QL_EINVAL);
    CHECK_MSG(strcmp(err.msg, "unknown type 'Q4_O'; did you mean 'Q4_0'?") == 0, "%s", err.msg);
    CHECK(ql_opt_parse_type("F1G", kv_types, 2, &t, &err) == QL_EINVAL);
    CHECK_MSG(strcmp(err.msg, "expected F32 or F16, got 'F1G'; did you mean 'F16'?") == 0, "%s",
              err.msg);
    CHECK(ql_opt_parse_type("f16", kv_types, 2, &t, &err) == QL_OK && t == QL_TYPE_F16);
    CHECK(ql_opt_parse_type("Q8_0", kv_types, 2, &t, &err) == QL_EINVAL);
    CHECK_MSG(strcmp(err.msg, "expected F32 or F16, got 'Q8_0'") == 0, "%s", err.msg);
}

static void spellings(void)
{
    /* --opt=value, --opt value, -kVALUE, -k VALUE, clusters, abbreviations. */
    run r = PARSE("M", "--text=a.txt", "--ctx", "64", "-t2", "-s", "7", "--rat=1.5", "--mem=2KiB",
                  "--kv-type", "f16", "--odd=3", "-q", "--csv");
    CHECK_MSG(r.rc == QL_OPT_GO_ON, "%s", r.err);
    CHECK(strcmp(r.v.args[0], "M") == 0 && r.v.args[1] == NULL && r.p.n_args == 1);
    CHECK(strcmp(r.v.text, "a.txt") == 0);
    CHECK_EQ_INT(r.v.ctx, 64);
    CHECK_EQ_INT(r.v.threads, 2);
    CHECK_EQ_INT(r.v.seed, 7);
    CHECK(r.v.ratio == 1.5);
    CHECK_EQ_INT(r.v.mem, 2048);
    CHECK_EQ_INT(r.v.kv, QL_TYPE_F16);
    CHECK_EQ_INT(r.v.odd_calls, 1);
    CHECK(r.v.quiet && !r.v.stats);
    CHECK_EQ_INT(r.v.fmt, 2);
    CHECK(ql_opt_given(&r.p, "ctx") && !ql_opt_given(&r.p, "prompt"));

    r = PARSE("-qt", "3", "-fT", "-c8", "M");
    CHECK_MSG(r.rc == QL_OPT_GO_ON, "%s", r.err);
    CHECK(r.v.quiet && r.v.threads == 3 && r.v.ctx == 8 && strcmp(r.v.text, "T") == 0);

    /* Defaults stay when an option is not given; an exact name wins over a longer one. */
    r = PARSE("M", "-f", "T", "--stats");
    CHECK_MSG(r.rc == QL_OPT_GO_ON, "%s", r.err);
    CHECK_EQ_INT(r.v.ctx, 512);
    CHECK(r.v.stats && !r.v.stats_more);
    CHECK(r.v.prompt == NULL);

    /* An empty value where any text is allowed; a value starting with '-'. */
    r = PARSE("M", "-f", "T", "--prompt=", "--seed", "-1");
    expect_usage(&r, "--seed: expected a non-negative integer, got '-1'");
    CHECK(r.v.prompt && r.v.prompt[0] == '\0');
}

static void positionals(void)
{
    /* Options after, between and before the arguments; the arguments keep their order. */
    run r = PARSE("-f", "T", "A", "-c", "16", "B", "-q");
    CHECK_MSG(r.rc == QL_OPT_GO_ON, "%s", r.err);
    CHECK(strcmp(r.v.args[0], "A") == 0 && strcmp(r.v.args[1], "B") == 0 && r.p.n_args == 2);
    CHECK(r.v.ctx == 16 && r.v.quiet);

    /* "--" ends the options. */
    r = PARSE("-f", "T", "--", "-A", "--ctx");
    CHECK_MSG(r.rc == QL_OPT_GO_ON, "%s", r.err);
    CHECK(strcmp(r.v.args[0], "-A") == 0 && strcmp(r.v.args[1], "--ctx") == 0);
    CHECK_EQ_INT(r.v.ctx, 512);

    /* -m gives MODEL another way, once. */
    r = PARSE("-m", "M", "-f", "T");
    CHECK_MSG(r.rc == QL_OPT_GO_ON && strcmp(r.v.args[0], "M") == 0 && r.p.n_args == 1, "%s",
              r.err);
    r = PARSE("-m", "M", "-f", "T", "N");
    expect_usage(&r, "MODEL given twice ('M' and 'N')");
    r = PARSE("N", "-f", "T", "--model=M");
    expect_usage(&r, "MODEL given twice ('N' and 'M' from --model)");

    r = PARSE("-f", "T");
    expect_usage(&r, "missing MODEL");
    r = PARSE("A", "B", "C", "-f", "T");
    expect_usage(&r, "unexpected argument 'C'");

    /* A dispatcher stops at its first argument: the rest is the subcommand's. */
    r = parse_words(WORDS("-q", "M", "--frobnicate", "-f"), true);
    CHECK_MSG(r.rc == 2, "%s", r.err); /* --text is required in this table */
    r = parse_words(WORDS("-q", "-f", "T", "M", "--frobnicate"), true);
    CHECK_MSG(r.rc == QL_OPT_GO_ON, "%s", r.err);
    CHECK(r.p.next == 4 && strcmp(r.v.args[0], "M") == 0 && r.v.quiet);
}

static void errors(void)
{
    run r = PARSE("M", "-f", "T", "--frobnicate");
    expect_usage(&r, "unknown option '--frobnicate'");
    r = PARSE("M", "-f", "T", "--frob=1");
    expect_usage(&r, "unknown option '--frob'");
    r = PARSE("M", "-f", "T", "-x");
    expect_usage(&r, "unknown option '-x'");
    r = PARSE("M", "-f", "T", "--st");
    expect_usage(&r, "option '--st' is ambiguous (--stats, --stats-more)");
    r = PARSE("M", "-f", "T", "--ctx");
    expect_usage(&r, "--ctx needs a value (N)");
    r = PARSE("M", "-f", "T", "-c");
    expect_usage(&r, "-c needs a value (N)");
    r = PARSE("M", "-f", "T", "-c", "2");
    expect_usage(&r, "-c: expected an integer in 4..1048576, got '2'");
    r = PARSE("M", "-f", "T", "--ctx=64k");
    expect_usage(&r, "--ctx: expected an integer in 4..1048576, got '64k'");
    r = PARSE("M", "-f", "T", "--ratio", "11");
    expect_usage(&r, "--ratio: expected a number in 0..10, got '11'");
    r = PARSE("M", "-f", "T", "--mem", "4G");
    CHECK_EQ_INT(r.rc, 2);
    CHECK_MSG(strstr(r.err, "qlab test: error: --mem: size '4G': unknown unit 'G'"), "%s", r.err);
    r = PARSE("M", "-f", "T", "--kv-type=q4_0");
    expect_usage(&r, "--kv-type: expected F32 or F16, got 'q4_0'");
    r = PARSE("M", "-f", "T", "--odd", "4");
    expect_usage(&r, "--odd: 4 is even");
    r = PARSE("M", "-f", "T", "--quiet=yes");
    expect_usage(&r, "--quiet takes no value (got '--quiet=yes')");
    r = PARSE("M", "-f", "T", "--help=1");
    expect_usage(&r, "--help takes no value (got '--help=1')");
    r = PARSE("M", "--text=");
    expect_usage(&r, "--text: expected FILE, got an empty value");
    r = PARSE("M");
    expect_usage(&r, "missing --text FILE");

    /* --help ends the parse at once, with exit code 0. */
    help_calls = 0;
    r = PARSE("--help", "--frobnicate");
    CHECK(r.rc == 0 && help_calls == 1 && r.err[0] == '\0');
    r = PARSE("-h");
    CHECK(r.rc == 0 && help_calls == 2);
    r = PARSE("--he");
    CHECK(r.rc == 0 && help_calls == 3);
}

/* llama.cpp's other names of an option, internal options, "did you mean". */
static void names(void)
{
    /* An alias is a name like the first: exact, abbreviated, with = or a value after. */
    run r = PARSE("M", "-f", "T", "--ctx-size", "64");
    CHECK_MSG(r.rc == QL_OPT_GO_ON && r.v.ctx == 64 && ql_opt_given(&r.p, "ctx"), "%s", r.err);
    r = PARSE("M", "-f", "T", "--context-length=32");
    CHECK_MSG(r.rc == QL_OPT_GO_ON && r.v.ctx == 32, "%s", r.err);
    r = PARSE("M", "-f", "T", "--ctx-s", "16");
    CHECK_MSG(r.rc == QL_OPT_GO_ON && r.v.ctx == 16, "%s", r.err);
    /* Messages spell the option as given. */
    r = PARSE("M", "-f", "T", "--ctx-size", "2");
    expect_usage(&r, "--ctx-size: expected an integer in 4..1048576, got '2'");
    /* Abbreviating both names of one option is not ambiguous; two options are. */
    r = PARSE("M", "-f", "T", "--ctx", "8");
    CHECK_MSG(r.rc == QL_OPT_GO_ON && r.v.ctx == 8, "%s", r.err);
    r = PARSE("M", "-f", "T", "--c", "8");
    expect_usage(&r, "option '--c' is ambiguous (--ctx, --csv)");
    r = PARSE("M", "-f", "T", "--output-file", "O");
    CHECK_MSG(r.rc == QL_OPT_GO_ON && strcmp(r.v.args[1], "O") == 0, "%s", r.err);

    /* An internal option takes no abbreviation, and none of a public one is its. */
    r = PARSE("M", "-f", "T", "--job", "2");
    CHECK_MSG(r.rc == QL_OPT_GO_ON && r.v.jobs == 2 && r.v.job_of == 0, "%s", r.err);
    r = PARSE("M", "-f", "T", "--job-of", "3");
    CHECK_MSG(r.rc == QL_OPT_GO_ON && r.v.job_of == 3 && r.v.jobs == 0, "%s", r.err);
    r = PARSE("M", "-f", "T", "--job-o", "3");
    expect_usage(&r, "unknown option '--job-o'; did you mean '--jobs'?");

    /* Did you mean: among the listed names (aliases too, internal ones never). */
    r = PARSE("M", "-f", "T", "--qiuet");
    expect_usage(&r, "unknown option '--qiuet'; did you mean '--quiet'?");
    r = PARSE("M", "-f", "T", "--ctx_size=8");
    expect_usage(&r, "unknown option '--ctx_size'; did you mean '--ctx-size'?");
    r = PARSE("M", "-f", "T", "--threds", "2");
    expect_usage(&r, "unknown option '--threds'; did you mean '--threads'?");
    r = PARSE("M", "-f", "T", "--zzzzzz");
    expect_usage(&r, "unknown option '--zzzzzz'");
}

static void threads_env(void)
{
    /* Precedence: --threads, then OMP_NUM_THREADS (its first level), else 0 (all cores). */
    unsetenv("OMP_NUM_THREADS");
    run r = PARSE("M", "-f", "T");
    CHECK_MSG(r.rc == QL_OPT_GO_ON && r.v.threads == 0 && !ql_opt_given(&r.p, "threads"), "%s",
              r.err);
    setenv("OMP_NUM_THREADS", "3", 1);
    r = PARSE("M", "-f", "T");
    CHECK_MSG(r.rc == QL_OPT_GO_ON && r.v.threads == 3 && ql_opt_given(&r.p, "threads"), "%s",
              r.err);
    r = PARSE("M", "-f", "T", "--threads=2");
    CHECK_EQ_INT(r.v.threads, 2);
    setenv("OMP_NUM_THREADS", " 4 , 2", 1);
    r = PARSE("M", "-f", "T");
    CHECK_MSG(r.rc == QL_OPT_GO_ON && r.v.threads == 4, "%s", r.err);
    setenv("OMP_NUM_THREADS", "", 1);
    r = PARSE("M", "-f", "T");
    CHECK_MSG(r.rc == QL_OPT_GO_ON && r.v.threads == 0, "%s", r.err);
    setenv("OMP_NUM_THREADS", "many", 1);
    r = PARSE("M", "-f", "T");
    expect_usage(&r, "OMP_NUM_THREADS (the default of --threads): expected an integer in "
                     "1..4096, got 'many'");
    r = PARSE("M", "-f", "T", "-t", "1"); /* not read when --threads is given */
    CHECK_MSG(r.rc == QL_OPT_GO_ON && r.v.threads == 1, "%s", r.err);
    setenv("OMP_NUM_THREADS", "0", 1);
    r = PARSE("M", "-f", "T");
    CHECK_EQ_INT(r.rc, 2);
    unsetenv("OMP_NUM_THREADS");
}

static void listing(void)
{
    run r = PARSE("M", "-f", "T");
    char buf[4096] = "";
    FILE *out = fmemopen(buf, sizeof buf - 1, "w");
    QL_ASSERT(out);
    ql_opt_print_options(out, &r.p);
    fclose(out);
    CHECK_MSG(strstr(buf, "options:\n  -m, --model MODEL  the model\n"), "%s", buf);
    CHECK_MSG(strstr(buf, "\nnumbers:\n  -c, --ctx N        context\n"
                          "                     second help line\n"),
              "%s", buf);
    CHECK_MSG(strstr(buf, "      --ratio R      a ratio\n"), "%s", buf);
    CHECK_MSG(strstr(buf, "  -t, --threads N    threads (default: $OMP_NUM_THREADS"), "%s", buf);
    CHECK_MSG(strstr(buf, "  -h, --help         print this help and exit\n"), "%s", buf);
    /* Aliases close the option's help; internal options are not listed. */
    CHECK_MSG(strstr(buf, "                     second help line\n"
                          "                     (also --ctx-size --context-length)\n"),
              "%s", buf);
    CHECK_MSG(strstr(buf, "  -o, --output OUT   (also --output-file)\n"), "%s", buf);
    CHECK_MSG(!strstr(buf, "job-of"), "%s", buf);
}

int main(void)
{
    values();
    spellings();
    positionals();
    errors();
    names();
    threads_env();
    listing();
    return qlt_done();
}
