#!/bin/sh
# What shared blocks save (README, "Speed"): the sweep weight_type = Q4_K Q6_K x
# head_type = same Q8_0 Q6_K on a model of PRESET's shapes (default qwen3-0.6b: the 0.5B
# class with 256-divisible rows, which K-quant heads need; qwen2.5-0.5b's are 896), with
# its own output.weight (tied=0: a tied head is the embedding table, so its type would
# change the blocks' input and nothing could be shared), ctx
# 512, CHUNKS chunks of TEXT, once as qlab runs it (configs that differ only in the head
# compute their head alone on the first one's hidden states) and once with --no-share
# (every config its own whole pass), each into a store of its own with the reference cache
# shared (computed by the first). Prints each config's quantized-pass time both ways, from
# the stores, and the wall time of each sweep; then the same for configs that share a
# prefix (recipes on the last blocks). Run by hand:
#   scripts/bench-shared.sh [PRESET] [CHUNKS] [TEXT] [QLAB]
set -eu
cd "$(dirname "$0")/.."
preset=${1:-qwen3-0.6b}
chunks=${2:-4}
text=${3:-wikitext-2-test}
qlab=${4:-build/core/qlab}
dir=results/bench/shared-$preset
mkdir -p "$dir"
cat >"$dir/shared.sweep" <<END
[sweep]
name    = shared-$preset
model   = synth:$preset,tied=0
text    = $text
ctx     = 512
chunks  = $chunks

[grid]
weight_type = Q4_K Q6_K
head_type   = same Q8_0 Q6_K
END
rm -f "$dir/shared.db" "$dir/alone.db"
wall() { # SWEEP DB [OPTION]: runs SWEEP into DB, prints its wall seconds
    t0=$(date +%s.%N)
    "$qlab" sweep "$1" --db "$2" --cache-dir "$dir/cache" --quiet --no-summary \
        ${3:+"$3"} >"$dir/out" 2>&1 || { cat "$dir/out" >&2; exit 1; }
    awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }'
}
# A first sweep makes the synthetic model and the reference; its time is not reported.
wall "$dir/shared.sweep" "$dir/ref.db" >/dev/null
rm -f "$dir/ref.db"
w_shared=$(wall "$dir/shared.sweep" "$dir/shared.db")
w_alone=$(wall "$dir/shared.sweep" "$dir/alone.db" --no-share)
q="SELECT c.weight_type, c.head_type, printf('%.1f', r.quant_seconds) AS pass_s,
       CASE WHEN r.body_of IS NULL THEN 'own' ELSE 'shared' END AS blocks,
       printf('%.1f', r.quantize_seconds) AS quantize_s, printf('%.4f', m.kld_mean * 1000) AS kld_e3
   FROM runs r JOIN configs c ON c.id = r.config_id JOIN metrics m ON m.run_id = r.id
   ORDER BY c.weight_type, c.head_type"
echo "shared blocks:"
"$qlab" query --db "$dir/shared.db" --md "$q"
echo "--no-share:"
"$qlab" query --db "$dir/alone.db" --md "$q"
printf 'wall time of the sweep: %.1f s shared, %.1f s with --no-share\n' "$w_shared" "$w_alone"

# Shared prefixes: Q4_K with recipes that change the last block's feed-forward, then the
# last two blocks'; the run order takes the second recipe first (it changes an earlier
# block), and each config after the first starts its pass at the first block where it
# differs from the one before, from that one's streams.
last=$("$qlab" query --db "$dir/shared.db" --csv "SELECT n_layer FROM models LIMIT 1" | tail -n 1)
l1=$((last - 1)) l2=$((last - 2))
cat >"$dir/prefix.sweep" <<END
[sweep]
name    = prefix-$preset
model   = synth:$preset,tied=0
text    = $text
ctx     = 512
chunks  = $chunks

[grid]
weight_type  = Q4_K
tensor_types = none blk\.$l1\.ffn_=Q8_0 blk\.($l2|$l1)\.ffn_=Q8_0
END
rm -f "$dir/prefix.db" "$dir/prefix-alone.db"
p_shared=$(wall "$dir/prefix.sweep" "$dir/prefix.db")
p_alone=$(wall "$dir/prefix.sweep" "$dir/prefix-alone.db" --no-share)
q="SELECT c.tensor_types, printf('%.1f', r.quant_seconds) AS pass_s, r.shared_blocks,
       printf('%.1f', r.forward_alone_seconds) AS alone_s, printf('%.4f', m.kld_mean * 1000) AS kld_e3
   FROM runs r JOIN configs c ON c.id = r.config_id JOIN metrics m ON m.run_id = r.id
   ORDER BY r.id"
echo "shared prefixes ($last blocks):"
"$qlab" query --db "$dir/prefix.db" --md "$q"
echo "--no-share:"
"$qlab" query --db "$dir/prefix-alone.db" --md "$q"
printf 'wall time of the sweep: %.1f s shared, %.1f s with --no-share\n' "$p_shared" "$p_alone"
