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
# shellcheck source=SCRIPTDIR/../e2e/lib.sh
. "$(dirname "$0")/../e2e/lib.sh"
n=0

# Every corpus file is listed, and every listed file exists.
all_listed "$tsv" "$dir"/*.gguf

tab=$(printf '\t')
while IFS="$tab" read -r name want; do
    case "$name" in '#'* | '') continue ;; esac
    f="$dir/$name"
    n=$((n + 1))
    [ -f "$f" ] || { bad "$name listed in expected.tsv but missing"; continue; }
    "$qlab" inspect "$f" >"$tmp/out" 2>"$tmp/err"
    refused "$name" $? "qlab: error: $f: offset " "$want" || continue
    if [ -s "$tmp/out" ]; then
        bad "$name: printed to stdout before failing"
    else
        ok "$name"
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
