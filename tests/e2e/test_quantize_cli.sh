#!/bin/sh
# qlab quantize and qlab bench quant from the command line: exit codes, the summary
# table (fallbacks listed), refused types with their reasons.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
model="$QLAB_SHARED/models/stories260K.gguf"
need_file "$model"

expect 0 "quantize Q4_0" "$qlab" quantize "$model" "$tmp/q.gguf" --type Q4_0 --stats --quiet
matches "$tmp/out" "blk.0.ffn_down.weight .* F16 .*fallback from Q4_0: row length 172" \
    "ffn_down reported as a fallback to F16"
matches "$tmp/out" "fallbacks: 5 of 48 tensors" "fallback count"
matches "$tmp/out" "general.file_type 2" "file type Q4_0"
matches "$tmp/out" "^error, model:" "model error totals"
[ -s "$tmp/q.gguf" ] && echo "ok: output written" || { echo "FAIL: no output"; fail=1; }

expect 0 "quantize Q4_K with head Q8_0 and embd F16, 1 thread" \
    "$qlab" quantize "$model" "$tmp/k.gguf" --type Q4_K --head-type Q8_0 --embd-type F16 \
    --threads 1 --quiet
matches "$tmp/out" "token_embd.weight .* F16 " "embedding override"
matches "$tmp/out" "output.weight .* Q8_0 " "head override"
matches "$tmp/out" "attn_q.weight .* Q5_0 .*fallback from Q4_K" "Q4_K falls back to Q5_0"

expect 2 "INT8_ROW refused" "$qlab" quantize "$model" "$tmp/x.gguf" --type INT8_ROW
matches "$tmp/err" "not a GGUF type" "INT8_ROW reason"
expect 2 "Q8_0_XC refused" "$qlab" quantize "$model" "$tmp/x.gguf" --type Q8_0_XC
matches "$tmp/err" "outlier columns" "Q8_0_XC reason"
expect 2 "Q8_K refused" "$qlab" quantize "$model" "$tmp/x.gguf" --type Q8_K
matches "$tmp/err" "Q8_K is not a weight format" "Q8_K reason"
expect 2 "Q8_1 head refused" "$qlab" quantize "$model" "$tmp/x.gguf" --type Q4_0 --head-type Q8_1
matches "$tmp/err" "head-type: head type Q8_1" "Q8_1 head reason"
# --help lists the types qlab quantize writes (the lattice types too), not the refused ones.
expect 0 "quantize --help" "$qlab" quantize --help
matches "$tmp/out" "^ *--type T .* Q4_0 " "--type lists Q4_0"
has "$tmp/out" "IQ2_XXS" "--type lists the IQ lattice types"
awk '/^ *--type T/ {f = 1} /^ *--head-type/ {f = 0} f' "$tmp/out" >"$tmp/types"
if grep -q "INT8_ROW\|Q8_0_XC\|Q8_K\|Q8_1\|once built" "$tmp/types"; then
    bad "--type lists a refused type:"; cat "$tmp/types"
else
    ok "--type lists no refused type"
fi
expect 2 "unknown type" "$qlab" quantize "$model" "$tmp/x.gguf" --type Q9_9
# stories260K's rows (64, 172) all fall back from IQ2_XXS to IQ4_NL / F16, so no tensor
# ends up needing the importance matrix IQ2_XXS requires: the file is written.
expect 0 "IQ2_XXS falls back everywhere" "$qlab" quantize "$model" "$tmp/iq.gguf" \
    --type IQ2_XXS --quiet
matches "$tmp/out" "fallbacks: 37 of 48" "IQ2_XXS fallbacks"
matches "$tmp/out" "general.file_type 19" "file type IQ2_XXS"
expect 2 "missing --type" "$qlab" quantize "$model" "$tmp/x.gguf"
expect 2 "missing output" "$qlab" quantize "$model" --type Q4_0
expect 1 "missing input file" "$qlab" quantize "$tmp/none.gguf" "$tmp/x.gguf" --type Q4_0
matches "$tmp/err" "qlab: error: .*none.gguf" "error names the file"
[ ! -e "$tmp/x.gguf" ] && echo "ok: no partial output" || { echo "FAIL: partial output"; fail=1; }

# llama-quantize's command line: IN OUT TYPE [nthreads] with its options; the mix's
# rules and file type (the bytes are checked by the golden suite, quantize-mixes).
expect 0 "quantize IN OUT Q4_K_M 1" "$qlab" quantize --quiet "$model" "$tmp/m.gguf" Q4_K_M 1
matches "$tmp/out" "blk.2.attn_v.weight .* Q8_0 .*Q4_K_M: attn_v 2 of 5" "Q4_K_M's attn_v rule"
matches "$tmp/out" "output.weight .* Q8_0 .*Q4_K_M: head" "Q4_K_M's head rule"
matches "$tmp/out" "general.file_type 15" "file type Q4_K_M"
matches "$tmp/out" "^file type: Q4_K_M (15), default type Q4_K, llama-quantize's" "mix summary"
expect 0 "the alias Q4_K and the number 15" "$qlab" quantize --quiet "$model" "$tmp/a.gguf" Q4_K
matches "$tmp/out" "general.file_type 15" "Q4_K means Q4_K_M"
expect 0 "--pure" "$qlab" quantize --quiet --pure "$model" "$tmp/p.gguf" 15
matches "$tmp/out" "blk.2.attn_v.weight .* Q5_0 .*fallback from Q4_K" "--pure: no attn_v rule"
matches "$tmp/out" "general.file_type 15" "--pure keeps the file type"
expect 0 "--leave-output-tensor, --output-tensor-type=, --token-embedding-type" \
    "$qlab" quantize --quiet --leave-output-tensor --token-embedding-type=Q8_0 "$model" \
    "$tmp/l.gguf" Q5_0
