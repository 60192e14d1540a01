#!/bin/sh
# quantizer = gptq end to end on stories260K: a sweep puts gptq beside ggml (same type,
# same bytes, same tokens) and GPTQ's KLD is below ggml's, with an outlier split too; a
# budget fits on GPTQ's output errors, and qlab fit writes that config's file; qlab quantize --quantizer gptq
# writes the file whose evaluation is the sweep's figure to the last digit (same
# calibration imatrix, Hessians from the same chunks); the refusals say why. The same on
# the mixture-of-experts model of golden/moe (Q4_K: per-expert Hessians), where the file
# is also the same with two threads and with a --mem that puts the experts in slices.
# Usage: test_gptq.sh QLAB
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
need_file "$QLAB_SHARED/models/stories260K.gguf"
cd "$tmp" || exit 1
cat >g.sweep <<'SW'
[sweep]
name    = gptq-e2e
model   = stories260K
text    = tinystories-valid
ctx     = 128
chunks  = 24
imatrix = calib:tinystories-calib,ctx=128,chunks=32

[grid]
weight_type = Q4_0 Q8_0
quantizer   = ggml gptq
SW
expect 0 "sweep with quantizer ggml and gptq" "$qlab" sweep g.sweep --db g.db --threads 1 --quiet
n=$(rows g.db "SELECT count(*) FROM results WHERE kld_mean IS NOT NULL")
[ "$n" = 4 ] && ok "four runs" || bad "runs: $n"
for t in Q4_0 Q8_0; do
    line=$(rows g.db "SELECT g.kld_mean, q.kld_mean, g.bytes = q.bytes, g.n_tokens = q.n_tokens
        FROM results g JOIN results q ON q.weight_type = g.weight_type
        WHERE g.weight_type = '$t' AND g.quantizer = 'ggml' AND q.quantizer = 'gptq'")
    echo "$t: ggml, gptq KLD, same bytes, same tokens: $line"
    echo "$line" | awk -F, '{ exit !($2 < $1 && $3 == 1 && $4 == 1) }' &&
        ok "$t: gptq's KLD below ggml's, same bytes and tokens" || bad "$t: $line"
done

# An outlier split (ratio 2): the kept channels stay exact, GPTQ rounds and compensates
# among the other columns only; the same bytes as ggml's split, a lower KLD, and not the
# plain GPTQ config's result.
sed 's/^name    = gptq-e2e/name    = gptq-outliers/; s/^weight_type = .*/weight_type = Q4_0\noutlier_ratio = 2/' \
    g.sweep >o.sweep
expect 0 "sweep with quantizer ggml and gptq and an outlier split" "$qlab" sweep o.sweep \
    --db o.db --threads 1 --quiet
line=$(rows o.db "SELECT g.kld_mean, q.kld_mean, g.bytes = q.bytes, g.bytes
    FROM results g JOIN results q ON q.weight_type = g.weight_type
    WHERE g.quantizer = 'ggml' AND q.quantizer = 'gptq' AND g.outlier_ratio = 2
    AND q.outlier_ratio = 2")
plain=$(rows g.db "SELECT kld_mean, bytes FROM results WHERE weight_type = 'Q4_0'
    AND quantizer = 'gptq'")
echo "Q4_0 outlier_ratio=2: ggml, gptq KLD, same bytes, bytes: $line; gptq without: $plain"
echo "$line,$plain" | awk -F, '{ exit !($2 < $1 && $3 == 1 && $4 > $6 && $2 != $5) }' &&
    ok "Q4_0 with outliers: gptq's KLD below ggml's, same bytes (the exact columns' too)" ||
    bad "Q4_0 with outliers: $line; without: $plain"

# A budget: the solver's candidates measured by GPTQ's output errors (e H e^T over the
# calibration tokens, fit_gptq.h), then quantized by GPTQ; within the budget (this model's
# bytes in Q4_0), below the ggml fit's KLD at the same budget.
sed 's/^name    = gptq-e2e/name    = gptq-budget/; s/^weight_type = .*/weight_type = Q8_0\nbudget      = Q4_0/' \
    g.sweep >b.sweep
expect 0 "sweep with a budget, quantizer ggml and gptq" "$qlab" sweep b.sweep --db b.db \
    --threads 1 --quiet
budget=$(rows g.db "SELECT bytes FROM results WHERE weight_type = 'Q4_0' AND quantizer = 'ggml'")
line=$(rows b.db "SELECT g.kld_mean, q.kld_mean, g.bytes <= $budget, q.bytes <= $budget
    FROM results g JOIN results q WHERE g.quantizer = 'ggml' AND q.quantizer = 'gptq'")
echo "budget Q4_0: ggml fit KLD, gptq fit KLD, within the budget: $line"
echo "$line" | awk -F, '{ exit !($2 < $1 && $3 == 1 && $4 == 1) }' &&
    ok "budget Q4_0: the GPTQ fit's KLD below the ggml fit's, within the budget" ||
    bad "budget Q4_0: $line"
n=$(rows b.db "SELECT count(*) FROM tensor_results WHERE quantizer = 'gptq'
    AND choice LIKE '%on GPTQ''s output errors%'")
[ "$n" -gt 0 ] && ok "the GPTQ fit's tensors say what chose them ($n)" || bad "choices: $n"

# The sweep's memory budget bounds the GPTQ pass (half of --mem, as for the other
# calibration passes): over it, the config fails naming the plan, and runs within it.
sed 's/^name    = gptq-e2e/name    = gptq-mem/; s/^weight_type = .*/weight_type = Q4_0/; s/^quantizer   = .*/quantizer   = gptq/' g.sweep >m.sweep
"$qlab" sweep m.sweep --db m.db --threads 1 --quiet --mem 2MiB >m.out 2>m.err
[ "$(rows m.db "SELECT status FROM runs")" = failed ] && grep -q "it may plan with (--mem)" m.err \
    && ok "a GPTQ pass over the sweep's memory budget fails its config, naming the plan" \
    || { bad "GPTQ pass over --mem"; cat m.err; }

# The file: the sweep's cached calibration imatrix, the same calibration chunks.
im=$(ls cache/imatrix-*-c128-n32-po0.gguf 2>/dev/null | head -n 1)
[ -n "$im" ] && ok "the sweep's imatrix is cached" || bad "no cached imatrix in cache/"
# qlab fit with GPTQ's errors: the same plan and bytes as the sweep's budget config (the
# same imatrix and calibration chunks), so its file evaluates to that config's KLD.
expect 0 "qlab fit --quantizer gptq" "$qlab" fit stories260K --imatrix "$im" --budget Q4_0 \
    --quantizer gptq --calib tinystories-calib --calib-ctx 128 --calib-chunks 32 -o fg.gguf \
    --no-cache --threads 1 --quiet
has "$tmp/out" "GPTQ's output error e H e^T / tokens" "fit says how its errors were measured"
has "$tmp/out" "hessian" "the plan names the errors' source per tensor"
expect 0 "eval of the GPTQ fit" "$qlab" eval fg.gguf --base stories260K --kl-divergence \
    --text tinystories-valid --ctx 128 --chunks 24 --json --quiet
got=$(sed -n 's/^ *"kld_mean": *\([-0-9.e]*\),*$/\1/p' "$tmp/out")
want=$(rows b.db "SELECT printf('%.17g', kld_mean) FROM results WHERE quantizer = 'gptq'")
awk -v g="$got" -v w="$want" 'BEGIN { d = g - w; if (d < 0) d = -d; exit !(g != "" && d <= 1e-15 * w) }' &&
    ok "the GPTQ fit's file has the sweep's budget config's KLD: $got = $want" ||
    bad "fit file KLD $got, sweep $want"
expect 2 "qlab fit --quantizer gptq without --calib" "$qlab" fit stories260K --budget Q4_0 \
    --quantizer gptq --dry-run
has "$tmp/err" "takes its Hessians from --calib TEXT" "it says what is missing"

expect 0 "qlab quantize --quantizer gptq" "$qlab" quantize "$QLAB_SHARED/models/stories260K.gguf" \
    q.gguf Q4_0 --pure --imatrix "$im" --quantizer gptq --calib tinystories-calib \
    --calib-ctx 128 --calib-chunks 32 --threads 1 --quiet
has "$tmp/out" "quantizer gptq: 30 tensors by GPTQ" "quantize says what GPTQ did"
expect 0 "inspect the GPTQ file" "$qlab" inspect q.gguf
has "$tmp/out" 'quantize.quantizer                      str            "gptq"' "the file records its quantizer"
expect 0 "eval of the GPTQ file" "$qlab" eval q.gguf --base stories260K --kl-divergence \
    --text tinystories-valid --ctx 128 --chunks 24 --json --quiet
got=$(sed -n 's/^ *"kld_mean": *\([-0-9.e]*\),*$/\1/p' "$tmp/out")
want=$(rows g.db "SELECT printf('%.17g', kld_mean) FROM results WHERE weight_type = 'Q4_0'
    AND quantizer = 'gptq'")
awk -v g="$got" -v w="$want" 'BEGIN { d = g - w; if (d < 0) d = -d; exit !(g != "" && d <= 1e-15 * w) }' &&
    ok "the file's KLD is the sweep's: $got = $want" || bad "file KLD $got, sweep $want"

# A second run writes the same bytes (GPTQ's arithmetic is deterministic).
expect 0 "quantize again, two threads" "$qlab" quantize "$QLAB_SHARED/models/stories260K.gguf" \
    q2.gguf Q4_0 --pure --imatrix "$im" --quantizer gptq --calib tinystories-calib \
    --calib-ctx 128 --calib-chunks 32 --threads 2 --quiet
cmp -s q.gguf q2.gguf && ok "same bytes with 1 and 2 threads" || bad "the files differ"

# A mixture of experts (golden/moe, llama with 4 experts, 256-wide rows: Q4_K).
moe="$QLAB_SHARED/golden/moe"
if [ -f "$moe/moe-llama-f32.gguf" ]; then
    mkdir -p "$tmp/moe" && cd "$tmp/moe" || exit 1
    cat >moe.sweep <<END
[sweep]
name    = gptq-moe
model   = $moe/moe-llama-f32.gguf
text    = tinystories-valid
ctx     = 128
chunks  = 24
imatrix = calib:tinystories-calib,ctx=128,chunks=32

[grid]
weight_type = Q4_K
quantizer   = ggml gptq
END
    expect 0 "MoE sweep with quantizer ggml and gptq" "$qlab" sweep moe.sweep --db moe.db \
        --threads 1 --quiet
    line=$(rows moe.db "SELECT g.kld_mean, q.kld_mean, g.bytes = q.bytes, g.n_tokens = q.n_tokens
        FROM results g JOIN results q ON q.weight_type = g.weight_type
        WHERE g.quantizer = 'ggml' AND q.quantizer = 'gptq'")
    echo "MoE Q4_K: ggml, gptq KLD, same bytes, same tokens: $line"
    echo "$line" | awk -F, '{ exit !($2 < $1 && $3 == 1 && $4 == 1) }' &&
        ok "MoE Q4_K: gptq's KLD below ggml's, same bytes and tokens" || bad "MoE Q4_K: $line"
    im=$(ls cache/imatrix-*-c128-n32-po0.gguf 2>/dev/null | head -n 1)
    [ -n "$im" ] && ok "the MoE sweep's imatrix is cached" || bad "no cached imatrix in moe/cache/"
    expect 0 "qlab quantize --quantizer gptq on the MoE model" "$qlab" quantize \
        "$moe/moe-llama-f32.gguf" q.gguf Q4_K --pure --imatrix "$im" --quantizer gptq \
        --calib tinystories-calib --calib-ctx 128 --calib-chunks 32 --threads 1 --quiet
    has "$tmp/out" "quantizer gptq: 14 tensors by GPTQ" "q/k/v/o and the three expert tensors of both blocks by GPTQ"
    expect 0 "eval of the MoE GPTQ file" "$qlab" eval q.gguf --base "$moe/moe-llama-f32.gguf" \
        --kl-divergence --text tinystories-valid --ctx 128 --chunks 24 --json --quiet
    got=$(sed -n 's/^ *"kld_mean": *\([-0-9.e]*\),*$/\1/p' "$tmp/out")
    want=$(rows moe.db "SELECT printf('%.17g', kld_mean) FROM results WHERE quantizer = 'gptq'")
    awk -v g="$got" -v w="$want" 'BEGIN { d = g - w; if (d < 0) d = -d; exit !(g != "" && d <= 1e-15 * w) }' &&
        ok "the MoE file's KLD is the sweep's: $got = $want" || bad "MoE file KLD $got, sweep $want"
    expect 0 "the MoE file with two threads" "$qlab" quantize "$moe/moe-llama-f32.gguf" q2.gguf \
        Q4_K --pure --imatrix "$im" --quantizer gptq --calib tinystories-calib --calib-ctx 128 \
        --calib-chunks 32 --threads 2 --quiet
    cmp -s q.gguf q2.gguf && ok "MoE: same bytes with 1 and 2 threads" || bad "MoE: the files differ"
    # All four experts' Hessians need about 15 MiB here, one expert's 12 MiB.
    expect 0 "the MoE file with its experts in slices" "$qlab" quantize "$moe/moe-llama-f32.gguf" \
        q3.gguf Q4_K --pure --imatrix "$im" --quantizer gptq --calib tinystories-calib \
        --calib-ctx 128 --calib-chunks 32 --threads 1 --mem 13MiB
    has "$tmp/err" "slices of" "it says the experts go in slices"
    cmp -s q.gguf q3.gguf && ok "MoE: the same bytes with the experts in slices" ||
        bad "MoE: the sliced file differs"
    expect 1 "a --mem below one expert's Hessians" "$qlab" quantize "$moe/moe-llama-f32.gguf" \
        q4.gguf Q4_K --pure --quantizer gptq --calib tinystories-calib --calib-ctx 128 \
        --calib-chunks 32 --threads 1 --mem 8MiB
    has "$tmp/err" "with one expert at a time" "the plan is stated"
    cd "$tmp" || exit 1
else
    echo "skip: no $moe/moe-llama-f32.gguf"
fi

# Refusals.
expect 2 "gptq without --calib" "$qlab" quantize "$QLAB_SHARED/models/stories260K.gguf" x.gguf \
    Q4_0 --quantizer gptq
has "$tmp/err" "needs --calib TEXT" "it says what is missing"
expect 2 "an unknown gptq option" "$qlab" quantize "$QLAB_SHARED/models/stories260K.gguf" x.gguf \
    Q4_0 --quantizer gptq:order=random --calib tinystories-calib
has "$tmp/err" "expected natural or act" "it names the values"
sed 's/^weight_type = .*/weight_type = IQ2_XS/' g.sweep >bad.sweep
expect 1 "a sweep asking GPTQ for a lattice type" "$qlab" sweep bad.sweep --db bad.db --quiet
has "$tmp/err" "does not apply to IQ2_XS: a lattice codebook type" "n/a with the reason"
exit "$fail"
