#!/bin/sh
# The sweep's budget axis: the exact-fit solver chooses a type per tensor, the
# quantized model is evaluated like any other config, its size stays within the
# byte budget, and its per-tensor types are stored.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"

cat >"$tmp/budget.sweep" <<'END'
[sweep]
name    = budget-test
model   = stories260K
text    = ts-eval
ctx     = 64
chunks  = 4
threads = 1

[grid]
weight_type = F16
budget      = 300000 bpw:7.5
END
"$qlab" sweep "$tmp/budget.sweep" --db "$tmp/b.db" --cache-dir "$tmp/cache" >"$tmp/out" 2>"$tmp/err" \
    || { bad "budget sweep failed"; cat "$tmp/err"; }
[ "$(rows "$tmp/b.db" "SELECT count(*) FROM results")" = 2 ] && ok "both budgets evaluated" \
    || { bad "budget configs not done"; "$qlab" query --db "$tmp/b.db" failed; }
bytes=$(rows "$tmp/b.db" "SELECT bytes FROM results WHERE budget = '300000'")
[ -n "$bytes" ] && [ "$bytes" -le 300000 ] && [ "$bytes" -ge 290000 ] \
    && ok "300000-byte budget used closely without exceeding it ($bytes bytes)" \
    || bad "budget bytes: '$bytes'"
types=$(rows "$tmp/b.db" "SELECT count(DISTINCT used_type) FROM tensor_errors t JOIN runs r ON r.id = t.run_id JOIN configs c ON c.id = r.config_id WHERE c.budget = '300000'")
[ "$types" -ge 2 ] && ok "the fitted model mixes $types types" || bad "fitted types: $types"
fallbacks=$(rows "$tmp/b.db" "SELECT count(*) FROM tensor_errors t JOIN runs r ON r.id = t.run_id JOIN configs c ON c.id = r.config_id WHERE c.budget = '300000' AND fallback = 1")
[ "$fallbacks" = 0 ] && ok "solver choices are recorded as requested types" || bad "fallbacks: $fallbacks"
ppl=$(rows "$tmp/b.db" "SELECT ppl IS NOT NULL AND kld_mean > 0 FROM results WHERE budget = 'bpw:7.5'")
[ "$ppl" = 1 ] && ok "bpw:7.5 has PPL and KLD" || bad "bpw:7.5 metrics"

# weight_type caps the ladder: with Q5_0 no tensor gets a type above 5.5 bits per
# weight (F16 only where no block type fits, and norms stay F32), even under a
# budget that could pay for Q8_0.
cat >"$tmp/cap.sweep" <<'END'
[sweep]
name    = budget-cap
model   = stories260K
text    = ts-eval
ctx     = 64
chunks  = 4
threads = 1

[grid]
weight_type = Q5_0
budget      = bpw:9
END
"$qlab" sweep "$tmp/cap.sweep" --db "$tmp/c.db" --cache-dir "$tmp/cache" >"$tmp/out" 2>"$tmp/err" \
    || { bad "capped budget sweep failed"; cat "$tmp/err"; }
above=$(rows "$tmp/c.db" "SELECT group_concat(DISTINCT used_type) FROM tensor_errors
    WHERE used_type NOT IN ('Q4_0', 'Q4_1', 'Q5_0', 'IQ4_NL', 'F16', 'F32')")
used=$(rows "$tmp/c.db" "SELECT group_concat(DISTINCT used_type) FROM tensor_errors")
[ -z "$above" ] && [ -n "$used" ] && ok "weight_type Q5_0 caps the fitted types ($used)" \
    || bad "types above Q5_0 under its cap: '$above'"
exit $fail
