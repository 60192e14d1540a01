#!/bin/sh
# A real Slurm run of a sweep (issue 8): starts a single-node Slurm on this
# machine (tests/slurm/local-cluster.sh), submits the sweep as a 4-task job array
# plus the merge job with --dependency=afterok (experiments/slurm/submit.sh),
# waits for both with a bounded timeout, and checks that the merged database
# holds the same results as a single-process run of the same sweep
# (tests/e2e/compare_results.sh: configs, run status, metrics, tensor errors,
# per-chunk sums, sweep memberships; provenance left out), that the shards ran
# their own configs and shared the reference cache, and that a failing shard
# cancels the merge instead of letting it run. The cluster is always stopped.
#
# Skipped (exit 77, with the reason) when the Slurm or munge binaries are not
# installed, when not root, or when the cluster cannot be started; never passed
# without running the jobs.
#
#   tests/slurm/test_slurm_sweep.sh QLAB
set -u
qlab="$1"
src="${QLAB_SOURCE_ROOT:?}"
sweep="$src/tests/data/sweep/slurm.sweep"
shards=4
timeout=300 # seconds for the jobs; they take well under a minute

skip() {
    echo "SKIP: $*"
    exit 77
}
fail() {
    echo "FAIL: $*"
    exit 1
}
elapsed() { echo "$(($(date +%s) - start))s"; }
start=$(date +%s)

for b in sbatch squeue sinfo scontrol scancel slurmctld slurmd munged munge unmunge; do
    command -v "$b" >/dev/null 2>&1 ||
        skip "'$b' is not installed (Debian packages: slurmctld slurmd slurm-client munge)"
done
[ "$(id -u)" -eq 0 ] || skip "a local Slurm needs root (munged, slurmd); running as uid $(id -u)"

