#!/bin/sh
# The command-line contract: help, version, exit codes 0 (ok), 1 (runtime), 2 (usage).
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
expect 0 "qlab --help" "$qlab" --help
expect 0 "qlab version" "$qlab" version
expect 2 "no command" "$qlab"
expect 2 "unknown command" "$qlab" frobnicate
"$qlab" --help >"$tmp/help"
has "$tmp/help" "usage: qlab" "--help has a usage line"
for cmd in $("$qlab" --help | awk '/^commands:/{f=1;next} f && /^  [a-z]/{print $1}'); do
    expect 0 "qlab $cmd --help" "$qlab" "$cmd" --help
done
exit $fail
