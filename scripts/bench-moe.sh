#!/bin/sh
# What a mixture of experts' pass costs against a dense model with the same active
# parameters (README, "Mixture-of-experts models"): `qlab bench forward` of a model with
# Qwen3-30B-A3B's shapes (128 experts of 768, 8 used, n_embd 2048, 32 / 4 heads of 128,
# LAYERS of its 48 blocks) and of its dense twin (a qwen3 model with the same attention and
# one feed-forward 8 x 768 = 6144 wide: the same multiply-adds per token), both BF16,
# interleaved RUNS times; the median tokens per second of each and their ratio. The models
# are written under results/bench/ when missing. Run by hand:
#   scripts/bench-moe.sh [LAYERS] [RUNS] [QLAB]
set -eu
cd "$(dirname "$0")/.."
layers=${1:-6}
runs=${2:-3}
qlab=${3:-build/core/qlab}
dir=results/bench
mkdir -p "$dir"
moe="$dir/qwen3-30b-a3b-l$layers-BF16.gguf"
dense="$dir/qwen3-30b-a3b-dense-l$layers-BF16.gguf"
[ -f "$moe" ] || { echo "writing $moe"; "$qlab" synth --preset qwen3-30b-a3b --layers "$layers" \
    --type BF16 -o "$moe.tmp" >/dev/null && mv "$moe.tmp" "$moe"; }
[ -f "$dense" ] || { echo "writing $dense"; "$qlab" synth --arch qwen3 --dim 2048 --ff 6144 \
    --layers "$layers" --heads 32 --kv-heads 4 --head-dim 128 --vocab 151936 --rope-base 1e6 \
    --type BF16 -o "$dense.tmp" >/dev/null && mv "$dense.tmp" "$dense"; }
opts="--ctx 512 --chunks 4"
times="$dir/moe.times"
: >"$times"
i=0
while [ "$i" -lt "$runs" ]; do
    for m in moe dense; do
        eval file=\$$m
        # shellcheck disable=SC2086
        "$qlab" bench forward "$file" $opts >"$dir/moe.out" 2>&1 ||
            { cat "$dir/moe.out"; exit 1; }
        [ "$i" -eq 0 ] && sed -n 's/^\(experts\|size\) /  '"$m"': \1 /p' "$dir/moe.out"
        echo "$m $(sed -n 's/.*chunks: \([0-9.]*\) tok\/s.*/\1/p' "$dir/moe.out")" >>"$times"
    done
    i=$((i + 1))
done
echo "bench forward $opts, $runs interleaved runs, tok/s:"
for m in moe dense; do
    printf '  %-6s %s\n' "$m" "$(awk -v m=$m '$1 == m {printf " %s", $2}' "$times")"
done
for m in moe dense; do
    awk -v m=$m '$1 == m {print $2}' "$times" | sort -n |
        awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'
done | paste -s - | awk '{printf "  median: MoE %.1f, dense %.1f tok/s; MoE time per token / dense = %.3f\n", $1, $2, $2 / $1}'
