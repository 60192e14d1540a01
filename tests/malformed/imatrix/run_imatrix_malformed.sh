#!/bin/sh
# Runs `qlab imatrix-convert FILE OUT` on every file of the malformed imatrix corpus
# (expected.tsv), for both output formats: exit 1, one "qlab: error: <path>: ..." line
# containing the expected substring, no sanitizer report, and no output file left.
# usage: run_imatrix_malformed.sh QLAB_BINARY CORPUS_DIR
set -u
qlab="$1"
dir="$2"
tsv="$dir/expected.tsv"
# shellcheck source=SCRIPTDIR/../../e2e/lib.sh
. "$(dirname "$0")/../../e2e/lib.sh"
n=0
all_listed "$tsv" "$dir"/*.dat "$dir"/*.gguf
tab=$(printf '\t')
while IFS="$tab" read -r name want; do
    case "$name" in '#'* | '') continue ;; esac
    f="$dir/$name"
    n=$((n + 1))
    [ -f "$f" ] || { bad "$name listed but missing"; continue; }
    for ext in gguf dat; do
        out="$tmp/out.$ext"
        "$qlab" imatrix-convert "$f" "$out" >"$tmp/out" 2>"$tmp/err"
        refused "$name -> .$ext" $? "qlab: error: $f: " "$want" || continue
        if [ -e "$out" ] || [ -n "$(ls "$tmp" | grep '^out\..*\.tmp')" ]; then
            bad "$name -> .$ext: an output file was left behind"
        else
            ok "$name -> .$ext"
        fi
    done
done <"$tsv"
echo "$n files checked"
[ "$n" -ge 8 ] || { echo "FAIL: only $n malformed imatrix files"; fail=1; }
exit $fail
