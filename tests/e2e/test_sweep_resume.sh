#!/bin/sh
# qlab sweep end to end on stories260K: a small sweep runs into the store; the same
# sweep killed with SIGKILL in the middle (fault injection through
# QLAB_FAULT_KILL_AFTER_RUNS, not timing luck) and run again holds every config
# exactly once, with the same metric values as the uninterrupted run; a third run
# skips everything; the reference pass runs once per sweep, not per config.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"

cat >"$tmp/small.sweep" <<'END'
[sweep]
name    = resume-test
model   = stories260K
text    = ts-eval
ctx     = 64
chunks  = 6
threads = 2

[grid]
weight_type = F16 Q8_0 Q4_0 Q5_1
head_type   = same Q8_0
END
# Q8_0 with head Q8_0 is Q8_0 with head same: 7 distinct configs.

# The metric values of a database, one line per config, in config-hash order
# (provenance such as timings and dates left out).
values() {
    "$qlab" query --db "$1" --csv "SELECT config_hash, ppl, ppl_err, ppl_ref, kld_mean, kld_p99,
        kld_max, dp_rms, max_abs_prob_err, top1_agree, n_tokens, rmse, bytes, bpw, gguf_bytes,
        zlib_bytes FROM results ORDER BY config_hash"
}

"$qlab" sweep "$tmp/small.sweep" --db "$tmp/a.db" --cache-dir "$tmp/cache-a" \
    >"$tmp/a.out" 2>"$tmp/a.err"
code=$?
[ "$code" -eq 0 ] && ok "uninterrupted sweep" || { bad "uninterrupted sweep: exit $code"; cat "$tmp/a.err"; }
n_ref=$(grep -c '^reference' "$tmp/a.err")
[ "$n_ref" -eq 1 ] && ok "one reference pass for 7 configs" || bad "reference passes: $n_ref"
grep -q "7 configs (7 run, 0 already done, 0 failed)" "$tmp/a.out" && ok "summary line" \
    || { bad "summary line"; cat "$tmp/a.out"; }

QLAB_FAULT_KILL_AFTER_RUNS=3 "$qlab" sweep "$tmp/small.sweep" --db "$tmp/b.db" \
    --cache-dir "$tmp/cache-b" >/dev/null 2>&1
code=$?
[ "$code" -eq 137 ] && ok "killed by SIGKILL in the middle" || bad "fault injection: exit $code, expected 137"
done_runs=$(rows "$tmp/b.db" "SELECT count(*) FROM runs WHERE status='done'")
running=$(rows "$tmp/b.db" "SELECT count(*) FROM runs WHERE status='running'")
[ "$done_runs" = 3 ] && [ "$running" = 1 ] && ok "3 runs done and 1 left running when killed" \
    || bad "after the kill: $done_runs done, $running running"

"$qlab" sweep "$tmp/small.sweep" --db "$tmp/b.db" --cache-dir "$tmp/cache-b" \
    >"$tmp/b.out" 2>"$tmp/b.err" || { bad "resumed sweep failed"; cat "$tmp/b.err"; }
grep -q "7 configs (4 run, 3 already done, 0 failed)" "$tmp/b.out" && ok "resume skips the 3 done configs" \
    || { bad "resume summary"; cat "$tmp/b.out"; }
grep -q "loaded from cache" "$tmp/b.out" && ok "resume loads the reference from the cache" \
    || bad "resume recomputed the reference"
per_config=$(rows "$tmp/b.db" \
    "SELECT count(*) FROM (SELECT config_id FROM runs GROUP BY config_id HAVING count(*) <> 1)")
n_runs=$(rows "$tmp/b.db" "SELECT count(*) FROM runs WHERE status='done'")
[ "$per_config" = 0 ] && [ "$n_runs" = 7 ] && ok "each config exactly once, all done" \
    || bad "runs per config: $per_config configs not once, $n_runs done"
retried=$(rows "$tmp/b.db" "SELECT count(*) FROM runs WHERE attempts = 2")
[ "$retried" = 1 ] && ok "the interrupted run was retried on the same row" || bad "retried runs: $retried"

values "$tmp/a.db" >"$tmp/a.csv"
values "$tmp/b.db" >"$tmp/b.csv"
if [ "$(wc -l <"$tmp/a.csv")" -eq 8 ] && cmp -s "$tmp/a.csv" "$tmp/b.csv"; then
    ok "killed-and-resumed values equal the uninterrupted run"
else
    bad "values differ"; diff "$tmp/a.csv" "$tmp/b.csv"
fi

"$qlab" sweep "$tmp/small.sweep" --db "$tmp/b.db" --cache-dir "$tmp/cache-b" >"$tmp/c.out" 2>&1
grep -q "7 configs (0 run, 7 already done, 0 failed)" "$tmp/c.out" && ok "a finished sweep runs nothing" \
    || { bad "third run"; cat "$tmp/c.out"; }

# --jobs: the configs run in three processes sharing the database and the cache; the
# results equal the single-process run's, and one summary covers them all.
"$qlab" sweep "$tmp/small.sweep" --db "$tmp/j.db" --cache-dir "$tmp/cache-j" --jobs 3 \
    >"$tmp/j.out" 2>"$tmp/j.err" || { bad "sweep --jobs 3 failed"; cat "$tmp/j.err"; }
