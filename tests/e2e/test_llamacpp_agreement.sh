#!/bin/sh
# The sweep's numbers against llama.cpp's (../shared/golden/llamacpp-reference/README.md,
# section 5.1: llama-perplexity --kl-divergence on stories260K, ts_eval.txt, ctx 128,
# all 1594 chunks, CPU backend). qlab quantizes stories260K itself exactly as
# llama-quantize did (Q8_0; Q4_0 with the head in Q8_0, ffn_down in F16), then:
#   - act_mode f32 (weights only): PPL within 0.5% of llama.cpp's; for Q4_0 also the
#     mean KLD within 10% (for Q8_0 the weight error is so small that llama.cpp's
#     quantized activations and f16 K/V cache make up half of its KLD: only native
#     reproduces it, checked below);
#   - act_mode native (llama.cpp's q8_0 activations and f16 K/V): PPL within 0.1%,
#     mean KLD within 5%, top-1 agreement within half a point.
# llama.cpp stores its reference as 16-bit log-probs truncated 16 nats below each
# maximum; that changes its KLD by less than 1e-5 (its F32-vs-F32 mean KLD is 0.000000),
# far below these tolerances.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"

cat >"$tmp/agreement.sweep" <<'END'
[sweep]
name    = llamacpp-agreement
model   = stories260K
text    = ts-eval
ctx     = 128
threads = 1
[grid]
weight_type = Q8_0 Q4_0
act_mode    = f32 native
head_type   = Q8_0
END
"$qlab" sweep "$tmp/agreement.sweep" --db "$tmp/a.db" --cache-dir "$tmp/cache" --quiet \
    >"$tmp/out" 2>"$tmp/err" || { echo "FAIL: sweep"; cat "$tmp/err"; exit 1; }
cat "$tmp/out"
"$qlab" query --db "$tmp/a.db" --csv \
    "SELECT weight_type, act_mode, ppl, kld_mean, top1_agree FROM results ORDER BY weight_type, act_mode" \
    | tail -n +2 >"$tmp/values"

# llama.cpp b4747's figures (README 5.1): PPL(Q), mean KLD, same top p (%).
awk -F, '
function check(what, got, want, rel) {
    d = got / want - 1; if (d < 0) d = -d
    ok = d <= rel
    printf "%s: %s %.6g vs llama.cpp %.6g (%.3f%%, limit %.1f%%)\n", ok ? "ok" : "FAIL", what, got, want, 100 * d, 100 * rel
    if (!ok) bad = 1
}
function check_abs(what, got, want, lim) {
    d = got - want; if (d < 0) d = -d
    ok = d <= lim
    printf "%s: %s %.3f vs llama.cpp %.3f (limit +-%.1f)\n", ok ? "ok" : "FAIL", what, got, want, lim
    if (!ok) bad = 1
}
{
    ppl["Q8_0"] = 6.355973; kld["Q8_0"] = 0.000951; top["Q8_0"] = 98.232
    ppl["Q4_0"] = 6.804494; kld["Q4_0"] = 0.103007; top["Q4_0"] = 83.877
    t = $1; m = $2; n++
    printf "qlab %s act %s: PPL %.5f, mean KLD %.6f, top-1 %.3f%%\n", t, m, $3, $4, 100 * $5
    if (m == "f32") {
        check(t " f32 PPL", $3, ppl[t], 0.005)
        if (t == "Q4_0") check(t " f32 mean KLD", $4, kld[t], 0.10)
    } else if (m == "native") {
        check(t " native PPL", $3, ppl[t], 0.001)
        check(t " native mean KLD", $4, kld[t], 0.05)
        check_abs(t " native top-1 %", 100 * $5, top[t], 0.5)
    }
}
END { if (n != 4) { print "FAIL: expected 4 results, got " n; bad = 1 } exit bad }
' "$tmp/values" || fail=1
exit $fail
