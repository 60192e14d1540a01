#!/bin/sh
# report.html in a real browser: headless Chromium loads the page of the report
# fixture with no console message (a page with a script error shows that the check
# sees one), its script runs (the page marks itself ready, and #sort=N-desc sorts the
# table), the plots are inline, and a screenshot shows the table and the first plot.
# Skipped without chromium or gnuplot (.ci/run installs both).
set -u
qlab="$1"
make_fixture_db="$2"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"

command -v chromium >/dev/null 2>&1 || skip "chromium not installed (Debian package chromium)"
command -v gnuplot >/dev/null 2>&1 || skip "gnuplot not installed"

db="$tmp/results.db"
"$make_fixture_db" --report "$db" || { bad "make_fixture_db --report"; exit 1; }
expect 0 "report with plots" "$qlab" report --db "$db" -o "$tmp/r" --sweep fixture-formats --resamples 1000
page="$tmp/r/fixture-formats/report.html"

# chromium_run OUT URL ARGS...: a fresh profile each time, no network of its own;
# stdout to OUT, its log (console messages included) to OUT.log.
chromium_run() {
    out=$1; url=$2; shift 2
    rm -rf "$tmp/profile"
    timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
        --disable-component-update --disable-sync --no-first-run --disable-quic \
        --user-data-dir="$tmp/profile" --enable-logging=stderr --v=0 "$@" "$url" \
        >"$out" 2>"$out.log"
}

# The check for console messages sees a script error.
printf '<!DOCTYPE html><html><body><script>undefined_function();</script></body></html>\n' >"$tmp/bad.html"
chromium_run "$tmp/bad.dom" "file://$tmp/bad.html" --dump-dom
if grep -q ':CONSOLE' "$tmp/bad.dom.log"; then ok "a script error shows in the log"; else bad "no console line for a script error"; cat "$tmp/bad.dom.log"; fi

chromium_run "$tmp/page.dom" "file://$page" --dump-dom
if grep -q ':CONSOLE' "$tmp/page.dom.log"; then bad "console messages:"; grep ':CONSOLE' "$tmp/page.dom.log"; else ok "no console messages"; fi
has "$tmp/page.dom" 'data-sortable="ready"' "the page's script ran"
[ "$(grep -c '<svg' "$tmp/page.dom")" -ge 4 ] && ok "the plots are inline SVG" || bad "fewer than 4 inline SVGs"

# Sorted by mean KLD (column 7 from 0: weights act head bpw size PPL ΔPPL KLD mean),
# descending: the Q4_0 q8_0 row (8.067e-02) comes first.
chromium_run "$tmp/sorted.dom" "file://$page#sort=7-desc" --dump-dom
first=$(awk '/<tbody>/ { f = 1 } f && /<tr>/ { print; exit }' "$tmp/sorted.dom")
case "$first" in
*"8.067e-02"*) ok "sorted by KLD mean, largest first" ;;
*) bad "first row after sorting: $first" ;;
esac
has "$tmp/sorted.dom" 'aria-sort="descending"' "the sorted column is marked"

chromium_run "$tmp/shot.out" "file://$page" --window-size=1280,1400 --screenshot="$tmp/shot.png" --hide-scrollbars
if grep -q ':CONSOLE' "$tmp/shot.out.log"; then bad "console messages while drawing"; fi
# A page of text and a plot compresses to far more than a blank one (a few KB).
if is_png "$tmp/shot.png" && [ "$(wc -c <"$tmp/shot.png")" -ge 60000 ]; then
    ok "screenshot taken ($(wc -c <"$tmp/shot.png") bytes)"
else
    bad "no screenshot of useful size"
fi
# Keep it for a person to look at when asked.
[ -n "${QLAB_KEEP_SCREENSHOT:-}" ] && cp "$tmp/shot.png" "$QLAB_KEEP_SCREENSHOT"

# The crowded fixture (issue 25): 60 configs in one plot, file configs by name with the
# whole value on hover; the pages load without a console message, every plot inline.
"$make_fixture_db" --report-crowded "$tmp/crowded.db" || { bad "make_fixture_db --report-crowded"; exit 1; }
expect 0 "report of the crowded sweeps" "$qlab" report --db "$tmp/crowded.db" -o "$tmp/c" --resamples 200
for sw in crowd-a crowd-b; do
    chromium_run "$tmp/$sw.dom" "file://$tmp/c/$sw/report.html" --dump-dom
    if grep -q ':CONSOLE' "$tmp/$sw.dom.log"; then bad "$sw: console messages:"; grep ':CONSOLE' "$tmp/$sw.dom.log"; else ok "$sw: no console messages"; fi
    [ "$(grep -c '<svg' "$tmp/$sw.dom")" -ge 4 ] && ok "$sw: the plots inline" || bad "$sw: fewer than 4 inline SVGs"
done
has "$tmp/crowd-b.dom" 'title="file:quants/lq-Q4_K_M-im.gguf@cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd">file:lq-Q4_K_M-im.gguf</td>' \
    "a file config by its name, the whole value on hover"
chromium_run "$tmp/crowd.out" "file://$tmp/c/crowd-a/report.html" --window-size=1400,2400 --screenshot="$tmp/crowd.png" --hide-scrollbars
is_png "$tmp/crowd.png" && ok "crowded page screenshot" || bad "no screenshot of the crowded page"
[ -n "${QLAB_KEEP_SCREENSHOT:-}" ] && cp "$tmp/crowd.png" "${QLAB_KEEP_SCREENSHOT%.png}-crowded.png"
exit "$fail"
