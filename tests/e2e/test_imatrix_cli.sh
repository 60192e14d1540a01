#!/bin/sh
# qlab imatrix from the command line on stories260K: the summary, both output formats
# (by --format or by name), --process-output, the same file for 1 and 2 threads, the
# imatrix feeding qlab quantize, an imatrix of another model refused by quantize, and
# the usage and runtime errors.
set -u
qlab="$1"
model="$QLAB_SHARED/models/stories260K.gguf"
[ -f "$model" ] || { echo "SKIP: $model not found"; exit 77; }
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }

"$qlab" imatrix stories260K --text ts-calib --ctx 64 --chunks 4 -o "$t/a.gguf" --threads 2 \
    >"$t/out" 2>"$t/err" &&
    grep -q "wrote $t/a.gguf (gguf): 35 entries, 4 chunks of 64 tokens (256 tokens), PPL " "$t/out" &&
    grep -q "^imatrix: 256/256" "$t/err" &&
    ok "imatrix: GGUF written, summary and progress" || { bad "imatrix GGUF"; cat "$t/out" "$t/err"; }
"$qlab" inspect "$t/a.gguf" >"$t/insp" 2>&1 &&
    grep -q "imatrix.chunk_size .* 64" "$t/insp" && grep -q "imatrix.chunk_count .* 4" "$t/insp" &&
    grep -q 'imatrix.datasets .*"ts-calib"' "$t/insp" &&
    grep -q "blk.4.ffn_down.weight.in_sum2" "$t/insp" &&
    ok "GGUF imatrix keys and tensors" || { bad "GGUF keys"; cat "$t/insp"; }
"$qlab" imatrix stories260K --text ts-calib --ctx 64 --chunks 4 -o "$t/b.gguf" --threads 1 \
    --quiet >/dev/null 2>"$t/err" && [ ! -s "$t/err" ] && cmp -s "$t/a.gguf" "$t/b.gguf" &&
    ok "1 and 2 threads write the same bytes; --quiet is quiet" || bad "thread independence"
"$qlab" imatrix stories260K --text ts-calib --ctx 64 --chunks 4 -o "$t/c.dat" --quiet \
    >"$t/out" 2>&1 && grep -q "(dat): 35 entries" "$t/out" &&
    "$qlab" imatrix-convert "$t/c.dat" "$t/c.gguf" --chunk-size 64 >/dev/null &&
    cmp -s "$t/a.gguf" "$t/c.gguf" &&
    ok ".dat by name; converts to the same GGUF" || { bad ".dat output"; cat "$t/out"; }
"$qlab" imatrix stories260K --text ts-calib --ctx 64 --chunks 4 -o "$t/d.bin" --format dat \
    --quiet >/dev/null && "$qlab" imatrix-convert "$t/d.bin" "$t/d.gguf" --chunk-size 64 \
    >/dev/null && cmp -s "$t/a.gguf" "$t/d.gguf" && ok "--format dat" || bad "--format dat"
"$qlab" imatrix stories260K --text ts-calib --ctx 64 --chunks 4 -o "$t/e.gguf" --quiet \
    --process-output --kv-type f16 >"$t/out" 2>&1 && grep -q "36 entries" "$t/out" &&
    "$qlab" inspect "$t/e.gguf" | grep -q "output.weight.in_sum2" &&
    ok "--process-output adds output.weight" || { bad "--process-output"; cat "$t/out"; }

# The imatrix feeds qlab quantize.
"$qlab" quantize "$model" "$t/q.gguf" --type IQ4_NL --imatrix "$t/a.gguf" --stats --quiet \
    >"$t/out" 2>&1 &&
    grep -q "35 of 37 quantized tensors used it, 2 quantized without" "$t/out" &&
    grep -q "^imatrix-weighted error: .* over 226560 of 292800 weights" "$t/out" &&
    grep -q "token_embd.weight .*no imatrix entry: quantized without" "$t/out" &&
    ok "quantize --imatrix with qlab's imatrix" || { bad "quantize --imatrix"; cat "$t/out"; }
