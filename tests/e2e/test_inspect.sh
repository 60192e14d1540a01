#!/bin/sh
# qlab inspect on the real stories260K.gguf: the header line, the totals, the byte
# accounting, array cutting, and the usage errors.
set -u
qlab="$1"
model="$QLAB_SHARED/models/stories260K.gguf"
[ -f "$model" ] || { echo "SKIP: $model not found"; exit 77; }
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT
fail=0
has() { # description fixed-string
    if grep -qF -- "$2" "$out"; then echo "ok: $1"; else echo "FAIL: $1: no line with '$2'"; fail=1; fi
}
"$qlab" inspect "$model" >"$out" || { echo "FAIL: inspect exited $?"; exit 1; }
has "header line" "stories260K.gguf: GGUF v3, 19 keys, 48 tensors, 1185376 bytes"
has "alignment" "alignment    32 (default; no general.alignment key)"
has "data offset" "data offset  14176"
has "all F32" "tensor types: F32 x 48 (all F32)"
has "totals" "totals: 48 tensors, 292800 parameters, 1171200 tensor bytes"
has "byte check" "check: header 14176 + tensor data 1171200 + alignment padding 0 = 1185376 = file size: OK"
has "a tensor row" "blk.0.ffn_down.weight     F32       172 x 64"
has "string array cut at 8" '["<unk>", "<s>", "</s>", "<0x00>", "<0x01>", "<0x02>", "<0x03>", "<0x04>", ... (504 more)]'
has "float value" "llama.attention.layer_norm_rms_epsilon  f32            9.99999975e-06"
[ "$(grep -c '^ *[0-9][0-9]*  blk\.' "$out")" -eq 45 ] && echo "ok: 45 block tensors" ||
    { echo "FAIL: expected 45 blk.* tensor rows"; fail=1; }

"$qlab" inspect --max-array 2 "$model" >"$out"
has "--max-array 2" '["<unk>", "<s>", ... (510 more)]'
"$qlab" inspect --max-array all "$model" >"$out"
has "--max-array all" ', "~", "'
grep -qF 'more)' "$out" && { echo "FAIL: --max-array all still cuts"; fail=1; }

expect() { # code description args...
    want=$1; shift; what=$1; shift
    "$qlab" inspect "$@" >/dev/null 2>&1; got=$?
    if [ "$got" -ne "$want" ]; then echo "FAIL: $what: exit $got, expected $want"; fail=1;
    else echo "ok: $what"; fi
}
expect 2 "no file" 
expect 2 "bad --max-array" --max-array x "$model"
expect 2 "negative --max-array" --max-array -1 "$model"
expect 2 "two files" "$model" "$model"
expect 2 "unknown option" --frobnicate "$model"
expect 1 "missing file" /nonexistent.gguf
expect 0 "--help" --help
exit $fail
