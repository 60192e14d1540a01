#!/bin/sh
# `meson install` (into a DESTDIR): the qlab binary, which runs from there; a man page
# for qlab and for every command `qlab --help` lists, made from the --help texts (so
# each names the command's options); the bash completion, which offers the commands
# and options the help texts list, llama.cpp's other names included and the internal
# --job-of not. Usage: test_install.sh MESON BUILDDIR MAN(yes|no) BASH
set -u
meson_bin="$1"
builddir="$2"
man="$3"
bash_bin="$4"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
dest="$tmp/dest"
if "$meson_bin" install -C "$builddir" --no-rebuild --destdir "$dest" >"$tmp/log" 2>&1; then
    ok "meson install into a DESTDIR"
else
    bad "meson install failed"; cat "$tmp/log"; exit 1
fi
bin=$(find "$dest" -type f -name qlab -path '*/bin/*' | head -n 1)
[ -n "$bin" ] && [ -x "$bin" ] && ok "installed $bin" || { bad "no bin/qlab under $dest"; exit 1; }
"$bin" version >"$tmp/v" 2>&1 && has "$tmp/v" "qlab" "the installed binary runs"
cmds=$("$bin" --help | awk '/^commands:/{f=1;next} f && /^  [a-z]/{print $1}')
if [ "$man" = yes ]; then
    mandir=$(find "$dest" -type d -name man1 | head -n 1)
    [ -n "$mandir" ] && [ -f "$mandir/qlab.1" ] && ok "qlab.1 installed" || bad "no man1/qlab.1"
    for c in $cmds; do
        page="$mandir/qlab-$c.1"
        if [ ! -f "$page" ]; then bad "no man page for qlab $c (core/meson.build's qlab_commands)"; continue; fi
        # every option of the command's --help is in its page (roff escapes '-' as '\-')
        "$bin" $c --help | awk '/^  (-[A-Za-z0-9], |    )--[a-z]/ { s = $0; sub(/^  (-[A-Za-z0-9], |    )--/, "", s); sub(/[ =].*/, "", s); print s }' >"$tmp/o"
        sed 's/\\-/-/g' "$page" >"$tmp/page"
        miss=""
        while read -r o; do grep -q -- "--$o" "$tmp/page" || miss="$miss --$o"; done <"$tmp/o"
        [ -z "$miss" ] && ok "qlab-$c.1 has its $(wc -l <"$tmp/o") options" || bad "qlab-$c.1 lacks$miss"
    done
    n_pages=$(find "$mandir" -name 'qlab-*.1' | wc -l)
    [ "$n_pages" -eq "$(echo "$cmds" | wc -w)" ] && ok "one page per command ($n_pages)" ||
        bad "$n_pages pages for $(echo "$cmds" | wc -w) commands"
    grep -q '^\.SH SYNOPSIS' "$mandir/qlab-eval.1" && ok "qlab-eval.1 has a SYNOPSIS from the usage lines" ||
        bad "qlab-eval.1 has no SYNOPSIS"
else
    echo "note: built without help2man: no man pages to check"
fi
comp=$(find "$dest" -type f -path '*bash-completion/completions/qlab' | head -n 1)
[ -n "$comp" ] && ok "bash completion installed ($comp)" || { bad "no bash completion"; exit "$fail"; }
cat >"$tmp/c.sh" <<EOS
. "$comp"
comp() { COMP_WORDS=("\$@"); COMP_CWORD=\$((\$# - 1)); COMPREPLY=(); _qlab; printf '%s\n' "\${COMPREPLY[@]}"; }
echo "1:\$(comp "$bin" ev | tr '\n' ' ')"
echo "2:\$(comp "$bin" eval --ctx | tr '\n' ' ')"
echo "3:\$(comp "$bin" sweep --job | tr '\n' ' ')"
echo "4:\$(comp "$bin" quantize --type Q4_K | tr '\n' ' ')"
echo "5:\$(comp "$bin" imatrix --in | tr '\n' ' ')"
echo "6:\$(comp "$bin" bench forward --ctx- | tr '\n' ' ')"
EOS
"$bash_bin" "$tmp/c.sh" >"$tmp/c" 2>&1
has "$tmp/c" "1:eval " "completes a command"
has "$tmp/c" "2:--ctx --ctx-size " "completes an option and its llama.cpp name"
has "$tmp/c" "3:--jobs " "offers --jobs, never the internal --job-of"
has "$tmp/c" "4:Q4_K " "completes a type name"
has "$tmp/c" "5:--in-file " "completes a new option"
has "$tmp/c" "6:--ctx-size " "completes a subcommand's options"
exit "$fail"
