#!/bin/sh
# shellcheck disable=SC2016 # single-quoted child scripts expand their own $1
# The test helpers themselves: qltest.c's qlt_skip and lib.sh's skip exit 77 (skipped)
# only while no check has failed, and 1 (failed) once one has, so a skip can never
# hide a failure in meson's summary; lib.sh gives every shell test the sanitizers'
# own exit codes.
#   test_harness.sh QLT_SELFTEST TEST_QUANT_GOLDEN
set -u
selftest="$1"
quant_golden="$2"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
lib="$(dirname "$0")/lib.sh"

expect 77 "qlt_skip with no failed check skips" "$selftest" skip
has "$tmp/out" "SKIP: skipped with every check passed" "qlt_skip prints its reason"
expect 1 "qlt_skip after a failed check fails" "$selftest" fail-then-skip
has "$tmp/out" "FAIL: 1 of 1 checks failed" "qlt_skip says checks failed"
expect 1 "a failed check fails" "$selftest" fail

# lib.sh's skip, in a child shell that sources it as a test does ($1 is the child's).
expect 77 "skip with no failed check skips" sh -c '. "$1"; ok "a check"; skip "why"' sh "$lib"
has "$tmp/out" "SKIP: why" "skip prints its reason"
expect 1 "skip after a failed check fails" sh -c '. "$1"; bad "a check"; skip "why"' sh "$lib"
has "$tmp/out" "FAIL: checks failed before the skip (why)" "skip says checks failed"
expect 1 "need_file after a failed check fails" sh -c '. "$1"; bad "a check"; need_file "$1.none"' sh "$lib"

# test_quant_golden on a copy of the golden manifest whose line for one Q4_0 case is cut
# after 8 columns (the data files are the real ones): the case is not passed over.
quants="${QLAB_SHARED:?}/golden/quants"
need_file "$quants/manifest.tsv"
mkdir -p "$tmp/shared/golden/quants"
ln -s "$quants/cases" "$quants/inputs" "$tmp/shared/golden/quants/"
awk -F '\t' 'BEGIN { OFS = "\t" } $1 == "gauss512__q4_0__imat" { NF = 8; cut = 1 } { print }
    END { exit !cut }' "$quants/manifest.tsv" >"$tmp/shared/golden/quants/manifest.tsv" ||
    bad "no case gauss512__q4_0__imat in $quants/manifest.tsv"
QLAB_SHARED="$tmp/shared" expect 1 "a short manifest line fails the golden test" "$quant_golden" q4_0
has "$tmp/err" "gauss512__q4_0__imat: 8 columns, expected at least 13" "names the short line"
has "$tmp/err" "7 of 8 golden cases compared" "counts the cases compared"
QLAB_SHARED="$tmp/shared" expect 0 "the other types of that manifest still pass" "$quant_golden" q8_0

# Every shell test runs with the sanitizers' own exit codes (a report is never exit 1).
case ":${ASAN_OPTIONS:-}:" in
*:exitcode=86:*) ok "lib.sh sets ASan's exit code 86" ;;
*) bad "ASAN_OPTIONS='${ASAN_OPTIONS:-}' lacks exitcode=86" ;;
esac
case ":${UBSAN_OPTIONS:-}:" in
*:halt_on_error=1:exitcode=87:*) ok "lib.sh makes UBSan halt with exit code 87" ;;
*) bad "UBSAN_OPTIONS='${UBSAN_OPTIONS:-}' lacks halt_on_error=1:exitcode=87" ;;
esac
exit "$fail"
