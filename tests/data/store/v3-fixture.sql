-- A results database written by qlab with store schema version 3, before its
-- schema was derived from the declarations of store.c, records.h and config.h
-- (tests/unit/make_fixture_db --shard 0/4 --fail 1 of commit ff9b792), dumped with
-- sqlite3 .dump; test_store replays it to check that today's qlab opens it, and that
-- its tables are what the declarations create. Do not edit: it is a frozen v3 file.
PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE models (
    id          INTEGER PRIMARY KEY,
    sha256      TEXT NOT NULL UNIQUE CHECK (length(sha256) = 64),
    path        TEXT NOT NULL,       -- where it was read the last time
    name        TEXT,                -- manifest name, NULL for a plain path
    arch        TEXT,                -- general.architecture
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
INSERT INTO models VALUES(1,'1111111111111111111111111111111111111111111111111111111111111111','models/fixture.gguf','fixture-model','llama',NULL,32768,NULL,NULL,NULL,NULL,NULL,NULL,NULL);
CREATE TABLE datasets (
    id              INTEGER PRIMARY KEY,
    sha256          TEXT NOT NULL UNIQUE CHECK (length(sha256) = 64),
    name            TEXT NOT NULL,   -- manifest name or the path as given
    path            TEXT,
    bytes           INTEGER,
    tokens          INTEGER,         -- whole text, under the tokenizer of tokens_model_id
    tokens_model_id INTEGER REFERENCES models(id)
);
INSERT INTO datasets VALUES(1,'3333333333333333333333333333333333333333333333333333333333333333','fixture-text',NULL,8192,NULL,NULL);
CREATE TABLE configs (
    id            INTEGER PRIMARY KEY,
    hash          TEXT NOT NULL UNIQUE CHECK (length(hash) = 64), -- sha256(canonical)
    canonical     TEXT NOT NULL UNIQUE,
    weight_type   TEXT NOT NULL,
    act_mode      TEXT NOT NULL,
    outlier_ratio REAL NOT NULL,     -- 0 = off
    head_type     TEXT NOT NULL,     -- 'same' or a type
    embd_type     TEXT NOT NULL,     -- 'same' or a type
    kv_type       TEXT NOT NULL,     -- resolved (never 'auto')
    imatrix       TEXT NOT NULL,     -- 'none', a path, or 'calib:<dataset>[,ctx=N][,chunks=N]'
    budget        TEXT NOT NULL,     -- 'none', bytes, or 'bpw:X'
    budget_bytes  INTEGER,           -- the byte budget, NULL unless given in bytes
    budget_bpw    REAL               -- the bpw budget, NULL unless given as bpw:X
);
INSERT INTO configs VALUES(1,'a87ceb01de5d3245e42a8dc8f85d357b937c766ec87fa18a74bdf8c74e856155','weight_type=F16 act_mode=f32 outlier_ratio=0 head_type=same embd_type=same kv_type=f32 imatrix=none budget=none','F16','f32',0.0,'same','same','f32','none','none',NULL,NULL);
INSERT INTO configs VALUES(2,'6dda1c3d14e24d14f0ed268c899d73697ca1263942ca4243f08d7a6aea142cf9','weight_type=Q4_0 act_mode=f32 outlier_ratio=0 head_type=Q8_0 embd_type=same kv_type=f32 imatrix=none budget=none','Q4_0','f32',0.0,'Q8_0','same','f32','none','none',NULL,NULL);
INSERT INTO configs VALUES(3,'3a5e92241723eb96d84da3a93e1e4b91c6c56345f8d5adf2eb0e4387489e0558','weight_type=Q4_1 act_mode=f32 outlier_ratio=0 head_type=Q8_0 embd_type=same kv_type=f32 imatrix=none budget=none','Q4_1','f32',0.0,'Q8_0','same','f32','none','none',NULL,NULL);
CREATE TABLE runs (
    id               INTEGER PRIMARY KEY,
    config_id        INTEGER NOT NULL REFERENCES configs(id),
    model_id         INTEGER NOT NULL REFERENCES models(id),
    dataset_id       INTEGER NOT NULL REFERENCES datasets(id),
    ctx              INTEGER NOT NULL CHECK (ctx > 0),
    chunks           INTEGER NOT NULL CHECK (chunks > 0),
    sweep            TEXT,            -- the sweep of the last attempt
    status           TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed')),
    error            TEXT,            -- why it failed
    attempts         INTEGER NOT NULL DEFAULT 1 CHECK (attempts > 0),
    started          TEXT NOT NULL,   -- UTC, YYYY-MM-DDTHH:MM:SSZ
    finished         TEXT,
    seconds          REAL,            -- the whole run
    quantize_seconds REAL,
    ref_seconds      REAL,            -- reference forward pass
    quant_seconds    REAL,            -- quantized forward pass
    threads          INTEGER,
    host             TEXT,
    qlab_version     TEXT NOT NULL,
    qlab_commit      TEXT NOT NULL,
    metrics_version  INTEGER NOT NULL CHECK (metrics_version > 0),
    imatrix_sha256   TEXT,
    UNIQUE (config_id, model_id, dataset_id, ctx, chunks),
    CHECK ((status = 'failed') = (error IS NOT NULL)),
    CHECK ((status = 'running') = (finished IS NULL))
);
INSERT INTO runs VALUES(1,1,1,1,64,3,'shards','done',NULL,1,'2026-12-01T22:30:20Z','2026-12-01T22:30:20Z',1.0,0.25,0.5,0.5,1,'vm','0.1.0','unknown',1,NULL);
INSERT INTO runs VALUES(2,2,1,1,64,3,'shards','done',NULL,1,'2026-12-01T22:30:20Z','2026-12-01T22:30:20Z',1.0,0.25,0.5,0.5,1,'vm','0.1.0','unknown',1,NULL);
INSERT INTO runs VALUES(3,3,1,1,64,3,'shards','done',NULL,1,'2026-12-01T22:30:20Z','2026-12-01T22:30:20Z',1.0,0.25,0.5,0.5,1,'vm','0.1.0','unknown',1,NULL);
CREATE TABLE sweep_runs (            -- every run a sweep includes, also those it skipped
    sweep  TEXT NOT NULL,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    PRIMARY KEY (sweep, run_id)
) WITHOUT ROWID;
INSERT INTO sweep_runs VALUES('shards',1);
INSERT INTO sweep_runs VALUES('shards',2);
INSERT INTO sweep_runs VALUES('shards',3);
CREATE TABLE metrics (
    run_id           INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
    ppl              REAL,
    ppl_err          REAL,
    ppl_ref          REAL,
    ppl_ref_err      REAL,
    ln_ppl_ratio     REAL,
    ln_ppl_ratio_err REAL,
    kld_mean         REAL,
    kld_mean_err     REAL,
    kld_median       REAL,
    kld_p90          REAL,
    kld_p99          REAL,
    kld_p999         REAL,
    kld_max          REAL,
    dp_mean          REAL,
    dp_rms           REAL,
    dp_min           REAL,
    dp_max           REAL,
    max_abs_prob_err REAL,
    top1_agree       REAL,
    n_tokens         INTEGER,
    rmse             REAL,
    max_err          REAL,
    imatrix_err      REAL,
    imatrix_err_rel  REAL,
    bytes            INTEGER,
    bpw              REAL,
    bytes_body       INTEGER,
    bpw_body         REAL,
    gguf_bytes       INTEGER,
    zlib_bytes       INTEGER,
    params           INTEGER,
    params_body      INTEGER
);
INSERT INTO metrics VALUES(1,8.0,NULL,8.0,NULL,0.0020161290322580644601,NULL,0.00100806451612903223,NULL,NULL,NULL,NULL,NULL,0.125,NULL,NULL,NULL,NULL,NULL,0.96774193548387099639,93,NULL,NULL,NULL,NULL,4096,16.0,NULL,NULL,NULL,NULL,32768,NULL);
INSERT INTO metrics VALUES(2,8.25,NULL,8.0,NULL,0.0100806451612903223,NULL,0.0050403225806451611504,NULL,NULL,NULL,NULL,NULL,0.625,NULL,NULL,NULL,NULL,NULL,0.96774193548387099639,93,NULL,NULL,NULL,NULL,20480,3.2000000000000001776,NULL,NULL,NULL,NULL,32768,NULL);
INSERT INTO metrics VALUES(3,8.5,NULL,8.0,NULL,0.018145161290322581876,NULL,0.0090725806451612909381,NULL,NULL,NULL,NULL,NULL,1.125,NULL,NULL,NULL,NULL,NULL,0.96774193548387099639,93,NULL,NULL,NULL,NULL,12288,5.3333333333333330372,NULL,NULL,NULL,NULL,32768,NULL);
CREATE TABLE tensor_errors (
    run_id          INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    tensor          TEXT NOT NULL,
    layer           INTEGER,         -- N of blk.N.*, NULL for other tensors
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
    outlier_cols    INTEGER,         -- NULL when the outlier split is off
    PRIMARY KEY (run_id, tensor),
    CHECK (fallback = (used_type <> requested_type)),
    CHECK (fallback = (fallback_reason IS NOT NULL))
);
INSERT INTO tensor_errors VALUES(1,'token_embd.weight',NULL,'F16','F16',0,NULL,64,32,2048,1024,0.00390625,0.015625,NULL,NULL,NULL);
INSERT INTO tensor_errors VALUES(1,'blk.0.attn_q.weight',0,'F16','F16',0,NULL,32,32,1024,512,0.0078125,0.03125,0.0625,0.015625,NULL);
INSERT INTO tensor_errors VALUES(2,'token_embd.weight',NULL,'Q4_0','Q4_0',0,NULL,64,32,2048,1024,0.01953125,0.078125,NULL,NULL,NULL);
INSERT INTO tensor_errors VALUES(2,'blk.0.attn_q.weight',0,'Q4_0','Q4_0',0,NULL,32,32,1024,512,0.0390625,0.15625,0.3125,0.015625,NULL);
INSERT INTO tensor_errors VALUES(3,'token_embd.weight',NULL,'Q4_1','Q4_1',0,NULL,64,32,2048,1024,0.03515625,0.140625,NULL,NULL,NULL);
INSERT INTO tensor_errors VALUES(3,'blk.0.attn_q.weight',0,'Q4_1','Q4_1',0,NULL,32,32,1024,512,0.0703125,0.28125,0.5625,0.015625,NULL);
CREATE TABLE chunk_metrics (
    run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    chunk       INTEGER NOT NULL CHECK (chunk >= 0), -- index in the text, < runs.chunks
    n_tokens    INTEGER NOT NULL CHECK (n_tokens > 0), -- scored tokens
    kld_sum     REAL,            -- sum of KL(p || q) over the scored tokens (nats)
    nll_sum     REAL,            -- sum of -log q(y)
    nll_ref_sum REAL,            -- sum of -log p(y)
    top1_count  INTEGER CHECK (top1_count BETWEEN 0 AND n_tokens),
    PRIMARY KEY (run_id, chunk)
) WITHOUT ROWID;
INSERT INTO chunk_metrics VALUES(1,0,31,0.015625,62.03125,62.0,31);
INSERT INTO chunk_metrics VALUES(1,1,31,0.03125,62.062500000000000001,62.0,30);
INSERT INTO chunk_metrics VALUES(1,2,31,0.046875,62.093749999999999999,62.0,29);
INSERT INTO chunk_metrics VALUES(2,0,31,0.078125,62.156249999999999998,62.0,31);
INSERT INTO chunk_metrics VALUES(2,1,31,0.15625,62.312499999999999998,62.0,30);
INSERT INTO chunk_metrics VALUES(2,2,31,0.234375,62.468749999999999998,62.0,29);
INSERT INTO chunk_metrics VALUES(3,0,31,0.140625,62.28125,62.0,31);
INSERT INTO chunk_metrics VALUES(3,1,31,0.28125,62.562499999999999999,62.0,30);
INSERT INTO chunk_metrics VALUES(3,2,31,0.421875,62.843750000000000001,62.0,29);
CREATE TABLE act_roundings (
    run_id    INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    tensor    TEXT NOT NULL,   -- the product's weight, e.g. blk.0.ffn_down.weight
    requested TEXT NOT NULL,   -- rounding the act_mode asks for: f16, q8_0, q8_K, ...
    used      TEXT NOT NULL,   -- rounding applied
    note      TEXT,            -- why used differs from requested
    kept_channels INTEGER,     -- outlier channels left unrounded
    PRIMARY KEY (run_id, tensor),
    CHECK ((used <> requested) = (note IS NOT NULL))
) WITHOUT ROWID;
CREATE INDEX runs_by_status ON runs(status);
CREATE VIEW results AS
SELECT r.id AS run_id, r.sweep,
       c.hash AS config_hash, c.canonical,
       c.weight_type, c.act_mode, c.outlier_ratio, c.head_type, c.embd_type, c.kv_type,
       c.imatrix, c.budget,
       mo.name AS model, mo.sha256 AS model_sha256, d.name AS dataset,
       d.sha256 AS dataset_sha256, r.ctx, r.chunks,
       m.ppl, m.ppl_err, m.ppl_ref, m.ppl_ref_err, m.ppl - m.ppl_ref AS d_ppl,
       m.ln_ppl_ratio, m.ln_ppl_ratio_err,
       m.kld_mean, m.kld_mean_err, m.kld_median, m.kld_p90, m.kld_p99, m.kld_p999,
       m.kld_max, m.dp_mean, m.dp_rms, m.dp_min, m.dp_max, m.max_abs_prob_err,
       m.top1_agree, m.n_tokens, m.rmse, m.max_err, m.imatrix_err, m.imatrix_err_rel,
       m.bytes, m.bpw, m.bytes_body, m.bpw_body, m.gguf_bytes, m.zlib_bytes, m.params,
       m.params_body,
       r.seconds, r.quantize_seconds, r.ref_seconds, r.quant_seconds, r.threads, r.host,
       r.finished, r.qlab_version, r.qlab_commit, r.metrics_version, r.imatrix_sha256
FROM runs r
JOIN configs c ON c.id = r.config_id
JOIN models mo ON mo.id = r.model_id
JOIN datasets d ON d.id = r.dataset_id
JOIN metrics m ON m.run_id = r.id
WHERE r.status = 'done';
CREATE VIEW sweep_results AS
SELECT r.id AS run_id, s.sweep,
       c.hash AS config_hash, c.canonical,
       c.weight_type, c.act_mode, c.outlier_ratio, c.head_type, c.embd_type, c.kv_type,
       c.imatrix, c.budget,
       mo.name AS model, mo.sha256 AS model_sha256, d.name AS dataset,
       d.sha256 AS dataset_sha256, r.ctx, r.chunks,
       m.ppl, m.ppl_err, m.ppl_ref, m.ppl_ref_err, m.ppl - m.ppl_ref AS d_ppl,
       m.ln_ppl_ratio, m.ln_ppl_ratio_err,
       m.kld_mean, m.kld_mean_err, m.kld_median, m.kld_p90, m.kld_p99, m.kld_p999,
       m.kld_max, m.dp_mean, m.dp_rms, m.dp_min, m.dp_max, m.max_abs_prob_err,
       m.top1_agree, m.n_tokens, m.rmse, m.max_err, m.imatrix_err, m.imatrix_err_rel,
       m.bytes, m.bpw, m.bytes_body, m.bpw_body, m.gguf_bytes, m.zlib_bytes, m.params,
       m.params_body,
       r.seconds, r.quantize_seconds, r.ref_seconds, r.quant_seconds, r.threads, r.host,
       r.finished, r.qlab_version, r.qlab_commit, r.metrics_version, r.imatrix_sha256
FROM sweep_runs s JOIN runs r ON r.id = s.run_id
JOIN configs c ON c.id = r.config_id
JOIN models mo ON mo.id = r.model_id
JOIN datasets d ON d.id = r.dataset_id
JOIN metrics m ON m.run_id = r.id
WHERE r.status = 'done';
CREATE VIEW run_log AS
SELECT r.id AS run_id, r.sweep, r.status, r.attempts, c.hash AS config_hash, c.canonical,
       mo.name AS model, mo.sha256 AS model_sha256, d.name AS dataset, r.ctx, r.chunks,
       r.started, r.finished, r.seconds, r.threads, r.host, r.qlab_version,
       r.qlab_commit, r.metrics_version, r.error
FROM runs r
JOIN configs c ON c.id = r.config_id
JOIN models mo ON mo.id = r.model_id
JOIN datasets d ON d.id = r.dataset_id;
CREATE VIEW failed_runs AS SELECT * FROM run_log WHERE status = 'failed';
CREATE VIEW tensor_results AS
SELECT r.id AS run_id, r.sweep, c.hash AS config_hash, c.canonical, c.weight_type,
       c.act_mode, c.outlier_ratio, mo.name AS model, d.name AS dataset, r.ctx, r.chunks,
       t.tensor, t.layer, t.requested_type, t.used_type, t.fallback, t.fallback_reason,
       t.n_rows, t.n_cols, t.params, t.bytes, 8.0 * t.bytes / t.params AS bpw,
       t.rmse, t.max_err, t.imatrix_err, t.imatrix_err_rel, t.outlier_cols
FROM tensor_errors t
JOIN runs r ON r.id = t.run_id
JOIN configs c ON c.id = r.config_id
JOIN models mo ON mo.id = r.model_id
JOIN datasets d ON d.id = r.dataset_id
WHERE r.status = 'done';
CREATE VIEW chunk_results AS
SELECT r.id AS run_id, c.hash AS config_hash, c.weight_type, c.act_mode, c.outlier_ratio,
       c.head_type, c.embd_type, c.kv_type, c.imatrix, c.budget, mo.name AS model,
       d.name AS dataset, r.ctx, r.chunks, k.chunk, k.n_tokens, k.kld_sum, k.nll_sum,
       k.nll_ref_sum, k.top1_count, k.kld_sum / k.n_tokens AS kld_mean,
       (k.nll_sum - k.nll_ref_sum) / k.n_tokens AS ln_ppl_ratio,
       1.0 * k.top1_count / k.n_tokens AS top1_agree
FROM chunk_metrics k
JOIN runs r ON r.id = k.run_id
JOIN configs c ON c.id = r.config_id
JOIN models mo ON mo.id = r.model_id
JOIN datasets d ON d.id = r.dataset_id
WHERE r.status = 'done';
PRAGMA user_version = 3;
PRAGMA application_id = 1902928226;
COMMIT;
