#!/bin/sh
# qlab compare from the command line on the report fixture database: the text table
# with its intervals, CSV and JSON with the same numbers, a config compared with
# itself, labels and hash prefixes, and exit codes (1 runtime, 2 usage).
set -u
qlab="$1"
make_fixture_db="$2"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"

db="$tmp/results.db"
"$make_fixture_db" --report "$db" || { bad "make_fixture_db --report"; exit 1; }

expect 0 "compare two labels" "$qlab" compare --db "$db" --sweep fixture-formats "Q4_0 head=same act=f32" "Q8_0 act=f32"
has "$tmp/out" "A: 1a4bd3dac2a8 (Q4_0 head=same act=f32)" "A resolved"
has "$tmp/out" "B: 55cc442f7055 (Q8_0 act=f32)" "B resolved"
has "$tmp/out" "fixture-a · fixture-text · ctx 64 · 8 chunks · 248 scored tokens" "the tokens compared"
has "$tmp/out" "10,000 resamples, 95% intervals, seed 20240601" "bootstrap settings"
matches "$tmp/out" '^| mean KLD  | .* | \[+[0-9.e+-]*, +[0-9.e+-]*\] | .* | yes ' "KLD interval above zero"
has "$tmp/out" "| ln PPL " "ln PPL row"
has "$tmp/out" "| top-1 % " "top-1 row"

expect 0 "compare --csv" "$qlab" compare --db "$db" --sweep fixture-formats 1a4bd3da 55cc442f --csv
has "$tmp/out" "model,dataset,ctx,chunks,tokens,config_a,config_b,statistic,a,b,diff,lo,hi,se,p,level,resamples,seed" "CSV header"
[ "$(grep -c '^fixture-a,fixture-text,64,8,248,' "$tmp/out")" -eq 3 ] && ok "three CSV rows" || bad "not three CSV rows"
cp "$tmp/out" "$tmp/csv"

expect 0 "compare --json" "$qlab" compare --db "$db" --sweep fixture-formats 1a4bd3da 55cc442f --json
has "$tmp/out" '"config_a": "1a4bd3dac2a8484b50560d9a471ae72d92140ca8d133af2650bdd082e1ff9b0c"' "JSON config_a"
has "$tmp/out" '"excludes_zero": true' "JSON says the KLD interval excludes zero"
# The JSON's KLD difference is the CSV's, to the last digit.
csv_diff=$(awk -F, '$8 == "kld_mean" { print $11 }' "$tmp/csv")
has "$tmp/out" "\"diff\": $csv_diff" "JSON and CSV give the same KLD difference"

# A config with itself: zero difference, an interval holding zero, p = 1.
expect 0 "compare a config with itself" "$qlab" compare --db "$db" "F16 act=f32" "F16 act=f32"
has "$tmp/out" "| +0.000e+00 | [+0.000e+00, +0.000e+00] | 1.0000 | no " "itself: [0, 0], p 1"

# Two places (fixture-a and fixture-b): one block each.
expect 0 "compare across sweeps" "$qlab" compare --db "$db" "Q4_0 head=same act=f32" "Q8_0 act=f32"
[ "$(grep -c 'scored tokens$' "$tmp/out")" -eq 2 ] && ok "a block per model" || bad "not two blocks"

# Errors.
expect 1 "ambiguous label" "$qlab" compare --db "$db" Q8_0 F16
has "$tmp/err" "configs match 'Q8_0'" "ambiguity named"
expect 1 "unknown config" "$qlab" compare --db "$db" Q5_1 F16
has "$tmp/err" "A: " "which argument"
expect 1 "no such database" "$qlab" compare --db "$tmp/nope.db" Q8_0 F16
expect 2 "one config only" "$qlab" compare --db "$db" Q8_0
expect 2 "bad --resamples" "$qlab" compare --db "$db" --resamples 5 Q8_0 F16
exit "$fail"
