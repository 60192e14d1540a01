#!/bin/sh
# The help texts and the README's synopses agree (issue #25): every command's usage
# lines name every option its --help lists (or say [options]); every option a README
# synopsis of `qlab CMD` gives is one CMD takes; every axis of the README's table and
# the values it spells out are in `qlab sweep --help`, and so is every key of the
# README's sweep file examples (exclude, only, layer_metrics included).
set -u
qlab="$1"
readme="$2"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"

cmds=$("$qlab" --help | awk '/^commands:/{f=1;next} f && /^  [a-z]/{print $1}')
[ "$(echo "$cmds" | wc -w)" -ge 16 ] || bad "commands: $cmds"

# names PROG-WORDS...: the long option names (and aliases) `qlab WORDS --help` lists.
names() {
    # shellcheck disable=SC2086
    "$qlab" "$@" --help | awk '
        /^  (-[A-Za-z0-9], |    )--[a-z]/ { s = $0; sub(/^  (-[A-Za-z0-9], |    )--/, "", s); sub(/[ =].*/, "", s); print s }
        /\(also --/ { s = $0; sub(/.*\(also /, "", s); sub(/\).*/, "", s); n = split(s, a, " "); for (i = 1; i <= n; i++) { t = a[i]; sub(/^--/, "", t); print t } }'
    echo help
}

# ---------------------------------------------------------------- usage lines
for cmd in $cmds "bench quant" "bench act" "bench forward" "data list" "data verify"; do
    # shellcheck disable=SC2086
    "$qlab" $cmd --help >"$tmp/h" 2>&1 || { bad "qlab $cmd --help failed"; continue; }
    awk '/^usage:/ {u = 1} u && /^$/ {exit} u' "$tmp/h" >"$tmp/syn"
    [ -s "$tmp/syn" ] || { bad "qlab $cmd --help has no usage lines"; continue; }
    if grep -q '\[options\]' "$tmp/syn"; then ok "qlab $cmd: usage says [options]"; continue; fi
    missing=""
    # Each listed option: its --name or its -k in the synopsis; an option that gives a
    # positional argument another way (-m MODEL) is the argument there.
    awk '/^  (-[A-Za-z0-9], |    )--[a-z]/' "$tmp/h" >"$tmp/opts"
    while IFS= read -r line; do
        long=$(printf '%s\n' "$line" | sed -E 's/^  (-[A-Za-z0-9], |    )--([a-z0-9-]+).*/\2/')
        short=$(printf '%s\n' "$line" | sed -nE 's/^  -([A-Za-z0-9]), .*/\1/p')
        [ "$long" = help ] && continue
        case "$line" in *"instead of the"*) continue ;; esac
        grep -qE -- "--$long([^a-z0-9-]|\$)" "$tmp/syn" && continue
        [ -n "$short" ] && grep -qE -- "(^|[ [(|])-$short([^A-Za-z0-9]|\$)" "$tmp/syn" && continue
        missing="$missing --$long"
    done <"$tmp/opts"
    [ -z "$missing" ] && ok "qlab $cmd: the usage lines name every option" ||
        bad "qlab $cmd: usage lines omit$missing"
done

# ---------------------------------------------------------------- README synopses
# Every `qlab CMD ...` in backticks or in a code block: its --options are CMD's.
awk '
    /^```/ { code = !code; next }
    code { line = $0; sub(/^ *(build\/core\/)?/, "", line); if (line ~ /^qlab [a-z]/) print line; next }
    { s = $0
      while (match(s, /`(build\/core\/)?qlab [a-z][^`]*`/)) {
          span = substr(s, RSTART + 1, RLENGTH - 2); sub(/^build\/core\//, "", span); print span
          s = substr(s, RSTART + RLENGTH) } }' "$readme" >"$tmp/spans"
[ "$(wc -l <"$tmp/spans")" -ge 20 ] && ok "README: $(wc -l <"$tmp/spans") qlab synopses and examples" ||
    bad "README: only $(wc -l <"$tmp/spans") qlab spans found"
checked=0
while IFS= read -r span; do
    set -- $span
    cmd=$2; sub=""
    case "$cmd" in bench | data) sub=${3:-}; case "$sub" in quant | act | forward | list | verify) ;; *) sub="" ;; esac ;; esac
    echo "$cmds" | grep -qx -- "$cmd" || { bad "README names 'qlab $cmd', no such command: $span"; continue; }
    # shellcheck disable=SC2086
    names $cmd $sub >"$tmp/names"
    for opt in $(printf '%s\n' "$span" | grep -oE -- '(^|[ [(|])--[a-z][a-z0-9-]*' | sed 's/^[ [(|]*--//'); do
        checked=$((checked + 1))
        grep -qx -- "$opt" "$tmp/names" || bad "README: 'qlab $cmd${sub:+ $sub}' has no --$opt: $span"
    done
done <"$tmp/spans"
[ "$checked" -ge 40 ] && ok "README: $checked options in qlab synopses, each one the command takes" ||
    bad "README: only $checked options checked"

# ---------------------------------------------------------------- sweep files
"$qlab" sweep --help >"$tmp/sh"
awk '/^Axes and what is implemented today:/ {f = 1; next} f && /^  [a-z_]+ / {print}' "$tmp/sh" >"$tmp/axes"
# The README's axis table: | `axis` | values | meaning |
awk -F'|' '/^\| `[a-z_]+`/ { print $2 "|" $3 }' "$readme" >"$tmp/rows"
[ "$(wc -l <"$tmp/rows")" -ge 8 ] || bad "README: axis table not found"
while IFS='|' read -r axes values; do
    for axis in $(printf '%s\n' "$axes" | grep -oE '`[a-z_]+`' | tr -d '`'); do
        line=$(grep -E "^  $axis " "$tmp/axes")
        [ -n "$line" ] || { bad "sweep --help does not list the axis $axis"; continue; }
        # the spelled-out values: words as they are, prefix forms (mix:NAME) by prefix
        for v in $(printf '%s\n' "$values" | grep -oE '`[^`]+`' | tr -d '`'); do
            case "$v" in
            [A-Za-z]*:*) want="${v%%:*}:" ;;
            *[!A-Za-z0-9_]* | [!a-z]*) continue ;; # examples: 300000, Q4_K_M
            *) want=$v ;;
            esac
            printf '%s\n' "$line" | grep -qF -- " $want" ||
                bad "README's $axis value '$v' is not in sweep --help: $line"
        done
    done
done <"$tmp/rows"
ok "sweep --help lists the README's axes and their values"
# Every key of the README's sweep file examples, and the filter keys.
keys=$(awk '/^```ini/ {f = 1; next} /^```/ {f = 0} f && /^[a-z_]+ *=/ { sub(/ *=.*/, ""); print }' "$readme" | sort -u)
[ -n "$keys" ] || bad "README: no sweep file example"
for k in $keys exclude only layer_metrics; do
    grep -qE "(^|[^a-z_])$k([^a-z_]|\$)" "$tmp/sh" || bad "sweep --help never mentions the key $k"
done
ok "sweep --help mentions every key of the README's sweep files"
exit "$fail"
