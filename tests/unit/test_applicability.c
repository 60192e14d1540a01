/* Whether a run measured the types its config names: the shares the store computes
 * from the tensor records, the results view's applies / types_used / fallback_note,
 * and the label (results/applicability.h). */
#include <math.h>
#include <string.h>

#include "formats/types.h"
#include "qltest.h"
#include "results/applicability.h"
#include "results/store.h"
#include "store_fixture.h"

/* A finished run of config `weights` with the given tensor records; its run id. */
static int64_t store_run(ql_store *s, const char *weights, const ql_tensor_record *te, size_t n)
{
    ql_error err;
    int64_t model, text, config, run = 0;
    qlt_store_add_inputs(s, &model, &text);
    ql_config c;
    CHECK_OK(ql_config_from_string(weights, &c, &err), &err);
    CHECK_OK(ql_store_upsert_config(s, &c, &config, &err), &err);
    ql_store_run_key key = {config, model, text, 128, 4};
    ql_store_run_info info = {.sweep = "s", .threads = 1, .metrics_version = 1};
    CHECK_OK(ql_store_begin_run(s, &key, &info, &run, &err), &err);
    ql_run_metrics m;
    ql_run_metrics_init(&m);
    m.kld_mean = 0.1;
    m.applied_body = 0.5; /* what the caller says is ignored: the records decide */
    CHECK_OK(ql_store_finish_run(s, run, &m, te, n, NULL, &err), &err);
    return run;
}

#define REC(name, req, used, params, why)                                                          \
    {                                                                                              \
        name, req, used, why, 1, params, params, params / 2, (double)NAN, (double)NAN,             \
            (double)NAN, (double)NAN, -1, NULL                                                     \
    }

static void check_run(ql_store *s, int64_t run, ql_applies applies, const char *types,
                      const char *note, const char *label)
{
    ql_error err;
    ql_applicability a;
    CHECK_OK(ql_run_applicability(s, run, &a, &err), &err);
    CHECK_EQ_INT(a.applies, applies);
    CHECK_MSG(strcmp(a.types_used, types) == 0, "types_used '%s', want '%s'", a.types_used, types);
    CHECK_MSG(strcmp(a.fallback_note, note) == 0, "fallback_note '%s', want '%s'", a.fallback_note,
              note);
    char buf[QL_APPLICABILITY_TEXT_MAX + 16];
    CHECK_OK(ql_run_applicability_label(s, run, buf, sizeof buf, &err), &err);
    CHECK_MSG(strcmp(buf, label) == 0, "label '%s', want '%s'", buf, label);
}

