#!/bin/sh
# Shards without a scheduler (issue 8): the Slurm test's sweep run as N shards
# (`qlab sweep --shard K/N`, each into its own database, sharing one reference
# cache), merged with `qlab merge`, equals the single-process run of the same
# sweep for N = 1, 3 and 4 (tests/e2e/compare_results.sh: configs, statuses,
# metrics, tensor errors, per-chunk sums, sweep memberships; provenance left out).
# `--shard auto` reads the Slurm array variables.
set -u
qlab="$1"
src="${QLAB_SOURCE_ROOT:?}"
sweep="$src/tests/data/sweep/slurm.sweep"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
run() { # LOG CMD...
    log=$1
    shift
    "$@" >"$log" 2>&1 || { bad "$*: exit $?"; cat "$log"; exit 1; }
}

run "$tmp/single.log" "$qlab" sweep "$sweep" --db "$tmp/single.db" --quiet
ok "single-process sweep"
for n in 1 3 4; do
    set --
    k=0
    while [ "$k" -lt "$n" ]; do
        db="$tmp/n$n-shard-$k.db"
        # One thread per shard, the single run used all cores: results must not
        # depend on it. The cache is the single run's: no shard recomputes the reference.
        run "$tmp/shard.log" "$qlab" sweep "$sweep" --shard "$k/$n" --threads 1 --quiet \
            --cache-dir "$tmp/cache" --db "$db"
        grep -q "loaded from cache" "$tmp/shard.log" || bad "shard $k/$n recomputed the reference"
        set -- "$@" "$db"
        k=$((k + 1))
    done
    run "$tmp/merge.log" "$qlab" merge "$tmp/merged-$n.db" "$@"
    if sh "$src/tests/e2e/compare_results.sh" "$qlab" "$tmp/single.db" "$tmp/merged-$n.db" >"$tmp/cmp"; then
        ok "N = $n: $(cat "$tmp/cmp")"
    else
        bad "N = $n: merged shards differ from the single-process run"
        cat "$tmp/cmp"
    fi
done

# --shard auto from a Slurm array task's variables: --array=4-6:2 has tasks 4 and
# 6 (MIN 4, STEP 2, COUNT 2), and task 6 is shard K = (6 - 4) / 2 = 1 of N = 2.
SLURM_ARRAY_TASK_ID=6 SLURM_ARRAY_TASK_MIN=4 SLURM_ARRAY_TASK_STEP=2 SLURM_ARRAY_TASK_COUNT=2 \
    run "$tmp/auto.log" "$qlab" sweep "$sweep" --shard auto --quiet --cache-dir "$tmp/cache" \
    --db "$tmp/auto.db"
"$qlab" sweep "$sweep" --list --shard 1/2 | awk '!/^#/ { print $2 }' | sort >"$tmp/want"
"$qlab" query --db "$tmp/auto.db" --csv "SELECT substr(hash, 1, 12) FROM configs" | tail -n +2 |
    sort >"$tmp/got"
if [ -s "$tmp/want" ] && cmp -s "$tmp/want" "$tmp/got"; then
    ok "--shard auto ran shard 1/2"
else
    bad "--shard auto ran other configs than shard 1/2"; diff "$tmp/want" "$tmp/got"
fi
exit "$fail"
