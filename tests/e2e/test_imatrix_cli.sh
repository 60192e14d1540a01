#!/bin/sh
# qlab imatrix from the command line on stories260K: the summary, both output formats
# (by --format or by name), --process-output, the same file for 1 and 2 threads, the
# imatrix feeding qlab quantize, an imatrix of another model refused by quantize, and
# the usage and runtime errors.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
model="$QLAB_SHARED/models/stories260K.gguf"
need_file "$model"

"$qlab" imatrix stories260K --text ts-calib --ctx 64 --chunks 4 -o "$tmp/a.gguf" --threads 2 \
    >"$tmp/out" 2>"$tmp/err" &&
    grep -q "wrote $tmp/a.gguf (gguf): 35 entries, 4 chunks of 64 tokens (256 tokens), PPL " "$tmp/out" &&
    grep -q "^imatrix: 256/256" "$tmp/err" &&
    ok "imatrix: GGUF written, summary and progress" || { bad "imatrix GGUF"; cat "$tmp/out" "$tmp/err"; }
"$qlab" inspect "$tmp/a.gguf" >"$tmp/insp" 2>&1 &&
    grep -q "imatrix.chunk_size .* 64" "$tmp/insp" && grep -q "imatrix.chunk_count .* 4" "$tmp/insp" &&
    grep -q 'imatrix.datasets .*"ts-calib"' "$tmp/insp" &&
    grep -q "blk.4.ffn_down.weight.in_sum2" "$tmp/insp" &&
    ok "GGUF imatrix keys and tensors" || { bad "GGUF keys"; cat "$tmp/insp"; }
"$qlab" imatrix stories260K --text ts-calib --ctx 64 --chunks 4 -o "$tmp/b.gguf" --threads 1 \
    --quiet >/dev/null 2>"$tmp/err" && [ ! -s "$tmp/err" ] && cmp -s "$tmp/a.gguf" "$tmp/b.gguf" &&
    ok "1 and 2 threads write the same bytes; --quiet is quiet" || bad "thread independence"
"$qlab" imatrix stories260K --text ts-calib --ctx 64 --chunks 4 -o "$tmp/c.dat" --quiet \
    >"$tmp/out" 2>&1 && grep -q "(dat): 35 entries" "$tmp/out" &&
    "$qlab" imatrix-convert "$tmp/c.dat" "$tmp/c.gguf" --chunk-size 64 >/dev/null &&
    cmp -s "$tmp/a.gguf" "$tmp/c.gguf" &&
    ok ".dat by name; converts to the same GGUF" || { bad ".dat output"; cat "$tmp/out"; }
"$qlab" imatrix stories260K --text ts-calib --ctx 64 --chunks 4 -o "$tmp/d.bin" --format dat \
    --quiet >/dev/null && "$qlab" imatrix-convert "$tmp/d.bin" "$tmp/d.gguf" --chunk-size 64 \
    >/dev/null && cmp -s "$tmp/a.gguf" "$tmp/d.gguf" && ok "--format dat" || bad "--format dat"
"$qlab" imatrix stories260K --text ts-calib --ctx 64 --chunks 4 -o "$tmp/e.gguf" --quiet \
    --process-output --kv-type f16 >"$tmp/out" 2>&1 && grep -q "36 entries" "$tmp/out" &&
    "$qlab" inspect "$tmp/e.gguf" | grep -q "output.weight.in_sum2" &&
    ok "--process-output adds output.weight" || { bad "--process-output"; cat "$tmp/out"; }

# llama-imatrix's protocol by default: its f16 K/V cache; --kv-type f32 is the exact reference.
"$qlab" imatrix stories260K --text ts-calib --ctx 64 --chunks 4 -o "$tmp/f16.gguf" --quiet \
    --kv-type f16 >/dev/null 2>&1 && cmp -s "$tmp/a.gguf" "$tmp/f16.gguf" &&
    ok "the default K/V cache is f16, as llama-imatrix's" || bad "default K/V is not f16"
"$qlab" imatrix stories260K --text ts-calib --ctx 64 --chunks 4 -o "$tmp/f32.gguf" \
    --kv-type f32 >"$tmp/out" 2>"$tmp/err" && ! cmp -s "$tmp/a.gguf" "$tmp/f32.gguf" &&
    grep -q "K/V f32" "$tmp/err" && ok "--kv-type f32 computes the exact reference's" ||
    { bad "--kv-type f32"; cat "$tmp/out" "$tmp/err"; }
"$qlab" imatrix stories260K --text ts-calib --ctx 64 --chunks 4 -o "$tmp/dflt.gguf" \
    >/dev/null 2>"$tmp/err" && grep -q "K/V f16" "$tmp/err" && ok "the header says K/V f16" ||
    { bad "header K/V"; cat "$tmp/err"; }