[ "$(grep -c "^sweep resume-test:" "$tmp/j.out")" = 1 ] && \
    grep -q "7 configs (7 run, 0 already done, 0 failed)" "$tmp/j.out" && ok "--jobs 3: one summary of 7 runs" \
    || { bad "--jobs summary"; cat "$tmp/j.out"; }
if "$(dirname "$0")/compare_results.sh" "$qlab" "$tmp/a.db" "$tmp/j.db" >"$tmp/cmp" 2>&1; then
    ok "--jobs 3 stores the same results as one process"
else
    bad "--jobs results differ"; cat "$tmp/cmp"
fi
# A job killed mid-sweep fails the sweep (exit 1, naming it); the next run resumes.
QLAB_FAULT_KILL_AFTER_RUNS=1 "$qlab" sweep "$tmp/small.sweep" --db "$tmp/k.db" --cache-dir "$tmp/cache-j" \
    --jobs 2 >"$tmp/k.out" 2>"$tmp/k.err"
code=$?
[ "$code" = 1 ] && grep -q "jobs failed (a job was killed by signal 9)" "$tmp/k.err" \
    && ok "a killed job fails the sweep with a message" || { bad "killed job: exit $code"; cat "$tmp/k.err"; }
"$qlab" sweep "$tmp/small.sweep" --db "$tmp/k.db" --cache-dir "$tmp/cache-j" --jobs 2 >"$tmp/k2.out" 2>&1 \
    && "$(dirname "$0")/compare_results.sh" "$qlab" "$tmp/a.db" "$tmp/k.db" >"$tmp/cmp" 2>&1 \
    && ok "resumed with --jobs: the same results" || { bad "resume with --jobs"; cat "$tmp/k2.out" "$tmp/cmp"; }
# Runs of another metrics version are redone by the jobs; the summary counts only
# what the jobs finished, not the old runs they did not get to (each job here dies
# when it begins its second config).
sqlite3 "$tmp/a.db" "VACUUM INTO '$tmp/v.db'" && sqlite3 "$tmp/v.db" "UPDATE runs SET metrics_version = 1"
if [ "$(rows "$tmp/v.db" "SELECT count(*) FROM runs WHERE metrics_version = 1")" = 7 ]; then
    QLAB_FAULT_KILL_AFTER_RUNS=1 "$qlab" sweep "$tmp/small.sweep" --db "$tmp/v.db" \
        --cache-dir "$tmp/cache-a" --jobs 2 >"$tmp/v.out" 2>"$tmp/v.err"
    grep -q "7 configs (2 run, 0 already done, 0 failed, 5 not run)" "$tmp/v.out" \
        && ok "--jobs summary: only the two configs the jobs redid count as run" \
        || { bad "--jobs summary over other-version runs"; cat "$tmp/v.out" "$tmp/v.err"; }
else
    bad "could not age the runs of $tmp/v.db"
fi

# The sweep process killed while its jobs work (fault injection: each job hangs in its
# second config through QLAB_FAULT_PAUSE_AFTER_RUNS): the jobs end with it instead of
# living on beside the rerun, and the rerun completes the sweep.
job_pids() { # DB: the live qlab processes writing to DB
    for d in /proc/[0-9]*; do
        tr '\0' ' ' <"$d/cmdline" 2>/dev/null | grep -q -- "sweep .* --db $1 " && echo "${d#/proc/}"
    done
}
QLAB_FAULT_PAUSE_AFTER_RUNS=1 "$qlab" sweep "$tmp/small.sweep" --db "$tmp/p.db" \
    --cache-dir "$tmp/cache-j" --jobs 2 >"$tmp/p.out" 2>"$tmp/p.err" &
parent=$!
n=0
while [ "$(rows "$tmp/p.db" "SELECT count(*) FROM runs WHERE status = 'running'" 2>/dev/null)" != 2 ] \
    && [ $n -lt 600 ]; do sleep 0.2; n=$((n + 1)); done
[ $n -lt 600 ] && ok "both jobs hang in their second config" || bad "the jobs never reached their second config"
kill -9 "$parent"
wait "$parent" 2>/dev/null
n=0
while [ -n "$(job_pids "$tmp/p.db")" ] && [ $n -lt 100 ]; do sleep 0.2; n=$((n + 1)); done
left=$(job_pids "$tmp/p.db")
[ -z "$left" ] && ok "the jobs end when the sweep process is killed" \
    || { bad "jobs outlive their sweep process: $left"; kill -9 $left 2>/dev/null; }
"$qlab" sweep "$tmp/small.sweep" --db "$tmp/p.db" --cache-dir "$tmp/cache-j" --jobs 2 >"$tmp/p2.out" 2>&1 \
    && "$(dirname "$0")/compare_results.sh" "$qlab" "$tmp/a.db" "$tmp/p.db" >"$tmp/cmp" 2>&1 \
    && ok "rerun after the kill: the same results" || { bad "rerun after the kill"; cat "$tmp/p2.out" "$tmp/cmp"; }
exit $fail
