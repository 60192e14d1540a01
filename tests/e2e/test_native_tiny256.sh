#!/bin/sh
# act_mode native with Q6_K weights on tiny256 (256-wide rows, so every tensor is Q6_K):
# the products run through the integer kernel that computes ggml-cpu's AVX2 Q6_K dot
# product bit for bit (core/formats/qgemm.h) on both of qlab's paths: a GGUF file
# evaluated as it is (`qlab eval`, the file's bytes) and qlab's own quantization in a
# sweep (the config's bytes). Both paths must then give the same PPL to the last
# printed digit; a path that lost the weight's bytes would fall back to the fake-quant
# product, whose f32 rounding differs in the last bits, and move the PPL by about 1e-4
# through the q8_K levels of the next products. q8_K activations with Q6_K weights are
# the same product as native.
# Usage: test_native_tiny256.sh QLAB
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
model="$QLAB_SHARED/models/tiny256.gguf"
need_file "$model"
expect 0 "quantize tiny256 to Q6_K" "$qlab" quantize "$model" "$tmp/q6k.gguf" Q6_K
cat >"$tmp/q6k.sweep" <<SWEEP
[sweep]
name   = native-q6k
model  = $model
text   = tinystories-valid
ctx    = 128
chunks = 20

[grid]
weight_type = Q6_K
act_mode    = native
SWEEP
expect 0 "sweep Q6_K native" "$qlab" sweep "$tmp/q6k.sweep" --db "$tmp/q6k.db" --quiet \
    --no-summary --threads 1
sweep_ppl=$(rows "$tmp/q6k.db" "SELECT printf('%.6f', ppl) FROM results")
for mode in native q8_K; do
    expect 0 "eval Q6_K file, act $mode" "$qlab" eval "$tmp/q6k.gguf" --text tinystories-valid \
        --ctx 128 --chunks 20 --kv-type f16 --act-mode "$mode" --threads 1 --quiet
    got=$(awk '/^PPL = /{print $3}' "$tmp/out")
    if [ -n "$got" ] && [ "$got" = "$sweep_ppl" ]; then
        ok "eval act $mode ($got) = sweep native ($sweep_ppl)"
    else
        bad "eval act $mode gives '$got', the sweep's native config '$sweep_ppl'"
    fi
done
exit "$fail"
