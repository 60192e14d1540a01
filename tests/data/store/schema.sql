CREATE TABLE models (
    id          INTEGER PRIMARY KEY,
    sha256      TEXT NOT NULL UNIQUE CHECK (length(sha256) = 64),
    path        TEXT NOT NULL, -- where it was read the last time
    name        TEXT, -- manifest name, NULL for a plain path
    arch        TEXT, -- general.architecture
    file_bytes  INTEGER,
    params      INTEGER,
    n_layer     INTEGER,
    n_embd      INTEGER,
    n_ff        INTEGER,
    n_head      INTEGER,
    n_head_kv   INTEGER,
    n_vocab     INTEGER,
    n_ctx_train INTEGER
);
CREATE TABLE datasets (
    id              INTEGER PRIMARY KEY,
    sha256          TEXT NOT NULL UNIQUE CHECK (length(sha256) = 64),
    name            TEXT NOT NULL, -- manifest name or the path as given
    path            TEXT,
    bytes           INTEGER,
    tokens          INTEGER, -- whole text, under the tokenizer of tokens_model_id
    tokens_model_id INTEGER REFERENCES models(id)
);
CREATE TABLE configs (
    id            INTEGER PRIMARY KEY,
    hash          TEXT NOT NULL UNIQUE CHECK (length(hash) = 64), -- sha256(canonical)
    canonical     TEXT NOT NULL UNIQUE,
    weight_type   TEXT NOT NULL,
    act_mode      TEXT NOT NULL,
    outlier_ratio REAL NOT NULL, -- 0 = off
    head_type     TEXT NOT NULL, -- 'same' or a type
    embd_type     TEXT NOT NULL, -- 'same' or a type
    kv_type       TEXT NOT NULL, -- resolved (never 'auto')
    imatrix       TEXT NOT NULL, -- 'none', a path, or 'calib:<dataset>[,ctx=N][,chunks=N]'
    budget        TEXT NOT NULL, -- 'none', bytes, 'bpw:X' or a type
    tensor_types  TEXT NOT NULL DEFAULT 'none', -- 'none' or REGEX=TYPE rules separated by ';' (first match wins)
    objective     TEXT NOT NULL DEFAULT 'imatrix', -- what a budget's solver minimises: 'imatrix' (weighted weight error) or 'kld' (measured sensitivities; 'kld:module', 'kld:layer', 'kld:kind': of groups that take one type)
    quantizer     TEXT NOT NULL DEFAULT 'ggml', -- 'ggml' (llama-quantize's rounding) or 'gptq[:OPTS]' (GPTQ into the same formats; OPTS the options that differ from GPTQ's defaults)
    budget_bytes  INTEGER, -- the byte budget, NULL unless given in bytes
    budget_bpw    REAL -- the bpw budget, NULL unless given as bpw:X
);
CREATE TABLE runs (
    id                    INTEGER PRIMARY KEY,
    config_id             INTEGER NOT NULL REFERENCES configs(id),
    model_id              INTEGER NOT NULL REFERENCES models(id),
    dataset_id            INTEGER NOT NULL REFERENCES datasets(id),
    ctx                   INTEGER NOT NULL CHECK (ctx > 0),
    chunks                INTEGER NOT NULL CHECK (chunks > 0),
    sweep                 TEXT, -- the sweep of the last attempt
    status                TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'interrupted')), -- interrupted: since version 6
    error                 TEXT, -- why it failed or stopped
    attempts              INTEGER NOT NULL DEFAULT 1 CHECK (attempts > 0),
    started               TEXT NOT NULL, -- UTC, YYYY-MM-DDTHH:MM:SSZ
    finished              TEXT,
    seconds               REAL, -- the whole run
    quantize_seconds      REAL,
    ref_seconds           REAL, -- reference forward pass
    quant_seconds         REAL, -- quantized forward pass
    threads               INTEGER,
    host                  TEXT,
    qlab_version          TEXT NOT NULL,
    qlab_commit           TEXT NOT NULL,
    metrics_version       INTEGER NOT NULL CHECK (metrics_version > 0),
    imatrix_sha256        TEXT,
    blas_kernel           TEXT, -- BLAS library, version and kernel, e.g. OpenBLAS 0.3.21 Haswell
    mem_budget            INTEGER, -- bytes the runner planned with (--mem)
    group_chunks          INTEGER, -- chunks per group of a pass, from mem_budget
    pid                   INTEGER, -- process on host of the last attempt
    body_of               TEXT, -- config hash of the pass whose blocks it reused (its head only); NULL = own
    forward_alone_seconds REAL, -- what quant_seconds would be without the shared body
    shared_blocks         INTEGER, -- blocks of body_of's pass it reused: all (head only) or the first ones; 0 = own
    UNIQUE (config_id, model_id, dataset_id, ctx, chunks),
    CHECK ((status IN ('failed', 'interrupted')) = (error IS NOT NULL)),
    CHECK ((status = 'running') = (finished IS NULL))
);
CREATE INDEX runs_by_status ON runs(status);
CREATE TABLE sweep_runs (            -- every run a sweep includes, also those it skipped
    sweep  TEXT NOT NULL,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    PRIMARY KEY (sweep, run_id)
) WITHOUT ROWID;
CREATE TABLE metrics (
    run_id              INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
    ppl                 REAL,
    ppl_err             REAL,
    ppl_ref             REAL,
    ppl_ref_err         REAL,
    ln_ppl_ratio        REAL,
    ln_ppl_ratio_err    REAL,
    kld_mean            REAL,
    kld_mean_err        REAL,
    kld_median          REAL,
    kld_p90             REAL,
    kld_p99             REAL,
    kld_p999            REAL,
    kld_max             REAL,
    dp_mean             REAL,
    dp_rms              REAL,
    dp_min              REAL,
    dp_max              REAL,
    max_abs_prob_err    REAL,
    top1_agree          REAL,
    n_tokens            INTEGER,
    kld_min             REAL,
    kld_p01             REAL,
    kld_p05             REAL,
    kld_p10             REAL,
    kld_p25             REAL,
    kld_p75             REAL,
    kld_p95             REAL,
    rkld_mean           REAL,
    rkld_mean_err       REAL,
    kld_conf_0_25       REAL,
    kld_conf_0_25_err   REAL,
    n_conf_0_25         INTEGER,
    kld_conf_25_50      REAL,
    kld_conf_25_50_err  REAL,
    n_conf_25_50        INTEGER,
    kld_conf_50_75      REAL,
    kld_conf_50_75_err  REAL,
    n_conf_50_75        INTEGER,
    kld_conf_75_95      REAL,
    kld_conf_75_95_err  REAL,
    n_conf_75_95        INTEGER,
    kld_conf_95_100     REAL,
    kld_conf_95_100_err REAL,
    n_conf_95_100       INTEGER,
    dp_mean_err         REAL,
    dp_rms_err          REAL,
    dp_p001             REAL,
    dp_p01              REAL,
    dp_p05              REAL,
    dp_p10              REAL,
    dp_p25              REAL,
    dp_median           REAL,
    dp_p75              REAL,
    dp_p90              REAL,
    dp_p95              REAL,
    dp_p99              REAL,
    dp_p999             REAL,
    top1_agree_err      REAL,
    top5_ref_in_q       REAL,
    top5_ref_in_q_err   REAL,
    top10_ref_in_q      REAL,
    top10_ref_in_q_err  REAL,
    top5_q_in_ref       REAL,
    top5_q_in_ref_err   REAL,
    top10_q_in_ref      REAL,
    top10_q_in_ref_err  REAL,
    rmse                REAL,
    max_err             REAL,
    imatrix_err         REAL,
    imatrix_err_rel     REAL,
    predicted_kld       REAL,
    calib_kld           REAL,
    bytes               INTEGER,
    bpw                 REAL,
    bytes_body          INTEGER,
    bpw_body            REAL,
    gguf_bytes          INTEGER,
    zlib_bytes          INTEGER,
    params              INTEGER,
    params_body         INTEGER,
    applied_body        REAL,
    applied_head        REAL,
    applied_embd        REAL,
    route_agree         REAL,
    route_overlap       REAL,
    load_shift          REAL,
    calib_overlap_8     REAL,
    calib_overlap_32    REAL
);
CREATE TABLE tensor_errors (
    run_id          INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    tensor          TEXT NOT NULL,
    layer           INTEGER, -- N of blk.N.*, NULL for other tensors
    requested_type  TEXT NOT NULL,
    used_type       TEXT NOT NULL,
    fallback        INTEGER NOT NULL CHECK (fallback IN (0, 1)),
    fallback_reason TEXT,
    n_rows          INTEGER NOT NULL,
    n_cols          INTEGER NOT NULL, -- row length (ggml ne[0])
    params          INTEGER NOT NULL,
    bytes           INTEGER NOT NULL,
    rmse            REAL,
    max_err         REAL,
    imatrix_err     REAL,
    imatrix_err_rel REAL,
    outlier_cols    INTEGER, -- NULL when the outlier split is off
    choice          TEXT, -- the rule or axis that asked for requested_type
    PRIMARY KEY (run_id, tensor),
    CHECK (fallback = (used_type <> requested_type)),
    CHECK (fallback = (fallback_reason IS NOT NULL))
);
CREATE TABLE chunk_metrics (
    run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    chunk       INTEGER NOT NULL CHECK (chunk >= 0), -- index in the text, < runs.chunks
    n_tokens    INTEGER NOT NULL CHECK (n_tokens > 0), -- scored tokens
    kld_sum     REAL, -- sum of KL(p || q) over the scored tokens (nats)
    nll_sum     REAL, -- sum of -log q(y)
    nll_ref_sum REAL, -- sum of -log p(y)
    top1_count  INTEGER CHECK (top1_count BETWEEN 0 AND n_tokens),
    PRIMARY KEY (run_id, chunk)
) WITHOUT ROWID;
CREATE TABLE act_roundings (
    run_id        INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    tensor        TEXT NOT NULL, -- the product's weight, e.g. blk.0.ffn_down.weight
    requested     TEXT NOT NULL, -- rounding the act_mode asks for: f16, q8_0, q8_K, ...
    used          TEXT NOT NULL, -- rounding applied
    note          TEXT, -- why used differs from requested
    kept_channels INTEGER, -- outlier channels left unrounded
    PRIMARY KEY (run_id, tensor),
    CHECK ((used <> requested) = (note IS NOT NULL))
) WITHOUT ROWID;
CREATE TABLE layer_metrics (
    run_id        INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    layer         INTEGER NOT NULL CHECK (layer >= 0), -- block index
    rel_err_mean  REAL, -- mean over scored tokens of ||h - r|| / ||r||
    rel_err_p99   REAL, -- its 99th percentile
    cos_mean      REAL, -- mean cosine similarity of h and r
    route_agree   REAL, -- a mixture-of-experts block: share of scored tokens routed to the reference's experts
    route_overlap REAL, -- mean share of a token's experts that are the reference's
    load_shift    REAL, -- total variation distance of the experts' loads from the reference's (0 .. 1)
    PRIMARY KEY (run_id, layer)
) WITHOUT ROWID;
CREATE TABLE expert_load (
    run_id    INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    layer     INTEGER NOT NULL CHECK (layer >= 0), -- block index
    expert    INTEGER NOT NULL CHECK (expert >= 0),
    ref_share REAL, -- the reference's share of the block's (token, expert) slots
    share     REAL, -- the run's
    PRIMARY KEY (run_id, layer, expert)
) WITHOUT ROWID;
CREATE TABLE expert_errors (
    run_id          INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    tensor          TEXT NOT NULL, -- the 3-D tensor, e.g. blk.0.ffn_down_exps.weight
    layer           INTEGER, -- N of blk.N.*
    expert          INTEGER NOT NULL CHECK (expert >= 0),
    rmse            REAL,
    max_err         REAL,
    imatrix_err     REAL,
    imatrix_err_rel REAL,
    PRIMARY KEY (run_id, tensor, expert)
) WITHOUT ROWID;
CREATE TABLE sensitivity (
    id               INTEGER PRIMARY KEY,
    model_sha256     TEXT NOT NULL, -- the model (models.sha256)
    text_sha256      TEXT NOT NULL, -- the calibration text
    text             TEXT, -- its name as the config gives it
    ctx              INTEGER NOT NULL,
    chunks           INTEGER NOT NULL,
    imatrix_sha256   TEXT NOT NULL, -- the quantizer's importance matrix, or 'none'
    metrics_version  INTEGER NOT NULL,
    tensor           TEXT NOT NULL, -- the tensor, or the group's name (blk.3.attn, blk.3, ffn_down)
    layer            INTEGER NOT NULL, -- the first block of its tensors; -1 the token embedding; n_layer the head
    kind             TEXT NOT NULL, -- attn_q ... ffn_down, output, token_embd; a group's: attn, ffn, block or the kind
    type             TEXT NOT NULL,
    bytes            INTEGER NOT NULL, -- its tensors in that type
    kld_mean         REAL, -- mean KLD of the model with only this tensor (group) quantized
    kld_mean_err     REAL,
    ln_ppl_ratio     REAL, -- ln(PPL / PPL of the reference)
    ln_ppl_ratio_err REAL,
    seconds          REAL, -- quantizing and scoring it
    qlab_version     TEXT NOT NULL,
    grouping         TEXT NOT NULL DEFAULT 'tensor', -- the unit's: tensor (one tensor, whichever grouping measured it), or module, layer, kind (a group of tensors: objective kld:<grouping>)
    n_tensors        INTEGER NOT NULL DEFAULT 1, -- the tensors quantized together
    blas_kernel      TEXT, -- what the products ran on (as runs.blas_kernel; not part of the key: NULL before schema 9)
    UNIQUE (model_sha256, text_sha256, ctx, chunks, imatrix_sha256, metrics_version, tensor, type)
);
CREATE VIEW results AS -- one row per finished run: config axes, model/text,
                       -- metrics and provenance; sweep: the one that last ran it
