#!/bin/sh
# `qlab quantize --imatrix FILE` on stories260K with every file of the malformed imatrix
# corpus (expected.tsv: exit 1, one "qlab: error: <FILE>: ..." line with the expected
# substring, no output file, no sanitizer report) and with the files of misfit/ that
# are well formed but do not fit the model (misfit/expected.tsv: exit code and message).
# usage: run_quantize_imatrix.sh QLAB_BINARY CORPUS_DIR
set -u
qlab="$1"
dir="$2"
model="${QLAB_SHARED:-}/models/stories260K.gguf"
# shellcheck source=SCRIPTDIR/../../e2e/lib.sh
. "$(dirname "$0")/../../e2e/lib.sh"
need_file "$model"
n=0
tab=$(printf '\t')
run() { # file
    rm -f "$tmp/q.gguf"
    "$qlab" quantize "$model" "$tmp/q.gguf" --type Q4_0 --quiet --imatrix "$1" \
        >"$tmp/out" 2>"$tmp/err"
}
check_error() { # file substring
    f=$1; name=$(basename "$f")
    refused "$name" "$rc" "qlab: error: $f: " "$2" || return
    if [ -e "$tmp/q.gguf" ] || [ -n "$(ls "$tmp" | grep '\.tmp')" ]; then
        bad "$name: an output file was left behind"
    else
        ok "$name: $(head -n 1 "$tmp/err")"
    fi
}

while IFS="$tab" read -r name want; do
    case "$name" in '#'* | '') continue ;; esac
    n=$((n + 1))
    run "$dir/$name"; rc=$?
    check_error "$dir/$name" "$want"
done <"$dir/expected.tsv"

while IFS="$tab" read -r name code want; do
    case "$name" in '#'* | '') continue ;; esac
    f="$dir/misfit/$name"
    n=$((n + 1))
    run "$f"; rc=$?
    if [ "$code" -eq 1 ]; then
        check_error "$f" "$want"
    elif [ "$rc" -ne 0 ]; then
        echo "FAIL: $name: exit $rc, expected 0"; cat "$tmp/err"; fail=1
    elif ! grep -qF -- "$want" "$tmp/out"; then
        echo "FAIL: $name: output lacks '$want'"; cat "$tmp/out"; fail=1
    elif [ ! -s "$tmp/q.gguf" ]; then
        echo "FAIL: $name: no output file"; fail=1
    else
        echo "ok: $name: $want"
    fi
done <"$dir/misfit/expected.tsv"
all_listed "$dir/misfit/expected.tsv" "$dir"/misfit/*.dat "$dir"/misfit/*.gguf
# An imatrix none of whose entries names a tensor of the model is worth a warning.
run "$dir/misfit/foreign_names.dat"
grep -q "^qlab: warning: no entry of .* names a tensor of" "$tmp/err" &&
    echo "ok: foreign_names.dat: warning" || { echo "FAIL: foreign_names.dat: no warning"; fail=1; }
# An entry without usable importance (all zero, denormal) is dropped with a warning, and
# its tensor is quantized without, noted in its line of the report.
for f in all_zero.dat denormal.gguf; do
    run "$dir/misfit/$f"
    grep -q "^qlab: warning: $dir/misfit/$f: 1 entry carries no usable importance" "$tmp/err" &&
        ok "$f: warning" || { echo "FAIL: $f: no warning"; cat "$tmp/err"; fail=1; }
    grep -q "imatrix entry without usable importance (all zero or denormal): quantized without" \
        "$tmp/out" && ok "$f: noted in the report" || { echo "FAIL: $f: no note"; fail=1; }
done
echo "$n files checked"
[ "$n" -ge 8 ] || { echo "FAIL: only $n files"; fail=1; }
exit $fail
