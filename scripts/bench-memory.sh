#!/bin/sh
# The model-size benchmark (README, "Real model sizes"): a sweep of Q8_0 and Q4_K (act f32,
# wikitext-2, ctx 512) on a synthetic model with a real model's shapes, measured from
# outside: the peak anonymous memory of the qlab process (RssAnon from /proc, sampled every
# 0.2 s; the pages of the memory-mapped model file are not counted, the kernel can drop
# them), the seconds of the reference pass and of each config, and the size of the
# reference cache. Nothing of it is timed by the tests; run it by hand:
#   scripts/bench-memory.sh [PRESET] [CHUNKS] [TYPE] [QLAB]
#   scripts/bench-memory.sh qwen2.5-0.5b 4 F16
#   scripts/bench-memory.sh llama3.1-8b 2 F16      # writes a 16 GB model first (~20 min)
#   LAYERS=6 WEIGHTS="Q8_0 Q4_K Q4_K_M" scripts/bench-memory.sh qwen3-30b-a3b 2 BF16
# LAYERS writes that many blocks of the preset's shape; WEIGHTS are the sweep's weight types.
# The synthetic model is cached under results/bench/ (delete it to regenerate).
set -eu
cd "$(dirname "$0")/.."
preset=${1:-qwen2.5-0.5b}
chunks=${2:-4}
type=${3:-F16}
qlab=${4:-build/core/qlab}
layers=${LAYERS:-}
weights=${WEIGHTS:-Q8_0 Q4_K}
dir=results/bench
mkdir -p "$dir"
model="$dir/$preset${layers:+-l$layers}-$type.gguf"
if [ ! -f "$model" ]; then
    echo "writing $model"
    "$qlab" synth --preset "$preset" ${layers:+--layers "$layers"} --type "$type" \
        -o "$model.tmp" && mv "$model.tmp" "$model"
fi
run="$dir/run-$preset${layers:+-l$layers}-$type-$chunks"
rm -rf "$run"
mkdir -p "$run"
cat >"$run/bench.sweep" <<EOF
[sweep]
name    = bench-$preset
model   = $PWD/$model
text    = wikitext-2-test
ctx     = 512
chunks  = $chunks

[grid]
weight_type = $weights
act_mode    = f32
EOF

# Samples RssAnon (kB) of PID into FILE until the process ends; the last line is the peak.
sample() {
    peak=0
    while [ -d "/proc/$1" ]; do
        kb=$(awk '/^RssAnon:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0)
        [ -n "$kb" ] && [ "$kb" -gt "$peak" ] && peak=$kb
        echo "$peak" >"$2"
        sleep 0.2
    done
}

"$qlab" sweep "$run/bench.sweep" --db "$run/qlab.db" --cache-dir "$run/cache" --no-summary \
    >"$run/sweep.out" 2>"$run/sweep.err" &
pid=$!
sample "$pid" "$run/peak" &
sampler=$!
status=0
wait "$pid" || status=$?
wait "$sampler" || true
[ "$status" -eq 0 ] || { echo "the sweep failed ($status):"; tail -5 "$run/sweep.err"; exit 1; }

peak_kb=$(cat "$run/peak")
file_bytes=$(stat -c %s "$model")
cache_bytes=$(du -cb "$run"/cache/ref-*.bin | tail -n 1 | cut -f1)
echo "model: $preset ($type), $(awk -v b="$file_bytes" 'BEGIN {printf "%.2f GB", b / 1e9}') file"
grep -E "^memory:" "$run/sweep.err" || true
awk -v k="$peak_kb" -v f="$file_bytes" \
    'BEGIN {printf "peak anonymous memory: %.2f GiB (%.2f x the model file)\n", k / 1048576, k * 1024 / f}'
awk -v b="$cache_bytes" 'BEGIN {printf "reference cache: %.2f MB\n", b / 1e6}'
sqlite3 -separator ' ' "$run/qlab.db" \
    "SELECT c.weight_type, printf('%.1f', r.seconds), printf('%.1f', r.quant_seconds),
            printf('%.1f', r.ref_seconds), printf('%.3f', r.quant_seconds / r.ref_seconds),
            printf('%.3e', m.kld_mean)
     FROM runs r JOIN configs c ON c.id = r.config_id JOIN metrics m ON m.run_id = r.id
     ORDER BY r.id" |
    awk 'BEGIN {print "config  seconds  pass  reference pass  passes  KLD mean"}
         {printf "%-6s %8s %6s %15s %7s  %s\n", $1, $2, $3, $4, $5, $6}'
