#!/bin/sh
# qlab and llama.cpp side by side on this machine (README, "Speed"), one after the other so
# each has the cores to itself:
#   forward   `qlab bench forward` and `llama-perplexity` on the same F16 model (the 30M,
#             Qwen2.5-0.5B and Llama-3.1-8B shapes of bench-forward.sh), ctx 512, the same
#             chunks and threads; llama.cpp's tok/s is its own "prompt eval" figure (the
#             decode alone, its warm-up excluded), qlab's the whole pass with its scoring.
#   quantize  `qlab quantize --pure` and `llama-quantize --pure` of the Qwen2.5-0.5B F16
#             model to each type, the same threads: wall seconds, MB/s of the F16 input file,
#             and whether the two files' tensors are the same bytes.
# llama.cpp: LLAMA_CPP_BIN, a directory holding llama-perplexity and llama-quantize; when
# unset, they are built once under results/llamacpp/ from the llama.cpp source the npm
# package node-llama-cpp ships (its git bundle of llama.cpp's tree; `npm pack` reaches the
# npm registry, cmake and g++ build it with llama.cpp's defaults for this CPU).
#   scripts/bench-llamacpp.sh [forward|quantize|all] [QLAB]
set -eu
cd "$(dirname "$0")/.."
what=${1:-all}
qlab=${2:-build/core/qlab}
threads=$(nproc)
text=$("$qlab" data list 2>/dev/null | awk '$1 == "wikitext-2-test" { print $NF }')
[ -f "$text" ] || { echo "no wikitext-2-test (qlab data list)" >&2; exit 1; }
. scripts/bench-model.sh

