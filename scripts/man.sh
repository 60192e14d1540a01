#!/bin/sh
# man.sh QLAB HELP2MAN OUTDIR VERSION CMD...: the man pages qlab(1) and qlab-CMD(1) for
# every CMD, made by help2man from the --help texts, so that the pages never say
# other than the program. help2man reads a program's --help; each page's program is
# a small wrapper that prints `qlab CMD --help` with its usage lines in the form
# help2man makes a SYNOPSIS of ("Usage: ..." and "   or: ...", continuation lines
# joined). The one-line summary is the command's line in `qlab --help`.
set -eu
qlab=$1
h2m=$2
out=$3
version=$4
shift 4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# wrapper NAME WORDS...: $work/NAME prints `qlab WORDS --help` for help2man.
wrapper() {
    name=$1
    shift
    {
        echo '#!/bin/sh'
        printf '"%s" %s --help | awk '\''\n' "$qlab" "$*"
        cat <<'AWK'
    !done && /^usage: / { sub(/^usage: /, "Usage: "); line = $0; u = 1; next }
    u && /^ +[[(]/ { s = $0; sub(/^ +/, " ", s); line = line s; next }
    u && /^       qlab / { print line; s = $0; sub(/^ +/, "", s); line = "   or: " s; next }
    u { print line; u = 0; done = 1 }
    { print }
    END { if (u) print line }'
AWK
    } >"$work/$name"
    chmod +x "$work/$name"
}

page() { # NAME SUMMARY
    "$h2m" --no-info --locale=C.UTF-8 --version-string="$version" --name="$2" \
        --output="$out/$1.1" "$work/$1"
}

wrapper qlab
page qlab "a testbed for LLM weight-quantization accuracy experiments"
for cmd in "$@"; do
    summary=$("$qlab" --help | awk -v c="$cmd" '$1 == c { $1 = ""; sub(/^ +/, ""); print; exit }')
    if [ -z "$summary" ]; then
        echo "man.sh: 'qlab --help' lists no command '$cmd'" >&2
        exit 1
    fi
    wrapper "qlab-$cmd" "$cmd"
    page "qlab-$cmd" "$summary"
done
