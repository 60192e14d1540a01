#!/bin/sh
# SIGINT and SIGTERM during a sweep (issue 16, item 8): the sweep stops after the block
# it is in, marks the run of the config in progress 'interrupted' (with the reason),
# says on stderr what is stored, which run was marked and the command that resumes, and
# exits 128 + the signal (130 for SIGINT); the next sweep retries the interrupted run.
# With --jobs, SIGTERM to the sweep process stops its jobs the same way. The signal
# comes while the sweep hangs in a config (QLAB_FAULT_PAUSE_AFTER_RUNS), not by timing.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"

cat >"$tmp/i.sweep" <<'END'
[sweep]
name    = interrupt-test
model   = stories260K
text    = ts-eval
ctx     = 64
chunks  = 6
threads = 1

[grid]
weight_type = F16 Q8_0 Q4_0 Q5_1
END
db="$tmp/i.db"
wait_running() { # DB N [DONE]: until N runs are running (and DONE are done)
    n=0
    while [ "$(rows "$1" "SELECT sum(status = 'running') || ' ' || sum(status = 'done') FROM runs" 2>/dev/null)" != "$2 ${3:-0}" ] \
        && [ $n -lt 600 ]; do sleep 0.2; n=$((n + 1)); done
    [ $n -lt 600 ]
}

QLAB_FAULT_PAUSE_AFTER_RUNS=2 "$qlab" sweep "$tmp/i.sweep" --db "$db" --cache-dir "$tmp/cache" \
    >"$tmp/a.out" 2>"$tmp/a.err" &
a=$!
wait_running "$db" 1 2 && ok "the sweep hangs in its third config" || bad "the sweep never reached its third config"
kill -INT "$a"
wait "$a"; code=$?
[ "$code" = 130 ] && ok "SIGINT: exit 130" || { bad "SIGINT: exit $code"; cat "$tmp/a.err"; }
has "$tmp/a.err" "qlab: interrupted (SIGINT): 2 configs stored, the run of config 2 (Q4_0) marked interrupted; resume with: qlab sweep $tmp/i.sweep --db $db" \
    "the message says what is stored, what was marked and how to resume"
[ "$(rows "$db" "SELECT count(*) FROM runs WHERE status = 'running'")" = 0 ] && ok "no run left running" \
    || bad "runs left running"
[ "$(rows "$db" "SELECT status || ' ' || error FROM run_log WHERE canonical LIKE 'weight_type=Q4_0%'")" = "interrupted interrupted by signal 2" ] \
    && ok "the run in progress is stored interrupted, with the reason" \
    || { bad "the interrupted run"; rows "$db" "SELECT canonical, status, error FROM run_log"; }
[ "$(rows "$db" "SELECT count(*) FROM runs WHERE status = 'done'")" = 2 ] && ok "the two finished configs are stored" \
    || bad "finished configs"

expect 0 "the next sweep resumes" "$qlab" sweep "$tmp/i.sweep" --db "$db" --cache-dir "$tmp/cache"
has "$tmp/out" "4 configs (2 run, 2 already done, 0 failed)" "it runs the interrupted config and the one not begun"
[ "$(rows "$db" "SELECT status || ' ' || attempts FROM run_log WHERE canonical LIKE 'weight_type=Q4_0%'")" = "done 2" ] \
    && ok "the interrupted run is retried" || bad "the interrupted run was not retried"

# --jobs: SIGTERM to the sweep process stops its jobs, each marking its run.
jdb="$tmp/j.db"
QLAB_FAULT_PAUSE_AFTER_RUNS=1 "$qlab" sweep "$tmp/i.sweep" --db "$jdb" --cache-dir "$tmp/cache" \
    --jobs 2 >"$tmp/j.out" 2>"$tmp/j.err" &
j=$!
wait_running "$jdb" 2 2 && ok "both jobs hang in their second config" || bad "the jobs never reached their second config"
kill -TERM "$j"
wait "$j"; code=$?
[ "$code" = 143 ] && ok "SIGTERM with --jobs: exit 143" || { bad "SIGTERM with --jobs: exit $code"; cat "$tmp/j.err"; }
has "$tmp/j.err" "qlab: interrupted (SIGTERM): 2 configs stored, the run of config " "the sweep process reports for its jobs"
has "$tmp/j.err" "resume with: qlab sweep $tmp/i.sweep --db $jdb" "with the command that resumes"
[ "$(rows "$jdb" "SELECT sum(status = 'interrupted') || ' ' || sum(status = 'running') || ' ' || sum(status = 'done') FROM runs")" = "2 0 2" ] \
    && ok "both jobs' runs are marked interrupted, none left running" \
    || { bad "runs after SIGTERM"; rows "$jdb" "SELECT canonical, status, error FROM run_log"; }
