#!/bin/sh
# The test helpers themselves: qltest.c's qlt_skip and lib.sh's skip exit 77 (skipped)
# only while no check has failed, and 1 (failed) once one has, so a skip can never
# hide a failure in meson's summary.
#   test_harness.sh QLT_SELFTEST
set -u
selftest="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
lib="$(dirname "$0")/lib.sh"

expect 77 "qlt_skip with no failed check skips" "$selftest" skip
has "$tmp/out" "SKIP: skipped with every check passed" "qlt_skip prints its reason"
expect 1 "qlt_skip after a failed check fails" "$selftest" fail-then-skip
has "$tmp/out" "FAIL: 1 of 1 checks failed" "qlt_skip says checks failed"
expect 1 "a failed check fails" "$selftest" fail

# lib.sh's skip, in a child shell that sources it as a test does.
expect 77 "skip with no failed check skips" sh -c '. "$1"; ok "a check"; skip "why"' sh "$lib"
has "$tmp/out" "SKIP: why" "skip prints its reason"
expect 1 "skip after a failed check fails" sh -c '. "$1"; bad "a check"; skip "why"' sh "$lib"
has "$tmp/out" "FAIL: checks failed before the skip (why)" "skip says checks failed"
expect 1 "need_file after a failed check fails" sh -c '. "$1"; bad "a check"; need_file "$1.none"' sh "$lib"
exit "$fail"
