#!/bin/sh
# qlab eval on stories260K with the llama.cpp reference text (manifest name ts-eval), all
# chunks, against llama-perplexity's figure (../shared/golden/llamacpp-reference/README.md).
# Usage: test_eval_ppl.sh QLAB CTX KV_TYPE EXPECTED_PPL
set -u
qlab="$1"; ctx="$2"; kv="$3"; want="$4"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
# Measured: 6.342213 / 6.905922 with the f16 K/V cache llama.cpp used (within 0.0002%),
# 6.342169 / 6.906008 with qlab's f32 reference (0.0007% / 0.0011% off: the f16 cache
# itself moves PPL by that much). The bound, 0.01% (the issue asked for 0.1%), is nine
# times the worst case: room for another machine's BLAS summation order, while a real
# error in the forward pass (a wrong rounding, a skipped position) moves PPL far more.
TOL_REL=0.0001
# One thread: meson runs tests side by side, and busy-waiting thread pools on an
# oversubscribed machine slow down by an order of magnitude (results do not change).
ppl_near "ctx $ctx, K/V $kv" "$want" "$TOL_REL" \
    "$qlab" eval stories260K --text ts-eval --ctx "$ctx" --kv-type "$kv" --threads 1 --quiet
exit "$fail"
