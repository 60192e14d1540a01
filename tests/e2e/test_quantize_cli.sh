#!/bin/sh
# qlab quantize and qlab bench quant from the command line: exit codes, the summary
# table (fallbacks listed), refused types with their reasons.
set -u
qlab="$1"
model="$QLAB_SHARED/models/stories260K.gguf"
[ -f "$model" ] || { echo "SKIP: $model not found"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # expected-code description command...
    want=$1; shift; what=$1; shift
    "$@" >"$tmp/out" 2>"$tmp/err"; got=$?
    if [ "$got" -ne "$want" ]; then
        echo "FAIL: $what: exit $got, expected $want"; cat "$tmp/err"; fail=1
    else echo "ok: $what"; fi
}
has() { # file pattern description
    if grep -q -- "$2" "$1"; then echo "ok: $3"; else echo "FAIL: $3 (no '$2' in output)"; fail=1; fi
}

check 0 "quantize Q4_0" "$qlab" quantize "$model" "$tmp/q.gguf" --type Q4_0 --stats --quiet
has "$tmp/out" "blk.0.ffn_down.weight .* F16 .*fallback from Q4_0: row length 172" \
    "ffn_down reported as a fallback to F16"
has "$tmp/out" "fallbacks: 5 of 48 tensors" "fallback count"
has "$tmp/out" "general.file_type 2" "file type Q4_0"
has "$tmp/out" "^error, model:" "model error totals"
[ -s "$tmp/q.gguf" ] && echo "ok: output written" || { echo "FAIL: no output"; fail=1; }

check 0 "quantize Q4_K with head Q8_0 and embd F16, 1 thread" \
    "$qlab" quantize "$model" "$tmp/k.gguf" --type Q4_K --head-type Q8_0 --embd-type F16 \
    --threads 1 --quiet
has "$tmp/out" "token_embd.weight .* F16 " "embedding override"
has "$tmp/out" "output.weight .* Q8_0 " "head override"
has "$tmp/out" "attn_q.weight .* Q5_0 .*fallback from Q4_K" "Q4_K falls back to Q5_0"

check 2 "INT8_ROW refused" "$qlab" quantize "$model" "$tmp/x.gguf" --type INT8_ROW
has "$tmp/err" "not a GGUF type" "INT8_ROW reason"
check 2 "Q8_0_XC refused" "$qlab" quantize "$model" "$tmp/x.gguf" --type Q8_0_XC
has "$tmp/err" "outlier columns" "Q8_0_XC reason"
check 2 "Q8_K refused" "$qlab" quantize "$model" "$tmp/x.gguf" --type Q8_K
check 2 "unknown type" "$qlab" quantize "$model" "$tmp/x.gguf" --type Q9_9
# stories260K's rows (64, 172) all fall back from IQ2_XXS to IQ4_NL / F16, so no tensor
# ends up needing the importance matrix IQ2_XXS requires: the file is written.
check 0 "IQ2_XXS falls back everywhere" "$qlab" quantize "$model" "$tmp/iq.gguf" \
    --type IQ2_XXS --quiet
has "$tmp/out" "fallbacks: 37 of 48" "IQ2_XXS fallbacks"
has "$tmp/out" "general.file_type 19" "file type IQ2_XXS"
check 2 "missing --type" "$qlab" quantize "$model" "$tmp/x.gguf"
check 2 "missing output" "$qlab" quantize "$model" --type Q4_0
check 1 "missing input file" "$qlab" quantize "$tmp/none.gguf" "$tmp/x.gguf" --type Q4_0
has "$tmp/err" "qlab: error: .*none.gguf" "error names the file"
[ ! -e "$tmp/x.gguf" ] && echo "ok: no partial output" || { echo "FAIL: partial output"; fail=1; }

# bench quant: one row per implemented type (tiny matrix, one run each).
check 0 "bench quant" "$qlab" bench quant --rows 4 --cols 256 --min-seconds 0 --threads 2
for t in F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q8_1 Q2_K Q3_K Q4_K Q5_K Q6_K Q8_K \
         IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S IQ1_S IQ1_M \
         IQ4_NL IQ4_XS TQ1_0 TQ2_0 INT8_ROW Q8_0_XC; do
    has "$tmp/out" "^$t " "bench row for $t"
done
check 2 "bench unknown" "$qlab" bench nothing
check 2 "bench quant bad cols" "$qlab" bench quant --cols 100
# bench act: every rounding and the three product paths (tiny shapes, one run each).
check 0 "bench act" "$qlab" bench act --tokens 4 --in 256 --out 16 --min-seconds 0 --threads 2
for r in f32 f16 bf16 q8_0 q8_1 q8_K q8x2; do
    has "$tmp/out" "^  $r " "bench act row for $r"
done
has "$tmp/out" "^  fake-quant " "bench act fake-quant path"
has "$tmp/out" "^  int8 C " "bench act portable int8 path"
check 2 "bench act bad in" "$qlab" bench act --in 100
exit $fail
