#!/bin/sh
# qlab fit from the command line on stories260K: usage errors (exit 2), an infeasible
# budget (exit 1, naming the smallest feasible size), the envelope arithmetic, the
# cache, and a written model that reads back with the planned types.
set -u
qlab="$1"
model="$QLAB_SHARED/models/stories260K.gguf"
[ -f "$model" ] || { echo "SKIP: $model not found"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
expect() { # expected-code description command...
    want=$1; shift; what=$1; shift
    "$@" >"$tmp/out" 2>"$tmp/err"; got=$?
    if [ "$got" -ne "$want" ]; then
        echo "FAIL: $what: exit $got, expected $want"; cat "$tmp/err"; fail=1
    else echo "ok: $what"; fi
}
grep_out() { # file pattern description
    if grep -q -- "$2" "$1"; then echo "ok: $3"; else echo "FAIL: $3 ('$2' not in $1)"; cat "$1"; fail=1; fi
}

expect 2 "no budget" "$qlab" fit "$model" --dry-run
expect 2 "budget and envelope" "$qlab" fit "$model" --budget 1MiB --envelope 2MiB --dry-run
expect 2 "neither -o nor --dry-run" "$qlab" fit "$model" --budget 1MiB
expect 2 "unknown option" "$qlab" fit "$model" --budget 1MiB --dry-run --frob
expect 2 "bad unit" "$qlab" fit "$model" --budget 4G --dry-run
grep_out "$tmp/err" "KiB" "bad unit message lists the units"
expect 2 "bad bpw" "$qlab" fit "$model" --budget bpw:x --dry-run
expect 2 "--ctx without --envelope" "$qlab" fit "$model" --budget 1MiB --ctx 64 --dry-run
expect 1 "missing model" "$qlab" fit "$tmp/nope.gguf" --budget 1MiB --dry-run
expect 1 "missing imatrix" "$qlab" fit "$model" --imatrix "$tmp/nope.dat" --budget 1MiB --dry-run

# Everything below needs the quantization formats.
if ! "$qlab" fit "$model" --budget 1GiB --types F16 --dry-run --no-cache >"$tmp/out" 2>"$tmp/err"; then
    if grep -q "cannot quantize it yet" "$tmp/err"; then
        echo "SKIP: the quantization formats are not in this build"; exit 77
    fi
    echo "FAIL: plain F16 fit"; cat "$tmp/err"; exit 1
fi

expect 1 "infeasible budget" "$qlab" fit "$model" --budget 100KiB --dry-run --cache-dir "$tmp/cache"
grep_out "$tmp/err" "smallest feasible size 240.47 KiB (246240 B)" "infeasible budget names the smallest size"

expect 0 "bpw budget, written" "$qlab" fit "$model" --budget bpw:8 -o "$tmp/fit.gguf" --cache-dir "$tmp/cache" --quiet
grep_out "$tmp/out" "read from the cache" "second run reads the error table from the cache"
grep_out "$tmp/out" "used        288.00 KiB (294912 B) = 100.0000% of the budget" "bpw:8 fills the budget"
grep_out "$tmp/out" "read back: every tensor in its planned type and size" "output read back"
[ -f "$tmp/fit.gguf" ] && echo "ok: output exists" || { echo "FAIL: no output file"; fail=1; }

# With llama-imatrix's importance matrix: errors weighted by it (the head by
# output_norm^2), and llama-quantize's provenance keys in the output.
imatrix="$QLAB_SHARED/golden/imatrix/imatrix-stories260K-tscalib-c128.dat"
expect 0 "imatrix fit" "$qlab" fit "$model" --imatrix "$imatrix" --budget bpw:7 -o "$tmp/fit-imat.gguf" --cache-dir "$tmp/cache" --quiet
grep_out "$tmp/out" "imatrix     .*(35 entries)" "imatrix summary"
grep_out "$tmp/out" "blk.0.attn_q.weight .* imatrix$" "attn_q weighted by its imatrix entry"
grep_out "$tmp/out" "output.weight .* output_norm$" "head weighted by output_norm^2"
grep_out "$tmp/out" "measured" "another imatrix is another cache entry"
"$qlab" inspect "$tmp/fit-imat.gguf" >"$tmp/inspect" 2>&1
grep_out "$tmp/inspect" "quantize.imatrix.chunks_count" "provenance keys written"

# Envelope: stories260K has 5 layers, 4 KV heads of dimension 8: at ctx 128 the f16
# KV cache is 5*128*4*8*2*2 = 81920 bytes.
expect 0 "envelope" "$qlab" fit "$model" --envelope 1MiB --ctx 128 --reserve 200KiB --dry-run --cache-dir "$tmp/cache"
grep_out "$tmp/out" "KV cache    80.00 KiB (81920 B) = 5 layers x ctx 128 x 4 KV heads x head dim 8" "KV cache arithmetic"
grep_out "$tmp/out" "budget      744.00 KiB (761856 B) = envelope - KV cache - reserve" "envelope budget"
expect 1 "envelope too small" "$qlab" fit "$model" --envelope 200KiB --ctx 128 --reserve 150KiB --dry-run --cache-dir "$tmp/cache"
grep_out "$tmp/err" "leaves nothing for the model" "envelope error"
exit $fail