expect 0 "the --jobs sweep resumes" "$qlab" sweep "$tmp/i.sweep" --db "$jdb" --cache-dir "$tmp/cache" --jobs 2
[ "$(rows "$jdb" "SELECT count(*) FROM runs WHERE status = 'done'")" = 4 ] && ok "every config done after the resume" \
    || bad "not every config done after the resume"

# The interrupted run is marked even while another process holds the store's lock at
# that moment (as a sibling job marking its own run does): the wait for the lock goes
# on for a grace period after the signal instead of giving up at once.
kdb="$tmp/k.db"
QLAB_FAULT_PAUSE_AFTER_RUNS=1 "$qlab" sweep "$tmp/i.sweep" --db "$kdb" --cache-dir "$tmp/cache" \
    >"$tmp/k.out" 2>"$tmp/k.err" &
k=$!
wait_running "$kdb" 1 1 && ok "the sweep hangs in its second config" || bad "the sweep never reached its second config"
mkfifo "$tmp/lock.fifo"
sqlite3 -cmd ".timeout 10000" "$kdb" <"$tmp/lock.fifo" >/dev/null 2>&1 &
holder=$!
exec 9>"$tmp/lock.fifo"
echo "BEGIN EXCLUSIVE; INSERT INTO sweep_runs SELECT 'lock-holder', id FROM runs LIMIT 1;" >&9
n=0 # until the lock is taken: a write with no wait fails
while sqlite3 -cmd ".timeout 0" "$kdb" "BEGIN IMMEDIATE; ROLLBACK;" >/dev/null 2>&1 && [ $n -lt 100 ]; do
    sleep 0.05; n=$((n + 1))
done
[ $n -lt 100 ] && ok "another process holds the lock" || bad "the lock was never taken"
kill -TERM "$k"
sleep 1
echo "ROLLBACK;" >&9
exec 9>&-
wait "$holder"
wait "$k"; code=$?
[ "$code" = 143 ] && ok "SIGTERM under a held lock: exit 143" || { bad "SIGTERM under a held lock: exit $code"; cat "$tmp/k.err"; }
[ "$(rows "$kdb" "SELECT sum(status = 'interrupted') || ' ' || sum(status = 'running') FROM runs")" = "1 0" ] \
    && ok "the run is marked interrupted once the lock is free" \
    || { bad "runs after SIGTERM under a held lock"; rows "$kdb" "SELECT canonical, status, error FROM run_log"; cat "$tmp/k.err"; }

# SIGTERM before any config is stored (issue 25, item 9): the summary says what the
# interrupt left, never that every config was done before. The first run hangs in the
# fault hook's delay (a sleep the signal ends), not by timing.
ndb="$tmp/n.db"
QLAB_FAULT_DELAY_MS=600000 "$qlab" sweep "$tmp/i.sweep" --db "$ndb" --cache-dir "$tmp/cache" \
    >"$tmp/n.out" 2>"$tmp/n.err" &
npid=$!
wait_running "$ndb" 1 0 && ok "the sweep hangs in its first config" || bad "the sweep never began a config"
sleep 0.3
kill -TERM "$npid"
wait "$npid"; code=$?
[ "$code" = 143 ] && ok "SIGTERM: exit 143" || { bad "SIGTERM: exit $code"; cat "$tmp/n.err"; }
has "$tmp/n.out" "sweep interrupt-test: 4 configs (0 run, 0 already done, 0 failed, 4 not run)" \
    "the sweep line counts the configs not run"
has "$tmp/n.out" "interrupted (SIGTERM): 0 configs stored by this sweep, 4 not run (1 of them stopped in progress, marked interrupted); the same command resumes" \
    "the summary says what the interrupt left"
if grep -q "done before" "$tmp/n.out"; then bad "the summary says configs were done before"; cat "$tmp/n.out"; else ok "no 'done before' for configs that did not run"; fi
has "$tmp/n.err" "qlab: interrupted (SIGTERM): 0 configs stored, the run of config 0 (F16) marked interrupted" \
    "stderr says the same"
exit "$fail"