# The imatrix feeds qlab quantize.
"$qlab" quantize "$model" "$tmp/q.gguf" --type IQ4_NL --imatrix "$tmp/a.gguf" --stats --quiet \
    >"$tmp/out" 2>&1 &&
    grep -q "35 of 37 quantized tensors used it, 2 quantized without" "$tmp/out" &&
    grep -q "^imatrix-weighted error: .* over 226560 of 292800 weights" "$tmp/out" &&
    grep -q "token_embd.weight .*no imatrix entry: quantized without" "$tmp/out" &&
    ok "quantize --imatrix with qlab's imatrix" || { bad "quantize --imatrix"; cat "$tmp/out"; }
"$qlab" inspect "$tmp/q.gguf" | grep -q "quantize.imatrix.entries_count .* 35" &&
    ok "quantize.imatrix.* keys written" || bad "quantize.imatrix keys"
"$qlab" quantize "$model" "$tmp/q0.gguf" --type IQ4_NL --stats --stats-imatrix "$tmp/a.gguf" \
    --quiet >"$tmp/out0" 2>&1 && ! grep -q "quantized tensors used it" "$tmp/out0" &&
    ! "$qlab" inspect "$tmp/q0.gguf" | grep -q "quantize.imatrix" &&
    ok "--stats-imatrix weighs the stats only" || { bad "--stats-imatrix"; cat "$tmp/out0"; }
with=$(sed -n 's/^imatrix-weighted error: \([^ ]*\) .*/\1/p' "$tmp/out")
without=$(sed -n 's/^imatrix-weighted error: \([^ ]*\) .*/\1/p' "$tmp/out0")
awk -v a="$with" -v b="$without" 'BEGIN { exit !(a > 0 && a < b) }' &&
    ok "weighted error with the imatrix $with < without $without" ||
    bad "weighted error with $with, without $without"

# An imatrix of another model: the first entry of another length is named.
"$qlab" synth -o "$tmp/other.gguf" --dim 128 --ff 256 --layers 1 --heads 4 --kv-heads 2 \
    >/dev/null 2>&1 &&
    "$qlab" imatrix "$tmp/other.gguf" --text ts-calib --ctx 32 --chunks 2 -o "$tmp/other.imat.gguf" \
        --quiet >/dev/null 2>&1 || bad "imatrix of a synthetic model"
"$qlab" quantize "$model" "$tmp/x.gguf" --type Q4_0 --imatrix "$tmp/other.imat.gguf" --quiet \
    >/dev/null 2>"$tmp/err"
code=$?
[ "$code" -eq 1 ] && grep -q "^qlab: error: $tmp/other.imat.gguf: entry 'blk.0.* has 128 values, but tensor .* needs 64" "$tmp/err" &&
    [ ! -e "$tmp/x.gguf" ] && ok "imatrix of another model refused, naming the tensor" ||
    { bad "imatrix of another model: exit $code"; cat "$tmp/err"; }

expect 2 "no model" "$qlab" imatrix --text ts-calib -o "$tmp/x.gguf"
expect 2 "no --text" "$qlab" imatrix stories260K -o "$tmp/x.gguf"
expect 2 "no -o" "$qlab" imatrix stories260K --text ts-calib
expect 2 "unknown option" "$qlab" imatrix stories260K --text ts-calib -o "$tmp/x.gguf" --bogus 1
expect 2 "bad --format" "$qlab" imatrix stories260K --text ts-calib -o "$tmp/x.gguf" --format json
expect 2 "--ctx below 4 (a chunk needs tokens to score)" "$qlab" imatrix stories260K --text ts-calib -o "$tmp/x.gguf" --ctx 2
expect 2 "--format contradicts the name" "$qlab" imatrix stories260K --text ts-calib -o "$tmp/x.gguf" --format dat
expect 2 "bad --kv-type" "$qlab" imatrix stories260K --text ts-calib -o "$tmp/x.gguf" --kv-type q8_0
expect 2 "bad --ctx" "$qlab" imatrix stories260K --text ts-calib -o "$tmp/x.gguf" --ctx 0
expect 1 "missing text" "$qlab" imatrix stories260K --text "$tmp/none.txt" -o "$tmp/x.gguf"
grep -q "^qlab: error: .*none.txt" "$tmp/err" && ok "error names the text" || bad "missing text message"
expect 1 "text shorter than a chunk" "$qlab" imatrix stories260K --text ts-calib --ctx 1000000 -o "$tmp/x.gguf"
expect 1 "missing model" "$qlab" imatrix "$tmp/none.gguf" --text ts-calib -o "$tmp/x.gguf"
[ ! -e "$tmp/x.gguf" ] && ok "no output after errors" || bad "output left after an error"
expect 0 "--help" "$qlab" imatrix --help
grep -q "process-output" "$tmp/out" && ok "help text" || bad "help text"
exit $fail
