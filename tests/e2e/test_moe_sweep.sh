#!/bin/sh
# Sweeps on a mixture-of-experts model (issue 23; ../shared/golden/moe):
#   - Q4_K_M with llama-imatrix's imatrix equals llama-quantize's own file as a config,
#     bit for bit: each expert quantized with its own importance;
#   - routing figures: the reference against itself agrees fully; a per-block row and
#     per-expert loads summing to 1; each expert's weight errors;
#   - tensor_types on the router and on the experts;
#   - objective kld:expert: one row per expert measured, one type per block's experts.
# usage: test_moe_sweep.sh QLAB
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
moe="$QLAB_SHARED/golden/moe"
need_file "$moe/moe-llama-f32.gguf"

cat >"$tmp/moe.sweep" <<END
[sweep]
name    = moe-test
model   = $moe/moe-llama-f32.gguf
text    = tinystories-valid
ctx     = 128
chunks  = 4
threads = 1

[grid]
weight_type = Q4_K_M
imatrix     = $moe/moe-llama.imatrix.dat

[grid]
weight_type = file:$moe/moe-llama-Q4_K_M-imat.gguf

[grid]
weight_type  = F32 Q8_0 Q2_K
tensor_types = none

[grid]
weight_type  = Q4_K
tensor_types = ffn_gate_inp=Q8_0 ffn_.*_exps=Q2_K;attn_.*=Q6_K
END
expect 0 "MoE sweep" "$qlab" sweep "$tmp/moe.sweep" --db "$tmp/m.db" --cache-dir "$tmp/cache" \
    --quiet
