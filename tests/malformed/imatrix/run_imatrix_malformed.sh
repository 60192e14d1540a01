#!/bin/sh
# Runs `qlab imatrix-convert FILE OUT` on every file of the malformed imatrix corpus
# (expected.tsv), for both output formats: exit 1, one "qlab: error: <path>: ..." line
# containing the expected substring, no sanitizer report, and no output file left.
# usage: run_imatrix_malformed.sh QLAB_BINARY CORPUS_DIR
set -u
qlab="$1"
dir="$2"
tsv="$dir/expected.tsv"
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}exitcode=86"
UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}halt_on_error=1:exitcode=87"
export ASAN_OPTIONS UBSAN_OPTIONS
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
n=0
for f in "$dir"/*.dat "$dir"/*.gguf; do
    name=$(basename "$f")
    awk -F '\t' -v n="$name" '$1 == n { found = 1 } END { exit !found }' "$tsv" ||
        { echo "FAIL: $name is not listed in expected.tsv"; fail=1; }
done
tab=$(printf '\t')
while IFS="$tab" read -r name want; do
    case "$name" in '#'* | '') continue ;; esac
    f="$dir/$name"
    n=$((n + 1))
    [ -f "$f" ] || { echo "FAIL: $name listed but missing"; fail=1; continue; }
    for ext in gguf dat; do
        out="$tmp/out.$ext"
        "$qlab" imatrix-convert "$f" "$out" >"$tmp/out" 2>"$tmp/err"
        rc=$?
        first=$(head -n 1 "$tmp/err")
        if [ "$rc" -ne 1 ]; then
            echo "FAIL: $name -> .$ext: exit $rc, expected 1"; cat "$tmp/err"; fail=1
        elif grep -qE 'Sanitizer|runtime error:' "$tmp/err"; then
            echo "FAIL: $name -> .$ext: sanitizer report"; cat "$tmp/err"; fail=1
        elif [ "$(wc -l <"$tmp/err")" -ne 1 ]; then
            echo "FAIL: $name -> .$ext: expected one line on stderr"; cat "$tmp/err"; fail=1
        elif case "$first" in "qlab: error: $f: "*) false ;; *) true ;; esac; then
            echo "FAIL: $name: message does not start with 'qlab: error: $f: '"
            echo "  got: $first"; fail=1
        elif ! printf '%s\n' "$first" | grep -qF -- "$want"; then
            echo "FAIL: $name: message lacks '$want'"; echo "  got: $first"; fail=1
        elif [ -e "$out" ] || [ -n "$(ls "$tmp" | grep '^out\..*\.tmp')" ]; then
            echo "FAIL: $name -> .$ext: an output file was left behind"; fail=1
        else
            echo "ok: $name -> .$ext"
        fi
    done
done <"$tsv"
echo "$n files checked"
[ "$n" -ge 8 ] || { echo "FAIL: only $n malformed imatrix files"; fail=1; }
exit $fail
