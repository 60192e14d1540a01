#!/bin/sh
# qlab fit from the command line on stories260K: usage errors (exit 2), an infeasible
# budget (exit 1, naming the smallest feasible size), the envelope arithmetic, the
# cache, a written model that reads back with the planned types, and budgets named by
# a quantization (comparison points).
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
model="$QLAB_SHARED/models/stories260K.gguf"
need_file "$model"

expect 2 "no budget" "$qlab" fit "$model" --dry-run
expect 2 "budget and envelope" "$qlab" fit "$model" --budget 1MiB --envelope 2MiB --dry-run
expect 2 "neither -o nor --dry-run" "$qlab" fit "$model" --budget 1MiB
expect 2 "unknown option" "$qlab" fit "$model" --budget 1MiB --dry-run --frob
expect 2 "bad unit" "$qlab" fit "$model" --budget 4G --dry-run
matches "$tmp/err" "KiB" "bad unit message lists the units"
expect 2 "bad bpw" "$qlab" fit "$model" --budget bpw:x --dry-run
expect 2 "--ctx without --envelope" "$qlab" fit "$model" --budget 1MiB --ctx 64 --dry-run
expect 1 "missing model" "$qlab" fit "$tmp/nope.gguf" --budget 1MiB --dry-run
expect 1 "missing imatrix" "$qlab" fit "$model" --imatrix "$tmp/nope.dat" --budget 1MiB --dry-run

expect 0 "plain F16 fit" "$qlab" fit "$model" --budget 1GiB --types F16 --dry-run --no-cache

expect 1 "infeasible budget" "$qlab" fit "$model" --budget 100KiB --dry-run --cache-dir "$tmp/cache"
matches "$tmp/err" "smallest feasible size 240.47 KiB (246240 B)" "infeasible budget names the smallest size"

expect 0 "bpw budget, written" "$qlab" fit "$model" --budget bpw:8 -o "$tmp/fit.gguf" --cache-dir "$tmp/cache" --quiet
matches "$tmp/out" "read from the cache" "second run reads the error table from the cache"
matches "$tmp/out" "used        288.00 KiB (294912 B) = 100.0000% of the budget" "bpw:8 fills the budget"
matches "$tmp/out" "read back: every tensor in its planned type and size" "output read back"
[ -f "$tmp/fit.gguf" ] && echo "ok: output exists" || { echo "FAIL: no output file"; fail=1; }

# With llama-imatrix's importance matrix: errors weighted by it (the head by
# output_norm^2), and llama-quantize's provenance keys in the output.
imatrix="$QLAB_SHARED/golden/imatrix/imatrix-stories260K-tscalib-c128.dat"
expect 0 "imatrix fit" "$qlab" fit "$model" --imatrix "$imatrix" --budget bpw:7 -o "$tmp/fit-imat.gguf" --cache-dir "$tmp/cache" --quiet
matches "$tmp/out" "imatrix     .*(35 entries)" "imatrix summary"
matches "$tmp/out" "blk.0.attn_q.weight .* imatrix$" "attn_q weighted by its imatrix entry"
matches "$tmp/out" "output.weight .* output_norm$" "head weighted by output_norm^2"
matches "$tmp/out" "measured" "another imatrix is another cache entry"
"$qlab" inspect "$tmp/fit-imat.gguf" >"$tmp/inspect" 2>&1
matches "$tmp/inspect" "quantize.imatrix.chunks_count" "provenance keys written"

