#!/bin/sh
# qlab bench quant --types: a name that is not a type it can time is a usage error
# naming it (a typo used to print an empty table); a valid list times exactly those
# types, whatever their case.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
# bench ARGS...: bench quant on a tiny matrix, one run per figure (run by expect).
# shellcheck disable=SC2317
bench() { "$qlab" bench quant --rows 4 --cols 256 --min-seconds 0 --threads 1 "$@"; }

expect 2 "--types typo" bench --types Q4_0,Q4_O
has "$tmp/err" "unknown type 'Q4_O'" "the typo is named"
if [ -s "$tmp/out" ]; then bad "a refused list printed a table"; else ok "no table for a refused list"; fi
expect 2 "--types empty name" bench --types Q4_0,
has "$tmp/err" "unknown type ''" "the empty name is named"
expect 2 "--types untimeable" bench --types I8
has "$tmp/err" "I8 has no quantizer" "the untimeable type is named"

expect 0 "--types subset" bench --types q4_k,Q8_0
matches "$tmp/out" "^Q4_K " "Q4_K row"
matches "$tmp/out" "^Q8_0 " "Q8_0 row"
n=$(grep -c "^[A-Z0-9_]* *[0-9.]* " "$tmp/out")
if [ "$n" -eq 2 ]; then ok "two rows"; else bad "$n rows, expected 2:"; cat "$tmp/out"; fi
exit $fail