int main(void)
{
    ql_error err;
    ql_store *s = NULL;
    CHECK_OK(ql_store_open(qlt_tmp_db("applicability.db"), NULL, &s, &err), &err);
    if (!s)
        return qlt_done();
    static const char *const row64 = "row length 64 is not a multiple of 256 (IQ2_XXS): IQ4_NL";
    static const char *const row172 = "row length 172 is not a multiple of 256 (IQ2_XXS): F16";
    /* Nothing got IQ2_XXS: 300 body parameters in IQ4_NL, 100 in F16, the head too. */
    const ql_tensor_record none[] = {
        REC("blk.0.attn_q.weight", QL_TYPE_IQ2_XXS, QL_TYPE_IQ4_NL, 200, row64),
        REC("blk.0.ffn_down.weight", QL_TYPE_IQ2_XXS, QL_TYPE_F16, 100, row172),
        REC("blk.0.ffn_up.weight", QL_TYPE_IQ2_XXS, QL_TYPE_IQ4_NL, 100, row64),
        REC("output.weight", QL_TYPE_IQ2_XXS, QL_TYPE_IQ4_NL, 50, row64),
        REC("token_embd.weight", QL_TYPE_IQ2_XXS, QL_TYPE_IQ4_NL, 50, row64),
    };
    int64_t r_none = store_run(s, "weight_type=IQ2_XXS imatrix=x.dat", none, 5);
    check_run(s, r_none, QL_APPLIES_NONE, "IQ4_NL 75.0%, F16 25.0%; head IQ4_NL; embd IQ4_NL",
              row64, "n/a: IQ4_NL 75.0%, F16 25.0%; head IQ4_NL; embd IQ4_NL");
    /* Some of the body got Q4_0; head and embeddings did. */
    static const char *const q4 = "row length 172 is not a multiple of 32 (Q4_0): F16";
    const ql_tensor_record part[] = {
        REC("blk.0.attn_q.weight", QL_TYPE_Q4_0, QL_TYPE_Q4_0, 300, NULL),
        REC("blk.0.ffn_down.weight", QL_TYPE_Q4_0, QL_TYPE_F16, 100, q4),
        REC("output.weight", QL_TYPE_Q4_0, QL_TYPE_Q4_0, 50, NULL),
    };
    int64_t r_part = store_run(s, "weight_type=Q4_0", part, 3);
    check_run(s, r_part, QL_APPLIES_PARTIAL, "Q4_0 75.0%, F16 25.0%", q4,
              "partial: Q4_0 75.0%, F16 25.0%");
    /* The body got its type, the head (head_type IQ1_S) did not: not what it says. */
    const ql_tensor_record head[] = {
        REC("blk.0.attn_q.weight", QL_TYPE_Q8_0, QL_TYPE_Q8_0, 300, NULL),
        REC("output.weight", QL_TYPE_IQ1_S, QL_TYPE_Q2_K, 50, "no imatrix: Q2_K"),
    };
    int64_t r_head = store_run(s, "weight_type=Q8_0 head_type=IQ1_S", head, 2);
    check_run(s, r_head, QL_APPLIES_NONE, "Q8_0; head Q2_K", "no imatrix: Q2_K",
              "n/a: Q8_0; head Q2_K");
    /* head_type same: the body got IQ1_S, the head (that follows the body) fell back:
     * partial, not n/a, since the config names no type of its own for the head. */
    const ql_tensor_record same[] = {
        REC("blk.0.attn_q.weight", QL_TYPE_IQ1_S, QL_TYPE_IQ1_S, 300, NULL),
        REC("output.weight", QL_TYPE_IQ1_S, QL_TYPE_Q2_K, 50, "no imatrix: Q2_K"),
    };
    int64_t r_same = store_run(s, "weight_type=IQ1_S imatrix=x.dat", same, 2);
    check_run(s, r_same, QL_APPLIES_PARTIAL, "IQ1_S; head Q2_K", "no imatrix: Q2_K",
              "partial: IQ1_S; head Q2_K");
    /* Everything applied: an empty label; no records: unknown. */
    const ql_tensor_record full[] = {
        REC("blk.0.attn_q.weight", QL_TYPE_Q8_0, QL_TYPE_Q8_0, 30, NULL)};
    int64_t r_full = store_run(s, "weight_type=Q8_0", full, 1);
    check_run(s, r_full, QL_APPLIES_YES, "Q8_0", "", "");
    int64_t r_unknown = store_run(s, "weight_type=F16", NULL, 0);
    check_run(s, r_unknown, QL_APPLIES_UNKNOWN, "", "", "");

    /* The stored shares: the records', not the caller's. */
    sqlite3 *db = ql_store_handle(s);
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT applied_body FROM metrics WHERE run_id = %lld",
             (long long)r_none);
    CHECK_NEAR(qlt_sql_real(db, sql), 0.0, 0.0);
    snprintf(sql, sizeof sql, "SELECT applied_body FROM metrics WHERE run_id = %lld",
             (long long)r_part);
    CHECK_NEAR(qlt_sql_real(db, sql), 0.75, 1e-15);
    snprintf(sql, sizeof sql, "SELECT applied_embd FROM metrics WHERE run_id = %lld",
             (long long)r_part);
    CHECK(isnan(qlt_sql_real(db, sql)));
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM results WHERE applies IS NULL"), 1);
    /* A run that is not finished. */
    CHECK(ql_run_applicability(s, 9999, &(ql_applicability){0}, &err) == QL_ENOTFOUND);
    CHECK(strstr(err.msg, "no finished run 9999") != NULL);
    ql_store_close(s);
    return qlt_done();
}
