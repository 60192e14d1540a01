#include "merge_fixture.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "experiment/config.h"
#include "formats/types.h"
#include "results/store.h"

static const char sweep_text[] = "[sweep]\n"
                                 "model = fixture\n"
                                 "text = fixture\n"
                                 "[grid]\n"
                                 "weight_type = F16 Q8_0 Q4_0 Q5_0 Q4_1 Q5_1\n"
                                 "head_type = same Q8_0\n";

void qlt_shard_spec_init(qlt_shard_spec *spec)
{
    *spec = (qlt_shard_spec){
        .sweep = QLT_SHARD_SWEEP,
        .model_sha = QLT_SHARD_MODEL_SHA,
        .model_name = "fixture-model",
        .text_sha = QLT_SHARD_TEXT_SHA,
        .ctx = QLT_SHARD_CTX,
        .chunks = QLT_SHARD_CHUNKS,
        .metrics_version = 1,
        .shard = {0, 1},
        .perturb = -1,
        .fail = -1,
        .running = -1,
    };
}

/* The measurements of config i, from IEEE-exact operations only (no libm), so
 * the same doubles on every machine. */
static ql_status finish(ql_store *s, int64_t run, const ql_config *c, int i,
                        const qlt_shard_spec *spec, ql_error *err)
{
    enum { MAX_CHUNKS = 16 };
    if (spec->chunks > MAX_CHUNKS)
        return ql_error_set(err, QL_EINVAL, "fixture: at most %d chunks", MAX_CHUNKS);
    ql_chunk_record ck[MAX_CHUNKS];
    ql_run_metrics m;
    ql_run_metrics_init(&m);
    double kld = 0.0, nll = 0.0, nll_ref = 0.0, top1 = 0.0;
    for (int k = 0; k < spec->chunks; k++) {
        ck[k] = (ql_chunk_record){
            .chunk = k,
            .n_tokens = QLT_SHARD_TOKENS,
            .kld_sum = (i + 1) * (k + 1) / 64.0,
            .nll_sum = 62.0 + (i + 1) * (k + 1) / 32.0,
            .nll_ref_sum = 62.0,
            .top1_count = QLT_SHARD_TOKENS - (i + k) % 4,
        };
        kld += ck[k].kld_sum;
        nll += ck[k].nll_sum;
        nll_ref += ck[k].nll_ref_sum;
        top1 += (double)ck[k].top1_count;
    }
    double n = (double)spec->chunks * QLT_SHARD_TOKENS;
    m.n_tokens = n;
    m.kld_mean = kld / n + (i == spec->perturb ? 1.0 / 1048576 : 0.0);
    m.kld_max = (i + 1) / 8.0;
    m.ln_ppl_ratio = (nll - nll_ref) / n;
    m.top1_agree = top1 / n;
    m.ppl = 8.0 + i / 16.0;
    m.ppl_ref = 8.0;
    m.bpw = 16.0 / (i % 6 + 1);
    m.bytes = 4096.0 * (i % 6 + 1);
    m.params = 32768;
    m.zlib_bytes = i % 2 ? 1000.0 + i : (double)NAN; /* not measured for some */

    ql_type wt = c->weight_type;
    ql_tensor_record te[2] = {
        {"token_embd.weight", wt, wt, NULL, 64, 32, 2048, 1024, (i + 1) / 256.0, (i + 1) / 64.0,
         (double)NAN, (double)NAN, -1, "the weight type"},
        {"blk.0.attn_q.weight", wt, wt, NULL, 32, 32, 1024, 512, (i + 1) / 128.0, (i + 1) / 32.0,
         (i + 1) / 16.0, 1.0 / 64, -1, "the weight type"},
    };
    /* Provenance of the shard, not of the config. */
    ql_run_timing t = {.seconds = 1.0 + spec->shard.index,
                       .quantize_seconds = 0.25,
                       .ref_seconds = 0.5,
                       .forward_seconds = 0.5,
                       .forward_alone_seconds = (double)NAN};
    ql_run_result r = {.metrics = &m,
                       .tensors = te,
                       .n_tensors = 2,
                       .chunks = ck,
                       .n_chunks = (size_t)spec->chunks,
                       .timing = &t};
    return ql_store_finish_run_result(s, run, &r, err);
}

ql_status qlt_shard_config_hash(int i, char out[65], ql_error *err)
{
    ql_sweep sw;
    ql_status st = ql_sweep_parse("fixture.sweep", sweep_text, 0, &sw, err);
    if (st)
        return st;
    if (i < 0 || (size_t)i >= sw.n_points)
        st = ql_error_set(err, QL_EINVAL, "fixture: no config %d", i);
    else
        memcpy(out, sw.points[i].hash, 65);
    ql_sweep_deinit(&sw);
    return st;
}

ql_status qlt_shard_fixture(const char *path, const qlt_shard_spec *spec, ql_error *err)
{
    ql_sweep sw;
    ql_status st = ql_sweep_parse("fixture.sweep", sweep_text, 0, &sw, err);
    if (st)
        return st;
    if (sw.n_points != QLT_SHARD_CONFIGS) {
        ql_sweep_deinit(&sw);
        return ql_error_set(err, QL_EINVAL, "fixture: %zu configs, expected %d", sw.n_points,
                            QLT_SHARD_CONFIGS);
    }
    ql_store *s;
    if ((st = ql_store_open(path, NULL, &s, err))) {
        ql_sweep_deinit(&sw);
        return st;
    }
    ql_store_model model;
    ql_store_model_init(&model);
    model.sha256 = spec->model_sha;
    model.path = "models/fixture.gguf";
    model.name = spec->model_name;
    model.arch = "llama";
    model.params = 32768;
    ql_store_dataset text;
    ql_store_dataset_init(&text);
    text.sha256 = spec->text_sha;
    text.name = "fixture-text";
    text.bytes = 8192;
    int64_t mid, tid;
    if ((st = ql_store_upsert_model(s, &model, &mid, err)) ||
        (st = ql_store_upsert_dataset(s, &text, &tid, err)))
        goto out;
    for (size_t i = 0; i < sw.n_points; i++) {
        if (!ql_shard_keeps(&spec->shard, i))
            continue;
        int64_t cid, run;
        if ((st = ql_store_upsert_config(s, &sw.points[i].config, &cid, err)))
            goto out;
        ql_store_run_key key = {cid, mid, tid, spec->ctx, spec->chunks};
        ql_store_run_info info = {
            spec->sweep, 1 + spec->shard.index, spec->metrics_version, NULL, spec->kernel, 0, 0};
        if ((st = ql_store_begin_run(s, &key, &info, &run, err)))
            goto out;
        if ((int)i == spec->running)
            continue;
        if ((int)i == spec->fail)
            st = ql_store_fail_run(s, run, "fixture: quantize failed", 0.5, err);
        else
            st = finish(s, run, &sw.points[i].config, (int)i, spec, err);
        if (st)
            goto out;
    }
out:
    ql_store_close(s);
    ql_sweep_deinit(&sw);
    return st;
}
