#!/bin/sh
# Memory does not grow with the number of layers: qlab eval of an F16 synthetic model with
# 2 and with 10 layers (the same widths) peaks at about the same anonymous memory, the
# weights staying in the file's memory map and only one layer existing in f32 at a time.
# A pass that widened the whole model to f32 would hold 8 more layers: 8 x 16.5 MB here.
# Peak RssAnon (/proc/PID/status) is sampled every 20 ms while the pass runs.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
[ -r /proc/self/status ] || skip "no /proc/PID/status on this system"

# One layer in f32: (2 x 512 x 512 + 2 x 512 x 256 + 3 x 512 x 1536) x 4 bytes = 12.6 MB.
LAYER_KB=12288

peak_kb() {
    "$@" >"$tmp/out" 2>"$tmp/err" &
    pid=$!
    peak=0
    while [ -d "/proc/$pid" ]; do
        kb=$(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
        [ -n "${kb:-}" ] && [ "$kb" -gt "$peak" ] && peak=$kb
        sleep 0.02
    done
    wait "$pid" || { bad "$*: exit $?"; cat "$tmp/err"; }
    echo "$peak"
}

for l in 2 10; do
    expect 0 "synth $l layers" "$qlab" synth -o "$tmp/m$l.gguf" --dim 512 --ff 1536 \
        --layers "$l" --heads 8 --kv-heads 4 --type F16 --seed 5
done
p2=$(peak_kb "$qlab" eval "$tmp/m2.gguf" -f tinystories-valid -c 128 --chunks 8 -t 1 -q)
p10=$(peak_kb "$qlab" eval "$tmp/m10.gguf" -f tinystories-valid -c 128 --chunks 8 -t 1 -q)
echo "peak RssAnon: $p2 kB with 2 layers, $p10 kB with 10 layers"
[ "$p2" -gt 0 ] && [ "$p10" -gt 0 ] && ok "sampled both passes" || bad "no samples"
# Less than two layers' f32 more (the measurement's slack), where widening would add eight.
if [ $((p10 - p2)) -lt $((2 * LAYER_KB)) ]; then
    ok "10 layers take at most two layers' f32 more than 2 layers"
else
    bad "10 layers take $((p10 - p2)) kB more than 2 layers (a layer in f32: $LAYER_KB kB)"
fi
exit "$fail"
