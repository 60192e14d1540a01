#!/bin/sh
# Per-layer divergence (README, "Per-layer divergence"): a sweep with layer_metrics = yes
# runs each config in lock-step with the reference and stores, per block, the relative
# error and cosine of the residual stream at the scored positions (layer_results view).
# - a config that quantizes only the head (weight_type F32, head_type Q4_0) leaves every
#   block's stream exactly the reference's: rel_err 0, cosine 1, while its KLD is not 0;
# - a Q4_0 config diverges from block 0 on;
# - the lock-step pass does not change any figure: the same KLD and PPL, bit for bit, as
#   the same sweep without layer metrics.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
need_file "$QLAB_SHARED/models/stories260K.gguf"

write_sweep() { # FILE LAYER_METRICS
    cat >"$1" <<END
[sweep]
name    = layers
model   = stories260K
text    = ts-eval
ctx     = 64
chunks  = 4
threads = 2
$2

[grid]
weight_type = F32 Q4_0
head_type   = Q4_0
END
}
write_sweep "$tmp/on.sweep" "layer_metrics = yes"
write_sweep "$tmp/off.sweep" ""
expect 0 "sweep with layer metrics" "$qlab" sweep "$tmp/on.sweep" --db "$tmp/on.db" --cache-dir "$tmp/c"
expect 0 "sweep without" "$qlab" sweep "$tmp/off.sweep" --db "$tmp/off.db" --cache-dir "$tmp/c"

n_layer=5 # stories260K's blocks
[ "$(rows "$tmp/on.db" "SELECT count(*) FROM layer_results WHERE weight_type = 'F32'")" = "$n_layer" ] &&
    ok "one row per block" || bad "layer rows: $(rows "$tmp/on.db" "SELECT count(*) FROM layer_results")"
[ "$(rows "$tmp/off.db" "SELECT count(*) FROM layer_metrics")" = 0 ] &&
    ok "no layer rows without layer_metrics" || bad "layer rows stored without the key"
got=$(rows "$tmp/on.db" "SELECT count(*) FROM layer_results WHERE weight_type = 'F32'
    AND rel_err_mean = 0 AND rel_err_p99 = 0 AND abs(cos_mean - 1) < 1e-12")
[ "$got" = "$n_layer" ] && ok "head-only quantization: no divergence in any block" ||
    { bad "head-only divergence"; rows "$tmp/on.db" "SELECT * FROM layer_metrics"; }
got=$(rows "$tmp/on.db" "SELECT kld_mean > 0 FROM results WHERE weight_type = 'F32'")
[ "$got" = 1 ] && ok "head-only quantization: KLD above 0" || bad "head-only KLD: $got"
got=$(rows "$tmp/on.db" "SELECT rel_err_mean > 0 AND cos_mean < 1 FROM layer_results
    WHERE weight_type = 'Q4_0' AND layer = 0")
[ "$got" = 1 ] && ok "Q4_0 diverges at block 0" || bad "Q4_0 block 0: $got"
q="SELECT weight_type, printf('%.17g %.17g %.17g', kld_mean, ppl, top1_agree) FROM results
    ORDER BY weight_type"
if [ "$(rows "$tmp/on.db" "$q")" = "$(rows "$tmp/off.db" "$q")" ]; then
    ok "layer metrics change no figure"
else
    bad "figures differ with layer metrics"; rows "$tmp/on.db" "$q"; rows "$tmp/off.db" "$q"
fi
expect 0 "report of the sweep with layer metrics" "$qlab" report --db "$tmp/on.db" -o "$tmp/r-on"
dat="$tmp/r-on/layers/divergence.dat"
[ "$(grep -c '^# index' "$dat" 2>/dev/null)" = 2 ] && ok "divergence.dat: a block per config" ||
    bad "divergence.dat: $(cat "$dat" 2>&1)"
has "$tmp/r-on/layers/report.md" "[divergence by layer](divergence.svg)" "report.md links the plot"
if command -v gnuplot >/dev/null 2>&1; then
    [ -s "$tmp/r-on/layers/divergence.png" ] && ok "divergence.png drawn" || bad "no divergence.png"
fi
expect 0 "report of the sweep without" "$qlab" report --db "$tmp/off.db" -o "$tmp/r-off"
[ ! -e "$tmp/r-off/layers/divergence.dat" ] && ok "no divergence plot without layer metrics" ||
    bad "a divergence plot without layer metrics"
printf '[sweep]\nmodel = stories260K\ntext = ts-eval\nlayer_metrics = maybe\n[grid]\nweight_type = Q8_0\n' \
    >"$tmp/bad.sweep"
expect 1 "a bad layer_metrics value is refused" "$qlab" sweep "$tmp/bad.sweep" --list
has "$tmp/err" "layer_metrics 'maybe' must be yes or no" "the error names the key and value"
exit "$fail"
