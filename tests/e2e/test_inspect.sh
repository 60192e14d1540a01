#!/bin/sh
# qlab inspect on the real stories260K.gguf: the header line, the totals, the byte
# accounting, array cutting, and the usage errors.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
model="$QLAB_SHARED/models/stories260K.gguf"
need_file "$model"
out="$tmp/out"
"$qlab" inspect "$model" >"$out" || { echo "FAIL: inspect exited $?"; exit 1; }
has "$out" "stories260K.gguf: GGUF v3, 19 keys, 48 tensors, 1185376 bytes" "header line"
has "$out" "alignment    32 (default; no general.alignment key)" "alignment"
has "$out" "data offset  14176" "data offset"
has "$out" "tensor types: F32 x 48 (all F32)" "all F32"
has "$out" "totals: 48 tensors, 292800 parameters, 1171200 tensor bytes" "totals"
has "$out" "check: header 14176 + tensor data 1171200 + alignment padding 0 = 1185376 = file size: OK" "byte check"
has "$out" "blk.0.ffn_down.weight     F32       172 x 64" "a tensor row"
has "$out" '["<unk>", "<s>", "</s>", "<0x00>", "<0x01>", "<0x02>", "<0x03>", "<0x04>", ... (504 more)]' "string array cut at 8"
has "$out" "llama.attention.layer_norm_rms_epsilon  f32            9.99999975e-06" "float value"
[ "$(grep -c '^ *[0-9][0-9]*  blk\.' "$out")" -eq 45 ] && echo "ok: 45 block tensors" ||
    { echo "FAIL: expected 45 blk.* tensor rows"; fail=1; }

"$qlab" inspect --max-array 2 "$model" >"$out"
has "$out" '["<unk>", "<s>", ... (510 more)]' "--max-array 2"
"$qlab" inspect --max-array all "$model" >"$out"
has "$out" ', "~", "' "--max-array all"
grep -qF 'more)' "$out" && { echo "FAIL: --max-array all still cuts"; fail=1; }

expect 2 "no file" "$qlab" inspect
expect 2 "bad --max-array" "$qlab" inspect --max-array x "$model"
expect 2 "negative --max-array" "$qlab" inspect --max-array -1 "$model"
expect 2 "two files" "$qlab" inspect "$model" "$model"
expect 2 "unknown option" "$qlab" inspect --frobnicate "$model"
expect 1 "missing file" "$qlab" inspect /nonexistent.gguf
expect 0 "--help" "$qlab" inspect --help
exit $fail
