#!/bin/sh
# Measured sensitivities and the fit's kld objective (README, "Mixed precision from
# measured sensitivities"):
# - a budget config with objective = kld measures every candidate (tensor, type) on its
#   calibration text, stores them in the sensitivity table, and stores its predicted KLD
#   (the sum over its choices) and its KLD on the calibration text;
# - a tensor's stored sensitivity is, bit for bit, the KLD and ln PPL ratio of a sweep
#   config that quantizes that tensor alone (tensor_types) on the calibration text, for a
#   block's product, the head and the token embedding;
# - a second budget reads them from the store (no measurement), and so does qlab fit
#   --objective kld with the same importance matrix;
# - groups of tensors (objective kld:module, kld:kind, kld:layer): a group's stored
#   sensitivity is, bit for bit, the KLD of a config that quantizes the group's tensors
#   alone; the fit gives every tensor of a group one type; the head's and embedding's
#   rows are the tensors' rows (not measured again for another grouping);
# - objective kld without a calib: imatrix or on the evaluation text is refused.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
need_file "$QLAB_SHARED/models/stories260K.gguf"

write_sweep() { # FILE NAME TEXT IMATRIX GRID...
    f=$1 name=$2 text=$3 imatrix=$4
    shift 4
    {
        printf '[sweep]\nname = %s\nmodel = stories260K\ntext = %s\nctx = 64\nchunks = 4\n' \
            "$name" "$text"
        printf 'threads = 2\nimatrix = %s\n\n[grid]\n' "$imatrix"
        for line in "$@"; do printf '%s\n' "$line"; done
    } >"$f"
}
calib=calib:ts-calib,chunks=4
write_sweep "$tmp/fit.sweep" fit ts-eval "$calib" "weight_type = F32" "budget = Q4_0" "objective = kld"
expect 0 "a kld fit" "$qlab" sweep "$tmp/fit.sweep" --db "$tmp/q.db" --cache-dir "$tmp/c"
has "$tmp/err" "sensitivity: " "the sensitivities are measured"
n=$(rows "$tmp/q.db" "SELECT count(*) FROM sensitivity")
[ "$n" -gt 30 ] && ok "$n sensitivities stored" || bad "sensitivities stored: $n"
got=$(rows "$tmp/q.db" "SELECT count(*) FROM sensitivity WHERE kld_mean IS NULL OR kld_mean < 0
    OR text <> 'ts-calib' OR ctx <> 64 OR chunks <> 4")
[ "$got" = 0 ] && ok "every sensitivity a KLD on ts-calib, 4 chunks of 64" || bad "bad rows: $got"
kernel=$(rows "$tmp/q.db" "SELECT DISTINCT coalesce(blas_kernel, 'NULL') FROM sensitivity")
case "$kernel" in OpenBLAS*) ok "sensitivities record the BLAS kernel ($kernel)" ;;
*) bad "sensitivity blas_kernel: '$kernel'" ;; esac
got=$(rows "$tmp/q.db" "SELECT predicted_kld > 0 AND calib_kld > 0 AND kld_mean > 0 AS ok FROM results WHERE objective = 'kld'")
[ "$got" = 1 ] && ok "predicted and calibration KLD stored" ||
    { bad "predicted KLD: $got"; rows "$tmp/q.db" "SELECT * FROM metrics"; }
got=$(rows "$tmp/q.db" "SELECT count(*) FROM tensor_results WHERE choice LIKE '%on measured KLD%'")
[ "$got" -gt 0 ] && ok "the tensors' types chosen on measured KLD" || bad "choices: $got"

# One tensor alone, as a sweep config on the calibration text: the same bits.
write_sweep "$tmp/alone.sweep" alone ts-calib "$calib" "weight_type = F32" \
    'tensor_types = blk\.2\.attn_v\.weight=Q4_0 ^output\.weight=Q5_0 token_embd\.weight=Q4_1'
expect 0 "single-tensor configs on the calibration text" "$qlab" sweep "$tmp/alone.sweep" \
    --db "$tmp/q.db" --cache-dir "$tmp/c"
