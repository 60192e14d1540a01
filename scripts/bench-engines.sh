#!/bin/sh
# The reference pass's speed, streaming engine against an earlier qlab (README, "Real model
# sizes"): `qlab bench forward` of both binaries, interleaved RUNS times on each model so
# that both see the same machine (on a shared 2-core machine one run's figure moves by
# several per cent from one minute to the next), then the median milliseconds per chunk of
# each and their ratio. The models are written under results/bench/ when missing: the
# 30M-parameter synthetic model (F32) and one with Qwen2.5-0.5B's shapes in llama form
# (F16; the engine before streaming reads neither qwen2 nor tied embeddings). Run by hand:
#   scripts/bench-engines.sh OLD_QLAB [NEW_QLAB] [RUNS]
#   (OLD_QLAB: a build of 49b7249, the engine before streaming; see compare-engines.sh)
set -eu
cd "$(dirname "$0")/.."
old=${1:?usage: scripts/bench-engines.sh OLD_QLAB [NEW_QLAB] [RUNS]}
new=${2:-build/core/qlab}
runs=${3:-5}
dir=results/bench
mkdir -p "$dir"

# model file, synth options, bench options
set -- \
    "$dir/30M-F32.gguf" "--preset 30M" "--ctx 256 --chunks 16" \
    "$dir/issue0.5b-F16.gguf" \
    "--dim 896 --ff 4864 --layers 24 --heads 14 --kv-heads 2 --vocab 151936 --type F16" \
    "--ctx 512 --chunks 4"
while [ $# -ge 3 ]; do
    model=$1 synth=$2 opts=$3
    shift 3
    if [ ! -f "$model" ]; then
        echo "writing $model"
        # shellcheck disable=SC2086
        "$new" synth $synth -o "$model.tmp" >/dev/null && mv "$model.tmp" "$model"
    fi
    : >"$dir/engines.times"
    i=0
    while [ "$i" -lt "$runs" ]; do
        for e in old new; do
            eval bin=\$$e
            # shellcheck disable=SC2086
            ms=$("$bin" bench forward "$model" $opts 2>&1 |
                sed -n 's/.*(\([0-9.]*\) ms per chunk.*/\1/p')
            [ -n "$ms" ] || { echo "$e: qlab bench forward $model failed"; exit 1; }
            echo "$e $ms" >>"$dir/engines.times"
        done
        i=$((i + 1))
    done
    echo "$(basename "$model") ($opts), $runs interleaved runs, ms per chunk:"
    for e in old new; do
        printf '  %-4s %s\n' "$e" "$(awk -v e=$e '$1 == e {printf " %s", $2}' "$dir/engines.times")"
    done
    for e in old new; do
        awk -v e=$e '$1 == e {print $2}' "$dir/engines.times" | sort -n |
            awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'
    done | paste -s - | awk '{printf "  median: old %.1f, new %.1f ms per chunk; new / old = %.3f\n", $1, $2, $2 / $1}'
done
