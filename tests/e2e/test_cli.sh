#!/bin/sh
# The command-line contract: help, version, exit codes 0 (ok), 1 (runtime), 2 (usage).
set -u
qlab="$1"
fail=0
expect() { # expected-code description command...
    want=$1; shift; what=$1; shift
    "$@" >/dev/null 2>&1; got=$?
    if [ "$got" -ne "$want" ]; then echo "FAIL: $what: exit $got, expected $want"; fail=1;
    else echo "ok: $what"; fi
}
expect 0 "qlab --help" "$qlab" --help
expect 0 "qlab version" "$qlab" version
expect 2 "no command" "$qlab"
expect 2 "unknown command" "$qlab" frobnicate
"$qlab" --help | grep -q "usage: qlab" || { echo "FAIL: --help has no usage line"; fail=1; }
for cmd in $("$qlab" --help | awk '/^commands:/{f=1;next} f && /^  [a-z]/{print $1}'); do
    expect 0 "qlab $cmd --help" "$qlab" "$cmd" --help
done
exit $fail
