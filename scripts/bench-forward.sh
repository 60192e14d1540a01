#!/bin/sh
# The reference pass at real shapes (README, "Speed"): `qlab bench forward --profile`
# (ctx 512, F16 weights, every core) on models of the 30M, Qwen2.5-0.5B and Llama-3.1-8B
# shapes, written under results/bench/ when missing (the 8B one is 16 GB and takes about
# 16 minutes to write). Prints each model's tokens per second, GFLOP/s against this
# machine's sgemm on the model's largest product, and where the pass's time goes. Run it
# on a quiet machine: two cores shared with a build move the figures by tens of per cent.
#   scripts/bench-forward.sh [PRESETS] [QLAB]     (default: "30M qwen2.5-0.5b llama3.1-8b")
set -eu
cd "$(dirname "$0")/.."
presets=${1:-30M qwen2.5-0.5b llama3.1-8b}
qlab=${2:-build/core/qlab}
dir=results/bench
mkdir -p "$dir"
for preset in $presets; do
    model=$dir/$preset-F16.gguf
    if [ ! -f "$model" ]; then
        echo "writing $model"
        "$qlab" synth --preset "$preset" --type F16 -o "$model.tmp" >/dev/null
        mv "$model.tmp" "$model"
    fi
    # Fewer timed chunks where a chunk is long: the figure is per token either way.
    case $preset in
    *8b*) chunks=1 ;;
    *0.5b* | *0.6b*) chunks=2 ;;
    *) chunks=8 ;;
    esac
    "$qlab" bench forward "$model" --ctx 512 --chunks "$chunks" --profile
    echo
done
