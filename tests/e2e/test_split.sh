#!/bin/sh
# Split GGUF sets (NAME-0000k-of-0000N.gguf, as gguf-split and llama-quantize --keep-split
# write them) are one model for qlab inspect, eval, quantize and sweep: a split of
# stories260K gives bit-identical figures and bytes; the reader checks the set as
# llama.cpp's loader does (first file given, every file present, split.no and
# split.count, split.tensors.count). Also llama-quantize's --keep-split,
# --allow-requantize, --override-kv and --include-weights/--exclude-weights.
set -u
qlab="$1"
make_split="$2"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
src="$QLAB_SHARED/models/stories260K.gguf"
need_file "$src"
imat="$QLAB_SHARED/golden/imatrix/imatrix-stories260K-tscalib-c128.dat"
need_file "$imat"
export OMP_NUM_THREADS=1

"$make_split" "$src" "$tmp/s" 3 || bad "make_split"
first="$tmp/s-00001-of-00003.gguf"

# ---------------------------------------------------------------- inspect
expect 0 "inspect a split set" "$qlab" inspect "$first"
has "$tmp/out" "split set    3 files (split.count), read as one model" "inspect names the set"
has "$tmp/out" "tensors (48;" "inspect lists the 48 tensors of all files"
[ "$(grep -c "^check, file [123] of 3: .*= file size: OK$" "$tmp/out")" -eq 3 ] &&
    ok "inspect checks every file's layout" || { bad "per-file checks"; cat "$tmp/out"; }
has "$tmp/out" "totals: 48 tensors, 292800 parameters" "inspect totals over the set"

# ---------------------------------------------------------------- eval: the same figures
"$qlab" eval "$src" -f ts-eval -c 64 --chunks 4 >"$tmp/eval.one" 2>/dev/null || bad "eval, one file"
expect 0 "eval the split set" "$qlab" eval "$first" -f ts-eval -c 64 --chunks 4
if cmp -s "$tmp/eval.one" "$tmp/out"; then ok "eval: the split set's [i] list and PPL are the file's, bit for bit"
else bad "eval of the split set differs"; diff "$tmp/eval.one" "$tmp/out"; fi

# ---------------------------------------------------------------- quantize
"$qlab" quantize -q "$src" "$tmp/q-one.gguf" Q4_0 >/dev/null 2>&1 || bad "quantize the file"
expect 0 "quantize a split input into one file" "$qlab" quantize -q "$first" "$tmp/q-split.gguf" Q4_0
if cmp -s "$tmp/q-one.gguf" "$tmp/q-split.gguf"; then ok "quantize: one file from the split set, byte-identical"
else bad "quantize of the split set differs from the file's"; fi
expect 0 "quantize --keep-split" "$qlab" quantize -q --keep-split "$first" "$tmp/k.gguf" Q4_0
has "$tmp/out" "split file 3 of 3: $tmp/k-00003-of-00003.gguf" "--keep-split names its files"
for k in 1 2 3; do
    [ -f "$tmp/k-0000$k-of-00003.gguf" ] && ok "--keep-split wrote file $k" || bad "no file $k"
