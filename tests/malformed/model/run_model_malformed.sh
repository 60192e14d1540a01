#!/bin/sh
# The malformed-model corpus (cases.tsv): each case is stories260K with edits, written
# by edit_gguf; `qlab eval` and `qlab quantize` must both refuse it with exit 1, one
# line naming the file and containing the expected text, no sanitizer report, no
# output file, and within a time limit (a count trusted before it is checked would
# allocate for it first). The unedited copy must pass both.
# usage: run_model_malformed.sh QLAB_BINARY EDIT_GGUF CASES_TSV
set -u
qlab="$1"
edit="$2"
cases="$3"
# shellcheck source=SCRIPTDIR/../../e2e/lib.sh
. "$(dirname "$0")/../../e2e/lib.sh"
model="${QLAB_SHARED:-}/models/stories260K.gguf"
need_file "$model"
command -v timeout >/dev/null || skip "timeout(1) not found"
# Seconds a refusal may take (the valid model's eval of one chunk takes well under one).
limit=30
n=0

# run LABEL FILE: eval then quantize of FILE; sets rc_eval, rc_quant (stderr in
# $tmp/err.eval and $tmp/err.quant).
run() {
    rm -f "$tmp/q.gguf"
    timeout "$limit" "$qlab" eval "$2" --text ts-eval --ctx 32 --chunks 1 \
        >"$tmp/out" 2>"$tmp/err.eval"
    rc_eval=$?
    timeout "$limit" "$qlab" quantize --quiet "$2" "$tmp/q.gguf" Q8_0 \
        >"$tmp/out" 2>"$tmp/err.quant"
    rc_quant=$?
}

# The copy without edits differs only by the general.alignment key the writer adds.
"$edit" "$model" "$tmp/copy.gguf" || bad "edit_gguf without edits failed"
run valid "$tmp/copy.gguf"
[ "$rc_eval" -eq 0 ] && [ "$rc_quant" -eq 0 ] && [ -s "$tmp/q.gguf" ] &&
    ok "the unedited model evaluates and quantizes" ||
    { bad "unedited model: eval $rc_eval, quantize $rc_quant"; cat "$tmp/err.eval" "$tmp/err.quant"; }

tab=$(printf '\t')
while IFS="$tab" read -r name edits want; do
    case "$name" in '#'* | '') continue ;; esac
    n=$((n + 1))
    f="$tmp/$name.gguf"
    # shellcheck disable=SC2086 # the edits are words
    if ! "$edit" "$model" "$f" $edits 2>"$tmp/err"; then
        bad "$name: edit_gguf failed: $(cat "$tmp/err")"
        continue
    fi
    run "$name" "$f"
    for cmd in eval quant; do
        eval rc=\$rc_$cmd
        cp "$tmp/err.$cmd" "$tmp/err"
        if [ "$rc" -eq 124 ]; then
            bad "$name ($cmd): still running after ${limit}s"
        elif refused "$name ($cmd)" "$rc" "qlab: error: $f: " "$want"; then
            ok "$name ($cmd)"
        fi
    done
    [ -e "$tmp/q.gguf" ] && bad "$name: quantize left an output file"
done <"$cases"
echo "$n cases checked"
[ "$n" -ge 20 ] || { echo "FAIL: only $n cases"; fail=1; }
exit "$fail"
