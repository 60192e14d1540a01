#!/bin/sh
# The calibration pass of a calib: imatrix also gives the activation maxima of the
# outlier split, and both are cached (calib.h): on stories260K with
# `imatrix = calib:ts-calib,chunks=8` and outlier ratios 0 and 3,
#   - a sweep runs the calibration forward pass once for the imatrix and the maxima,
#     and keeps the maxima beside the cached imatrix (imatrix-*.amax);
#   - another process with the same cache loads both and runs no calibration pass;
#     so do the job processes of `--jobs 2`, which leave the cache file untouched;
#   - a corrupt maxima file is named in a warning and computed again (once, by the
#     parent of the jobs), and so is a missing one next to a cached imatrix (a cache
#     from before the maxima were kept); the imatrix stays cached;
# and every one of these sweeps stores the same results, bit for bit.
# A calibration pass prints one line "... over N chunks ..." (the imatrix's, or the
# maxima's alone); that line is what is counted.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
need_file "$QLAB_SHARED/models/stories260K.gguf"
compare="$(dirname "$0")/compare_results.sh"

cat >"$tmp/calib.sweep" <<'END'
[sweep]
name    = calib-cache
model   = stories260K
text    = ts-eval
ctx     = 64
chunks  = 4
threads = 2
imatrix = calib:ts-calib,chunks=8
act_mode = q8_0

[grid]
weight_type   = Q8_0 Q4_0
outlier_ratio = 0 3
END

# sweep NAME [ARGS...]: the sweep into $tmp/NAME.db with the shared cache; its
# output in $tmp/NAME.out and $tmp/NAME.err.
sweep() {
    name_=$1
    shift
    "$qlab" sweep "$tmp/calib.sweep" --db "$tmp/$name_.db" --cache-dir "$tmp/cache" "$@" \
        >"$tmp/$name_.out" 2>"$tmp/$name_.err"
    code_=$?
    [ "$code_" -eq 0 ] && ok "$name_: sweep ran" || { bad "$name_: sweep exit $code_"; cat "$tmp/$name_.err"; }
}
# passes NAME: calibration passes the sweep NAME printed.
passes() { grep -c "over [0-9]* chunks" "$tmp/$1.err"; }
# same NAME: NAME.db holds the same results as a.db.
same() {
    if sh "$compare" "$qlab" "$tmp/a.db" "$tmp/$1.db" >"$tmp/cmp" 2>&1; then
        ok "$1: the same results as the first sweep"
    else
        bad "$1: other results than the first sweep"; cat "$tmp/cmp"
    fi
}
inode() { stat -c %i "$1" 2>/dev/null; }

# 1. A fresh cache: one pass for both, both cached.
sweep a
n=$(passes a)
[ "$n" -eq 1 ] && ok "one calibration pass for the imatrix and the maxima" ||
    { bad "$n calibration passes"; cat "$tmp/a.err"; }
grep -q "4 configs (4 run, 0 already done, 0 failed)" "$tmp/a.out" && ok "4 configs run" ||
    { bad "summary"; cat "$tmp/a.out"; }
amax=$(ls "$tmp/cache"/imatrix-*-c64-n8-po0.amax 2>/dev/null)
[ -n "$amax" ] && [ -f "${amax%.amax}.gguf" ] && ok "maxima cached beside the imatrix as $(basename "$amax")" ||
    { bad "no cached maxima beside the imatrix"; ls -l "$tmp/cache"; }
matches "$tmp/a.err" "^calib:ts-calib: activation maxima of [0-9]* products cached in .*\.amax$" \
    "the sweep says where the maxima are kept"
kept=$(rows "$tmp/a.db" "SELECT count(*) FROM tensor_errors te JOIN runs r ON r.id = te.run_id
    JOIN configs c ON c.id = r.config_id WHERE c.outlier_ratio = 3 AND te.outlier_cols > 0")
[ "${kept:-0}" -gt 0 ] && ok "the ratio-3 runs split $kept tensors" || bad "no outlier columns kept: '$kept'"

# 2. Another process, the same cache: both loaded, no pass.
sweep b
n=$(passes b)
[ "$n" -eq 0 ] && ok "a second process runs no calibration pass" || { bad "$n passes"; cat "$tmp/b.err"; }
has "$tmp/b.err" "calib:ts-calib: activation maxima loaded from cache $amax" "it loads the cached maxima"
same b

# 3. Job processes load the cached maxima: none computes (which would rewrite the file).
before=$(inode "$amax")
sweep c --jobs 2
n=$(passes c)
[ "$n" -eq 0 ] && ok "--jobs 2: no calibration pass" || { bad "--jobs 2: $n passes"; cat "$tmp/c.err"; }
[ -n "$before" ] && [ "$(inode "$amax")" = "$before" ] && ok "--jobs 2: the job processes left the maxima file as it was" ||
    bad "--jobs 2: the maxima file was written again"
same c

# 4. A corrupt maxima file (one changed byte of a maximum): named, computed again once
#    by the parent of the jobs, cached again; the imatrix is not computed again.
size=$(wc -c <"$amax")
printf '\377' | dd of="$amax" bs=1 seek=$((size - 2)) conv=notrunc 2>/dev/null
sweep d --jobs 2
n=$(grep -c "warning: ignoring the cached activation maxima $amax (.*corrupt" "$tmp/d.err")
[ "$n" -eq 1 ] && ok "the corrupt maxima file is named once" || { bad "warned $n times"; cat "$tmp/d.err"; }
n=$(passes d)
[ "$n" -eq 1 ] && grep -q "^calib:ts-calib: activation maxima over 8 chunks of 64 tokens" "$tmp/d.err" &&
    ! grep -q "entries over" "$tmp/d.err" && ok "the maxima are computed again, once; the imatrix is not" ||
    { bad "after corruption: $n passes"; cat "$tmp/d.err"; }
same d
sweep e
[ "$(passes e)" -eq 0 ] && ! grep -q "warning" "$tmp/e.err" && ok "the maxima were cached again" ||
    { bad "the rewritten maxima file is not used"; cat "$tmp/e.err"; }

# A file that is not a maxima file at all.
echo "not maxima" >"$amax"
sweep f
grep -q "warning: ignoring the cached activation maxima $amax (.*shorter than the 256-byte header" \
    "$tmp/f.err" && [ "$(passes f)" -eq 1 ] && ok "a truncated maxima file is named and computed again" ||
    { bad "truncated maxima file"; cat "$tmp/f.err"; }
same f

# 5. A cache from before the maxima were kept: the imatrix is loaded, the maxima made.
rm -f "$amax"
sweep g
[ "$(passes g)" -eq 1 ] && grep -q "^imatrix calib:ts-calib: loaded from cache" "$tmp/g.err" &&
    [ -f "$amax" ] && ok "missing maxima are computed beside the cached imatrix" ||
    { bad "missing maxima"; cat "$tmp/g.err"; }
same g
exit "$fail"