done
"$qlab" inspect "$tmp/k-00002-of-00003.gguf" >"$tmp/k2" 2>&1
has "$tmp/k2" "give the first file, $tmp/k-00001-of-00003.gguf" "the second file alone points to the first"
"$qlab" inspect --max-array 0 "$tmp/k-00001-of-00003.gguf" >"$tmp/k1" 2>&1
has "$tmp/k1" "split.count                             u16            3" "--keep-split writes split.count (u16)"
has "$tmp/k1" "split.tensors.count                     i32            48" "--keep-split writes split.tensors.count"
"$qlab" eval "$tmp/q-one.gguf" -f ts-eval -c 64 --chunks 4 >"$tmp/e1" 2>/dev/null
"$qlab" eval "$tmp/k-00001-of-00003.gguf" -f ts-eval -c 64 --chunks 4 >"$tmp/e3" 2>/dev/null
if cmp -s "$tmp/e1" "$tmp/e3"; then ok "--keep-split output evaluates as the single file"
else bad "--keep-split output evaluates differently"; diff "$tmp/e1" "$tmp/e3"; fi
"$qlab" eval "$tmp/k-00001-of-00003.gguf" --base "$first" -f ts-eval -c 64 --chunks 4 --json >"$tmp/j3" 2>/dev/null
"$qlab" eval "$tmp/q-one.gguf" --base "$src" -f ts-eval -c 64 --chunks 4 --json >"$tmp/j1" 2>/dev/null
sed 's/"model": .*/M/; s/"base": .*/B/' "$tmp/j1" >"$tmp/j1s"; sed 's/"model": .*/M/; s/"base": .*/B/' "$tmp/j3" >"$tmp/j3s"
if cmp -s "$tmp/j1s" "$tmp/j3s" && grep -q kld_mean "$tmp/j1s"; then ok "eval --base: split sets on both sides give the file's KLD figures"
else bad "eval --base on split sets differs"; diff "$tmp/j1s" "$tmp/j3s" | head; fi

