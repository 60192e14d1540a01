#!/bin/sh
# Every tensor of a model is used (issue 23, item 2): a tensor the forward pass does not
# read is refused by every command that evaluates the model, naming it, and copied by
# qlab quantize as llama-quantize copies it; llama's optional biases are read.
# usage: test_model_tensors.sh QLAB EDIT_GGUF
set -u
qlab="$1"
edit="$2"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
model="$QLAB_SHARED/models/stories260K.gguf"
need_file "$model"

"$edit" "$model" "$tmp/extra.gguf" "add:blk.1.attn_q_norm.weight=8" || bad "edit_gguf (add)"
expect 1 "eval of a model with an unused tensor" \
    "$qlab" eval "$tmp/extra.gguf" --text ts-eval --ctx 64 --chunks 1 --quiet
has "$tmp/err" "tensor 'blk.1.attn_q_norm.weight' (8, F32) is not part of a llama model" \
    "the error names the tensor"
cat >"$tmp/extra.sweep" <<END
[sweep]
name   = extra-tensor
model  = $tmp/extra.gguf
text   = ts-eval
ctx    = 64
chunks = 1

[grid]
weight_type = Q8_0
END
expect 1 "sweep of a model with an unused tensor" \
    "$qlab" sweep "$tmp/extra.sweep" --db "$tmp/db" --cache-dir "$tmp/cache" --quiet
has "$tmp/err" "blk.1.attn_q_norm.weight" "the sweep names the tensor"
expect 0 "quantize copies it" "$qlab" quantize --quiet "$tmp/extra.gguf" "$tmp/q.gguf" Q8_0
expect 0 "inspect the result" "$qlab" inspect "$tmp/q.gguf"
has "$tmp/out" "blk.1.attn_q_norm.weight" "the quantized file keeps the tensor"
exit "$fail"