SELECT r.id AS run_id, r.sweep,
       c.hash AS config_hash, c.canonical, c.weight_type, c.act_mode, c.outlier_ratio,
       c.head_type, c.embd_type, c.kv_type, c.imatrix, c.budget, c.tensor_types, c.objective,
       c.quantizer, mo.name AS model, mo.sha256 AS model_sha256, d.name AS dataset,
       d.sha256 AS dataset_sha256, r.ctx, r.chunks, m.ppl, m.ppl_err, m.ppl_ref,
       m.ppl_ref_err, m.ppl - m.ppl_ref AS d_ppl, m.ln_ppl_ratio, m.ln_ppl_ratio_err,
       m.kld_mean, m.kld_mean_err, m.kld_median, m.kld_p90, m.kld_p99, m.kld_p999, m.kld_max,
       m.dp_mean, m.dp_rms, m.dp_min, m.dp_max, m.max_abs_prob_err, m.top1_agree, m.n_tokens,
       m.kld_min, m.kld_p01, m.kld_p05, m.kld_p10, m.kld_p25, m.kld_p75, m.kld_p95,
       m.rkld_mean, m.rkld_mean_err, m.kld_conf_0_25, m.kld_conf_0_25_err, m.n_conf_0_25,
       m.kld_conf_25_50, m.kld_conf_25_50_err, m.n_conf_25_50, m.kld_conf_50_75,
       m.kld_conf_50_75_err, m.n_conf_50_75, m.kld_conf_75_95, m.kld_conf_75_95_err,
       m.n_conf_75_95, m.kld_conf_95_100, m.kld_conf_95_100_err, m.n_conf_95_100,
       m.dp_mean_err, m.dp_rms_err, m.dp_p001, m.dp_p01, m.dp_p05, m.dp_p10, m.dp_p25,
       m.dp_median, m.dp_p75, m.dp_p90, m.dp_p95, m.dp_p99, m.dp_p999, m.top1_agree_err,
       m.top5_ref_in_q, m.top5_ref_in_q_err, m.top10_ref_in_q, m.top10_ref_in_q_err,
       m.top5_q_in_ref, m.top5_q_in_ref_err, m.top10_q_in_ref, m.top10_q_in_ref_err, m.rmse,
       m.max_err, m.imatrix_err, m.imatrix_err_rel, m.predicted_kld, m.calib_kld, m.bytes,
       m.bpw, m.bytes_body, m.bpw_body, m.gguf_bytes, m.zlib_bytes, m.params, m.params_body,
       m.applied_body, m.applied_head, m.applied_embd, m.route_agree, m.route_overlap,
       m.load_shift, m.calib_overlap_8, m.calib_overlap_32,
       CASE WHEN m.applied_body = 0 OR (m.applied_head = 0 AND c.head_type <> 'same') OR (m.applied_embd = 0 AND c.embd_type <> 'same') THEN 'n/a' WHEN m.applied_body < 1 OR m.applied_head < 1 OR m.applied_embd < 1 THEN 'partial' WHEN coalesce(m.applied_body, m.applied_head, m.applied_embd) IS NULL THEN NULL ELSE 'yes' END AS applies,
       (SELECT group_concat(part, '; ') FROM (SELECT (CASE cls WHEN 'body' THEN '' ELSE cls || ' ' END) || group_concat(used, ', ') AS part FROM (SELECT CASE t.tensor WHEN 'output.weight' THEN 'head' WHEN 'token_embd.weight' THEN 'embd' ELSE 'body' END AS cls, t.used_type || CASE WHEN sum(t.params) = tot.p THEN '' ELSE printf(' %.1f%%', 100.0 * sum(t.params) / tot.p) END AS used, sum(t.params) AS p, max(t.fallback) AS fell FROM tensor_errors t JOIN (SELECT CASE tensor WHEN 'output.weight' THEN 'head' WHEN 'token_embd.weight' THEN 'embd' ELSE 'body' END AS cls2, sum(params) AS p FROM tensor_errors WHERE run_id = r.id GROUP BY cls2) tot ON tot.cls2 = CASE t.tensor WHEN 'output.weight' THEN 'head' WHEN 'token_embd.weight' THEN 'embd' ELSE 'body' END WHERE t.run_id = r.id GROUP BY cls, t.used_type ORDER BY cls = 'body' DESC, cls, p DESC, t.used_type) GROUP BY cls HAVING cls = 'body' OR max(fell) = 1 ORDER BY cls = 'body' DESC, cls = 'head' DESC)) AS types_used,
       (SELECT t.fallback_reason FROM tensor_errors t WHERE t.run_id = r.id AND t.fallback = 1 ORDER BY t.params DESC, t.tensor LIMIT 1) AS fallback_note,
       r.seconds, r.quantize_seconds, r.ref_seconds, r.quant_seconds, r.threads, r.host,
       r.finished, r.qlab_version, r.qlab_commit, r.metrics_version, r.imatrix_sha256,
       r.blas_kernel, r.mem_budget, r.group_chunks, r.body_of, r.forward_alone_seconds,
       r.shared_blocks