for pair in blk.2.attn_v.weight:Q4_0 output.weight:Q5_0 token_embd.weight:Q4_1; do
    tensor=${pair%:*} type=${pair#*:}
    s=$(rows "$tmp/q.db" "SELECT printf('%.17g %.17g', kld_mean, ln_ppl_ratio) FROM sensitivity
        WHERE tensor = '$tensor' AND type = '$type'")
    r=$(rows "$tmp/q.db" "SELECT printf('%.17g %.17g', kld_mean, ln_ppl_ratio) FROM results
        WHERE sweep = 'alone' AND tensor_types LIKE '%=$type'")
    [ -n "$s" ] && [ "$s" = "$r" ] && ok "$tensor $type: sensitivity = the config's KLD ($s)" ||
        bad "$tensor $type: sensitivity '$s', config '$r'"
done

# Another budget: read from the store, nothing measured.
write_sweep "$tmp/fit2.sweep" fit ts-eval "$calib" "weight_type = F32" "budget = Q5_0" "objective = kld"
expect 0 "a second kld fit" "$qlab" sweep "$tmp/fit2.sweep" --db "$tmp/q.db" --cache-dir "$tmp/c"
if grep -q "^sensitivity: " "$tmp/err"; then bad "measured again"; else ok "read from the store"; fi
[ "$(rows "$tmp/q.db" "SELECT count(*) FROM sensitivity")" = "$n" ] && ok "no row added" ||
    bad "rows added"

# qlab fit with the same importance matrix and text: the store's rows, a prediction.
im=$(ls "$tmp"/c/imatrix-*-n4-po0.gguf | head -n 1)
expect 0 "qlab fit --objective kld" "$qlab" fit stories260K --imatrix "$im" --budget Q4_0 \
    --objective kld --calib ts-calib --calib-ctx 64 --calib-chunks 4 --db "$tmp/q.db" \
    --cache-dir "$tmp/c" --dry-run
has "$tmp/out" "predicted   KLD" "qlab fit prints the predicted KLD"
if grep -q "^sensitivity: " "$tmp/err"; then bad "qlab fit measured again"; else
    ok "qlab fit reads the sweep's sensitivities"; fi
want=$(rows "$tmp/q.db" "SELECT printf('%.4e', predicted_kld) FROM results WHERE budget = 'Q4_0'")
has "$tmp/out" "KLD $want" "qlab fit predicts what the sweep's fit predicted ($want)"

# Merged by what they measured: once, however often merged.
expect 0 "merge" "$qlab" merge "$tmp/m.db" "$tmp/q.db"
expect 0 "merge again" "$qlab" merge "$tmp/m.db" "$tmp/q.db"
q="SELECT tensor, type, printf('%.17g', kld_mean) FROM sensitivity ORDER BY tensor, type"
[ "$(rows "$tmp/m.db" "$q")" = "$(rows "$tmp/q.db" "$q")" ] && ok "merged sensitivities, once" ||
    bad "merged sensitivities differ: $(rows "$tmp/m.db" "SELECT count(*) FROM sensitivity")"

# Groups of tensors. stories260K's ffn_down rows (172 wide) take F16 alone, so a module
# or a layer holding one takes F16 too: their budgets are bytes above that.
write_sweep "$tmp/groups.sweep" groups ts-eval "$calib" "weight_type = F32" \
    "budget = 600000" "objective = kld:module kld:layer" "" "[grid]" "weight_type = F32" \
    "budget = Q4_0" "objective = kld:kind"
expect 0 "kld fits of modules, layers and kinds" "$qlab" sweep "$tmp/groups.sweep" \
    --db "$tmp/q.db" --cache-dir "$tmp/c"
has "$tmp/err" "(module, type) pairs" "the modules are measured"
got=$(rows "$tmp/q.db" "SELECT grouping, min(n_tensors), max(n_tensors), count(DISTINCT tensor)
    FROM sensitivity WHERE grouping <> 'tensor' GROUP BY grouping ORDER BY grouping")
want=$(printf 'kind,5,5,7\nlayer,7,7,5\nmodule,3,4,10')
[ "$got" = "$want" ] && ok "group rows: 7 kinds of 5, 5 layers of 7, 10 modules of 3 or 4" ||
    bad "group rows: $(echo "$got" | tr '\n' ' ')"
[ "$(rows "$tmp/q.db" "SELECT count(*) FROM sensitivity WHERE tensor LIKE '%.weight'
    AND tensor NOT LIKE 'blk.%' AND grouping <> 'tensor'")" = 0 ] &&
    ok "the head's and embedding's rows are tensor rows in every grouping" ||
    bad "head or embedding rows stored under a grouping"
# One type per group in every fitted run: per module, layer or kind (of blk.N.KIND.weight).
block="substr(tensor, 1, instr(substr(tensor, 5), '.') + 3)"
kind="substr(tensor, instr(substr(tensor, 5), '.') + 5)"
one_type() { # OBJECTIVE UNIT-SQL
    got=$(rows "$tmp/q.db" "SELECT count(*) FROM (SELECT $2 AS unit FROM tensor_results
        WHERE sweep = 'groups' AND objective = '$1' AND tensor LIKE 'blk.%'
        GROUP BY unit HAVING count(DISTINCT used_type) > 1)")
    n=$(rows "$tmp/q.db" "SELECT count(*) FROM tensor_results WHERE sweep = 'groups'
        AND objective = '$1' AND choice LIKE '%on measured KLD%'")
    [ "$got" = 0 ] && [ "$n" -gt 30 ] && ok "$1: one type per group ($n tensors)" ||
        bad "$1: $got groups of several types, $n tensors fitted"
}
one_type kld:module "$block || substr($kind, 1, 4)"
one_type kld:layer "$block"
one_type kld:kind "$kind"
# A group alone, as a sweep config on the calibration text: the same bits.
write_sweep "$tmp/galone.sweep" galone ts-calib "$calib" "weight_type = F32" \
    'tensor_types = blk\.1\.attn_(q|k|v|output)\.weight=Q4_0 ffn_up=Q5_0'
expect 0 "group configs on the calibration text" "$qlab" sweep "$tmp/galone.sweep" \
    --db "$tmp/q.db" --cache-dir "$tmp/c"
for pair in blk.1.attn:Q4_0 ffn_up:Q5_0; do
    unit=${pair%:*} type=${pair#*:}
    s=$(rows "$tmp/q.db" "SELECT printf('%.17g %.17g', kld_mean, ln_ppl_ratio) FROM sensitivity
        WHERE tensor = '$unit' AND type = '$type'")
    r=$(rows "$tmp/q.db" "SELECT printf('%.17g %.17g', kld_mean, ln_ppl_ratio) FROM results
        WHERE sweep = 'galone' AND tensor_types LIKE '%=$type'")
    [ -n "$s" ] && [ "$s" = "$r" ] && ok "$unit $type: sensitivity = the config's KLD ($s)" ||
        bad "$unit $type: sensitivity '$s', config '$r'"
done
expect 0 "qlab fit --objective kld:kind" "$qlab" fit stories260K --imatrix "$im" --budget Q4_0 \
    --objective kld:kind --calib ts-calib --calib-ctx 64 --calib-chunks 4 --db "$tmp/q.db" \
    --cache-dir "$tmp/c" --dry-run
if grep -q "^sensitivity: " "$tmp/err"; then bad "qlab fit measured the kinds again"; else
    ok "qlab fit reads the sweep's kind sensitivities"; fi
want=$(rows "$tmp/q.db" "SELECT printf('%.4e', predicted_kld) FROM results WHERE sweep = 'groups'
    AND objective = 'kld:kind'")
has "$tmp/out" "KLD $want" "qlab fit predicts what the sweep's kind fit predicted ($want)"
expect 2 "an unknown grouping" "$qlab" fit stories260K --budget Q4_0 --objective kld:blocks \
    --calib ts-calib --dry-run
has "$tmp/err" "unknown grouping 'blocks'" "the refusal names the grouping"

# Refusals.
write_sweep "$tmp/bad1.sweep" bad1 ts-eval none "weight_type = F32" "budget = Q4_0" \
    "objective = kld"
expect 1 "objective kld without a calibration text" "$qlab" sweep "$tmp/bad1.sweep" \
    --db "$tmp/bad.db" --cache-dir "$tmp/c"
has "$tmp/err" "objective kld measures each tensor's sensitivity on the calibration text" \
    "the refusal says why"
expect 1 "a measurement above the memory budget" "$qlab" sweep "$tmp/fit.sweep" \
    --db "$tmp/bad.db" --cache-dir "$tmp/c" --mem 400KiB --strict
has "$tmp/err" "residual streams (2 x 4 chunks x 63 tokens x 64 floats) and scores take" \
    "the refusal says what the measurement needs"
[ "$(rows "$tmp/bad.db" "SELECT count(*) FROM sensitivity")" = 0 ] && ok "nothing measured" ||
    bad "measured above the budget"
write_sweep "$tmp/bad2.sweep" bad2 ts-calib "$calib" "weight_type = F32" "budget = Q4_0" "objective = kld"
"$qlab" sweep "$tmp/bad2.sweep" --db "$tmp/bad.db" --cache-dir "$tmp/c" >"$tmp/out" 2>"$tmp/err"
has "$tmp/err" "is the sweep's evaluation text" "calibration on the evaluation text is refused"
exit "$fail"
