#!/bin/sh
# qlab report from the command line on the report fixture database: the files
# under -o, byte-identical output of two runs, real PNG/SVG plots when gnuplot
# is installed, the no-gnuplot path (PATH without gnuplot: tables written,
# plots skipped with the reason, exit 0), and exit codes (1 runtime, 2 usage); on the
# crowded fixture, every plot of every sweep, and a plot whose script fails left out
# alone, named with gnuplot's message.
set -u
qlab="$1"
make_fixture_db="$2"
src="${QLAB_SOURCE_ROOT:?}"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"

db="$tmp/results.db"
"$make_fixture_db" --report "$db" || { bad "make_fixture_db --report"; exit 1; }

# Without gnuplot on PATH (qlab itself is called by its full path).
mkdir "$tmp/emptybin"
PATH="$tmp/emptybin" expect 0 "report without gnuplot exits 0" "$qlab" report --db "$db" -o "$tmp/nognu"
has "$tmp/err" "plots skipped: gnuplot not found on PATH" "says why plots were skipped"
has "$tmp/out" "report: 3 sweeps" "summary line"
for f in report.md formats.csv formats.dat kld_bpw.gp ppl_bpw.gp pareto_kld.dat; do
    [ -s "$tmp/nognu/fixture-formats/$f" ] && ok "no gnuplot: $f written" || bad "no gnuplot: $f missing"
done
[ ! -e "$tmp/nognu/fixture-formats/kld_bpw.png" ] && ok "no gnuplot: no PNG" || bad "no gnuplot: a PNG appeared"
cmp -s "$tmp/nognu/fixture-formats/report.md" "$src/tests/data/report/fixture-formats.md" &&
    ok "report.md as expected" || bad "report.md differs from tests/data/report/fixture-formats.md"

# Determinism: two runs give byte-identical tables, data files and scripts.
expect 0 "report --no-plots" "$qlab" report --db "$db" -o "$tmp/a" --no-plots
expect 0 "report --no-plots again" "$qlab" report --db "$db" -o "$tmp/b" --no-plots
if diff -r "$tmp/a" "$tmp/b" >/dev/null; then ok "two runs byte-identical"; else bad "two runs differ"; diff -r "$tmp/a" "$tmp/b" | head; fi
diff -r "$tmp/a" "$tmp/nognu" >/dev/null && ok "gnuplot-less run writes the same files" || bad "no-gnuplot output differs"

# With gnuplot: real images.
if command -v gnuplot >/dev/null 2>&1; then
    expect 0 "report with plots" "$qlab" report --db "$db" -o "$tmp/plots" --sweep fixture-formats
    has "$tmp/out" "report: 1 sweep, 21 files under $tmp/plots/, 4 plots" "plots summary"
    for p in kld_bpw ppl_bpw kld_cdf tensors-c90fa930648f; do
        is_png "$tmp/plots/fixture-formats/$p.png" && ok "$p.png is a real PNG" || bad "$p.png is not a PNG of useful size"
        grep -q "<svg" "$tmp/plots/fixture-formats/$p.svg" && ok "$p.svg" || bad "$p.svg is not SVG"
    done
    # report.html: every plot inline, nothing fetched from elsewhere.
    html="$tmp/plots/fixture-formats/report.html"
    [ "$(grep -c '<svg' "$html")" -eq 4 ] && ok "report.html inlines the 4 plots" || bad "report.html: not 4 inline SVGs"
    if grep -Eq '<(script|img|link|iframe)[^>]*(src|href)=|https?://[^"]*\.(js|css)|@import' "$html"; then
        bad "report.html refers to an external file"
    else
        ok "report.html is self-contained"
    fi
    has "$tmp/plots/fixture-formats/report.md" "[report.html](report.html)" "report.md links report.html"
    # The scripts redraw the plots on their own from their directory.
    rm "$tmp/plots/fixture-formats/kld_bpw.png"
    (cd "$tmp/plots/fixture-formats" && gnuplot kld_bpw.gp) && is_png "$tmp/plots/fixture-formats/kld_bpw.png" &&
        ok "kld_bpw.gp reruns by hand" || bad "kld_bpw.gp does not rerun"
    expect 0 "--tensors" "$qlab" report --db "$db" -o "$tmp/plots" --sweep fixture-formats --tensors 9514f3
    is_png "$tmp/plots/fixture-formats/tensors-9514f34a1aec.png" && ok "--tensors plot" || bad "--tensors plot missing"

    # Crowded sweeps (issue 25): every plot of every sweep drawn.
    "$make_fixture_db" --report-crowded "$tmp/crowded.db" || bad "make_fixture_db --report-crowded"
    expect 0 "report of crowded sweeps" "$qlab" report --db "$tmp/crowded.db" -o "$tmp/crowd" --resamples 200
    has "$tmp/out" "report: 4 sweeps, " "four crowded sweeps"
    has "$tmp/out" ", 16 plots" "every plot of every crowded sweep drawn"
    if grep -q "skipped\|not drawn" "$tmp/err"; then bad "plots left out:"; cat "$tmp/err"; else ok "no plot left out"; fi
    # One script that fails costs its plot alone; the summary names it, its script and
    # gnuplot's message.
    mkdir -p "$tmp/failbin"
    real=$(command -v gnuplot)
    cat >"$tmp/failbin/gnuplot" <<END
