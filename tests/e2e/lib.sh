# shellcheck shell=sh disable=SC2034,SC2154
# The preamble and checks the shell tests share; sourced, never run:
#     . "$(dirname "$0")/lib.sh"              (tests/e2e)
#     . "$(dirname "$0")/../e2e/lib.sh"       (tests/malformed)
# It makes a temporary directory $tmp (removed on exit) and sets fail=0. Every check
# prints one "ok: ..." or "FAIL: ..." line; a failure sets fail=1 and shows what was
# seen. A test ends with `exit "$fail"`; `skip` exits 77, meson's code for skipped,
# unless a check already failed: then it exits 1, so a skip never hides a failure.
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

# Sanitizers must not exit with 1 (ASan's default), the code every runtime error and
# refusal of qlab uses, nor let undefined behaviour go on: a check expecting exit 1
# would pass on a sanitizer report. No effect on a build without sanitizers.
sanitizer_exit_codes() {
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}exitcode=86"
    UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}halt_on_error=1:exitcode=87"
    export ASAN_OPTIONS UBSAN_OPTIONS
}
sanitizer_exit_codes

ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }
skip() {
    if [ "$fail" -ne 0 ]; then echo "FAIL: checks failed before the skip ($1)"; exit 1; fi
    echo "SKIP: $1"; exit 77
}
# need_file FILE: skips the test when FILE (shared data under ../shared) is missing.
need_file() { [ -f "$1" ] || skip "$1 not found"; }

# expect CODE DESCRIPTION CMD...: runs CMD with stdout in $tmp/out and stderr in
# $tmp/err; another exit code than CODE fails and prints both.
expect() {
    want=$1; shift; what=$1; shift
    "$@" >"$tmp/out" 2>"$tmp/err"; got=$?
    if [ "$got" -eq "$want" ]; then ok "$what"; else bad "$what: exit $got, expected $want"; cat "$tmp/out" "$tmp/err"; fi
}
# has FILE TEXT DESCRIPTION: a line of FILE contains the fixed string TEXT.
has() {
    if grep -qF -- "$2" "$1"; then ok "$3"; else bad "$3: '$2' not in:"; cat "$1"; fi
}
# matches FILE REGEX DESCRIPTION: a line of FILE matches the basic regular expression.
matches() {
    if grep -q -- "$2" "$1"; then ok "$3"; else bad "$3: no line matches '$2' in:"; cat "$1"; fi
}
# is_png FILE: the 8-byte PNG signature and at least 8 KiB (bare axes are about 7 KiB).
is_png() {
    sig=$(od -An -tx1 -N8 "$1" | tr -d ' \n')
    [ "$sig" = "89504e470d0a1a0a" ] && [ "$(wc -c <"$1")" -ge 8192 ]
}
# rows DB SQL: the rows `qlab query --csv` prints for SQL on DB, without the header
# line ($qlab is the binary under test).
rows() { "$qlab" query --db "$1" --csv "$2" | tail -n +2; }
# ppl_near LABEL WANT TOL CMD...: CMD (a `qlab eval`) succeeds and prints a line
# "PPL = X" with X within the relative tolerance TOL of WANT (llama-perplexity's figure).
ppl_near() {
    label=$1; ref=$2; tol=$3; shift 3
    "$@" >"$tmp/ppl" || { bad "$label: qlab eval exited $?"; return; }
    cat "$tmp/ppl"
    got=$(awk '/^PPL = /{print $3}' "$tmp/ppl")
    [ -n "$got" ] || { bad "$label: no 'PPL = ' line"; return; }
    line=$(awk -v g="$got" -v w="$ref" -v t="$tol" 'BEGIN {
        d = (g - w) / w; if (d < 0) d = -d;
        printf "qlab %s, llama.cpp %s, relative difference %.2e (tolerance %g)\n", g, w, d, t;
        exit !(d <= t) }') && ok "$label: $line" || bad "$label: PPL outside tolerance: $line"
}

# ---------------------------------------------------------------- malformed inputs
# The corpora of tests/malformed: a file is refused with exit 1 and exactly one line
# on stderr.
# all_listed TSV FILE...: the name of every FILE is the first column of a line of TSV
# (the corpus has no file its expectations miss).
all_listed() {
    list_=$1
    shift
    for file_ in "$@"; do
        awk -F '\t' -v n="${file_##*/}" '$1 == n { found = 1 } END { exit !found }' "$list_" ||
            bad "${file_##*/} is not listed in $list_"
    done
}
# refused LABEL CODE PREFIX TEXT: the command whose exit code is CODE (stderr in
# $tmp/err) refused its input: exit 1, no sanitizer report, one line on stderr that
# starts with PREFIX and contains the fixed string TEXT. Prints FAIL and returns 1
# otherwise; prints nothing on success, so that the caller can check more.
refused() {
    first=$(head -n 1 "$tmp/err")
    if [ "$2" -ne 1 ]; then
        bad "$1: exit $2, expected 1"; cat "$tmp/err"
    elif grep -qE 'Sanitizer|runtime error:' "$tmp/err"; then
        bad "$1: sanitizer report"; cat "$tmp/err"
    elif [ "$(wc -l <"$tmp/err")" -ne 1 ]; then
        bad "$1: $(wc -l <"$tmp/err") lines on stderr, expected one"; cat "$tmp/err"
    elif case "$first" in "$3"*) false ;; *) true ;; esac; then
        bad "$1: message does not start with '$3'"; echo "  got: $first"
    elif ! printf '%s\n' "$first" | grep -qF -- "$4"; then
        bad "$1: message lacks '$4'"; echo "  got: $first"
    else
        return 0
    fi
    return 1
}
