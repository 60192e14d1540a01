#!/bin/sh
# Runs `qlab inspect` on every file of the malformed GGUF corpus (expected.tsv) and on
# the valid edge cases in valid/:
#   malformed: exit 1, no output on stdout, one error line on stderr that names the file
#              ("qlab: error: <path>: offset N: ...") and contains the expected substring;
#   valid:     exit 0, nothing on stderr.
# Under ASan/UBSan a sanitizer report fails the case even when the exit code looks right.
# usage: run_malformed.sh QLAB_BINARY CORPUS_DIR
set -u
qlab="$1"
dir="$2"
tsv="$dir/expected.tsv"
# Sanitizers must not exit with 1, the code a correct rejection uses.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}exitcode=86"
UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}halt_on_error=1:exitcode=87"
export ASAN_OPTIONS UBSAN_OPTIONS
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
n=0

sanitizer_report() {
    grep -qE 'Sanitizer|runtime error:' "$tmp/err"
}

# Every corpus file is listed, and every listed file exists.
for f in "$dir"/*.gguf; do
    name=$(basename "$f")
    if ! awk -F '\t' -v n="$name" '$1 == n { found = 1 } END { exit !found }' "$tsv"; then
        echo "FAIL: $name is not listed in expected.tsv"
        fail=1
    fi
done

tab=$(printf '\t')
while IFS="$tab" read -r name want; do
    case "$name" in '#'* | '') continue ;; esac
    f="$dir/$name"
    n=$((n + 1))
    if [ ! -f "$f" ]; then
        echo "FAIL: $name listed in expected.tsv but missing"
        fail=1
        continue
    fi
    "$qlab" inspect "$f" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    first=$(head -n 1 "$tmp/err")
    lines=$(wc -l <"$tmp/err")
    if [ "$rc" -ne 1 ]; then
        echo "FAIL: $name: exit $rc, expected 1"; cat "$tmp/err"; fail=1
    elif sanitizer_report; then
        echo "FAIL: $name: sanitizer report"; cat "$tmp/err"; fail=1
    elif [ -s "$tmp/out" ]; then
        echo "FAIL: $name: printed to stdout before failing"; fail=1
    elif [ "$lines" -ne 1 ]; then
        echo "FAIL: $name: $lines lines on stderr, expected one"; cat "$tmp/err"; fail=1
    elif case "$first" in "qlab: error: $f: offset "*) false ;; *) true ;; esac; then
        echo "FAIL: $name: message does not start with 'qlab: error: $f: offset N:'"
        echo "  got: $first"; fail=1
    elif ! printf '%s\n' "$first" | grep -qF -- "$want"; then
        echo "FAIL: $name: message lacks '$want'"
        echo "  got: $first"; fail=1
    else
        echo "ok: $name"
    fi
done <"$tsv"

for f in "$dir"/valid/*.gguf; do
    name=valid/$(basename "$f")
    n=$((n + 1))
    "$qlab" inspect --max-array all "$f" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -ne 0 ] || [ -s "$tmp/err" ]; then
        echo "FAIL: $name: exit $rc, expected 0 and no message"; cat "$tmp/err"; fail=1
    elif ! grep -qE '^check: .*(OK|skipped)' "$tmp/out"; then
        echo "FAIL: $name: no passing check line"; fail=1
    else
        echo "ok: $name"
    fi
done
if ! "$qlab" inspect "$dir/valid/unknown_tensor_type.gguf" 2>&1 | grep -q ' type id 5 '; then
    echo "FAIL: valid/unknown_tensor_type.gguf: tensor type not shown as 'type id 5'"
    fail=1
fi

echo "$n files checked"
[ "$n" -ge 20 ] || { echo "FAIL: corpus has only $n files"; fail=1; }
exit $fail