matches "$tmp/out" "^output.weight .* F32 .*kept (--leave-output-tensor" "output kept"
matches "$tmp/out" "^token_embd.weight .* Q8_0 .*--token-embedding-type" "embedding type"
expect 0 "--tensor-type: the first matching rule wins" \
    "$qlab" quantize --quiet "$model" "$tmp/t.gguf" Q4_0 --tensor-type 'blk\.1\.ATTN_Q=q8_0' \
    --tensor-type attn_q=Q5_1
matches "$tmp/out" "blk.1.attn_q.weight .* Q8_0 .*--tensor-type" "first rule for blk.1"
matches "$tmp/out" "blk.2.attn_q.weight .* Q5_1 .*--tensor-type 'attn_q=Q5_1'" "second rule"
matches "$tmp/out" "blk.2.attn_k.weight .* Q4_0 " "no rule: the mix"
expect 2 "--tensor-type without =" "$qlab" quantize "$model" "$tmp/x.gguf" Q4_0 --tensor-type attn
matches "$tmp/err" "--tensor-type 'attn': expected REGEX=TYPE" "no = named"
expect 2 "--tensor-type bad regex" "$qlab" quantize "$model" "$tmp/x.gguf" Q4_0 \
    --tensor-type 'attn_(q=Q8_0'
matches "$tmp/err" "--tensor-type 'attn_(q=Q8_0': regex 'attn_(q'" "bad regex named"
expect 2 "--tensor-type bad type" "$qlab" quantize "$model" "$tmp/x.gguf" Q4_0 \
    --tensor-type attn_q=Q9_9
matches "$tmp/err" "unknown type 'Q9_9'" "bad type named"
expect 2 "--tensor-type INT8_ROW" "$qlab" quantize "$model" "$tmp/x.gguf" Q4_0 \
    --tensor-type attn_q=INT8_ROW
matches "$tmp/err" "attn_q=INT8_ROW.*not a GGUF type" "INT8_ROW override refused"
expect 2 "unknown file type" "$qlab" quantize "$model" "$tmp/x.gguf" Q4_K_X
matches "$tmp/err" "unknown file type 'Q4_K_X'" "unknown file type named"
expect 2 "IQ2_XS needs an imatrix" "$qlab" quantize "$model" "$tmp/x.gguf" IQ2_XS
matches "$tmp/err" "IQ2_XS needs --imatrix" "imatrix requirement"
expect 2 "TYPE and --type" "$qlab" quantize "$model" "$tmp/x.gguf" Q4_0 --type Q4_0
expect 2 "bad nthreads" "$qlab" quantize "$model" "$tmp/x.gguf" Q4_0 zero
expect 2 "--pure with --type" "$qlab" quantize --pure "$model" "$tmp/x.gguf" --type Q4_0
[ ! -e "$tmp/x.gguf" ] && echo "ok: no output on refusals" || { echo "FAIL: output"; fail=1; }
# A model whose rows split into 256-blocks: the K types themselves, by the rules.
expect 0 "synth 4 layers, GQA 4" "$qlab" synth -o "$tmp/s.gguf" --layers 4 --heads 8 --kv-heads 2
expect 0 "synth Q4_K_M" "$qlab" quantize --quiet "$tmp/s.gguf" "$tmp/sq.gguf" Q4_K_M
matches "$tmp/out" "blk.2.attn_v.weight .* Q6_K " "attn_v 2 of 4: Q6_K"
matches "$tmp/out" "blk.1.attn_v.weight .* Q4_K " "attn_v 1 of 4: Q4_K"
matches "$tmp/out" "blk.3.ffn_down.weight .* Q6_K " "ffn_down 3 of 4: Q6_K"
matches "$tmp/out" "^output.weight .* Q6_K " "head Q6_K"
matches "$tmp/out" "fallbacks: 0 of" "no fallback"
# IQ2_M's IQ2_S tensors need importance weights: without an imatrix llama-quantize
# refuses the first one, and so does qlab.
expect 1 "synth IQ2_M without an imatrix" "$qlab" quantize --quiet "$tmp/s.gguf" "$tmp/x.gguf" IQ2_M
matches "$tmp/err" "tensor 'blk.0.attn_q.weight': IQ2_S without importance weights" \
    "the tensor is named"
expect 0 "quantize --help again" "$qlab" quantize --help
matches "$tmp/out" "15=Q4_K_M" "--help lists the file types"
matches "$tmp/out" "20=IQ2_XS\\*" "--help marks those that need an imatrix"

# bench quant: one row per implemented type (tiny matrix, one run each).
expect 0 "bench quant" "$qlab" bench quant --rows 4 --cols 256 --min-seconds 0 --threads 2
for t in F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q8_1 Q2_K Q3_K Q4_K Q5_K Q6_K Q8_K \
         IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S IQ1_S IQ1_M \
         IQ4_NL IQ4_XS TQ1_0 TQ2_0 INT8_ROW Q8_0_XC; do
    matches "$tmp/out" "^$t " "bench row for $t"
done
expect 2 "bench unknown" "$qlab" bench nothing
expect 2 "bench quant bad cols" "$qlab" bench quant --cols 100
# bench act: every rounding and the three product paths (tiny shapes, one run each).
expect 0 "bench act" "$qlab" bench act --tokens 4 --in 256 --out 16 --min-seconds 0 --threads 2
for r in f32 f16 bf16 q8_0 q8_1 q8_K q8x2; do
    matches "$tmp/out" "^  $r " "bench act row for $r"
done
matches "$tmp/out" "^  fake-quant " "bench act fake-quant path"
matches "$tmp/out" "^  int8 C " "bench act portable int8 path"
expect 2 "bench act bad in" "$qlab" bench act --in 100
exit $fail
