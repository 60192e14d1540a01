#!/bin/sh
# experiments/slurm/submit.sh SWEEP N [OUT.db] [-- SBATCH-OPTIONS...]
#
# Runs a sweep on a Slurm cluster as N shards and merges them: submits
# sweep-array.sbatch as a job array of N tasks (task K = shard K/N, into
# $SHARD_DIR/shard-K.db), then merge.sbatch with --dependency=afterok on the
# array (it starts once every shard has succeeded; --kill-on-invalid-dep cancels
# it when one fails). Prints the two job ids. Options after -- go to both sbatch
# calls (partition, account, time limit, --cpus-per-task, ...).
#
#   experiments/slurm/submit.sh experiments/quick.sweep 4 results/qlab.db -- --cpus-per-task=8
#
# Environment: SHARD_DIR (default results/shards/<sweep name>), QLAB, LOCAL_DIR,
# CACHE_DIR, SWEEP_ARGS (see sweep-array.sbatch and merge.sbatch).
set -eu

usage() {
    echo "usage: $0 SWEEP N [OUT.db] [-- SBATCH-OPTIONS...]" >&2
    exit 2
}
[ $# -ge 2 ] || usage
sweep=$1
n=$2
shift 2
out=results/qlab.db
if [ $# -gt 0 ] && [ "$1" != -- ]; then
    out=$1
    shift
fi
if [ $# -gt 0 ]; then
    [ "$1" = -- ] || usage
    shift
fi
case "$n" in '' | *[!0-9]* | 0) echo "$0: N must be a positive number (got '$n')" >&2; exit 2 ;; esac
[ -f "$sweep" ] || { echo "$0: $sweep: no such sweep file" >&2; exit 1; }

here=$(cd "$(dirname "$0")" && pwd)
name=$(basename "$sweep" .sweep)
shard_dir="${SHARD_DIR:-results/shards/$name}"
mkdir -p "$shard_dir"

# --parsable prints "jobid" or "jobid;cluster".
array=$(sbatch --parsable --job-name="qlab-$name" --array="0-$((n - 1))" \
    --output="$shard_dir/sweep-%A_%a.out" \
    --export="ALL,SWEEP=$sweep,SHARD_DIR=$shard_dir" "$@" "$here/sweep-array.sbatch")
array=${array%%;*}
merge=$(sbatch --parsable --job-name="qlab-$name-merge" --dependency="afterok:$array" \
    --kill-on-invalid-dep=yes --output="$shard_dir/merge-%j.out" \
    --export="ALL,SHARD_DIR=$shard_dir,OUT=$out,SHARDS=$n" "$@" "$here/merge.sbatch")
merge=${merge%%;*}
echo "array job $array: $n shards of $sweep into $shard_dir/shard-K.db"
echo "merge job $merge (afterok:$array): into $out"