#!/bin/sh
case "\$(pwd)" in */crowd-a) if [ "\$1" = kld_bpw.gp ]; then
  echo '"kld_bpw.gp" line 9: y range must be greater than 0 for log scale' >&2; exit 1; fi ;; esac
exec "$real" "\$@"
END
    chmod +x "$tmp/failbin/gnuplot"
    PATH="$tmp/failbin:$PATH" expect 0 "a failing plot is not an error" "$qlab" report --db "$tmp/crowded.db" -o "$tmp/crowd" --resamples 200
    has "$tmp/out" ", 15 plots" "the other 15 plots drawn"
    has "$tmp/err" "qlab report: sweep crowd-a: plot kld_bpw not drawn: gnuplot $tmp/crowd/crowd-a/kld_bpw.gp: exit status 1: \"kld_bpw.gp\" line 9: y range must be greater than 0 for log scale" \
        "the plot, its script and gnuplot's message named"
    has "$tmp/err" "qlab report: 1 plot not drawn; every other file and plot was written" "what the rest of the report is"
    if grep -q "rerun once gnuplot works" "$tmp/err"; then bad "a failing script blamed on gnuplot"; else ok "gnuplot not blamed"; fi
    has "$tmp/crowd/crowd-a/report.md" "Plots not drawn, their gnuplot scripts: [mean KLD against bpw](kld_bpw.gp)." "report.md links the script"
    [ ! -e "$tmp/crowd/crowd-a/kld_bpw.png" ] && ok "no stale image" || bad "crowd-a/kld_bpw.png left from the run before"
    for sw in crowd-b crowd-c crowd-d; do
        is_png "$tmp/crowd/$sw/kld_bpw.png" && ok "$sw: drawn" || bad "$sw: kld_bpw not drawn"
    done
else
    echo "note: gnuplot not installed; real-plot checks skipped"
fi

# Errors.
expect 1 "unknown sweep" "$qlab" report --db "$db" -o "$tmp/x" --sweep nope
has "$tmp/err" "qlab: error: $db: no sweep 'nope' (sweeps: fixture-failed, fixture-formats, fixture-mixed)" "names the sweeps"
expect 1 "no database" "$qlab" report --db "$tmp/none.db" -o "$tmp/x"
has "$tmp/err" "no results database here" "missing database message"
expect 1 "--tensors matching nothing" "$qlab" report --db "$db" -o "$tmp/x" --tensors 8138fe
expect 2 "--tensors too short" "$qlab" report --db "$db" --tensors ab
expect 2 "unknown option" "$qlab" report --frobnicate
expect 2 "--sweep without a value" "$qlab" report --sweep
expect 2 "stray argument" "$qlab" report extra
expect 0 "--help" "$qlab" report --help
has "$tmp/out" "usage: qlab report" "help text"

exit $fail
