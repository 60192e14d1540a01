#!/bin/sh
# The notebooks-c programs on the report fixture database: their tables (front
# membership, ΔKLD equal to the difference of the stored run means, intervals
# around it, reproducible with a fixed seed), their plots (or the message when
# gnuplot is missing), and clear errors on databases without the needed runs.
set -u
qlab="$1"
make_fixture_db="$2"
pareto="$3"
act_cost="$4"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"

db="$tmp/results.db"
"$make_fixture_db" --report "$db" || { bad "make_fixture_db --report"; exit 1; }

# ---------------------------------------------------------------- pareto
expect 0 "pareto" "$pareto" --db "$db" -o "$tmp/nb"
md="$tmp/nb/pareto.md"
has "$md" "7 configs: 4 on the KLD front, 4 on the PPL front." "front sizes of fixture-a"
# The quantized-activation runs are beaten by f32 runs of at most their size, by more
# than the noise (the fixture's chunks all agree), with the excess and its interval.
has "$md" "| Q4_0          | q8_0 |  4.678 | 8.067e-02 | 10.9320 | no        | no        | Q4_0 (f32): +1.39e-03 [+1.22e-03, +1.56e-03] |" "Q4_0 q8_0 beaten by Q4_0 f32"
has "$md" "| F16           | q8_0 | 16.103 | 1.418e-03 | 10.5074 | no        | no        | Q8_0 (f32): +1.02e-03 [+8.53e-04, +1.18e-03] |" "F16 q8_0 beaten by the cheaper Q8_0 f32"
has "$md" "| Q4_0 head=F32 | f32  |  6.955 | 7.443e-02 | 10.8981 | yes       | yes       | —                                            |" "head=F32 on the front"
# Without chunk sums: plain dominance, said so.
"$make_fixture_db" --report-nochunks "$tmp/nochunks.db" || bad "make_fixture_db --report-nochunks"
expect 0 "pareto without chunk sums" "$pareto" --db "$tmp/nochunks.db" -o "$tmp/nbn" --sweep fixture-formats
has "$tmp/nbn/pareto.md" "no per-chunk sums: plain dominance" "says it falls back to plain dominance"
has "$tmp/nbn/pareto.md" "| Q4_0          | q8_0 |  4.678 | 8.067e-02 | 10.9320 | no        | no        | Q4_0 (f32)" "plain: Q4_0 q8_0 beaten by Q4_0 f32"
has "$md" "## fixture-b · fixture-text · ctx 64 · 8 chunks" "second group"
[ -s "$tmp/nb/pareto-1.dat" ] && [ -s "$tmp/nb/pareto-2.gp" ] && ok "pareto data and scripts" || bad "pareto data/scripts missing"
expect 0 "pareto --sweep" "$pareto" --db "$db" -o "$tmp/nb1" --sweep fixture-formats
[ -s "$tmp/nb1/pareto.dat" ] && ok "one group: no suffix" || bad "one group: pareto.dat missing"

# ---------------------------------------------------------------- act_cost
expect 0 "act_cost" "$act_cost" --db "$db" -o "$tmp/nb"
md="$tmp/nb/act_cost.md"
has "$md" "10000 resamples, seed 20240601" "bootstrap parameters stated"
# ΔKLD is the difference of the stored mean KLDs (paired over the same chunks).
for w in F16 Q8_0 Q4_0; do
    "$qlab" query --db "$db" --csv "SELECT printf('%+.3e', q.kld_mean - f.kld_mean) FROM results q JOIN results f ON f.weight_type = q.weight_type AND f.model = q.model AND f.head_type = q.head_type WHERE q.weight_type = '$w' AND q.act_mode = 'q8_0' AND f.act_mode = 'f32' AND q.model = 'fixture-a'" >"$tmp/q" 2>&1
    want=$(tail -n 1 "$tmp/q")
    line=$(grep "^| $w " "$md")
    case "$line" in
    *"| $want | ["*) ok "$w: ΔKLD $want = difference of the run means" ;;
    *) bad "$w: ΔKLD $want not in: $line" ;;
    esac
done
# The interval holds the estimate: [lo, hi] around +1.4e-03 for every weight type.
awk -F'|' '/^\| (F16|Q8_0|Q4_0) /{ n++; gsub(/[][ ]/, "", $7); split($7, ci, ","); d = $6 + 0;
    if (!(ci[1] + 0 < d && d < ci[2] + 0)) { print "bad interval: " $0; bad = 1 } }
    END { exit bad || n != 3 }' "$md" &&
    ok "intervals contain the estimates" || bad "an interval misses its estimate"
expect 0 "act_cost again" "$act_cost" --db "$db" -o "$tmp/nb2"
cmp -s "$md" "$tmp/nb2/act_cost.md" && ok "same seed, same table" || bad "act_cost not reproducible"
expect 0 "act_cost --seed 7" "$act_cost" --db "$db" -o "$tmp/nb3" --seed 7 --resamples 500
cmp -s "$md" "$tmp/nb3/act_cost.md" && bad "another seed gives the same table" || ok "another seed, another table"

if command -v gnuplot >/dev/null 2>&1; then
    is_png "$tmp/nb/act_cost.png" && ok "act_cost.png" || bad "act_cost.png is not a real PNG"
    is_png "$tmp/nb/pareto-1.png" && ok "pareto-1.png" || bad "pareto-1.png is not a real PNG"
    grep -q "<svg" "$tmp/nb/pareto-2.svg" && ok "pareto-2.svg" || bad "pareto-2.svg"
else
    echo "note: gnuplot not installed; image checks skipped"
fi
mkdir "$tmp/emptybin"
PATH="$tmp/emptybin" expect 0 "act_cost without gnuplot" "$act_cost" --db "$db" -o "$tmp/nognu"
has "$tmp/err" "plot skipped: gnuplot not found on PATH" "act_cost says why"
[ -s "$tmp/nognu/act_cost.md" ] && ok "table without gnuplot" || bad "no table without gnuplot"

# ---------------------------------------------------------------- errors
expect 1 "act_cost on a sweep without f32/q8_0 pairs" "$act_cost" --db "$db" -o "$tmp/e" --sweep fixture-mixed
has "$tmp/err" "no pair of finished runs that differ only in act_mode" "names what is missing"
expect 1 "a sweep without finished runs" "$pareto" --db "$db" -o "$tmp/e" --sweep fixture-failed
has "$tmp/err" "no finished runs in sweep 'fixture-failed'" "pareto: no finished runs"
"$make_fixture_db" --report-nochunks "$tmp/nochunks.db" || bad "make_fixture_db --report-nochunks"
expect 1 "act_cost without per-chunk metrics" "$act_cost" --db "$tmp/nochunks.db" -o "$tmp/e"
has "$tmp/err" "3 pairs of runs found, but none has per-chunk metrics" "act_cost: no chunk metrics"
expect 1 "missing database" "$pareto" --db "$tmp/none.db" -o "$tmp/e"
expect 2 "--resamples too small" "$act_cost" --db "$db" --resamples 5
expect 2 "unknown option" "$pareto" --frobnicate
expect 2 "-o without a value" "$act_cost" -o
expect 0 "--help" "$act_cost" --help
has "$tmp/out" "usage: act_cost" "help"

exit $fail
