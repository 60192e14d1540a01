#!/bin/sh
# llama-quantize's file types, per-tensor recipes and multi-grid files in a sweep, on
# tiny256 (256-wide rows, so the K-quants apply) with an importance matrix from a
# calibration text: every config lands in the store with the type and the rule of
# each tensor, the report says which tensors got which type, a mix's sizes are those
# of `qlab quantize` for the same file type, and a file whose configs cannot run as
# written is refused, naming its line, before anything runs.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
model="$QLAB_SHARED/models/tiny256.gguf"
need_file "$model"

printf 'attn_v = Q8_0     # the value projections\nffn_down = Q6_K\n' >"$tmp/big-v.txt"
cat >"$tmp/mixes.sweep" <<END
[sweep]
name    = mixes
model   = $model
text    = ts-eval
ctx     = 64
chunks  = 4
threads = 2
imatrix = calib:ts-calib,chunks=8

[grid]                       # llama-quantize's file types next to pure types
weight_type = Q4_K_M Q4_K_S Q3_K_M mix:IQ4_XS IQ4_XS Q4_K Q8_0

[grid]                       # recipes on Q4_K, not with q8_0 activations
weight_type  = Q4_K
act_mode     = f32 q8_0
tensor_types = big-v.txt ^output=Q8_0
exclude      = act_mode=q8_0 tensor_types=^output=Q8_0
END

expect 0 "sweep of mixes, pure types and recipes" "$qlab" sweep "$tmp/mixes.sweep" --db "$tmp/m.db" --cache-dir "$tmp/cache"
has "$tmp/out" "sweep mixes: 10 configs (10 run, 0 already done, 0 failed)" "10 configs run"
n=$(rows "$tmp/m.db" "SELECT count(*) FROM results WHERE sweep = 'mixes'")
[ "$n" = 10 ] && ok "10 results stored" || bad "results: $n"
# In run order: the Q4_K configs of f32 activations, whose recipes differ, one after the
# other (a family may share its first blocks), then Q8_0, then Q4_K with q8_0 activations.
mixes=$(rows "$tmp/m.db" "SELECT group_concat(weight_type, ' ') FROM (SELECT weight_type FROM configs ORDER BY id)")
[ "$mixes" = "Q4_K_M Q4_K_S Q3_K_M mix:IQ4_XS IQ4_XS Q4_K Q4_K Q4_K Q8_0 Q4_K" ] &&
    ok "configs keep the mix names (mix:IQ4_XS apart from the pure IQ4_XS)" || bad "configs: $mixes"

# The rules of llama-quantize b4747 for a 2-layer llama with GQA 2: Q4_K_M's second
# attn_v and ffn_down in Q6_K, its head in Q6_K; Q3_K_M's attn_v in Q5_K (CSV quotes a
# rule with a comma).
typ() { rows "$tmp/m.db" "SELECT used_type || ' ' || choice FROM tensor_results WHERE weight_type = '$1' AND tensor_types = '${3:-none}' AND act_mode = 'f32' AND tensor = '$2'"; }
got=$(typ Q4_K_M blk.1.attn_v.weight)
[ "$got" = '"Q6_K Q4_K_M: attn_v 1 of 2, a layer with more bits: Q6_K"' ] && ok "Q4_K_M: $got" || bad "Q4_K_M attn_v 1: $got"
got=$(typ Q4_K_M blk.0.attn_v.weight)
[ "$got" = "Q4_K Q4_K_M: its default type: Q4_K" ] && ok "Q4_K_M: $got" || bad "Q4_K_M attn_v 0: $got"
got=$(typ Q4_K_M output.weight)
[ "$got" = "Q6_K Q4_K_M: head: Q6_K" ] && ok "Q4_K_M head: $got" || bad "Q4_K_M head: $got"
got=$(typ Q3_K_M blk.0.attn_v.weight)
[ "$got" = "Q5_K Q3_K_M: attn_v 0 (< 2): Q5_K" ] && ok "Q3_K_M: $got" || bad "Q3_K_M attn_v 0: $got"
got=$(typ IQ4_XS output.weight)
[ "$got" = "IQ4_XS the weight type: IQ4_XS" ] && ok "pure IQ4_XS head: $got" || bad "pure IQ4_XS head: $got"
got=$(typ mix:IQ4_XS output.weight)
[ "$got" = "Q6_K IQ4_XS: head: Q6_K" ] && ok "mix:IQ4_XS head: $got" || bad "mix:IQ4_XS head: $got"
got=$(typ Q4_K blk.0.attn_v.weight 'attn_v=Q8_0;ffn_down=Q6_K')
[ "$got" = "Q8_0 --tensor-type 'attn_v=Q8_0': Q8_0" ] && ok "recipe file: $got" || bad "recipe attn_v: $got"
got=$(typ Q4_K blk.1.ffn_down.weight 'attn_v=Q8_0;ffn_down=Q6_K')
[ "$got" = "Q6_K --tensor-type 'ffn_down=Q6_K': Q6_K" ] && ok "recipe file: $got" || bad "recipe ffn_down: $got"
n=$(rows "$tmp/m.db" "SELECT count(*) FROM tensor_results WHERE choice IS NULL")
[ "$n" = 0 ] && ok "every tensor record has its rule" || bad "$n records without a rule"
n=$(rows "$tmp/m.db" "SELECT count(*) FROM results WHERE tensor_types = '^output=Q8_0'")
[ "$n" = 1 ] && ok "the excluded combination did not run" || bad "^output=Q8_0 configs: $n"

