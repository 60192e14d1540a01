#!/bin/sh
# qlab eval QUANT --base stories260K on a GGUF file llama-quantize wrote, with what
# llama.cpp computes for it (native activations, f16 K/V cache), against
# llama-perplexity --kl-divergence's figures on the same file and text (ctx 128, all
# chunks; ../shared/golden/llamacpp-reference/README.md section 5.1): the statistics
# block has llama-perplexity's labels in its order, and PPL(Q), PPL(base) and the mean
# KLD agree.
# Usage: test_eval_base.sh QLAB FILE_TAG PPL_Q MEAN_KLD
set -u
qlab="$1"; tag="$2"; want_ppl="$3"; want_kld="$4"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
# PPL(Q): the issue's bound, 0.05%. Measured: Q4_0 -0.015%, Q4_K_M -0.009% (summation
# order and the x86 activation quantizer's ties, as for plain qlab eval).
TOL_PPL=0.0005
# PPL(base) against the F32 run's 6.342216 (llama.cpp's own "Mean PPL(base)" comes from
# its 16-bit reference codes and is biased, 5.92): qlab's base is the exact reference
# (f32 K/V), 0.0007% from llama.cpp's f16-K/V run; 0.01% as in test_eval_ppl.sh.
WANT_BASE=6.342216
TOL_BASE=0.0001
# Mean KLD: the issue's bound, 2%. The two are not the same quantity: llama.cpp's
# reference is the F32 model with its f16 K/V cache, stored as 16-bit codes of each
# log-probability (steps of about 2.4e-4 nats, floored 16 nats below the maximum), and
# its KLD is against the decoded codes; qlab's is against the exact f32 reference. On
# mean KLDs of 0.025 and 0.1 that difference is far below 2% (measured: Q4_0 -0.05%,
# Q4_K_M -0.09%); a wrong reference or a wrong quantized pass moves it by more.
TOL_KLD=0.02
model="$QLAB_SHARED/golden/llamacpp-reference/quantized/stories260K-$tag.gguf"
need_file "$model"
# One thread: meson runs tests side by side (results do not depend on it).
expect 0 "$tag: eval --base" "$qlab" eval "$model" --base stories260K --text ts-eval \
    --ctx 128 --kv-type f16 --act-mode native --threads 1 --quiet
cp "$tmp/out" "$tmp/block"
cat "$tmp/block"

# The labels, in llama-perplexity's order (b4747 prints its 99% KLD line twice).
labels=$(sed -n 's/^\([^:]*\):.*/\1/p' "$tmp/block" | sed 's/ *$//' | tr '\n' '|')
want_labels='Mean PPL(Q)|Mean PPL(base)|Cor(ln(PPL(Q)), ln(PPL(base)))|Mean ln(PPL(Q)/PPL(base))|Mean PPL(Q)/PPL(base)|Mean PPL(Q)-PPL(base)|Mean    KLD|Maximum KLD|99.9%   KLD|99.0%   KLD|99.0%   KLD|Median  KLD|10.0%   KLD| 5.0%   KLD| 1.0%   KLD|Minimum KLD|Mean    Δp|Maximum Δp|99.9%   Δp|99.0%   Δp|95.0%   Δp|90.0%   Δp|75.0%   Δp|Median  Δp|25.0%   Δp|10.0%   Δp| 5.0%   Δp| 1.0%   Δp| 0.1%   Δp|Minimum Δp|RMS Δp|Same top p|'
[ "$labels" = "$want_labels" ] && ok "$tag: llama-perplexity's labels in its order" ||
    bad "$tag: labels differ: $labels"
for h in "====== Perplexity statistics ======" "====== KL divergence statistics ======" \
    "====== Token probability statistics ======"; do
    has "$tmp/block" "$h" "$tag: heading $h"
done
# Every mean has its ±.
for l in "Mean PPL(Q)" "Mean PPL(base)" "Mean ln(PPL(Q)/PPL(base))" "Mean    KLD" "Mean    Δp" \
    "RMS Δp" "Same top p"; do
    grep -F -- "$l" "$tmp/block" | grep -qF "±" && ok "$tag: $l has its ±" ||
        bad "$tag: $l without ±"
done

# near LABEL GOT WANT TOL: |GOT - WANT| / WANT <= TOL.
near() {
    line=$(awk -v g="$2" -v w="$3" -v t="$4" 'BEGIN {
        if (g == "") exit 1
        d = (g - w) / w; if (d < 0) d = -d;
        printf "qlab %s, llama.cpp %s, relative difference %.2e (tolerance %g)", g, w, d, t;
        exit !(d <= t) }') && ok "$tag: $1: $line" || bad "$tag: $1 outside tolerance: $line"
}
value() { grep -F -- "$1" "$tmp/block" | head -n 1 | sed 's/^[^:]*: *\([-0-9.]*\).*/\1/'; }
near "PPL(Q)" "$(value 'Mean PPL(Q) ')" "$want_ppl" "$TOL_PPL"
near "PPL(base)" "$(value 'Mean PPL(base)')" "$WANT_BASE" "$TOL_BASE"
near "mean KLD" "$(value 'Mean    KLD')" "$want_kld" "$TOL_KLD"
exit "$fail"
