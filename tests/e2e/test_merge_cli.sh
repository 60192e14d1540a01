#!/bin/sh
# qlab merge from the command line: shards K/N of the merge fixture (N = 1, 3, 4)
# merged equal the whole sweep in one database (compare_results.sh, the same
# comparison the Slurm test makes), merging again changes no byte, a shard of
# the same sweep on another model or text is refused naming the mismatch with
# the output untouched (or not created), exit codes 0 / 1 / 2.
set -u
qlab="$1"
make_fixture_db="$2"
src="${QLAB_SOURCE_ROOT:?}"
compare="$src/tests/e2e/compare_results.sh"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
fixture() { "$make_fixture_db" "$@" || { bad "make_fixture_db $*"; exit 1; }; }

fixture --shard 0/1 "$tmp/single.db"
for n in 1 3 4; do
    set --
    k=0
    while [ "$k" -lt "$n" ]; do
        fixture --shard "$k/$n" "$tmp/shard-$k-of-$n.db"
        set -- "$@" "$tmp/shard-$k-of-$n.db"
        k=$((k + 1))
    done
    expect 0 "merge $n shards" "$qlab" merge "$tmp/merged-$n.db" "$@"
    has "$tmp/out" "merged $n database" "summary line for $n shards"
    if sh "$compare" "$qlab" "$tmp/single.db" "$tmp/merged-$n.db" >"$tmp/cmp"; then
        ok "N = $n: merged shards equal the single-process database"
    else
        bad "N = $n: merged shards differ"; cat "$tmp/cmp"
    fi
done
# The metric columns of the results view, by config hash (what the README shows).
cols="config_hash, ppl, kld_mean, kld_p99, kld_max, top1_agree, n_tokens, bpw, zlib_bytes"
"$qlab" query --db "$tmp/single.db" --csv "SELECT $cols FROM results ORDER BY config_hash" >"$tmp/q1"
"$qlab" query --db "$tmp/merged-3.db" --csv "SELECT $cols FROM results ORDER BY config_hash" >"$tmp/q3"
if [ "$(wc -l <"$tmp/q1")" -eq 12 ] && cmp -s "$tmp/q1" "$tmp/q3"; then
    ok "query --csv of the results view is the same"
else
    bad "query --csv of the results view differs"; diff "$tmp/q1" "$tmp/q3"
fi

# The comparison is not blind.
fixture --shard 1/3 --perturb 4 "$tmp/perturbed-1-of-3.db"
expect 0 "merge with a perturbed shard" "$qlab" merge "$tmp/perturbed.db" "$tmp/shard-0-of-3.db" \
    "$tmp/perturbed-1-of-3.db" "$tmp/shard-2-of-3.db"
if sh "$compare" "$qlab" "$tmp/single.db" "$tmp/perturbed.db" >"$tmp/cmp"; then
    bad "compare_results missed a perturbed kld_mean"
else
    has "$tmp/cmp" "metrics differ" "compare_results sees the perturbed metric"
fi
expect 0 "merge missing a shard" "$qlab" merge "$tmp/partial.db" "$tmp/shard-0-of-3.db" "$tmp/shard-1-of-3.db"
if sh "$compare" "$qlab" "$tmp/single.db" "$tmp/partial.db" >/dev/null; then
    bad "compare_results missed a missing shard"
else
    ok "compare_results sees a missing shard"
fi
# Shard 11 of 12 of the 11-config fixture: a database without runs, twice.
fixture --shard 11/12 "$tmp/empty-a.db"
fixture --shard 11/12 "$tmp/empty-b.db"
if sh "$compare" "$qlab" "$tmp/empty-a.db" "$tmp/empty-b.db" >"$tmp/cmp"; then
    bad "compare_results called two databases without runs the same"; cat "$tmp/cmp"
else
    has "$tmp/cmp" "hold no runs" "compare_results refuses two databases without runs"
fi

# Idempotence: the same shards again change no byte.
db="$tmp/merged-3.db"
before=$(cksum <"$db")
expect 0 "merge the same shards again" "$qlab" merge "$db" "$tmp/shard-0-of-3.db" "$tmp/shard-1-of-3.db" "$tmp/shard-2-of-3.db"
has "$tmp/out" "merged 3 databases into $db: 0 runs added, 0 replaced" "nothing added the second time"
if [ "$before" = "$(cksum <"$db")" ]; then ok "database file unchanged by a second merge"; else bad "second merge changed the file"; fi

# Mismatched model or text: refused, output untouched, new output not created.
fixture --shard 1/2 --model-b "$tmp/other-model.db"
fixture --shard 1/2 --text-b "$tmp/other-text.db"
expect 1 "shard on another model refused" "$qlab" merge "$db" "$tmp/other-model.db"
has "$tmp/err" "qlab: error: $tmp/other-model.db: sweep 'shards' used model fixture-model-b (sha256 222222222222...) but $db has model fixture-model (sha256 111111111111...)" "model mismatch named"
expect 1 "shard on another text refused" "$qlab" merge "$db" "$tmp/other-text.db"
has "$tmp/err" "sweep 'shards' used text fixture-text (sha256 444444444444...) but $db has text fixture-text (sha256 333333333333...)" "text mismatch named"
if [ "$before" = "$(cksum <"$db")" ]; then ok "refused merges left the output unchanged"; else bad "a refused merge changed the output"; fi
expect 1 "mismatch between inputs refused" "$qlab" merge "$tmp/new.db" "$tmp/shard-0-of-4.db" "$tmp/other-model.db"
if [ -e "$tmp/new.db" ]; then bad "a refused merge created its output"; else ok "a refused merge creates no output"; fi

# Usage and input errors.
expect 2 "merge without arguments" "$qlab" merge
expect 2 "merge without inputs" "$qlab" merge "$tmp/x.db"
has "$tmp/err" "missing the input databases" "usage message"
expect 2 "merge unknown option" "$qlab" merge --frobnicate "$tmp/x.db" "$db"
expect 1 "merge a missing input" "$qlab" merge "$tmp/x.db" "$tmp/none.db"
has "$tmp/err" "none.db: cannot read: No such file or directory" "missing input named"
expect 1 "merge the output into itself" "$qlab" merge "$db" "$db"
has "$tmp/err" "is the output database" "self-merge message"
expect 0 "merge --help" "$qlab" merge --help
has "$tmp/out" "usage: qlab merge OUT.db IN.db..." "help text"

exit "$fail"