# A mix's size in the sweep is the size of qlab quantize's file of that type.
im=$(ls "$tmp"/cache/imatrix-*.gguf 2>/dev/null | head -1)
[ -n "$im" ] || bad "no cached calibration imatrix"
for t in Q4_K_M Q3_K_M; do
    "$qlab" quantize --imatrix "$im" "$model" "$tmp/q.gguf" "$t" >/dev/null 2>&1 || bad "quantize $t"
    want=$("$qlab" inspect "$tmp/q.gguf" | sed -n 's/^totals: .* \([0-9]*\) tensor bytes .*/\1/p')
    got=$(rows "$tmp/m.db" "SELECT bytes FROM results WHERE weight_type = '$t'")
    [ -n "$want" ] && [ "$got" = "$want" ] && ok "$t: $got bytes, as qlab quantize writes" ||
        bad "$t: sweep $got bytes, quantize $want"
done

# The report: a tensor-type table per config and every tensor in tensor-types.csv.
expect 0 "report" "$qlab" report --db "$tmp/m.db" -o "$tmp/rep" --no-plots
md="$tmp/rep/mixes/report.md"
matches "$md" "^| Q4_K_M act=f32  *| Q4_K  *| Q4_K  *| Q4_K  *| Q4_K ×1 / Q6_K ×1 |" "report: Q4_K_M's attn_v is mixed, with counts"
matches "$md" "^| Q4_K act=f32 recipe=attn_v=Q8_0;ffn_down=Q6_K .*| Q8_0 .*| Q6_K .*|" "report: the recipe's types"
matches "$md" "^| IQ4_XS act=f32  *| IQ4_XS .* IQ4_XS  *|  *0 of 16 |$" "report: pure IQ4_XS everywhere"
matches "$md" "^| mix:IQ4_XS act=f32  *| IQ4_XS .* IQ4_XS  *| Q6_K  *|  *0 of 16 |$" "report: the IQ4_XS mix has its head in Q6_K"
n=$(grep -c ',Q4_K_M act=f32,blk\.' "$tmp/rep/mixes/tensor-types.csv")
[ "$n" = 14 ] && ok "tensor-types.csv: Q4_K_M's 14 block tensors" || bad "tensor-types.csv: $n Q4_K_M block rows"

# Refused before anything runs: a head type stories260K's rows do not split into, and
# a rule that matches no tensor; the store is not even created.
cat >"$tmp/bad.sweep" <<END
[sweep]
model = stories260K
text  = ts-eval
ctx   = 64
chunks = 2
[grid]
weight_type = Q4_0 Q8_0
head_type   = same Q4_K
END
expect 1 "a head type that would fall back" "$qlab" sweep "$tmp/bad.sweep" --db "$tmp/bad.db" --cache-dir "$tmp/cache"
has "$tmp/err" "qlab: error: $tmp/bad.sweep:8: head_type Q4_K: tensor 'output.weight' of " "names the line and the tensor"
has "$tmp/err" "would fall back: row length 64 is not a multiple of 256 (Q4_K): Q5_0" "says why"
[ ! -e "$tmp/bad.db" ] && ok "nothing ran, no store written" || bad "a store was written"
sed -e 's/^head_type .*/tensor_types = none blk\\.9\\.attn_q=Q8_0/' "$tmp/bad.sweep" >"$tmp/bad2.sweep"
expect 1 "a rule that matches no tensor" "$qlab" sweep "$tmp/bad2.sweep" --db "$tmp/bad.db" --cache-dir "$tmp/cache"
has "$tmp/err" "bad2.sweep:8: tensor_types rule 'blk\\.9\\.attn_q=Q8_0' matches no tensor of " "rule matching nothing refused"
exit $fail