FROM runs r
JOIN configs c ON c.id = r.config_id
JOIN models mo ON mo.id = r.model_id
JOIN datasets d ON d.id = r.dataset_id
JOIN metrics m ON m.run_id = r.id
WHERE r.status = 'done';
CREATE VIEW sweep_results AS -- results once per sweep that includes the run,
                             -- also when an earlier sweep ran it
SELECT r.id AS run_id, s.sweep,
       c.hash AS config_hash, c.canonical, c.weight_type, c.act_mode, c.outlier_ratio,
       c.head_type, c.embd_type, c.kv_type, c.imatrix, c.budget, c.tensor_types, c.objective,
       c.quantizer, mo.name AS model, mo.sha256 AS model_sha256, d.name AS dataset,
       d.sha256 AS dataset_sha256, r.ctx, r.chunks, m.ppl, m.ppl_err, m.ppl_ref,
       m.ppl_ref_err, m.ppl - m.ppl_ref AS d_ppl, m.ln_ppl_ratio, m.ln_ppl_ratio_err,
       m.kld_mean, m.kld_mean_err, m.kld_median, m.kld_p90, m.kld_p99, m.kld_p999, m.kld_max,
       m.dp_mean, m.dp_rms, m.dp_min, m.dp_max, m.max_abs_prob_err, m.top1_agree, m.n_tokens,
       m.kld_min, m.kld_p01, m.kld_p05, m.kld_p10, m.kld_p25, m.kld_p75, m.kld_p95,
       m.rkld_mean, m.rkld_mean_err, m.kld_conf_0_25, m.kld_conf_0_25_err, m.n_conf_0_25,
       m.kld_conf_25_50, m.kld_conf_25_50_err, m.n_conf_25_50, m.kld_conf_50_75,
       m.kld_conf_50_75_err, m.n_conf_50_75, m.kld_conf_75_95, m.kld_conf_75_95_err,
       m.n_conf_75_95, m.kld_conf_95_100, m.kld_conf_95_100_err, m.n_conf_95_100,
       m.dp_mean_err, m.dp_rms_err, m.dp_p001, m.dp_p01, m.dp_p05, m.dp_p10, m.dp_p25,
       m.dp_median, m.dp_p75, m.dp_p90, m.dp_p95, m.dp_p99, m.dp_p999, m.top1_agree_err,
       m.top5_ref_in_q, m.top5_ref_in_q_err, m.top10_ref_in_q, m.top10_ref_in_q_err,
       m.top5_q_in_ref, m.top5_q_in_ref_err, m.top10_q_in_ref, m.top10_q_in_ref_err, m.rmse,
       m.max_err, m.imatrix_err, m.imatrix_err_rel, m.predicted_kld, m.calib_kld, m.bytes,
       m.bpw, m.bytes_body, m.bpw_body, m.gguf_bytes, m.zlib_bytes, m.params, m.params_body,
       m.applied_body, m.applied_head, m.applied_embd, m.route_agree, m.route_overlap,
       m.load_shift, m.calib_overlap_8, m.calib_overlap_32,
       CASE WHEN m.applied_body = 0 OR (m.applied_head = 0 AND c.head_type <> 'same') OR (m.applied_embd = 0 AND c.embd_type <> 'same') THEN 'n/a' WHEN m.applied_body < 1 OR m.applied_head < 1 OR m.applied_embd < 1 THEN 'partial' WHEN coalesce(m.applied_body, m.applied_head, m.applied_embd) IS NULL THEN NULL ELSE 'yes' END AS applies,
       (SELECT group_concat(part, '; ') FROM (SELECT (CASE cls WHEN 'body' THEN '' ELSE cls || ' ' END) || group_concat(used, ', ') AS part FROM (SELECT CASE t.tensor WHEN 'output.weight' THEN 'head' WHEN 'token_embd.weight' THEN 'embd' ELSE 'body' END AS cls, t.used_type || CASE WHEN sum(t.params) = tot.p THEN '' ELSE printf(' %.1f%%', 100.0 * sum(t.params) / tot.p) END AS used, sum(t.params) AS p, max(t.fallback) AS fell FROM tensor_errors t JOIN (SELECT CASE tensor WHEN 'output.weight' THEN 'head' WHEN 'token_embd.weight' THEN 'embd' ELSE 'body' END AS cls2, sum(params) AS p FROM tensor_errors WHERE run_id = r.id GROUP BY cls2) tot ON tot.cls2 = CASE t.tensor WHEN 'output.weight' THEN 'head' WHEN 'token_embd.weight' THEN 'embd' ELSE 'body' END WHERE t.run_id = r.id GROUP BY cls, t.used_type ORDER BY cls = 'body' DESC, cls, p DESC, t.used_type) GROUP BY cls HAVING cls = 'body' OR max(fell) = 1 ORDER BY cls = 'body' DESC, cls = 'head' DESC)) AS types_used,
       (SELECT t.fallback_reason FROM tensor_errors t WHERE t.run_id = r.id AND t.fallback = 1 ORDER BY t.params DESC, t.tensor LIMIT 1) AS fallback_note,
       r.seconds, r.quantize_seconds, r.ref_seconds, r.quant_seconds, r.threads, r.host,
       r.finished, r.qlab_version, r.qlab_commit, r.metrics_version, r.imatrix_sha256,
       r.blas_kernel, r.mem_budget, r.group_chunks, r.body_of, r.forward_alone_seconds,
       r.shared_blocks