"$qlab" inspect "$t/q.gguf" | grep -q "quantize.imatrix.entries_count .* 35" &&
    ok "quantize.imatrix.* keys written" || bad "quantize.imatrix keys"
"$qlab" quantize "$model" "$t/q0.gguf" --type IQ4_NL --stats --stats-imatrix "$t/a.gguf" \
    --quiet >"$t/out0" 2>&1 && ! grep -q "quantized tensors used it" "$t/out0" &&
    ! "$qlab" inspect "$t/q0.gguf" | grep -q "quantize.imatrix" &&
    ok "--stats-imatrix weighs the stats only" || { bad "--stats-imatrix"; cat "$t/out0"; }
with=$(sed -n 's/^imatrix-weighted error: \([^ ]*\) .*/\1/p' "$t/out")
without=$(sed -n 's/^imatrix-weighted error: \([^ ]*\) .*/\1/p' "$t/out0")
awk -v a="$with" -v b="$without" 'BEGIN { exit !(a > 0 && a < b) }' &&
    ok "weighted error with the imatrix $with < without $without" ||
    bad "weighted error with $with, without $without"

# An imatrix of another model: the first entry of another length is named.
"$qlab" synth -o "$t/other.gguf" --dim 128 --ff 256 --layers 1 --heads 4 --kv-heads 2 \
    >/dev/null 2>&1 &&
    "$qlab" imatrix "$t/other.gguf" --text ts-calib --ctx 32 --chunks 2 -o "$t/other.imat.gguf" \
        --quiet >/dev/null 2>&1 || bad "imatrix of a synthetic model"
"$qlab" quantize "$model" "$t/x.gguf" --type Q4_0 --imatrix "$t/other.imat.gguf" --quiet \
    >/dev/null 2>"$t/err"
code=$?
[ "$code" -eq 1 ] && grep -q "^qlab: error: $t/other.imat.gguf: entry 'blk.0.* has 128 values, but tensor .* needs 64" "$t/err" &&
    [ ! -e "$t/x.gguf" ] && ok "imatrix of another model refused, naming the tensor" ||
    { bad "imatrix of another model: exit $code"; cat "$t/err"; }

expect() { # code description args...
    want=$1; shift; what=$1; shift
    "$qlab" imatrix "$@" >"$t/out" 2>"$t/err"; got=$?
    [ "$got" -eq "$want" ] && ok "$what (exit $got)" || { bad "$what: exit $got, expected $want"; cat "$t/err"; }
}
expect 2 "no model" --text ts-calib -o "$t/x.gguf"
expect 2 "no --text" stories260K -o "$t/x.gguf"
expect 2 "no -o" stories260K --text ts-calib
expect 2 "unknown option" stories260K --text ts-calib -o "$t/x.gguf" --bogus 1
expect 2 "bad --format" stories260K --text ts-calib -o "$t/x.gguf" --format json
expect 2 "--format contradicts the name" stories260K --text ts-calib -o "$t/x.gguf" --format dat
expect 2 "bad --kv-type" stories260K --text ts-calib -o "$t/x.gguf" --kv-type q8_0
expect 2 "bad --ctx" stories260K --text ts-calib -o "$t/x.gguf" --ctx 0
expect 1 "missing text" stories260K --text "$t/none.txt" -o "$t/x.gguf"
grep -q "^qlab: error: .*none.txt" "$t/err" && ok "error names the text" || bad "missing text message"
expect 1 "text shorter than a chunk" stories260K --text ts-calib --ctx 1000000 -o "$t/x.gguf"
expect 1 "missing model" "$t/none.gguf" --text ts-calib -o "$t/x.gguf"
[ ! -e "$t/x.gguf" ] && ok "no output after errors" || bad "output left after an error"
expect 0 "--help" --help
grep -q "process-output" "$t/out" && ok "help text" || bad "help text"
exit $fail
