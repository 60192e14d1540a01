#!/bin/sh
# The store under contention (issue 16, item 7): a second sweep on a database another
# live sweep works on leaves it the config it is running (a paused process, through
# QLAB_FAULT_PAUSE_AFTER_RUNS, not timing luck) and takes the others; a run whose
# process was killed is taken over by the next sweep; two sweeps started together
# finish with every config done exactly once; a write lock held (by sqlite3) longer
# than the lock waits is waited for again, saying so, and no computed config is lost;
# a store on a read-only directory can be queried; a foreign SQLite file given as --db
# is refused with its bytes unchanged; a stale .tmp.PID file of a killed cache write is
# removed by the next sweep.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
command -v sqlite3 >/dev/null || skip "sqlite3 not installed"

cat >"$tmp/c.sweep" <<'END'
[sweep]
name    = contention
model   = stories260K
text    = ts-eval
ctx     = 64
chunks  = 6
threads = 1

[grid]
weight_type = F16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1
END
n_configs=6
db="$tmp/c.db"
cache="$tmp/cache"

# --- a live process's running config is left to it; a dead one's is taken over
QLAB_FAULT_PAUSE_AFTER_RUNS=1 "$qlab" sweep "$tmp/c.sweep" --db "$db" --cache-dir "$cache" \
    >"$tmp/a.out" 2>"$tmp/a.err" &
a=$!
n=0
while [ "$(rows "$db" "SELECT count(*) FROM runs WHERE status = 'running'" 2>/dev/null)" != 1 ] \
    && [ $n -lt 600 ]; do sleep 0.2; n=$((n + 1)); done
[ $n -lt 600 ] && ok "the first sweep hangs in its second config" || bad "the first sweep never reached its second config"
expect 0 "a second sweep on the same store" "$qlab" sweep "$tmp/c.sweep" --db "$db" --cache-dir "$cache"
has "$tmp/out" "1 left to another process" "the second sweep leaves the running config to the first"
has "$tmp/out" "running in another process" "its summary row says so"
[ "$(rows "$db" "SELECT count(*) FROM runs WHERE status = 'done' AND attempts = 1")" = $((n_configs - 1)) ] \
    && ok "the second sweep took the other configs, each once" \
    || { bad "runs after the second sweep"; rows "$db" "SELECT config_hash, status, attempts FROM run_log"; }
[ "$(rows "$db" "SELECT pid FROM runs WHERE status = 'running'")" = "$a" ] \
    && ok "the running run belongs to the first sweep's process" || bad "owner of the running run"
grep -q "is done, not running\|not running" "$tmp/err" && bad "a 'not running' error: $(cat "$tmp/err")"
kill -9 "$a"; wait "$a" 2>/dev/null
expect 0 "a third sweep after the first was killed" "$qlab" sweep "$tmp/c.sweep" --db "$db" --cache-dir "$cache"
has "$tmp/out" "$n_configs configs (1 run, $((n_configs - 1)) already done, 0 failed)" "the killed process's config is taken over"
[ "$(rows "$db" "SELECT count(*) FROM runs WHERE status = 'done'")" = "$n_configs" ] \
    && ok "every config done" || bad "not every config done"
kernel=$(rows "$db" "SELECT DISTINCT blas_kernel FROM runs")
case "$kernel" in OpenBLAS*) ok "runs record the BLAS kernel ($kernel)" ;; *) bad "blas_kernel: '$kernel'" ;; esac
[ "$(rows "$db" "SELECT count(*) FROM runs WHERE mem_budget > 0 AND group_chunks > 0 AND threads = 1")" = "$n_configs" ] \
    && ok "runs record the memory plan and threads" || bad "memory plan not recorded"

# --- two sweeps at once: both succeed, every config done exactly once
db2="$tmp/two.db"
"$qlab" sweep "$tmp/c.sweep" --db "$db2" --cache-dir "$cache" >"$tmp/p.out" 2>"$tmp/p.err" &
p=$!
"$qlab" sweep "$tmp/c.sweep" --db "$db2" --cache-dir "$cache" >"$tmp/q.out" 2>"$tmp/q.err" &
q=$!
wait "$p"; cp=$?
wait "$q"; cq=$?
[ "$cp" = 0 ] && [ "$cq" = 0 ] && ok "two concurrent sweeps both succeed" \
    || { bad "concurrent sweeps: exit $cp and $cq"; cat "$tmp/p.err" "$tmp/q.err"; }
[ "$(rows "$db2" "SELECT count(*) || ' ' || sum(attempts) || ' ' || sum(status = 'done') FROM runs")" \
    = "$n_configs $n_configs $n_configs" ] && ok "every config done exactly once" \
    || { bad "concurrent runs"; rows "$db2" "SELECT config_hash, status, attempts FROM run_log"; }

