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
[ -f "$QLAB_SHARED/models/stories260K.gguf" ] || { echo "SKIP: stories260K not found"; exit 77; }
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }

cat >"$t/imat.sweep" <<'END'
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

"$qlab" sweep "$t/imat.sweep" --db "$t/a.db" --cache-dir "$t/cache" >"$t/a.out" 2>"$t/a.err"
code=$?
[ "$code" -eq 0 ] && ok "sweep ran" || { bad "sweep: exit $code"; cat "$t/a.err"; }
grep -q "4 configs (4 run, 0 already done, 0 failed)" "$t/a.out" && ok "4 configs stored" ||
    { bad "summary"; cat "$t/a.out"; }
n=$(grep -c "^imatrix calib:ts-calib: 35 entries over 8 chunks of 64 tokens" "$t/a.err")
[ "$n" -eq 1 ] && ok "calibration imatrix computed once" || { bad "imatrix computed $n times"; cat "$t/a.err"; }
cached=$(ls "$t/cache"/imatrix-*-c64-n8-po0.gguf 2>/dev/null)
[ -n "$cached" ] && ok "cached as $(basename "$cached")" || bad "no cached imatrix"
"$qlab" inspect "$cached" | grep -q "imatrix.chunk_size .* 64" && ok "cache file is a GGUF imatrix" ||
    bad "cache file"
sha=$(sha256sum "$cached" | cut -d' ' -f1)

q() { "$qlab" query --db "$1" --csv "$2" | tail -n +2; }
runs=$(q "$t/a.db" "SELECT count(*) FROM runs WHERE status = 'done'")
[ "$runs" = 4 ] && ok "4 runs done" || bad "runs done: $runs"
shas=$(q "$t/a.db" "SELECT DISTINCT coalesce(r.imatrix_sha256, 'NULL') FROM runs r
    JOIN configs c ON c.id = r.config_id WHERE c.imatrix LIKE 'calib:%'")
[ "$shas" = "$sha" ] && ok "runs record the cached imatrix's sha256" || bad "recorded sha256: $shas vs $sha"
none=$(q "$t/a.db" "SELECT count(*) FROM runs r JOIN configs c ON c.id = r.config_id
    WHERE c.imatrix = 'none' AND r.imatrix_sha256 IS NULL")
[ "$none" = 2 ] && ok "runs without an imatrix record none" || bad "imatrix none runs: $none"
for wt in Q4_0 IQ4_NL; do
    with=$(q "$t/a.db" "SELECT imatrix_err FROM results WHERE weight_type = '$wt' AND imatrix LIKE 'calib:%'")
    without=$(q "$t/a.db" "SELECT imatrix_err FROM results WHERE weight_type = '$wt' AND imatrix = 'none'")
    awk -v a="$with" -v b="$without" 'BEGIN { exit !(a != "" && b != "" && a > 0 && a < b) }' &&
        ok "$wt: imatrix_err $with with the imatrix < $without without" ||
        bad "$wt: imatrix_err with '$with', without '$without'"
done
terr=$(q "$t/a.db" "SELECT count(*) FROM tensor_errors te JOIN runs r ON r.id = te.run_id
    JOIN configs c ON c.id = r.config_id
    WHERE c.imatrix = 'none' AND te.tensor = 'blk.0.attn_q.weight' AND te.imatrix_err > 0")
[ "$terr" = 2 ] && ok "per-tensor imatrix_err stored for runs without an imatrix too" ||
    bad "per-tensor imatrix_err: $terr"

# Another database, the same cache: the imatrix is loaded, not computed again.
"$qlab" sweep "$t/imat.sweep" --db "$t/b.db" --cache-dir "$t/cache" >"$t/b.out" 2>"$t/b.err" ||
    { bad "second sweep"; cat "$t/b.err"; }
grep -q "^imatrix calib:ts-calib: loaded from cache" "$t/b.err" &&
    ! grep -q "entries over" "$t/b.err" && ok "second sweep loads the cached imatrix" ||
    { bad "second sweep recomputed the imatrix"; cat "$t/b.err"; }
a=$(q "$t/a.db" "SELECT weight_type || imatrix || imatrix_err FROM results ORDER BY 1")
b=$(q "$t/b.db" "SELECT weight_type || imatrix || imatrix_err FROM results ORDER BY 1")
[ "$a" = "$b" ] && ok "same imatrix_err from the cached imatrix" || bad "cached imatrix gives other values"

# A calibration text that does not exist.
sed 's/calib:ts-calib,chunks=8/calib:no-such-text/' "$t/imat.sweep" >"$t/bad.sweep"
"$qlab" sweep "$t/bad.sweep" --db "$t/c.db" --cache-dir "$t/cache" >/dev/null 2>"$t/c.err"
code=$?
[ "$code" -eq 1 ] && grep -q "^qlab: error: .*calib:no-such-text" "$t/c.err" &&
    ok "missing calibration text named (exit 1)" || { bad "missing calibration text: exit $code"; cat "$t/c.err"; }
exit $fail
