#!/bin/sh
# qlab and llama.cpp side by side on this machine (README, "Speed"), one after the other so
# each has the cores to itself:
#   forward   `qlab bench forward` and `llama-perplexity` on the same F16 model (the 30M,
#             Qwen2.5-0.5B and Llama-3.1-8B shapes of bench-forward.sh), ctx 512, the same
#             chunks and threads, each after its own warm-up, each pass with its scoring;
#             llama.cpp's tok/s from its log's time stamps (from "calculating perplexity"
#             to "Final estimate": chunks x 512 tokens), with its defaults otherwise
#             (flash attention where it picks it, F16 K/V cache).
#   quantize  `qlab quantize --pure` and `llama-quantize --pure` of the Qwen3-0.6B F16
#             model to each type, the same threads: wall seconds, MB/s of the F16 input file,
#             and whether the two files' tensors are the same bytes. Qwen3-0.6B, not
#             Qwen2.5-0.5B: its rows are multiples of 256, so no tensor falls back to
#             another type (Qwen2.5's 896-wide rows do, and llama.cpp's fallback for Q2_K
#             and Q3_K is Q4_0 since b4747's IQ4_NL, which qlab keeps).
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
            tar xzf ./*.tgz package/llama/gitRelease.bundle)
        git -c advice.detachedHead=false clone --quiet "$dir/package/llama/gitRelease.bundle" "$dir/src"
    fi
    echo "building llama-perplexity and llama-quantize in $dir/build" >&2
    cmake -S "$dir/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
        >"$dir/cmake.log" 2>&1 || { cat "$dir/cmake.log" >&2; exit 1; }
    cmake --build "$dir/build" -j "$threads" --target llama-perplexity llama-quantize \
        >"$dir/build.log" 2>&1 || { tail -30 "$dir/build.log" >&2; exit 1; }
}

# seconds CMD...: runs CMD (output to $log) and prints its wall seconds; the best of three
# runs when one takes under 10 s (those are mostly file input and output, which vary).
seconds() {
    best=
    for _ in 1 2 3; do
        t0=$(date +%s.%N)
        "$@" >"$log" 2>&1 || { tail -20 "$log" >&2; exit 1; }
        best=$(awk -v a="$t0" -v b="$(date +%s.%N)" -v best="$best" \
            'BEGIN { t = b - a; if (best != "" && best < t) t = best; printf "%.2f\n", t }')
        awk -v t="$best" 'BEGIN { exit !(t >= 10) }' && break
    done
    echo "$best"
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
        theirs=$(awk -v tokens=$((chunks * 512)) '
            function t(stamp, p) { split(stamp, p, "."); return p[1] * 60 + p[2] + p[3] / 1e3 + p[4] / 1e6 }
            / I perplexity: calculating perplexity over / { a = t($1) }
            / I Final estimate: / { b = t($1) }
            END { if (a && b > a) print tokens / (b - a) }' "$log")
        [ -n "$ours" ] && [ -n "$theirs" ] || { echo "no tok/s for $preset in $log" >&2; exit 1; }
        printf '| %-12s | %6s | %10.1f | %16.1f | %5.2f |\n' "$preset" "$chunks" "$ours" "$theirs" \
            "$(awk -v a="$ours" -v b="$theirs" 'BEGIN { print a / b }')"
    done
}

# same_tensors A B: "same" when the two GGUF files hold the same tensors (names, types,
# shapes) with the same bytes, whatever their metadata and tensor order; else what differs.
same_tensors() {
    for f in "$1" "$2"; do # name type shape bytes absolute-offset, by name
        "$qlab" inspect --max-array 0 "$f" | awk '
            /^  data offset/ { base = $3 }
            /^tensors \(/ { on = 1; getline; next }
            on && NF == 0 { on = 0 }
            on { shape = $4; for (i = 5; i <= NF - 3; i++) shape = shape $i
                 print $2, $3, shape, $(NF - 1), base + $NF }' | sort >"$f.tensors" ||
            { echo unreadable; return; }
    done
    cut -d' ' -f1-4 "$1.tensors" >"$1.table"
    cut -d' ' -f1-4 "$2.tensors" >"$2.table"
    cmp -s "$1.table" "$2.table" || { echo "types differ"; return; }
    differ=$(paste -d' ' "$1.tensors" "$2.tensors" | while read -r name _ _ bytes a _ _ _ _ b; do
        cmp -s -n "$bytes" -i "$a:$b" "$1" "$2" || echo "$name"
    done | wc -l)
    [ "$differ" = 0 ] && echo same || echo "$differ tensors differ"
}

quantize() {
    preset=${QUANT_PRESET:-qwen3-0.6b}
    model=$(bench_model "$preset" "$qlab")
    dir=results/bench/quantize-$preset
    mkdir -p "$dir"
    mb=$(awk -v s="$(stat -c %s "$model")" 'BEGIN { print s / 1e6 }')
    echo "quantize --pure $model ($mb MB), $threads threads: seconds, MB/s of the input file"
    printf '| %-7s | %6s | %7s | %11s | %9s | %5s | %-9s |\n' type qlab_s llama_s qlab_MB/s llama_MB/s ratio tensors
    printf '|%s|%s|%s|%s|%s|%s|%s|\n' --------- -------: --------: ------------: -----------: ------: -----------
    for ftype in ${TYPES:-Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_M Q4_K_M Q5_K_M Q6_K IQ4_NL IQ4_XS IQ3_S TQ1_0 TQ2_0}; do
        ours=$(seconds "$qlab" quantize --pure "$model" "$dir/qlab.gguf" "$ftype" "$threads")
        theirs=$(seconds "$bin/llama-quantize" --pure "$model" "$dir/llama.gguf" "$ftype" "$threads")
        printf '| %-7s | %6s | %7s | %11.1f | %10.1f | %5.2f | %-9s |\n' "$ftype" "$ours" "$theirs" \
            "$(awk -v m="$mb" -v s="$ours" 'BEGIN { print m / s }')" \
            "$(awk -v m="$mb" -v s="$theirs" 'BEGIN { print m / s }')" \
            "$(awk -v a="$theirs" -v b="$ours" 'BEGIN { print a / b }')" \
            "$(same_tensors "$dir/qlab.gguf" "$dir/llama.gguf")"
    done
    rm -f "$dir"/qlab.gguf* "$dir"/llama.gguf*
}

llamacpp
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "llama.cpp: $bin: $("$bin/llama-perplexity" --version 2>&1 | grep -m1 '^version')"
echo "qlab: $("$qlab" version | head -1); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; QLAB_GEMM=${QLAB_GEMM:-auto}"
case $what in
forward) forward ;;
quantize) quantize ;;
all) forward && echo && quantize ;;
*) echo "usage: scripts/bench-llamacpp.sh [forward|quantize|all] [QLAB]" >&2; exit 2 ;;
esac
