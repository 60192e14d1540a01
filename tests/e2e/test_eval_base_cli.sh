#!/bin/sh
# qlab eval MODEL --base REF end to end on stories260K (a few chunks): a qlab-quantized
# Q4_0 file against its source prints llama-perplexity's statistics block and, with
# --json, the same figures; the source against itself is at KLD 0 exactly (both passes
# compute the same thing); a model of another shape is refused naming the difference;
# --json without --base is a usage error, and too few tokens for the statistics a
# runtime error.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
need_file "$QLAB_SHARED/models/stories260K.gguf"
need_file "$QLAB_SHARED/models/tiny256.gguf"
expect 0 "quantize Q4_0" "$qlab" quantize --pure "$QLAB_SHARED/models/stories260K.gguf" "$tmp/q4_0.gguf" Q4_0
run="--text ts-eval --ctx 64 --chunks 4 --threads 1"
# shellcheck disable=SC2086
expect 0 "eval --base" "$qlab" eval "$tmp/q4_0.gguf" --base stories260K $run --act-mode native \
    --kv-type f16
cp "$tmp/out" "$tmp/block"
has "$tmp/block" "====== KL divergence statistics ======" "statistics block"
has "$tmp/err" "activations native" "the model's settings named"
has "$tmp/err" "base: f32" "the base is the exact reference"
# shellcheck disable=SC2086
expect 0 "eval --base --json" "$qlab" eval "$tmp/q4_0.gguf" --base stories260K $run \
    --act-mode native --kv-type f16 --json
cp "$tmp/out" "$tmp/json"
# jkey KEY: the number of "KEY": in the JSON output.
jkey() { sed -n "s/^ *\"$1\": \\([^,]*\\),\\{0,1\\}\$/\\1/p" "$tmp/json"; }
# block LABEL: the first number after LABEL's colon in the text block.
block() { grep -F -- "$1" "$tmp/block" | head -n 1 | sed 's/^[^:]*: *\([-0-9.]*\).*/\1/'; }
# same LABEL KEY SCALE: the JSON figure times SCALE, printed as the block prints it,
# is the block's.
same() {
    j=$(jkey "$2")
    b=$(block "$1")
    fmt="%.6f"; [ "$3" = 100 ] && fmt="%.3f"
    jt=$(awk -v v="$j" -v s="$3" -v f="$fmt" 'BEGIN { printf f, v * s }')
    [ -n "$j" ] && [ "$jt" = "$b" ] && ok "json $2 = block '$1' ($b)" ||
        bad "json $2 ($j) is not block '$1' ($b)"
}
same "Mean PPL(Q) " ppl 1
same "Mean PPL(base)" ppl_base 1
same "Mean ln(PPL(Q)/PPL(base))" ln_ppl_ratio 1
same "Mean PPL(Q)/PPL(base)" ppl_ratio 1
same "Mean    KLD" kld_mean 1
same "99.9%   KLD" kld_p99_9 1
same "Minimum KLD" kld_min 1
same "Mean    Δp" dp_mean 100
same " 0.1%   Δp" dp_p0_1 100
same "RMS Δp" dp_rms 100
same "Same top p" same_top_p 100
[ "$(jkey n_tokens)" = 124 ] && ok "json n_tokens 124" || bad "json n_tokens $(jkey n_tokens)"
kld=$(jkey kld_mean)
awk -v k="$kld" 'BEGIN { exit !(k > 0.01 && k < 1) }' && ok "Q4_0 KLD $kld is plausible" ||
    bad "Q4_0 KLD $kld"
# The source against itself with the base's own settings: the same pass twice.
# shellcheck disable=SC2086
expect 0 "eval the base against itself" "$qlab" eval stories260K --base stories260K $run
has "$tmp/out" "Maximum KLD:   0.000000" "KLD 0 against itself"
has "$tmp/out" "Same top p: 100.000 ± 0.000 %" "same top p 100% against itself"
# shellcheck disable=SC2086
expect 1 "another model's shape" "$qlab" eval "$QLAB_SHARED/models/tiny256.gguf" \
    --base stories260K $run
refused "another model's shape" 1 "qlab: error: not a quantization of the base model:" \
    "tiny256.gguf: block_count 2, the reference" && ok "the difference named"
expect 2 "--json without --base" "$qlab" eval stories260K --json --text ts-eval
has "$tmp/err" "--json needs --base" "usage error says why"
expect 1 "too few tokens" "$qlab" eval "$tmp/q4_0.gguf" --base stories260K --text ts-eval \
    --ctx 64 --chunks 2 --threads 1
has "$tmp/err" "62 scored tokens; the statistics block needs at least 100" "says how many"
exit "$fail"
