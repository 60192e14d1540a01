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
. scripts/bench-model.sh
for preset in $presets; do
    model=$(bench_model "$preset" "$qlab")
    chunks=$(bench_chunks "$preset")
    "$qlab" bench forward "$model" --ctx 512 --chunks "$chunks" --profile
    echo
done