FROM sweep_runs s JOIN runs r ON r.id = s.run_id
JOIN configs c ON c.id = r.config_id
JOIN models mo ON mo.id = r.model_id
JOIN datasets d ON d.id = r.dataset_id
JOIN metrics m ON m.run_id = r.id
WHERE r.status = 'done';
CREATE VIEW run_log AS -- every run whatever its status, with provenance and error
SELECT r.id AS run_id, r.sweep, r.status, r.attempts, c.hash AS config_hash,
       c.canonical, mo.name AS model, mo.sha256 AS model_sha256, d.name AS dataset,
       r.ctx, r.chunks, r.started, r.finished, r.seconds, r.threads, r.host,
       r.qlab_version, r.qlab_commit, r.metrics_version, r.blas_kernel,
       r.mem_budget, r.group_chunks, r.pid, r.error
FROM runs r
JOIN configs c ON c.id = r.config_id
JOIN models mo ON mo.id = r.model_id
JOIN datasets d ON d.id = r.dataset_id;
CREATE VIEW failed_runs AS SELECT * FROM run_log WHERE status = 'failed';
CREATE VIEW tensor_results AS -- per-tensor errors of finished runs, with their
                              -- config
SELECT r.id AS run_id, r.sweep, c.hash AS config_hash, c.canonical,
       c.weight_type, c.act_mode, c.outlier_ratio, c.head_type, c.embd_type, c.kv_type,
       c.imatrix, c.budget, c.tensor_types, c.objective, c.quantizer,
       mo.name AS model, d.name AS dataset, r.ctx, r.chunks, t.tensor, t.layer,
       t.requested_type, t.used_type, t.fallback, t.fallback_reason, t.n_rows,
       t.n_cols, t.params, t.bytes, 8.0 * t.bytes / t.params AS bpw, t.rmse,
       t.max_err, t.imatrix_err, t.imatrix_err_rel, t.outlier_cols, t.choice