work=$(mktemp -d "${TMPDIR:-/tmp}/qlab-slurm-test.XXXXXX") || fail "mktemp"
export QLAB_SLURM_DIR="$work/cluster"
export SLURM_CONF="$QLAB_SLURM_DIR/slurm.conf"
cluster="$src/tests/slurm/local-cluster.sh"
cleanup() {
    "$cluster" stop
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# The single-process run first: the reference, and the check that qlab can run
# sweeps at all.
echo "== single-process sweep"
if ! "$qlab" sweep "$sweep" --db "$work/single.db" >"$work/single.log" 2>&1; then
    cat "$work/single.log"
    fail "the single-process sweep failed"
fi
tail -n 3 "$work/single.log"
echo "   done after $(elapsed)"

echo "== local Slurm"
if ! "$cluster" start >"$work/cluster.log" 2>&1; then
    cat "$work/cluster.log"
    skip "cannot start a single-node Slurm here: $(grep 'local-cluster:' "$work/cluster.log" | tail -n 1)"
fi
cat "$work/cluster.log"
echo "   up after $(elapsed)"

echo "== submit: $shards shards + merge (afterok)"
mkdir -p "$work/shards"
# One CPU per task, so the four tasks share this machine's cores; the single
# run used every core: results must not depend on the thread count. The shards
# share the single run's reference cache ($work/cache, next to single.db), so
# each must load the reference from it instead of computing it again.
QLAB="$qlab" SHARD_DIR="$work/shards" LOCAL_DIR="$work" CACHE_DIR="$work/cache" \
    "$src/experiments/slurm/submit.sh" "$sweep" "$shards" "$work/merged.db" -- \
    --cpus-per-task=1 >"$work/submit.log" 2>&1 || {
    cat "$work/submit.log"
    fail "submit.sh failed"
}
cat "$work/submit.log"
array=$(sed -n 's/^array job \([0-9]*\):.*/\1/p' "$work/submit.log")
merge=$(sed -n 's/^merge job \([0-9]*\) .*/\1/p' "$work/submit.log")
if [ -z "$array" ] || [ -z "$merge" ]; then fail "no job ids in submit.sh's output"; fi

# wait_jobs JOB...: polls squeue until the jobs have left the queue.
wait_jobs() {
    waited=0
    while [ -n "$(squeue -h -j "$(echo "$@" | tr ' ' ,)" -o %i 2>/dev/null)" ]; do
        if [ "$waited" -ge "$timeout" ]; then
            squeue
            fail "jobs still queued or running after ${timeout}s"
        fi
        sleep 1
        waited=$((waited + 1))
    done
}
wait_jobs "$array" "$merge"
echo "   jobs finished after $(elapsed)"

# Every array task and the merge completed with exit code 0.
status_ok=1
for job in "$array" "$merge"; do
    scontrol -o show job "$job" >"$work/job-$job" 2>&1 || true
    while read -r line; do
        id=$(echo "$line" | sed -n 's/.*JobId=\([0-9]*\).*/\1/p')
        task=$(echo "$line" | sed -n 's/.*ArrayTaskId=\([0-9]*\).*/ task \1/p')
        state=$(echo "$line" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
        code=$(echo "$line" | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p')
        echo "   job $id$task: $state, exit $code"
        if [ "$state" != COMPLETED ] || [ "$code" != 0:0 ]; then status_ok=0; fi
    done <"$work/job-$job"
done
if [ "$status_ok" -ne 1 ]; then
    for f in "$work"/shards/*.out; do
        echo "--- $f"
        cat "$f"
    done
    fail "a job did not complete"
fi
ntasks=$(grep -c ArrayTaskId "$work/job-$array")
[ "$ntasks" -eq "$shards" ] || fail "the array ran $ntasks tasks, expected $shards"
cat "$work"/shards/merge-*.out
for f in "$work"/shards/sweep-*.out; do
    grep -q "reference loaded from cache" "$f" ||
        fail "$(basename "$f"): the shard did not load the reference from the shared cache: $(cat "$f")"
done
echo "   every shard loaded the reference from the shared cache; task 0 printed:"
sed 's/^/   | /' "$work"/shards/sweep-*_0.out

echo "== merged shards against the single-process run"
sh "$src/tests/e2e/compare_results.sh" "$qlab" "$work/single.db" "$work/merged.db" ||
    fail "the merged database differs from the single-process run"
# Each shard ran exactly its own configs (i mod 4 == K), as `sweep --list` shows.
k=0
while [ "$k" -lt "$shards" ]; do
    "$qlab" sweep "$sweep" --list --shard "$k/$shards" | awk '!/^#/ { print $2 }' | sort >"$work/want"
    "$qlab" query --db "$work/shards/shard-$k.db" --csv "SELECT substr(hash, 1, 12) FROM configs" |
        tail -n +2 | sort >"$work/got"
    cmp -s "$work/want" "$work/got" || fail "shard-$k.db holds configs $(tr '\n' ' ' <"$work/got")but shard $k/$shards is $(tr '\n' ' ' <"$work/want")"
    k=$((k + 1))
done
# afterok: when a shard fails, the merge never runs (submit.sh passes
# --kill-on-invalid-dep, so it is cancelled instead of pending for ever).
echo "== a failing shard cancels the merge"
QLAB="$qlab" SHARD_DIR="$work/failing" LOCAL_DIR="$work" CACHE_DIR="$work/cache" \
    SWEEP_ARGS=--no-such-option "$src/experiments/slurm/submit.sh" "$sweep" 2 \
    "$work/never.db" -- --cpus-per-task=1 >"$work/submit2.log" 2>&1 || {
    cat "$work/submit2.log"
    fail "submit.sh failed"
}
array2=$(sed -n 's/^array job \([0-9]*\):.*/\1/p' "$work/submit2.log")
merge2=$(sed -n 's/^merge job \([0-9]*\) .*/\1/p' "$work/submit2.log")
wait_jobs "$array2" "$merge2"
state=$(scontrol -o show job "$merge2" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
[ "$state" = CANCELLED ] || fail "merge job $merge2 is '$state' after its shards failed, expected CANCELLED"
[ ! -e "$work/never.db" ] || fail "the merge ran although its shards failed"
echo "   shards failed, merge job $merge2 $state, no database written ($(elapsed))"

"$qlab" query --db "$work/merged.db" \
    "SELECT config_hash, weight_type, head_type, ppl, kld_mean, top1_agree FROM results ORDER BY config_hash"
echo "PASS after $(elapsed)"
