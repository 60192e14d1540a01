#!/bin/sh
# qlab imatrix-convert on the llama-imatrix file for stories260K: .dat -> GGUF -> .dat
# gives back the original bytes, the format follows --format or the extension, the
# chunk-size note, and the usage errors.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
dat="$QLAB_SHARED/golden/imatrix/imatrix-stories260K-tscalib-c128.dat"
need_file "$dat"

"$qlab" imatrix-convert "$dat" "$tmp/a.gguf" --chunk-size 128 >"$tmp/out" 2>"$tmp/err" &&
    grep -q "35 entries, 606 chunks of 128 tokens; datasets: ts_calib.txt" "$tmp/out" &&
    [ ! -s "$tmp/err" ] && ok ".dat -> GGUF" || { bad ".dat -> GGUF"; cat "$tmp/out" "$tmp/err"; }
"$qlab" inspect "$tmp/a.gguf" | grep -q 'imatrix.chunk_size   u32            128' &&
    ok "GGUF has imatrix.chunk_size 128" || bad "imatrix.chunk_size"
"$qlab" imatrix-convert "$tmp/a.gguf" "$tmp/b.dat" >/dev/null && cmp -s "$dat" "$tmp/b.dat" &&
    ok "GGUF -> .dat gives back llama-imatrix's bytes" || bad "GGUF -> .dat"
"$qlab" imatrix-convert "$dat" "$tmp/c.bin" --format gguf >/dev/null 2>"$tmp/err" &&
    head -c 4 "$tmp/c.bin" | grep -q GGUF && grep -q "assuming 512 tokens" "$tmp/err" &&
    ok "--format gguf, default chunk size noted" || { bad "--format gguf"; cat "$tmp/err"; }
"$qlab" imatrix-convert "$tmp/c.bin" "$tmp/d.dat" >/dev/null && cmp -s "$dat" "$tmp/d.dat" &&
    ok "512-token round trip also gives back the bytes" || bad "512 round trip"

expect 2 "no arguments" "$qlab" imatrix-convert
expect 2 "one argument" "$qlab" imatrix-convert "$dat"
expect 2 "unknown extension" "$qlab" imatrix-convert "$dat" "$tmp/x.bin"
expect 2 "bad --format" "$qlab" imatrix-convert "$dat" "$tmp/x.gguf" --format npz
expect 2 "bad --chunk-size" "$qlab" imatrix-convert "$dat" "$tmp/x.gguf" --chunk-size 0
expect 2 "--chunk-size against a GGUF's own" "$qlab" imatrix-convert "$tmp/a.gguf" "$tmp/x.dat" --chunk-size 64
expect 2 "unknown option" "$qlab" imatrix-convert "$dat" "$tmp/x.gguf" --frob
expect 1 "missing input" "$qlab" imatrix-convert "$tmp/nope.dat" "$tmp/x.gguf"
expect 1 "unwritable output" "$qlab" imatrix-convert "$dat" /nonexistent-dir/x.gguf --chunk-size 128
expect 0 "--help" "$qlab" imatrix-convert --help
[ ! -e "$tmp/x.gguf" ] && [ ! -e "$tmp/x.dat" ] && ok "failed runs wrote nothing" || bad "output left"
exit $fail