FROM tensor_errors t
JOIN runs r ON r.id = t.run_id
JOIN configs c ON c.id = r.config_id
JOIN models mo ON mo.id = r.model_id
JOIN datasets d ON d.id = r.dataset_id
WHERE r.status = 'done';
CREATE VIEW chunk_results AS -- per-chunk means of finished runs with their
                             -- config (pair two runs by chunk)
SELECT r.id AS run_id, c.hash AS config_hash,
       c.weight_type, c.act_mode, c.outlier_ratio, c.head_type, c.embd_type, c.kv_type,
       c.imatrix, c.budget, c.tensor_types, c.objective, c.quantizer,
       mo.name AS model, d.name AS dataset, r.ctx, r.chunks, k.chunk, k.n_tokens,
       k.kld_sum, k.nll_sum, k.nll_ref_sum, k.top1_count,
       k.kld_sum / k.n_tokens AS kld_mean,
       (k.nll_sum - k.nll_ref_sum) / k.n_tokens AS ln_ppl_ratio,
       1.0 * k.top1_count / k.n_tokens AS top1_agree
FROM chunk_metrics k
JOIN runs r ON r.id = k.run_id
JOIN configs c ON c.id = r.config_id
JOIN models mo ON mo.id = r.model_id
JOIN datasets d ON d.id = r.dataset_id
WHERE r.status = 'done';
CREATE VIEW layer_results AS -- per-layer divergence of finished runs with
                             -- their config
SELECT r.id AS run_id, c.hash AS config_hash,
       c.weight_type, c.act_mode, c.outlier_ratio, c.head_type, c.embd_type, c.kv_type,
       c.imatrix, c.budget, c.tensor_types, c.objective, c.quantizer,
       mo.name AS model, d.name AS dataset, r.ctx, r.chunks, l.layer,
       l.rel_err_mean, l.rel_err_p99, l.cos_mean
FROM layer_metrics l
JOIN runs r ON r.id = l.run_id
JOIN configs c ON c.id = r.config_id
JOIN models mo ON mo.id = r.model_id
JOIN datasets d ON d.id = r.dataset_id
WHERE r.status = 'done';
