#!/bin/sh
# scripts/readme-tables.sh on a copy of itself next to a small README.md, with the
# report fixture database: a block between the report markers is replaced by the
# sweep's table (what `qlab report` wrote, without heading and legend), the text
# around it kept; a marker naming a sweep the database lacks fails the script and
# leaves README.md exactly as it was (it was once truncated).
set -u
qlab="$1"
make_fixture_db="$2"
src="${QLAB_SOURCE_ROOT:?}"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"

db="$tmp/results.db"
"$make_fixture_db" --report "$db" || { bad "make_fixture_db --report"; exit 1; }
mkdir -p "$tmp/repo/scripts"
cp "$src/scripts/readme-tables.sh" "$tmp/repo/scripts/"
readme="$tmp/repo/README.md"
script="$tmp/repo/scripts/readme-tables.sh"

cat >"$readme" <<'END'
# A project

Before the table.
<!-- report:fixture-formats -->
a stale line
<!-- /report:fixture-formats -->
After the table.
END
expect 0 "tables regenerated" sh "$script" "$qlab" "$db"
has "$readme" "| Q4_0    | f32  | same |  4.678 |" "the sweep's table is in"
has "$readme" "- configs: 7 done, 1 failed" "its summary lines are in"
grep -qF "a stale line" "$readme" && bad "the old block content stayed" || ok "the old block content is gone"
grep -qF "## Sweep" "$readme" && bad "the report's heading was copied" || ok "no report heading"
grep -qF "bpw and size:" "$readme" && bad "the legend was copied" || ok "no legend"
head -n 4 "$readme" | tail -n 1 | grep -qxF "<!-- report:fixture-formats -->" &&
    tail -n 2 "$readme" | head -n 1 | grep -qxF "<!-- /report:fixture-formats -->" &&
    tail -n 1 "$readme" | grep -qxF "After the table." &&
    ok "markers and surrounding text kept" || { bad "markers or surrounding text changed"; cat "$readme"; }

# A one-axis comparison table (pairs:SWEEP:AXIS), after the same sweep's report block
# (the report file is read from its start again), and an axis the report lacks.
cp "$readme" "$tmp/saved.md"
cat >"$readme" <<'END'
<!-- report:fixture-formats -->
<!-- /report:fixture-formats -->
<!-- pairs:fixture-formats:act_mode -->
stale pairs
<!-- /pairs:fixture-formats:act_mode -->
END
expect 0 "pairs regenerated" sh "$script" "$qlab" "$db"
has "$readme" "| config | act A | act B |" "the comparison table's header is in"
has "$readme" "| Q4_0   | f32   | q8_0  |" "its rows are in"
grep -qF "stale pairs" "$readme" && bad "the old pairs stayed" || ok "the old pairs are gone"
tail -n 1 "$readme" | grep -qxF "<!-- /pairs:fixture-formats:act_mode -->" &&
    ok "the closing marker kept" || { bad "the closing marker changed"; cat "$readme"; }
printf '%s\n' "<!-- pairs:fixture-formats:kv_type -->" "<!-- /pairs:fixture-formats:kv_type -->" >>"$readme"
expect 1 "an axis without comparisons fails" sh "$script" "$qlab" "$db"
has "$tmp/err" "no kv_type comparisons in the report of fixture-formats" "names the axis"
cp "$tmp/saved.md" "$readme"

# A sweep the database lacks: the script fails and README.md is untouched.
cat >>"$readme" <<'END'
<!-- report:no-such-sweep -->
old numbers
<!-- /report:no-such-sweep -->
END
cp "$readme" "$tmp/before.md"
expect 1 "a missing sweep fails" sh "$script" "$qlab" "$db"
has "$tmp/err" "missing report for sweep no-such-sweep" "names the missing sweep"
cmp -s "$readme" "$tmp/before.md" && ok "README.md unchanged after the failure" ||
    { bad "README.md changed after the failure:"; diff "$tmp/before.md" "$readme" | head; }
exit "$fail"
