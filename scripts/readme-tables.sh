#!/bin/sh
# Regenerates the result tables shown in README.md from the results store: each
# block between "<!-- report:SWEEP -->" and "<!-- /report:SWEEP -->" is replaced by
# the table `qlab report` wrote to results/SWEEP/report.md (summary lines, table and
# the notes under it, without what report.md marks as details: tensor types,
# comparisons, plot links, the legend); a block "<!-- pairs:SWEEP:AXIS -->" gets the
# report's one-axis comparison table of AXIS (its paired-bootstrap intervals, from the
# details). Run the sweeps first; the numbers come from
# qlab, not from hand editing. With SWEEP names, only their blocks are replaced (the
# others stay as they are: a store that holds only some sweeps).
#   usage: scripts/readme-tables.sh [QLAB] [DB] [SWEEP...]
set -eu
cd "$(dirname "$0")/.."
qlab=${1:-build/core/qlab}
db=${2:-results/qlab.db}
[ $# -ge 2 ] && shift 2 || set --
only=" $* "
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$qlab" report --db "$db" -o "$out" --no-plots >/dev/null
cp README.md "$out/README.in"
awk -v dir="$out" -v only="$only" '
    /^<!-- report:[^ ]+ -->$/ {
        name = $0; sub(/^<!-- report:/, "", name); sub(/ -->$/, "", name)
        if (only != "  " && index(only, " " name " ") == 0) { print; next }
        print
        file = dir "/" name "/report.md"
        if ((getline line < file) <= 0) { print "missing report for sweep " name > "/dev/stderr"; exit 1 }
        # Copy the summary, the table and the notes under it; skip the heading and
        # what report.md marks as details (comparisons, plot links, the legend).
        details = 0
        do {
            if (line ~ /^## /) continue
            if (line == "<!-- details -->") { details = 1; continue }
            if (line == "<!-- /details -->") { details = 0; continue }
            if (!details) print line
        } while ((getline line < file) > 0)
        skipping = 1
        next
    }
    /^<!-- pairs:[^ :]+:[^ ]+ -->$/ {
        spec = $0; sub(/^<!-- pairs:/, "", spec); sub(/ -->$/, "", spec)
        name = spec; sub(/:.*/, "", name)
        axis = spec; sub(/^[^:]*:/, "", axis)
        if (only != "  " && index(only, " " name " ") == 0) { print; next }
        print
        file = dir "/" name "/report.md"
        # The lines after "AXIS:" up to the end of its table (from the start of the file: a
        # report block may have read it already).
        close(file)
        state = 0
        while ((getline line < file) > 0) {
            if (state == 0 && line == axis ":") { state = 1; continue }
            if (state == 1 && line ~ /^\|/) state = 2
            if (state == 2) { if (line !~ /^\|/) break; print line }
        }
        close(file)
        if (state != 2) { print "no " axis " comparisons in the report of " name > "/dev/stderr"; exit 1 }
        skipping = 1
        next
    }
    /^<!-- \/(report|pairs):[^ ]+ -->$/ { skipping = 0 }
    !skipping { print }
' "$out/README.in" >"$out/README.new"
# Replaced only when every table was found: a missing report leaves README.md as it was
# (awk fails, and set -e stops here).
cp "$out/README.new" README.md
echo "README.md tables regenerated from $db"