# ---------------------------------------------------------------- sweep
cat >"$tmp/one.sweep" <<EOS
[sweep]
name = split-one
model = $src
text = ts-eval
ctx = 64
chunks = 4
[grid]
weight_type = Q8_0 Q4_0
EOS
sed "s|name = split-one|name = split-set|; s|model = .*|model = $first|" "$tmp/one.sweep" >"$tmp/set.sweep"
"$qlab" sweep "$tmp/one.sweep" --db "$tmp/one.db" -q --no-summary >/dev/null 2>&1 || bad "sweep of the file"
expect 0 "sweep of the split set" "$qlab" sweep "$tmp/set.sweep" --db "$tmp/set.db" -q --no-summary
q="SELECT weight_type, ppl, ppl_ref, kld_mean, kld_max, top1_agree, bpw FROM results ORDER BY weight_type"
rows "$tmp/one.db" "$q" >"$tmp/r1"; rows "$tmp/set.db" "$q" >"$tmp/r3"
if [ -s "$tmp/r1" ] && cmp -s "$tmp/r1" "$tmp/r3"; then ok "sweep: the split set's figures are the file's"
else bad "sweep figures differ"; cat "$tmp/r1" "$tmp/r3"; fi
sha_one=$(rows "$tmp/one.db" "SELECT sha256 FROM models"); sha_set=$(rows "$tmp/set.db" "SELECT sha256 FROM models")
[ "$sha_one" != "$sha_set" ] && [ ${#sha_set} -eq 64 ] && ok "the set's identity is its own (every file hashed)" ||
    bad "model identity: '$sha_one' / '$sha_set'"

# A quantized split set as a file config: its identity is every file's.
cat >"$tmp/file.sweep" <<EOS
[sweep]
name = split-file
model = $src
text = ts-eval
ctx = 64
chunks = 4
[grid]
weight_type = file:$tmp/k-00001-of-00003.gguf file:$tmp/q-one.gguf
EOS
expect 0 "sweep of a split file config" "$qlab" sweep "$tmp/file.sweep" --db "$tmp/file.db" -q --no-summary
q="SELECT kld_mean, ppl FROM results ORDER BY config_hash"
n=$(rows "$tmp/file.db" "SELECT count(DISTINCT printf('%.17g %.17g', kld_mean, ppl)) || ' ' || count(*) FROM results")
[ "$n" = "1 2" ] && ok "the split file config measures as the one file" || bad "split file config: '$n'"
h1=$(rows "$tmp/file.db" "SELECT canonical FROM configs WHERE canonical LIKE '%k-00001-of-00003%'")
cp "$tmp/k-00002-of-00003.gguf" "$tmp/keepk2"
printf 'x' >>"$tmp/k-00002-of-00003.gguf" # still a set qlab can hash; only its identity changes
"$qlab" sweep "$tmp/file.sweep" --list >"$tmp/list2" 2>&1
cp "$tmp/keepk2" "$tmp/k-00002-of-00003.gguf"
"$qlab" sweep "$tmp/file.sweep" --list >"$tmp/list1" 2>&1
sha_of() { grep -o 'k-00001-of-00003.gguf@[0-9a-f]*' "$1" | head -n 1; }
[ -n "$(sha_of "$tmp/list1")" ] && [ "$(sha_of "$tmp/list1")" != "$(sha_of "$tmp/list2")" ] \
    && ok "a change in the set's second file changes the file config's identity" \
    || { bad "split file config identity"; cat "$tmp/list1" "$tmp/list2"; echo "$h1"; }

# ---------------------------------------------------------------- a broken set is refused
cp "$tmp/s-00002-of-00003.gguf" "$tmp/keep2"
rm "$tmp/s-00002-of-00003.gguf"
expect 1 "a missing file" "$qlab" eval "$first" -f ts-eval -c 64 --chunks 1
has "$tmp/err" "split file 2 of 3 is missing: no $tmp/s-00002-of-00003.gguf" "the missing file is named"
cp "$tmp/keep2" "$tmp/s-00002-of-00003.gguf"
expect 1 "the second file given" "$qlab" inspect "$tmp/s-00003-of-00003.gguf"
has "$tmp/err" "split file 3 of 3 (split.no = 2): give the first file, $tmp/s-00001-of-00003.gguf" "points to the first file"
cp "$first" "$tmp/renamed.gguf"
expect 1 "a first file not named as a set" "$qlab" inspect "$tmp/renamed.gguf"
has "$tmp/err" "does not end in -00001-of-00003.gguf" "says why the set cannot be found"
"$make_split" "$src" "$tmp/c" 2 --tensors-count 47 || bad "make_split --tensors-count"
expect 1 "split.tensors.count wrong" "$qlab" inspect "$tmp/c-00001-of-00002.gguf"
has "$tmp/err" "split.tensors.count is 47, but the 2 files hold 48 tensors" "count mismatch named"
"$make_split" "$src" "$tmp/n" 3 --no 2 || bad "make_split --no"
expect 1 "split.no wrong" "$qlab" inspect "$tmp/n-00001-of-00003.gguf"
has "$tmp/err" "n-00002-of-00003.gguf: split.no is 2, expected 1" "split.no mismatch named"
"$make_split" "$src" "$tmp/d" 2 || bad "make_split 2"
"$make_split" "$src" "$tmp/e" 3 || bad "make_split 3"
cp "$tmp/e-00002-of-00003.gguf" "$tmp/d-00002-of-00002.gguf" # split.count 3 in a set of 2
expect 1 "split.count differs" "$qlab" inspect "$tmp/d-00001-of-00002.gguf"
has "$tmp/err" "d-00002-of-00002.gguf: split.count is 3, expected 2 as in the first file" "split.count mismatch named"

# ---------------------------------------------------------------- --allow-requantize
expect 1 "a quantized source is refused" "$qlab" quantize -q "$tmp/q-one.gguf" "$tmp/rq.gguf" Q8_0
has "$tmp/err" "requantizing from type Q4_0 is disabled" "llama-quantize's refusal"
has "$tmp/err" "--allow-requantize" "the refusal names the option"
expect 0 "--allow-requantize" "$qlab" quantize -q --allow-requantize "$tmp/q-one.gguf" "$tmp/rq.gguf" Q8_0
has "$tmp/err" "warning: --allow-requantize: 32 tensors of $tmp/q-one.gguf are already quantized (Q4_0 first)" "llama-quantize's warning about quality"
has "$tmp/out" "requantized: 31 tensors quantized again from their dequantized values" "the report counts them"
# Q8_0 of Q4_0's dequantized values: what quantizing a file of those values gives
expect 0 "eval the requantized file" "$qlab" eval "$tmp/rq.gguf" -f ts-eval -c 64 --chunks 4 -q
grep -q "^PPL = " "$tmp/out" && ok "the requantized file evaluates" || bad "no PPL"

# ---------------------------------------------------------------- --override-kv
expect 0 "--override-kv" "$qlab" quantize -q "$src" "$tmp/o.gguf" Q8_0 \
    --override-kv general.name=str:tiny-override --override-kv qlab.test.i=int:-7 \
    --override-kv qlab.test.f=float:0.5 --override-kv qlab.test.b=bool:true \
    --override-kv general.file_type=int:1
"$qlab" inspect --max-array 0 "$tmp/o.gguf" >"$tmp/o" 2>&1
has "$tmp/o" 'general.name                            str            "tiny-override"' "str override"
has "$tmp/o" "qlab.test.i                             i32            -7" "int override (i32)"
has "$tmp/o" "qlab.test.f                             f32            0.5" "float override (f32)"
has "$tmp/o" "qlab.test.b                             bool           true" "bool override"
has "$tmp/o" "general.file_type                       i32            1" "an override wins over qlab's own key"
for bad_kv in "general.name" "=int:1" "k=int:1.5" "k=float:x" "k=bool:yes" "k=list:1" "k=int:99999999999"; do
    expect 2 "--override-kv '$bad_kv' refused" "$qlab" quantize "$src" "$tmp/x.gguf" Q8_0 --override-kv "$bad_kv"
done
has "$tmp/err" "expected an integer in -2147483648..2147483647 after int:" "an int beyond i32 is named"

# ---------------------------------------------------------------- --include/--exclude-weights
expect 0 "--exclude-weights" "$qlab" quantize "$src" "$tmp/x1.gguf" Q4_0 --imatrix "$imat" -q \
    --exclude-weights ffn_ --exclude-weights attn_q
has "$tmp/out" "blk.0.ffn_up.weight" "listed"
matches "$tmp/out" "^blk.0.ffn_up.weight .*left out by --exclude-weights" "an excluded tensor is quantized without"
matches "$tmp/out" "^blk.0.attn_q.weight .*left out by --exclude-weights" "the second --exclude-weights too"
grep "^blk.0.attn_k.weight " "$tmp/out" | grep -q "without" && bad "attn_k lost its imatrix" || ok "others keep theirs"
has "$tmp/out" ": 35 entries, 606 chunks; 15 of 37 quantized tensors used it" "the count says so"
"$qlab" inspect --max-array 0 "$tmp/x1.gguf" >"$tmp/x1" 2>&1
has "$tmp/x1" "quantize.imatrix.entries_count          i32            15" "entries_count after the filter, as llama-quantize writes it"
expect 0 "--include-weights" "$qlab" quantize "$src" "$tmp/x2.gguf" Q4_0 --imatrix "$imat" -q --include-weights attn_k
has "$tmp/out" "chunks; 5 of 37 quantized tensors used it" "only the included tensors use it"
matches "$tmp/out" "^blk.0.attn_v.weight .*not chosen by --include-weights" "the others are said to be left out"
# an excluded tensor gets the bytes of a quantization without imatrix
"$qlab" quantize "$src" "$tmp/x0.gguf" Q4_0 -q >/dev/null 2>&1
"$qlab" quantize "$src" "$tmp/x3.gguf" Q4_0 --imatrix "$imat" -q --exclude-weights blk. >/dev/null 2>&1
cmp -s "$tmp/x0.gguf" "$tmp/x3.gguf" 2>/dev/null && bad "keys should differ (imatrix keys)" || true
"$qlab" quantize "$src" "$tmp/x4.gguf" Q4_0 --imatrix "$imat" -q --stats --exclude-weights blk. >"$tmp/s4" 2>&1
"$qlab" quantize "$src" "$tmp/x5.gguf" Q4_0 -q --stats >"$tmp/s5" 2>&1
a=$(grep "^error, model:" "$tmp/s4" | awk '{print $3, $4}'); b=$(grep "^error, model:" "$tmp/s5" | awk '{print $3, $4}')
[ -n "$a" ] && [ "$a" = "$b" ] && ok "excluding every tensor gives the errors of no imatrix ($a)" || bad "errors '$a' vs '$b'"
expect 2 "include and exclude together" "$qlab" quantize "$src" "$tmp/x.gguf" Q4_0 --imatrix "$imat" --include-weights a --exclude-weights b
expect 2 "--exclude-weights without --imatrix" "$qlab" quantize "$src" "$tmp/x.gguf" Q4_0 --exclude-weights b
exit "$fail"
