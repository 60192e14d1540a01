#!/bin/sh
# A sweep with `imatrix = none calib:ts-calib,chunks=8` on stories260K: the calibration
# imatrix is computed once, cached in the cache directory as a GGUF imatrix and
# recorded (sha256) in the runs that use it; every run is stored, and for Q4_0 and
# IQ4_NL the runs quantized with the imatrix have a lower imatrix_err (every run is
# weighed by the sweep's first imatrix). A second sweep with the same cache loads the
# imatrix instead of computing it; a calibration text that does not exist stops the
# sweep with a message naming it.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
need_file "$QLAB_SHARED/models/stories260K.gguf"

cat >"$tmp/imat.sweep" <<'END'
[sweep]
name    = imatrix-calib
model   = stories260K
text    = ts-eval
ctx     = 64
chunks  = 4
threads = 2

[grid]
weight_type = Q4_0 IQ4_NL
imatrix     = none calib:ts-calib,chunks=8
END

"$qlab" sweep "$tmp/imat.sweep" --db "$tmp/a.db" --cache-dir "$tmp/cache" >"$tmp/a.out" 2>"$tmp/a.err"
code=$?
[ "$code" -eq 0 ] && ok "sweep ran" || { bad "sweep: exit $code"; cat "$tmp/a.err"; }
grep -q "4 configs (4 run, 0 already done, 0 failed)" "$tmp/a.out" && ok "4 configs stored" ||
    { bad "summary"; cat "$tmp/a.out"; }
n=$(grep -c "^imatrix calib:ts-calib: 35 entries over 8 chunks of 64 tokens" "$tmp/a.err")
[ "$n" -eq 1 ] && ok "calibration imatrix computed once" || { bad "imatrix computed $n times"; cat "$tmp/a.err"; }
cached=$(ls "$tmp/cache"/imatrix-*-c64-n8-po0.gguf 2>/dev/null)
[ -n "$cached" ] && ok "cached as $(basename "$cached")" || bad "no cached imatrix"
"$qlab" inspect "$cached" | grep -q "imatrix.chunk_size .* 64" && ok "cache file is a GGUF imatrix" ||
    bad "cache file"
sha=$(sha256sum "$cached" | cut -d' ' -f1)

runs=$(rows "$tmp/a.db" "SELECT count(*) FROM runs WHERE status = 'done'")
[ "$runs" = 4 ] && ok "4 runs done" || bad "runs done: $runs"
shas=$(rows "$tmp/a.db" "SELECT DISTINCT coalesce(r.imatrix_sha256, 'NULL') FROM runs r
    JOIN configs c ON c.id = r.config_id WHERE c.imatrix LIKE 'calib:%'")
[ "$shas" = "$sha" ] && ok "runs record the cached imatrix's sha256" || bad "recorded sha256: $shas vs $sha"
none=$(rows "$tmp/a.db" "SELECT count(*) FROM runs r JOIN configs c ON c.id = r.config_id
    WHERE c.imatrix = 'none' AND r.imatrix_sha256 IS NULL")
[ "$none" = 2 ] && ok "runs without an imatrix record none" || bad "imatrix none runs: $none"
for wt in Q4_0 IQ4_NL; do
    with=$(rows "$tmp/a.db" "SELECT imatrix_err FROM results WHERE weight_type = '$wt' AND imatrix LIKE 'calib:%'")
    without=$(rows "$tmp/a.db" "SELECT imatrix_err FROM results WHERE weight_type = '$wt' AND imatrix = 'none'")
    awk -v a="$with" -v b="$without" 'BEGIN { exit !(a != "" && b != "" && a > 0 && a < b) }' &&
        ok "$wt: imatrix_err $with with the imatrix < $without without" ||
        bad "$wt: imatrix_err with '$with', without '$without'"
done
terr=$(rows "$tmp/a.db" "SELECT count(*) FROM tensor_errors te JOIN runs r ON r.id = te.run_id
    JOIN configs c ON c.id = r.config_id
    WHERE c.imatrix = 'none' AND te.tensor = 'blk.0.attn_q.weight' AND te.imatrix_err > 0")
[ "$terr" = 2 ] && ok "per-tensor imatrix_err stored for runs without an imatrix too" ||
    bad "per-tensor imatrix_err: $terr"

# Another database, the same cache: the imatrix is loaded, not computed again.
"$qlab" sweep "$tmp/imat.sweep" --db "$tmp/b.db" --cache-dir "$tmp/cache" >"$tmp/b.out" 2>"$tmp/b.err" ||
    { bad "second sweep"; cat "$tmp/b.err"; }
grep -q "^imatrix calib:ts-calib: loaded from cache" "$tmp/b.err" &&
    ! grep -q "entries over" "$tmp/b.err" && ok "second sweep loads the cached imatrix" ||
    { bad "second sweep recomputed the imatrix"; cat "$tmp/b.err"; }
a=$(rows "$tmp/a.db" "SELECT weight_type || imatrix || imatrix_err FROM results ORDER BY 1")
b=$(rows "$tmp/b.db" "SELECT weight_type || imatrix || imatrix_err FROM results ORDER BY 1")
[ "$a" = "$b" ] && ok "same imatrix_err from the cached imatrix" || bad "cached imatrix gives other values"

# A calibration text that does not exist.
sed 's/calib:ts-calib,chunks=8/calib:no-such-text/' "$tmp/imat.sweep" >"$tmp/bad.sweep"
"$qlab" sweep "$tmp/bad.sweep" --db "$tmp/c.db" --cache-dir "$tmp/cache" >/dev/null 2>"$tmp/c.err"
code=$?
[ "$code" -eq 1 ] && grep -q "^qlab: error: .*calib:no-such-text" "$tmp/c.err" &&
    ok "missing calibration text named (exit 1)" || { bad "missing calibration text: exit $code"; cat "$tmp/c.err"; }
exit $fail
