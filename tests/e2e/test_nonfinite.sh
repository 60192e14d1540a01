#!/bin/sh
# Non-finite figures are failures, never results (README, "What a run measures"):
# - a weight that is NaN: qlab eval refuses the model naming the tensor, row and column;
# - a weight of 3e38 (finite, but the products overflow): qlab eval exits 1 saying the
#   perplexity is not finite instead of printing PPL = nan;
# - a weight of 1e5 in an F32 model: the reference is finite, an F16 config of it is not
#   (1e5 is above the largest half): that config's run is stored failed with the reason,
#   --strict exits 1, and the Q8_0 config of the same sweep is done;
# - the 3e38 model as a sweep's reference: the sweep stops before any config.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
need_file "$QLAB_SHARED/models/stories260K.gguf"

"$qlab" synth -o "$tmp/m.gguf" --dim 64 --ff 128 --layers 1 --heads 2 --kv-heads 1 \
    >/dev/null 2>&1 || { bad "synth"; exit 1; }
# poke FILE TENSOR BYTES: writes the 4 bytes (printf escapes, little-endian f32) over the
# first value of TENSOR, at the offsets qlab inspect prints.
poke() {
    cp "$tmp/m.gguf" "$1"
    data=$("$qlab" inspect "$1" | awk '$1 == "data" && $2 == "offset" { print $3 }')
    off=$("$qlab" inspect "$1" | awk -v t="$2" '$2 == t { print $NF }')
    printf "$3" | dd of="$1" bs=1 seek=$((data + off)) conv=notrunc status=none
}
poke "$tmp/nan.gguf" blk.0.attn_q.weight '\000\000\300\177'   # NaN
poke "$tmp/big.gguf" blk.0.ffn_down.weight '\346\261\141\177' # 3.0e38
poke "$tmp/1e5.gguf" blk.0.ffn_up.weight '\000\120\303\107'   # 100000

eval_m() { "$qlab" eval "$1" --text ts-eval --ctx 64 --chunks 2 --threads 1; }
expect 1 "eval of a model with a NaN weight fails" eval_m "$tmp/nan.gguf"
has "$tmp/err" "tensor 'blk.0.attn_q.weight' (F32): the value at row 0, column 0 is NaN" \
    "the error names the tensor, row and column"
expect 1 "eval of a model whose products overflow fails" eval_m "$tmp/big.gguf"
has "$tmp/err" "the perplexity is" "the error says the perplexity is not finite"
if grep -q "PPL = " "$tmp/out"; then bad "a PPL was printed: $(cat "$tmp/out")"; else
    ok "no PPL printed"; fi
expect 0 "eval of the model with a large finite weight works" eval_m "$tmp/1e5.gguf"

cat >"$tmp/s.sweep" <<END
[sweep]
name    = nonfinite
model   = $tmp/1e5.gguf
text    = ts-eval
ctx     = 64
chunks  = 2
threads = 1

[grid]
weight_type = F16 Q8_0
END
db="$tmp/s.db"
expect 1 "--strict fails on the non-finite config" \
    "$qlab" sweep "$tmp/s.sweep" --db "$db" --cache-dir "$tmp/cache" --strict
has "$tmp/err" "config 0 (F16) failed: tensor 'blk.0.ffn_up.weight' (F16)" "stderr names the config and the tensor"
state() { rows "$db" "SELECT r.status FROM runs r JOIN configs c ON c.id = r.config_id
    WHERE c.weight_type = '$1'"; }
[ "$(state F16)" = failed ] && ok "the F16 run is stored failed" ||
    bad "F16 run is '$(state F16)'"
[ "$(state Q8_0)" = done ] && ok "the Q8_0 run is done" || bad "Q8_0 run is '$(state Q8_0)'"
rows "$db" "SELECT error FROM failed_runs" >"$tmp/failed"
has "$tmp/failed" "blk.0.ffn_up.weight" "the stored error names the tensor"
sed "s|$tmp/1e5.gguf|$tmp/big.gguf|" "$tmp/s.sweep" >"$tmp/big.sweep"
expect 1 "a sweep whose reference overflows fails before any config" \
    "$qlab" sweep "$tmp/big.sweep" --db "$tmp/big.db" --cache-dir "$tmp/cache"
has "$tmp/err" "the reference model computes non-finite hidden states" \
    "the error says the reference is not finite"
exit "$fail"