# Envelope: stories260K has 5 layers, 4 KV heads of dimension 8: at ctx 128 the f16
# KV cache is 5*128*4*8*2*2 = 81920 bytes.
expect 0 "envelope" "$qlab" fit "$model" --envelope 1MiB --ctx 128 --reserve 200KiB --dry-run --cache-dir "$tmp/cache"
matches "$tmp/out" "KV cache    80.00 KiB (81920 B) = 5 layers x ctx 128 x 4 KV heads x head dim 8" "KV cache arithmetic"
matches "$tmp/out" "budget      744.00 KiB (761856 B) = envelope - KV cache - reserve" "envelope budget"
expect 1 "envelope too small" "$qlab" fit "$model" --envelope 200KiB --ctx 128 --reserve 150KiB --dry-run --cache-dir "$tmp/cache"
matches "$tmp/err" "leaves nothing for the model" "envelope error"
# A source model in an IQ type: its rows are decoded through the lattice tables,
# which must be loaded before the first row is read (and again when the error
# table comes from the cache).
"$qlab" synth -o "$tmp/s.gguf" --dim 256 --ff 512 --layers 1 --heads 4 --kv-heads 4 >/dev/null 2>&1 &&
    "$qlab" quantize "$tmp/s.gguf" "$tmp/s-iq3s.gguf" --type IQ3_S >/dev/null 2>&1 ||
    { echo "FAIL: making the IQ3_S source model"; fail=1; }
expect 0 "fit from an IQ3_S model" "$qlab" fit "$tmp/s-iq3s.gguf" --budget bpw:6 --types Q4_K,Q8_0,F16 --dry-run --cache-dir "$tmp/cache-iq"
expect 0 "fit from an IQ3_S model, written" "$qlab" fit "$tmp/s-iq3s.gguf" --budget bpw:6 -o "$tmp/fit-iq.gguf" --cache-dir "$tmp/cache-iq" --quiet
expect 0 "again, the table from the cache" "$qlab" fit "$tmp/s-iq3s.gguf" --budget bpw:6 -o "$tmp/fit-iq2.gguf" --cache-dir "$tmp/cache-iq" --quiet
matches "$tmp/out" "read from the cache" "the IQ3_S source's table comes from the cache"
# Comparison points: --budget names a quantization as a sweep's weight_type does, and
# the budget is the tensor bytes `qlab quantize` writes for it (the sizes compared by
# qlab inspect's totals), pure types and llama-quantize's mixes, with the imatrix's
# coverage; a mix that cannot be made fails before any error is measured.
tensor_bytes() { "$qlab" inspect "$1" | sed -n 's/^totals: .* \([0-9]*\) tensor bytes .*/\1/p'; }
# point NAME QUANTIZE-ARGS...: --budget NAME against qlab quantize MODEL OUT ARGS.
point() {
    name=$1; shift
    "$qlab" quantize "$model" "$tmp/point.gguf" "$@" >/dev/null 2>&1 || bad "quantize $*"
    size=$(tensor_bytes "$tmp/point.gguf")
    expect 0 "--budget $name" "$qlab" fit "$model" --budget "$name" --dry-run --cache-dir "$tmp/cache"
    matches "$tmp/out" "^budget      .* ($size B)$" "--budget $name is the $size tensor bytes of quantize $*"
}
point Q4_K_M Q4_K_M
point Q3_K_L Q3_K_L
point mix:Q6_K Q6_K
point Q6_K --type Q6_K
"$qlab" quantize --imatrix "$imatrix" "$model" "$tmp/point.gguf" Q4_K_M >/dev/null 2>&1 || bad "quantize Q4_K_M with the imatrix"
size=$(tensor_bytes "$tmp/point.gguf")
expect 0 "--budget Q4_K_M with the imatrix" "$qlab" fit "$model" --imatrix "$imatrix" --budget Q4_K_M --dry-run --cache-dir "$tmp/cache"
matches "$tmp/out" "^Q4_K_M      .* ($size B) = this model as llama-quantize's Q4_K_M$" "the comparison point is named"
expect 2 "--budget of an unknown type" "$qlab" fit "$model" --budget Q4_K_N --dry-run
has "$tmp/err" "--budget: 'Q4_K_N' is not a size, bpw:X or a weight type (unknown type 'Q4_K_N'; did you mean 'Q4_K_S'?)" "unknown type named"
expect 1 "--budget of a mix that needs an imatrix" "$qlab" fit "$model" --budget mix:IQ2_S --dry-run --cache-dir "$tmp/cache"
has "$tmp/err" "--budget mix:IQ2_S: $model: IQ2_S needs an importance matrix" "mix without its imatrix refused"
grep -q "measuring errors" "$tmp/err" && bad "errors measured before the refusal" || ok "refused before measuring"
exit $fail