# --- a write lock held longer than the store waits: the sweep waits again, saying so
cat >"$tmp/l.sweep" <<'END'
[sweep]
name    = contention-lock
model   = stories260K
text    = ts-eval
ctx     = 64
chunks  = 6
threads = 1

[grid]
weight_type = Q4_0 Q8_0 Q5_0
act_mode    = native
END
# Each run begun waits 2.5 s (QLAB_FAULT_DELAY_MS) before it computes, so the lock below
# is held when the first result is to be stored, however loaded the machine.
QLAB_FAULT_DELAY_MS=2500 QLAB_STORE_BUSY_TIMEOUT_MS=300 QLAB_STORE_LOCK_PATIENCE_MS=1000 \
    "$qlab" sweep "$tmp/l.sweep" \
    --db "$db" --cache-dir "$cache" >"$tmp/l.out" 2>"$tmp/l.err" &
l=$!
n=0
while [ "$(rows "$db" "SELECT count(*) FROM runs WHERE sweep = 'contention-lock' AND status = 'running'" 2>/dev/null)" != 1 ] \
    && [ $n -lt 600 ]; do sleep 0.05; n=$((n + 1)); done
{ echo "BEGIN EXCLUSIVE; INSERT INTO sweep_runs SELECT 'lock-holder', id FROM runs LIMIT 1;"; sleep 4; echo "ROLLBACK;"; } \
    | sqlite3 "$db"
wait "$l"; cl=$?
[ "$cl" = 0 ] && ok "the sweep under a held lock succeeds" || { bad "sweep under lock: exit $cl"; cat "$tmp/l.err"; }
has "$tmp/l.err" "the results store is locked by another process; waiting" "the wait is said"
has "$tmp/l.err" "waits for the lock another process holds" "the retry after the store gave up is said"
[ "$(rows "$db" "SELECT count(*) FROM runs WHERE sweep = 'contention-lock' AND status = 'done' AND attempts = 1")" = 3 ] \
    && ok "every computed config is stored once" \
    || { bad "runs after the lock"; rows "$db" "SELECT config_hash, status, attempts FROM run_log"; }

# --- a store on a read-only directory (or file) can be queried
ro="$tmp/ro"
mkdir "$ro" && cp "$db" "$ro/r.db" && chmod 0444 "$ro/r.db" && chmod 0555 "$ro"
# (As root the directory stays writable: the file's mode alone says read-only.)
expect 0 "query of a read-only store" "$qlab" query --db "$ro/r.db" --csv "SELECT count(*) FROM results"
[ "$(tail -n 1 "$tmp/out")" = $((n_configs + 3)) ] && ok "it reads every result" || { bad "read-only query"; cat "$tmp/out"; }
[ ! -e "$ro/r.db-shm" ] && [ ! -e "$ro/r.db-wal" ] && ok "nothing created beside it" || bad "files created beside a read-only store"
chmod 0755 "$ro"

# --- a foreign SQLite file is refused, byte for byte untouched
sqlite3 "$tmp/other.db" "CREATE TABLE t (x); INSERT INTO t VALUES (1);"
before=$(sha256sum <"$tmp/other.db")
expect 1 "a sweep into a foreign SQLite file" "$qlab" sweep "$tmp/c.sweep" --db "$tmp/other.db" --cache-dir "$cache"
has "$tmp/err" "not a qlab results database" "it is refused as not a qlab database"
[ "$(sha256sum <"$tmp/other.db")" = "$before" ] && ok "the foreign file is unchanged" || bad "the foreign file was changed"
[ "$(sqlite3 "$tmp/other.db" "PRAGMA journal_mode")" = delete ] && ok "its journal mode is unchanged" || bad "journal mode changed"

# --- a stale temporary file of a killed cache write is removed by the next sweep
sh -c 'exit 0' & dead=$!; wait "$dead"
stale="$cache/ref-0123456789abcdef.bin.tmp.$dead"
fresh="$cache/ref-fedcba9876543210.bin.tmp.$dead"
live="$cache/ref-live.bin.tmp.$$"
echo partial >"$stale"; echo partial >"$fresh"; echo partial >"$live"
touch -d '10 minutes ago' "$stale" "$live"
expect 0 "a sweep with stale temporary files in its cache" "$qlab" sweep "$tmp/c.sweep" --db "$db" --cache-dir "$cache"
[ ! -e "$stale" ] && ok "the stale .tmp.PID file is removed" || bad "the stale .tmp.PID file is still there"
has "$tmp/err" "removed 1 stale temporary file" "the removal is said"
[ -e "$live" ] && ok "a live process's temporary file is kept" || bad "a live process's temporary file was removed"
[ -e "$fresh" ] && ok "a just-written temporary file is kept" || bad "a fresh temporary file was removed"
exit "$fail"
