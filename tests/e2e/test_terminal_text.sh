#!/bin/sh
# Text from files and databases on the terminal (issue 16, item 10): control
# characters of a GGUF's strings are escaped in qlab inspect, in error messages and in
# qlab quantize's report; a query's results are escaped on a terminal and exact in a
# pipe; a sweep file that starts with a UTF-8 byte order mark is read as without.
# usage: test_terminal_text.sh QLAB EDIT_GGUF MAKE_FIXTURE_DB
set -u
qlab="$1"
edit="$2"
make_fixture_db="$3"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
model="$QLAB_SHARED/models/stories260K.gguf"
need_file "$model"
esc=$(printf '\033')
bel=$(printf '\007')

# no_raw LABEL FILE: FILE holds no ESC or BEL byte.
no_raw() {
    if grep -q "[$esc$bel]" "$2"; then bad "$1: a raw control character reached the output"
    else ok "$1: no raw control character"; fi
}

# A model whose name, architecture and a tensor name hold terminal controls.
"$edit" "$model" "$tmp/ctl.gguf" "set:general.name=str:$(printf 'a\033[2Jb\007c')" \
    || bad "edit_gguf (name)"
"$edit" "$model" "$tmp/arch.gguf" "set:general.architecture=str:$(printf 'x\033]0;t\007')" \
    || bad "edit_gguf (architecture)"
expect 0 "inspect" "$qlab" inspect "$tmp/ctl.gguf"
has "$tmp/out" '"a\x1b[2Jb\x07c"' "inspect escapes a string value"
no_raw "inspect" "$tmp/out"
expect 1 "eval of an unknown architecture" "$qlab" eval "$tmp/arch.gguf" --text ts-eval
has "$tmp/err" "architecture 'x\\x1b]0;t\\x07' is not supported" "the error escapes the name"
no_raw "error message" "$tmp/err"

# A tensor name with an escape sequence (an extra vector the forward pass does not read,
# which quantize copies):
# quantize's report shows it escaped.
"$edit" "$model" "$tmp/tname.gguf" "add:$(printf 'extra\033[2Jname')=4" || bad "edit_gguf (add)"
expect 0 "quantize of a model with a control character in a tensor name" \
    "$qlab" quantize --quiet "$tmp/tname.gguf" "$tmp/q.gguf" Q8_0
has "$tmp/out" 'extra\x1b[2Jname' "the report escapes the tensor name"
no_raw "quantize report" "$tmp/out"

# A query's results: on a terminal (script(1) gives one) escaped, in a pipe exact.
"$make_fixture_db" "$tmp/f.db" >/dev/null || bad "make_fixture_db"
sql="SELECT 'x' || char(27) || '[31mred' || char(7) || char(155) AS v"
"$qlab" query --db "$tmp/f.db" --csv "$sql" >"$tmp/pipe"
grep -q "$esc\[31mred$bel" "$tmp/pipe" && ok "query into a pipe keeps the bytes" ||
    { bad "query into a pipe changed the bytes"; od -c "$tmp/pipe" | head; }
if command -v script >/dev/null; then
    for fmt in "" --csv --json --md; do
        script -qec "$qlab query --db $tmp/f.db $fmt \"$sql\"" /dev/null >"$tmp/tty" 2>&1
        # JSON escapes C0 controls itself (\u001B); the terminal filter does the rest.
        want='x\x1b[31mred\x07\xc2\x9b'
        [ "$fmt" = --json ] && want='x\u001B[31mred\u0007\xc2\x9b'
        has "$tmp/tty" "$want" "query ${fmt:-(table)} on a terminal escapes"
        no_raw "query ${fmt:-(table)} on a terminal" "$tmp/tty"
    done
else
    echo "note: script(1) not found; the terminal case of qlab query is not checked"
fi

# A byte order mark at the start of a sweep file.
printf '\357\273\277[sweep]\nname = bom\nmodel = stories260K\ntext = ts-eval\n[grid]\nweight_type = Q8_0\n' \
    >"$tmp/bom.sweep"
expect 0 "a sweep file with a BOM" "$qlab" sweep "$tmp/bom.sweep" --db "$tmp/r.db" --list
has "$tmp/out" "# sweep bom: model stories260K" "the BOM is not part of the first line"
exit "$fail"
