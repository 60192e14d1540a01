#!/bin/sh
# qlab imatrix-convert on the llama-imatrix file for stories260K: .dat -> GGUF -> .dat
# gives back the original bytes, the format follows --format or the extension, the
# chunk-size note, and the usage errors.
set -u
qlab="$1"
dat="$QLAB_SHARED/golden/imatrix/imatrix-stories260K-tscalib-c128.dat"
[ -f "$dat" ] || { echo "SKIP: $dat not found"; exit 77; }
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }

"$qlab" imatrix-convert "$dat" "$t/a.gguf" --chunk-size 128 >"$t/out" 2>"$t/err" &&
    grep -q "35 entries, 606 chunks of 128 tokens; datasets: ts_calib.txt" "$t/out" &&
    [ ! -s "$t/err" ] && ok ".dat -> GGUF" || { bad ".dat -> GGUF"; cat "$t/out" "$t/err"; }
"$qlab" inspect "$t/a.gguf" | grep -q 'imatrix.chunk_size   u32            128' &&
    ok "GGUF has imatrix.chunk_size 128" || bad "imatrix.chunk_size"
"$qlab" imatrix-convert "$t/a.gguf" "$t/b.dat" >/dev/null && cmp -s "$dat" "$t/b.dat" &&
    ok "GGUF -> .dat gives back llama-imatrix's bytes" || bad "GGUF -> .dat"
"$qlab" imatrix-convert "$dat" "$t/c.bin" --format gguf >/dev/null 2>"$t/err" &&
    head -c 4 "$t/c.bin" | grep -q GGUF && grep -q "assuming 512 tokens" "$t/err" &&
    ok "--format gguf, default chunk size noted" || { bad "--format gguf"; cat "$t/err"; }
"$qlab" imatrix-convert "$t/c.bin" "$t/d.dat" >/dev/null && cmp -s "$dat" "$t/d.dat" &&
    ok "512-token round trip also gives back the bytes" || bad "512 round trip"

expect() { # code description args...
    want=$1; shift; what=$1; shift
    "$qlab" imatrix-convert "$@" >/dev/null 2>&1; got=$?
    [ "$got" -eq "$want" ] && ok "$what" || bad "$what: exit $got, expected $want"
}
expect 2 "no arguments"
expect 2 "one argument" "$dat"
expect 2 "unknown extension" "$dat" "$t/x.bin"
expect 2 "bad --format" "$dat" "$t/x.gguf" --format npz
expect 2 "bad --chunk-size" "$dat" "$t/x.gguf" --chunk-size 0
expect 2 "--chunk-size against a GGUF's own" "$t/a.gguf" "$t/x.dat" --chunk-size 64
expect 2 "unknown option" "$dat" "$t/x.gguf" --frob
expect 1 "missing input" "$t/nope.dat" "$t/x.gguf"
expect 1 "unwritable output" "$dat" /nonexistent-dir/x.gguf --chunk-size 128
expect 0 "--help" --help
[ ! -e "$t/x.gguf" ] && [ ! -e "$t/x.dat" ] && ok "failed runs wrote nothing" || bad "output left"
exit $fail