db="$tmp/m.db"
q4=$(rows "$db" "SELECT m.kld_mean FROM metrics m JOIN runs r ON r.id = m.run_id JOIN configs c
    ON c.id = r.config_id WHERE c.weight_type = 'Q4_K_M'")
file=$(rows "$db" "SELECT m.kld_mean FROM metrics m JOIN runs r ON r.id = m.run_id JOIN configs
    c ON c.id = r.config_id WHERE c.weight_type LIKE 'file:%'")
if [ -n "$q4" ] && [ "$q4" = "$file" ]; then ok "Q4_K_M + imatrix = llama-quantize's file ($q4)"
else bad "Q4_K_M + imatrix KLD '$q4', llama-quantize's file '$file'"; fi

metric() { # WEIGHT_TYPE COLUMN
    rows "$db" "SELECT m.$2 FROM metrics m JOIN runs r ON r.id = m.run_id JOIN configs c
        ON c.id = r.config_id WHERE c.weight_type = '$1' AND c.tensor_types = 'none'"
}
awk -v a="$(metric F32 route_agree)" -v s="$(metric F32 load_shift)" \
    'BEGIN { exit !(a == 1 && s == 0) }' \
    && ok "the reference's own weights route as the reference" \
    || bad "F32: route_agree $(metric F32 route_agree), load_shift $(metric F32 load_shift)"
awk -v a="$(metric Q8_0 route_agree)" -v b="$(metric Q2_K route_agree)" \
    'BEGIN { exit !(a < 1 && b < a && b > 0) }' \
    && ok "routing agreement falls with the bits (Q8_0 $(metric Q8_0 route_agree), Q2_K $(metric Q2_K route_agree))" \
    || bad "route_agree Q8_0 $(metric Q8_0 route_agree), Q2_K $(metric Q2_K route_agree)"
n=$(rows "$db" "SELECT count(*) FROM layer_metrics WHERE route_agree IS NOT NULL")
[ "$n" -eq 14 ] && ok "a routing row per block of every run (7 x 2)" || bad "$n routing rows, expected 14"
bad_sums=$(rows "$db" "SELECT count(*) FROM (SELECT run_id, layer, sum(share) s, sum(ref_share) r
    FROM expert_load GROUP BY run_id, layer) WHERE abs(s - 1) > 1e-9 OR abs(r - 1) > 1e-9")
[ "$bad_sums" -eq 0 ] && ok "each block's expert loads add up to 1" || bad "$bad_sums blocks' loads do not add up to 1"
n=$(rows "$db" "SELECT count(*) FROM expert_errors e JOIN runs r ON r.id = e.run_id JOIN configs c
    ON c.id = r.config_id WHERE c.weight_type = 'Q8_0'")
[ "$n" -eq 24 ] && ok "24 expert error rows (3 tensors x 2 blocks x 4 experts)" || bad "$n expert error rows"
used() { # TENSOR
    rows "$db" "SELECT t.used_type FROM tensor_errors t JOIN runs r ON r.id = t.run_id JOIN
        configs c ON c.id = r.config_id WHERE c.tensor_types = '$2' AND t.tensor = '$1'"
}
[ "$(used blk.1.ffn_gate_inp.weight ffn_gate_inp=Q8_0)" = "Q8_0" ] \
    && ok "tensor_types sets the router's type" || bad "router: '$(used blk.1.ffn_gate_inp.weight ffn_gate_inp=Q8_0)'"
[ "$(used blk.0.ffn_down_exps.weight 'ffn_.*_exps=Q2_K;attn_.*=Q6_K')" = "Q2_K" ] \
    && [ "$(used blk.0.attn_v.weight 'ffn_.*_exps=Q2_K;attn_.*=Q6_K')" = "Q6_K" ] \
    && ok "tensor_types on expert and attention tensors" || bad "expert/attention rule types"

cat >"$tmp/fit.sweep" <<END
[sweep]
name    = moe-fit
model   = $moe/moe-llama-f32.gguf
text    = tinystories-valid
ctx     = 128
chunks  = 4
threads = 1
imatrix = calib:tinystories-calib,chunks=2

[grid]
weight_type = F32
budget      = Q3_K_M
objective   = kld:expert
END
expect 0 "kld:expert fit" "$qlab" sweep "$tmp/fit.sweep" --db "$tmp/m.db" --cache-dir "$tmp/cache" \
    --quiet
n=$(rows "$db" "SELECT count(DISTINCT tensor) FROM sensitivity WHERE grouping = 'expert'")
[ "$n" -eq 8 ] && ok "one sensitivity row per expert and block (8)" || bad "$n expert rows, expected 8"
# The router is measured and assigned like any other tensor (llama-quantize keeps it F32;
# a kld fit decides from its measured sensitivity).
n=$(rows "$db" "SELECT count(DISTINCT tensor) FROM sensitivity WHERE tensor LIKE 'blk.%.ffn_gate_inp.weight'")
[ "$n" -eq 2 ] && ok "each block's router has its sensitivity rows" || bad "$n routers with sensitivity rows, expected 2"
n=$(rows "$db" "SELECT count(*) FROM tensor_errors t JOIN runs r ON r.id = t.run_id JOIN configs c
    ON c.id = r.config_id WHERE c.objective = 'kld:expert' AND t.tensor LIKE '%ffn_gate_inp.weight'
    AND t.choice LIKE 'budget: the exact-fit solver%'")
[ "$n" -eq 2 ] && ok "the fit chose each router's type" || { bad "$n routers typed by the fit, expected 2";
    rows "$db" "SELECT t.tensor, t.used_type, t.choice FROM tensor_errors t WHERE t.tensor LIKE '%gate_inp%'"; }
n=$(rows "$db" "SELECT count(*) FROM sensitivity WHERE grouping = 'expert' AND type = 'Q3_K'
    AND kld_mean <= 1e-4")
[ "$n" -eq 0 ] && ok "every expert's Q3_K moves the output" || bad "$n experts' Q3_K rows without effect"
n=$(rows "$db" "SELECT count(DISTINCT t.layer || t.used_type) FROM tensor_errors t JOIN runs r
    ON r.id = t.run_id JOIN configs c ON c.id = r.config_id WHERE c.objective = 'kld:expert'
    AND t.tensor LIKE '%_exps.weight'")
[ "$n" -le 2 ] && ok "one type for each block's three expert tensors" || bad "$n (block, type) pairs of expert tensors"
# The report draws the routing by block and the experts' sensitivities.
expect 0 "report of the MoE sweeps" "$qlab" report --db "$db" -o "$tmp/report"
is_png "$tmp/report/moe-test/routing.png" && ok "routing plot drawn" || bad "no routing.png"
is_png "$tmp/report/moe-fit/sensitivity_experts.png" && ok "expert sensitivity heatmap drawn" \
    || bad "no sensitivity_experts.png"
has "$tmp/report/moe-test/report.md" "route %" "report.md has the routing column"

# llama-quantize's rules for 8-expert models (Mixtral), on a synthetic one: attn_k and
# attn_v in Q8_0, attn_output in Q5_K under Q4_K_M (llama_tensor_get_type, b4747).
expect 0 "synth 8 experts" "$qlab" synth -o "$tmp/mx8.gguf" --experts 8 --experts-used 2 \
    --layers 2
expect 0 "quantize Q4_K_M" "$qlab" quantize "$tmp/mx8.gguf" "$tmp/mx8q.gguf" Q4_K_M
matches "$tmp/out" "blk.1.attn_v.weight .* Q8_0 " "8 experts: attn_v Q8_0"
matches "$tmp/out" "blk.0.attn_k.weight .* Q8_0 " "8 experts: attn_k Q8_0"
matches "$tmp/out" "blk.0.attn_output.weight .* Q5_K " "8 experts: attn_output Q5_K"

# qlab eval --base prints the routing block (the model against itself: every expert kept).
expect 0 "eval --base of the MoE model against itself" "$qlab" eval "$moe/moe-llama-f32.gguf" \
    --base "$moe/moe-llama-f32.gguf" --text tinystories-valid --ctx 128 --chunks 4 --quiet
has "$tmp/out" "Same experts:          100.000 %" "eval --base: the routing block"
has "$tmp/out" "Load shift:             0.00000" "eval --base: no load shift"
exit "$fail"
