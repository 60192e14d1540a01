-- A results database written by qlab with store schema version 1 (the fixture of
-- tests/unit/store_fixture.c), dumped with sqlite3 .dump; test_store replays it to
-- check the migration to the current schema. Do not edit: it is a frozen v1 file.
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
INSERT INTO models VALUES(1,'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa','models/fake.gguf','fake-model','llama',NULL,8192,1,NULL,NULL,NULL,NULL,NULL,NULL);
CREATE TABLE datasets (
    id              INTEGER PRIMARY KEY,
    sha256          TEXT NOT NULL UNIQUE CHECK (length(sha256) = 64),
    name            TEXT NOT NULL,   -- manifest name or the path as given
    path            TEXT,
    bytes           INTEGER,
    tokens          INTEGER,         -- whole text, under the tokenizer of tokens_model_id
    tokens_model_id INTEGER REFERENCES models(id)
);
INSERT INTO datasets VALUES(1,'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb','fake-text',NULL,4096,NULL,NULL);
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
INSERT INTO configs VALUES(2,'d1ab19e4ade29ca647dfbb26b8f7b29700151e41d5d5425bfce71295dceaf597','weight_type=Q8_0 act_mode=f32 outlier_ratio=0 head_type=same embd_type=same kv_type=f32 imatrix=none budget=none','Q8_0','f32',0.0,'same','same','f32','none','none',NULL,NULL);
INSERT INTO configs VALUES(3,'88005179d5a510460d59b37500766f264fc607741718dfc6061269de8009ddb5','weight_type=Q4_0 act_mode=f32 outlier_ratio=0 head_type=same embd_type=same kv_type=f32 imatrix=none budget=none','Q4_0','f32',0.0,'same','same','f32','none','none',NULL,NULL);
INSERT INTO configs VALUES(4,'69763e18a1bbc567c9397cb5acf282cddb7d32fe960ef2b3b6c7665c2a80725f','weight_type=IQ4_NL act_mode=f32 outlier_ratio=0 head_type=same embd_type=same kv_type=f32 imatrix=none budget=none','IQ4_NL','f32',0.0,'same','same','f32','none','none',NULL,NULL);
INSERT INTO configs VALUES(5,'2b12f915e88e9f37240d44043017c34c2242c72ef33cd96ec8e21c3ae3103d35','weight_type=Q5_0 act_mode=f32 outlier_ratio=0 head_type=same embd_type=same kv_type=f32 imatrix=none budget=none','Q5_0','f32',0.0,'same','same','f32','none','none',NULL,NULL);
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
INSERT INTO runs VALUES(1,1,1,1,128,4,'fixture','done',NULL,1,'2026-11-30T21:52:40Z','2026-11-30T21:52:40Z',12.5,1.0,4.0,5.0,2,'vm','0.1.0','98cb1207469f',1,NULL);
INSERT INTO runs VALUES(2,2,1,1,128,4,'fixture','done',NULL,1,'2026-11-30T21:52:40Z','2026-11-30T21:52:40Z',12.5,1.0,4.0,5.0,2,'vm','0.1.0','98cb1207469f',1,NULL);
INSERT INTO runs VALUES(3,3,1,1,128,4,'fixture','done',NULL,1,'2026-11-30T21:52:40Z','2026-11-30T21:52:40Z',12.5,1.0,4.0,5.0,2,'vm','0.1.0','98cb1207469f',1,NULL);
INSERT INTO runs VALUES(4,4,1,1,128,4,'fixture','failed','quantize: IQ4_NL is "not implemented", see a|b',1,'2026-11-30T21:52:40Z','2026-11-30T21:52:40Z',0.5,NULL,NULL,NULL,2,'vm','0.1.0','98cb1207469f',1,NULL);
INSERT INTO runs VALUES(5,5,1,1,128,4,'fixture','running',NULL,1,'2026-11-30T21:52:40Z',NULL,NULL,NULL,NULL,NULL,2,'vm','0.1.0','98cb1207469f',1,NULL);
CREATE TABLE sweep_runs (            -- every run a sweep includes, also those it skipped
    sweep  TEXT NOT NULL,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    PRIMARY KEY (sweep, run_id)
) WITHOUT ROWID;
INSERT INTO sweep_runs VALUES('fixture',1);
INSERT INTO sweep_runs VALUES('fixture',2);
INSERT INTO sweep_runs VALUES('fixture',3);
INSERT INTO sweep_runs VALUES('fixture',4);
INSERT INTO sweep_runs VALUES('fixture',5);
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
INSERT INTO metrics VALUES(1,10.125,0.25,10.0,0.25,0.012422519998557110185,NULL,0.0001220703125,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,0.875,252,NULL,NULL,NULL,NULL,16384,16.0,NULL,NULL,NULL,NULL,8192,NULL);
INSERT INTO metrics VALUES(2,10.499999999999999999,0.25,10.0,0.25,0.048790164169432048701,NULL,0.001953125,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,0.875,252,NULL,NULL,NULL,NULL,8704,8.5,NULL,NULL,NULL,1000,8192,NULL);
INSERT INTO metrics VALUES(3,12.25,0.25,10.0,0.25,0.20294084399669037876,NULL,0.0625,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,0.875,252,NULL,NULL,NULL,NULL,4608,4.5,NULL,NULL,NULL,NULL,8192,NULL);
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
INSERT INTO tensor_errors VALUES(1,'token_embd.weight',NULL,'F16','F16',0,NULL,512,64,32768,1000,0.0625,0.25,NULL,NULL,NULL);
INSERT INTO tensor_errors VALUES(1,'blk.0.attn_q.weight',0,'F16','F16',0,NULL,64,64,4096,500,0.125,0.5,2.0,0.015625,NULL);
INSERT INTO tensor_errors VALUES(1,'blk.0.ffn_down.weight',0,'Q4_K','Q5_0',1,'row length 172 is not a multiple of 256',64,172,11008,700,0.25,1.0,4.0,0.03125,NULL);
INSERT INTO tensor_errors VALUES(2,'token_embd.weight',NULL,'Q8_0','Q8_0',0,NULL,512,64,32768,1000,0.0625,0.25,NULL,NULL,NULL);
INSERT INTO tensor_errors VALUES(2,'blk.0.attn_q.weight',0,'Q8_0','Q8_0',0,NULL,64,64,4096,500,0.125,0.5,2.0,0.015625,NULL);
INSERT INTO tensor_errors VALUES(2,'blk.0.ffn_down.weight',0,'Q4_K','Q5_0',1,'row length 172 is not a multiple of 256',64,172,11008,700,0.25,1.0,4.0,0.03125,NULL);
INSERT INTO tensor_errors VALUES(3,'token_embd.weight',NULL,'Q4_0','Q4_0',0,NULL,512,64,32768,1000,0.0625,0.25,NULL,NULL,NULL);
INSERT INTO tensor_errors VALUES(3,'blk.0.attn_q.weight',0,'Q4_0','Q4_0',0,NULL,64,64,4096,500,0.125,0.5,2.0,0.015625,NULL);
INSERT INTO tensor_errors VALUES(3,'blk.0.ffn_down.weight',0,'Q4_K','Q5_0',1,'row length 172 is not a multiple of 256',64,172,11008,700,0.25,1.0,4.0,0.03125,NULL);
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
PRAGMA user_version = 1;
PRAGMA application_id = 1902928226;
COMMIT;
