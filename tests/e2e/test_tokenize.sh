#!/bin/sh
# qlab tokenize end to end: the ids it prints for the golden texts are llama.cpp's
# (llama-tokenize --ids prints the same "[1, 2, 3]" line), pieces round-trip, and bad
# invocations exit 2 (usage) or 1 (runtime).
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
tok="$QLAB_SHARED/golden/tokens"

same_ids() { # description expected-file command...
    what=$1; shift; want=$1; shift
    if ! "$@" > "$tmp/out" 2> "$tmp/err"; then
        echo "FAIL: $what: exit code $?"; cat "$tmp/err"; fail=1; return
    fi
    if cmp -s "$tmp/out" "$want"; then echo "ok: $what"
    else echo "FAIL: $what: ids differ from $want"; fail=1; fi
}
same_ids "stories260K tricky.txt" "$tok/stories260K.tricky.ids" \
    "$qlab" tokenize "$QLAB_SHARED/models/stories260K.gguf" --file "$tok/tricky.txt" --ids
same_ids "stories260K tinystories sample" "$tok/stories260K.tinystories_sample.ids" \
    "$qlab" tokenize "$QLAB_SHARED/models/stories260K.gguf" --file "$tok/tinystories_sample.txt" --ids
same_ids "gpt-2 tricky.txt" "$tok/gpt-2.tricky.ids" \
    "$qlab" tokenize "$tok/ggml-vocab-gpt-2.gguf" --file "$tok/tricky.txt" --ids

# id<TAB>piece lines; the pieces of "Hello world" without BOS are " He" "ll" "o" " w" ...
"$qlab" tokenize "$QLAB_SHARED/models/stories260K.gguf" --text "Hello world" --no-bos > "$tmp/pieces"
printf '346\t He\n306\tll\n414\to\n263\t w\n304\tor\n341\tld\n' > "$tmp/want"
if cmp -s "$tmp/pieces" "$tmp/want"; then echo "ok: id/piece lines"
else echo "FAIL: id/piece lines:"; cat "$tmp/pieces"; fail=1; fi
# Control bytes in pieces are escaped.
"$qlab" tokenize "$tok/ggml-vocab-gpt-2.gguf" --text "$(printf 'a\tb')" > "$tmp/esc"
if grep -q '^197	\\t$' "$tmp/esc"; then echo "ok: escaped tab piece"
else echo "FAIL: escaped tab piece:"; cat "$tmp/esc"; fail=1; fi

expect 2 "no model" "$qlab" tokenize --text hi
expect 2 "no text" "$qlab" tokenize "$QLAB_SHARED/models/stories260K.gguf"
expect 2 "both --text and --file" "$qlab" tokenize "$QLAB_SHARED/models/stories260K.gguf" --text a --file b
expect 2 "unknown option" "$qlab" tokenize "$QLAB_SHARED/models/stories260K.gguf" --text a --frob
expect 1 "missing model file" "$qlab" tokenize "$tmp/nothere.gguf" --text hi
grep -q "qlab: error: .*nothere.gguf" "$tmp/err" || { echo "FAIL: error names the file"; fail=1; }
expect 1 "missing text file" "$qlab" tokenize "$QLAB_SHARED/models/stories260K.gguf" --file "$tmp/none.txt"
exit $fail