NODE_LLAMA_CPP=node-llama-cpp@3.22.1
llamacpp() {
    if [ -n "${LLAMA_CPP_BIN:-}" ]; then
        bin=$LLAMA_CPP_BIN
        return
    fi
    dir=$PWD/results/llamacpp
    bin=$dir/build/bin
    [ -x "$bin/llama-perplexity" ] && [ -x "$bin/llama-quantize" ] && return
    mkdir -p "$dir"
    if [ ! -d "$dir/src" ]; then
        (cd "$dir" && rm -rf package ./*.tgz && npm pack --silent "$NODE_LLAMA_CPP" >/dev/null &&
            tar xzf ./*.tgz package/llama/gitRelease.bundle package/llama/llama.cpp.info.json)
        git clone --quiet "$dir/package/llama/gitRelease.bundle" "$dir/src"
        cp "$dir/package/llama/llama.cpp.info.json" "$dir/src/"
    fi
    echo "building llama-perplexity and llama-quantize in $dir/build" >&2
    cmake -S "$dir/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
        >"$dir/cmake.log" 2>&1 || { cat "$dir/cmake.log" >&2; exit 1; }
    cmake --build "$dir/build" -j "$threads" --target llama-perplexity llama-quantize \
        >"$dir/build.log" 2>&1 || { tail -30 "$dir/build.log" >&2; exit 1; }
}

# seconds CMD...: runs CMD (output to $log) and prints its wall seconds.
seconds() {
    t0=$(date +%s.%N)
    "$@" >"$log" 2>&1 || { tail -20 "$log" >&2; exit 1; }
    awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f\n", b - a }'
}

forward() {
    echo "forward pass, F16, ctx 512, $threads threads (tok/s)"
    printf '| %-12s | %6s | %10s | %16s | %5s |\n' shape chunks qlab llama-perplexity ratio
    printf '|%s|%s|%s|%s|%s|\n' -------------- -------: -----------: -----------------: ------:
    for preset in ${PRESETS:-30M qwen2.5-0.5b llama3.1-8b}; do
        model=$(bench_model "$preset" "$qlab")
        chunks=$(bench_chunks "$preset")
        "$qlab" bench forward "$model" --ctx 512 --chunks "$chunks" --threads "$threads" >"$log" 2>&1 ||
            { cat "$log" >&2; exit 1; }
        ours=$(sed -n 's/.* chunks: \([0-9.]*\) tok\/s.*/\1/p' "$log")
        "$bin/llama-perplexity" -m "$model" -f "$text" -c 512 -b 512 --chunks "$chunks" \
            -t "$threads" >"$log" 2>&1 || { tail -20 "$log" >&2; exit 1; }
        theirs=$(sed -n 's/.*prompt eval time.*, *\([0-9.]*\) tokens per second.*/\1/p' "$log")
        [ -n "$ours" ] && [ -n "$theirs" ] || { echo "no tok/s for $preset in $log" >&2; exit 1; }
        printf '| %-12s | %6s | %10.1f | %16.1f | %5.2f |\n' "$preset" "$chunks" "$ours" "$theirs" \
            "$(awk -v a="$ours" -v b="$theirs" 'BEGIN { print a / b }')"
    done
}

# same_tensors A B: "same" when the two GGUF files hold the same tensors (names, types,
# shapes, offsets) with the same bytes, whatever their metadata; else what differs.
same_tensors() {
    "$qlab" inspect "$1" >"$dir/a.txt" && "$qlab" inspect "$2" >"$dir/b.txt" || { echo unreadable; return; }
    table() { sed -n '/^tensors (/,/^$/p' "$1" | sed 1d >"$1.table"; }
    offset() { sed -n 's/^  data offset *\([0-9]*\).*/\1/p' "$1"; }
    table "$dir/a.txt" && table "$dir/b.txt"
    cmp -s "$dir/a.txt.table" "$dir/b.txt.table" || { echo "tensor table differs"; return; }
    a=$(offset "$dir/a.txt") b=$(offset "$dir/b.txt")
    if cmp -s -i "$a:$b" "$1" "$2"; then echo same; else echo "data differs"; fi
}

quantize() {
    preset=${QUANT_PRESET:-qwen2.5-0.5b}
    model=$(bench_model "$preset" "$qlab")
    dir=results/bench/quantize-$preset
    mkdir -p "$dir"
    mb=$(awk -v s="$(stat -c %s "$model")" 'BEGIN { print s / 1e6 }')
    echo "quantize --pure $model ($mb MB), $threads threads: seconds, MB/s of the input file"
    printf '| %-7s | %6s | %7s | %11s | %9s | %5s | %-9s |\n' type qlab_s llama_s qlab_MB/s llama_MB/s ratio tensors
    printf '|%s|%s|%s|%s|%s|%s|%s|\n' --------- -------: --------: ------------: -----------: ------: -----------
    for ftype in ${TYPES:-Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_M Q4_K_M Q5_K_M Q6_K IQ4_NL IQ4_XS IQ3_S IQ3_XXS TQ2_0}; do
        ours=$(seconds "$qlab" quantize --pure "$model" "$dir/qlab.gguf" "$ftype" "$threads")
        theirs=$(seconds "$bin/llama-quantize" --pure "$model" "$dir/llama.gguf" "$ftype" "$threads")
        printf '| %-7s | %6s | %7s | %11.1f | %10.1f | %5.2f | %-9s |\n' "$ftype" "$ours" "$theirs" \
            "$(awk -v m="$mb" -v s="$ours" 'BEGIN { print m / s }')" \
            "$(awk -v m="$mb" -v s="$theirs" 'BEGIN { print m / s }')" \
            "$(awk -v a="$theirs" -v b="$ours" 'BEGIN { print a / b }')" \
            "$(same_tensors "$dir/qlab.gguf" "$dir/llama.gguf")"
    done
    rm -f "$dir/qlab.gguf" "$dir/llama.gguf"
}

llamacpp
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "llama.cpp: $bin ($(cat "$bin/../../src/llama.cpp.info.json" 2>/dev/null | tr -d '\n ' || echo "LLAMA_CPP_BIN"))"
echo "qlab: $("$qlab" version | head -1); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
case $what in
forward) forward ;;
quantize) quantize ;;
all) forward && echo && quantize ;;
*) echo "usage: scripts/bench-llamacpp.sh [forward|quantize|all] [QLAB]" >&2; exit 2 ;;
esac
