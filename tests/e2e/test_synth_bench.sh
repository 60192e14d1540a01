#!/bin/sh
# qlab synth and qlab bench forward end to end: a small synthetic model is written,
# written again identically, benchmarked; usage and runtime errors give exit 2 and 1.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
expect 0 "synth small" "$qlab" synth -o "$tmp/a.gguf" --dim 256 --ff 256 --layers 1 --heads 4 --kv-heads 4 --seed 3
expect 0 "synth again" "$qlab" synth -o "$tmp/b.gguf" --dim 256 --ff 256 --layers 1 --heads 4 --kv-heads 4 --seed 3
cmp -s "$tmp/a.gguf" "$tmp/b.gguf" || { echo "FAIL: same options, different files"; fail=1; }
expect 0 "synth F16, padded vocab" "$qlab" synth -o "$tmp/c.gguf" --dim 256 --ff 256 --layers 1 --heads 2 --kv-heads 1 --vocab 1024 --type F16
expect 0 "bench forward" "$qlab" bench forward "$tmp/c.gguf" --ctx 32 --chunks 2 --threads 1
grep -q "tok/s" "$tmp/out" || { echo "FAIL: bench printed no tok/s"; fail=1; }
grep -q "vocab 1024" "$tmp/out" || { echo "FAIL: bench does not show the padded vocabulary"; fail=1; }
# the profile: every phase printed, shares of the pass that add up to about 100%
expect 0 "bench forward --profile" "$qlab" bench forward "$tmp/c.gguf" --ctx 32 --chunks 2 \
    --threads 1 --profile
for phase in attn_q ffn_down attention "decode to f32" "head (output)"; do
    grep -q "^  $phase " "$tmp/out" || { echo "FAIL: the profile has no '$phase'"; fail=1; }
done
awk '/^profile/ {p = 1; next} p {s += $NF} END {exit !(s > 90 && s < 110)}' "$tmp/out" ||
    { echo "FAIL: the profile's shares do not add up to the pass"; cat "$tmp/out"; fail=1; }
# a mixture of experts: its experts timed together
expect 0 "synth MoE" "$qlab" synth -o "$tmp/m.gguf" --arch qwen3moe --experts 4 --experts-used 2 \
    --expert-ff 256 --dim 256 --ff 256 --layers 1 --heads 4 --kv-heads 2
expect 0 "bench forward MoE" "$qlab" bench forward "$tmp/m.gguf" --ctx 32 --chunks 2 --profile
grep -q "^experts 2 of 4 per token" "$tmp/out" || { echo "FAIL: no experts line"; fail=1; }
grep -q "^  experts (all kinds) " "$tmp/out" || { echo "FAIL: no experts in the profile"; fail=1; }
expect 2 "synth without -o" "$qlab" synth --dim 256
expect 2 "synth bad type" "$qlab" synth -o "$tmp/x.gguf" --type Q4_0
expect 2 "synth bad number" "$qlab" synth -o "$tmp/x.gguf" --dim 12x
expect 1 "synth heads do not divide dim" "$qlab" synth -o "$tmp/x.gguf" --dim 256 --heads 3 --kv-heads 1
expect 1 "synth vocab below the tokenizer" "$qlab" synth -o "$tmp/x.gguf" --vocab 100
[ -e "$tmp/x.gguf" ] && { echo "FAIL: a failed synth left a file"; fail=1; }
expect 2 "bench without benchmark" "$qlab" bench
expect 2 "bench without model" "$qlab" bench forward
expect 2 "bench bad ctx" "$qlab" bench forward "$tmp/a.gguf" --ctx 0
expect 1 "bench missing model" "$qlab" bench forward "$tmp/none.gguf"
grep -q "none.gguf" "$tmp/err" || { echo "FAIL: error does not name the file"; fail=1; }
exit $fail
