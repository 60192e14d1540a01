#!/bin/sh
# Labels that say what was measured, on stories260K (its rows of 64 and 172 values): a
# sweep of weight_type IQ2_XXS TQ2_0 Q4_0 stores that no tensor got IQ2_XXS or TQ2_0
# (they fell back to IQ4_NL and Q4_0, 256-value blocks not dividing 64), and that Q4_0
# applied to all but the 172-wide feed-forward down projections (F16). The results
# view, report.md and report.html say so; TQ2_0 measured exactly Q4_0, and qlab compare
# of the two gives a zero difference with an interval holding zero.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"

cat >"$tmp/ap.sweep" <<'END'
[sweep]
name    = applicability
model   = stories260K
text    = ts-eval
ctx     = 64
chunks  = 8
threads = 1
imatrix = calib:ts-calib,chunks=8

[grid]
weight_type = IQ2_XXS TQ2_0 Q4_0
END
expect 0 "sweep" "$qlab" sweep "$tmp/ap.sweep" --db "$tmp/a.db" --cache-dir "$tmp/cache"
has "$tmp/out" "3 configs (3 run, 0 already done, 0 failed)" "three configs evaluated"

# The results view.
rows "$tmp/a.db" "SELECT weight_type, applies, types_used, applied_body FROM results ORDER BY weight_type" >"$tmp/view"
has "$tmp/view" "IQ2_XXS,n/a,\"IQ4_NL 75.7%, F16 24.3%; head IQ4_NL; embd IQ4_NL\",0" "view: IQ2_XXS not applicable, types used"
has "$tmp/view" "TQ2_0,n/a,\"Q4_0 75.7%, F16 24.3%; head Q4_0; embd Q4_0\",0" "view: TQ2_0 not applicable, types used"
matches "$tmp/view" '^Q4_0,partial,"Q4_0 75.7%, F16 24.3%",0.75' "view: Q4_0 partial"
rows "$tmp/a.db" "SELECT fallback_note FROM results WHERE weight_type = 'IQ2_XXS'" >"$tmp/note"
has "$tmp/note" "not a multiple of 256 (IQ2_XXS)" "view: why IQ2_XXS fell back"

# report.md and report.html.
expect 0 "report" "$qlab" report --db "$tmp/a.db" -o "$tmp/r" --no-plots --resamples 500
md="$tmp/r/applicability/report.md"
has "$md" "- IQ2_XXS: measured IQ4_NL 75.7%, F16 24.3%; head IQ4_NL; embd IQ4_NL (row length 64 is not a multiple of 256 (IQ2_XXS): IQ4_NL)" "report.md: IQ2_XXS listed as not applicable"
has "$md" "- TQ2_0: measured Q4_0 75.7%, F16 24.3%; head Q4_0; embd Q4_0" "report.md: TQ2_0 listed as not applicable"
matches "$md" '^| Q4_0    | Q4_0 75.7%, F16 24.3% |' "report.md: Q4_0 in the table with its types"
if sed '/^<!-- details -->$/q' "$md" | grep -q '^| IQ2_XXS\|^| TQ2_0'; then bad "report.md: a not-applicable config in the table"; else ok "report.md: not-applicable configs out of the table"; fi
html="$tmp/r/applicability/report.html"
has "$html" "<li>IQ2_XXS: measured IQ4_NL 75.7%, F16 24.3%; head IQ4_NL; embd IQ4_NL" "report.html: IQ2_XXS not applicable"
has "$html" "<li>TQ2_0: measured Q4_0 75.7%, F16 24.3%; head Q4_0; embd Q4_0" "report.html: TQ2_0 not applicable"

# TQ2_0 measured Q4_0: the same numbers, nothing to tell them apart.
expect 0 "compare TQ2_0 with Q4_0" "$qlab" compare --db "$tmp/a.db" TQ2_0 Q4_0 --resamples 500
has "$tmp/out" "| +0.000e+00 | [+0.000e+00, +0.000e+00] | 1.0000 | no " "TQ2_0 and Q4_0: zero difference, interval holding zero"
exit "$fail"
