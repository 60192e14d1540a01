#!/bin/sh
# qlab sweep --list and qlab query from the command line: outputs, shards, exit
# codes (0 ok, 1 bad input file or refused statement, 2 usage), read-only access.
set -u
qlab="$1"
make_fixture_db="$2"
src="${QLAB_SOURCE_ROOT:?}"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"

tiny="$src/tests/data/sweep/tiny.sweep"
expect 0 "sweep --list" "$qlab" sweep "$tiny" --list
cat >"$tmp/want" <<'END'
# sweep tiny: model stories260K, text tinystories-valid, ctx 128, chunks 4, 5 configs
   0  d1ab19e4ade2  weight_type=Q8_0 act_mode=f32 outlier_ratio=0 head_type=same embd_type=same kv_type=f32 imatrix=none budget=none
   1  88005179d5a5  weight_type=Q4_0 act_mode=f32 outlier_ratio=0 head_type=same embd_type=same kv_type=f32 imatrix=none budget=none
   2  6dda1c3d14e2  weight_type=Q4_0 act_mode=f32 outlier_ratio=0 head_type=Q8_0 embd_type=same kv_type=f32 imatrix=none budget=none
   3  a87ceb01de5d  weight_type=F16 act_mode=f32 outlier_ratio=0 head_type=same embd_type=same kv_type=f32 imatrix=none budget=none
   4  0fe778210082  weight_type=F16 act_mode=f32 outlier_ratio=0 head_type=Q8_0 embd_type=same kv_type=f32 imatrix=none budget=none
END
if cmp -s "$tmp/out" "$tmp/want"; then ok "sweep --list output"; else bad "sweep --list output"; diff "$tmp/want" "$tmp/out"; fi
cp "$tmp/out" "$tmp/all"

expect 0 "sweep --shard 1/2" "$qlab" sweep "$tiny" --list --shard 1/2
grep -v '^#' "$tmp/all" | awk '$1 % 2 == 1' >"$tmp/want"
grep -v '^#' "$tmp/out" >"$tmp/got"
if cmp -s "$tmp/got" "$tmp/want"; then ok "shard 1/2 keeps configs 1 and 3"; else bad "shard 1/2"; cat "$tmp/out"; fi
has "$tmp/out" "5 configs, shard 1/2: 2" "shard header"
SLURM_ARRAY_TASK_ID=2 SLURM_ARRAY_TASK_COUNT=3 expect 0 "sweep --shard auto" "$qlab" sweep "$tiny" --list --shard auto
has "$tmp/out" "shard 2/3: 1" "shard auto from Slurm variables"
expect 2 "--shard 2/2 is a usage error" "$qlab" sweep "$tiny" --list --shard 2/2
expect 2 "sweep without a file" "$qlab" sweep --list
expect 2 "sweep unknown option" "$qlab" sweep "$tiny" --frobnicate

bad_file="$src/tests/malformed/sweep/unknown-type.sweep"
expect 1 "malformed sweep file" "$qlab" sweep "$bad_file" --list
has "$tmp/err" "qlab: error: $bad_file:6: weight_type: unknown type 'Q4_O'; did you mean 'Q4_0'?" "error names file:line"
expect 1 "missing sweep file" "$qlab" sweep "$tmp/none.sweep" --list
# A malformed file fails before anything runs: no database is created.
expect 1 "malformed sweep file is not run" "$qlab" sweep "$bad_file" --db "$tmp/never.db"
[ -e "$tmp/never.db" ] && bad "a malformed sweep created a database" || ok "no database for a malformed sweep"

db="$tmp/results.db"
"$make_fixture_db" "$db" || { bad "make_fixture_db"; exit 1; }
expect 0 "query default table" "$qlab" query --db "$db" "SELECT weight_type, bpw FROM results ORDER BY bpw"
has "$tmp/out" "(3 rows)" "table footer"
expect 0 "query --csv" "$qlab" query --db "$db" --csv "SELECT weight_type, zlib_bytes FROM results ORDER BY bpw"
printf 'weight_type,zlib_bytes\nQ4_0,\nQ8_0,1000\nF16,\n' >"$tmp/want"
if cmp -s "$tmp/out" "$tmp/want"; then ok "csv output with NULL as empty"; else bad "csv output"; cat "$tmp/out"; fi
expect 0 "query --json" "$qlab" query --db "$db" --json "SELECT weight_type, zlib_bytes FROM results ORDER BY bpw LIMIT 1"
has "$tmp/out" '{"weight_type": "Q4_0", "zlib_bytes": null}' "json output with null"
expect 0 "query --md" "$qlab" query --db "$db" --md "SELECT weight_type FROM results ORDER BY bpw LIMIT 1"
has "$tmp/out" "| Q4_0        |" "markdown output"

before=$(cksum <"$db")
expect 1 "query refuses INSERT" "$qlab" query --db "$db" "INSERT INTO sweep_runs VALUES ('x', 1)"
has "$tmp/err" "only read-only statements" "INSERT refusal message"
expect 1 "query refuses DELETE" "$qlab" query --db "$db" "DELETE FROM metrics"
expect 0 "metrics intact" "$qlab" query --db "$db" --csv "SELECT count(*) AS n FROM metrics"
has "$tmp/out" "3" "metrics count unchanged"
[ "$before" = "$(cksum <"$db")" ] && ok "database file unchanged" || bad "database file changed"

expect 0 "query --list" "$qlab" query --list
has "$tmp/out" "tensors <config-hash-prefix>" "named query list"
for q in formats failed runs sweeps configs; do
    expect 0 "named query $q" "$qlab" query --db "$db" "$q"
done
expect 0 "named query tensors" "$qlab" query --db "$db" tensors 88005179
has "$tmp/out" "blk.0.ffn_down.weight" "tensors output"
expect 2 "tensors needs a prefix" "$qlab" query --db "$db" tensors
expect 2 "query without SQL" "$qlab" query --db "$db"
expect 2 "query unknown option" "$qlab" query --db "$db" --xml "SELECT 1"
expect 1 "query on a missing database" "$qlab" query --db "$tmp/nope.db" "SELECT 1"
has "$tmp/err" "no results database here" "missing database message"
[ ! -e "$tmp/nope.db" ] && ok "query did not create a database" || bad "query created $tmp/nope.db"
exit $fail
