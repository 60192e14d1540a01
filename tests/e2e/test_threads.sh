#!/bin/sh
# Results do not depend on the thread count (README, "Speed"): the same sweep with 1, 2
# and 3 threads stores bit-identical results (compare_results.sh: every metric, tensor
# error and per-chunk sum), on a synthetic model whose products all span several of
# gemm's tiles (rows of 512 and 1536, a 512-token head) and with act modes that round
# inputs, and K-quant weights whose quantizers run across threads. Run under
# OPENBLAS_CORETYPE=Haswell too by .ci/run (whose kernels once made 1 and 2 threads
# differ).
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
need_file "$QLAB_SHARED/models/stories260K.gguf"

cat >"$tmp/t.sweep" <<END
[sweep]
name    = threads
model   = synth:dim=512,ff=1536,layers=2,heads=8,kv-heads=4
text    = ts-eval
ctx     = 128
chunks  = 3

[grid]
weight_type = Q4_K Q8_0
act_mode    = f32 q8_0
END
for n in 1 2 3; do
    expect 0 "sweep with $n threads" \
        "$qlab" sweep "$tmp/t.sweep" --threads "$n" --db "$tmp/t$n.db" --cache-dir "$tmp/c$n"
done
for n in 2 3; do
    if "$(dirname "$0")/compare_results.sh" "$qlab" "$tmp/t1.db" "$tmp/t$n.db" >"$tmp/cmp" 2>&1; then
        ok "1 and $n threads: bit-identical results"
    else
        bad "1 and $n threads differ"; cat "$tmp/cmp"
    fi
done

# The F16 copy of the model under each choice of product kernel, 1 and 3 threads
# bit-identical under each: auto (the default, QLAB_GEMM unset: the F16 rows read by
# qlab's own kernel), dot (every weight product on it) and blas (OpenBLAS's tiles, the
# rows decoded to f32); each recorded in the runs' blas_kernel. On the f32 model auto's
# products are OpenBLAS's: its results are blas's, bit for bit. A value that is none of
# the three is an error naming it.
sed -e 's/^name    = threads/name    = threads-f16/' \
    -e 's/^model   = synth:\(.*\)/model   = synth:\1,type=F16/' "$tmp/t.sweep" >"$tmp/d.sweep"
for products in auto dot blas; do
    for n in 1 3; do
        if [ $products = auto ]; then set -- env -u QLAB_GEMM; else set -- env QLAB_GEMM=$products; fi
        expect 0 "$products products: sweep with $n threads" "$@" \
            "$qlab" sweep "$tmp/d.sweep" --threads "$n" --db "$tmp/$products$n.db" \
            --cache-dir "$tmp/$products-c$n"
    done
    if "$(dirname "$0")/compare_results.sh" "$qlab" "$tmp/${products}1.db" "$tmp/${products}3.db" \
        >"$tmp/cmp" 2>&1; then
        ok "$products products: 1 and 3 threads bit-identical"
    else
        bad "$products products: 1 and 3 threads differ"; cat "$tmp/cmp"
    fi
    sqlite3 "$tmp/${products}1.db" "SELECT DISTINCT blas_kernel FROM runs" >"$tmp/kernel-$products"
done
has "$tmp/kernel-auto" " + F16/BF16 weights qlab-dot" "the default records its kernels"
has "$tmp/kernel-dot" " + weights qlab-dot" "QLAB_GEMM=dot records qlab's kernel"
if grep -q "qlab-dot" "$tmp/kernel-blas"; then bad "QLAB_GEMM=blas recorded qlab's kernel"
else ok "QLAB_GEMM=blas records OpenBLAS alone ($(cat "$tmp/kernel-blas"))"; fi
expect 0 "f32 model, auto" env -u QLAB_GEMM \
    "$qlab" sweep "$tmp/t.sweep" --threads 2 --db "$tmp/ta.db" --cache-dir "$tmp/ca"
expect 0 "f32 model, QLAB_GEMM=blas" env QLAB_GEMM=blas \
    "$qlab" sweep "$tmp/t.sweep" --threads 2 --db "$tmp/tb.db" --cache-dir "$tmp/cb"
if "$(dirname "$0")/compare_results.sh" "$qlab" "$tmp/ta.db" "$tmp/tb.db" \
    >"$tmp/cmp" 2>&1; then
    ok "f32 model: auto and blas bit-identical"
else
    bad "f32 model: auto and blas differ"; cat "$tmp/cmp"
fi
expect 1 "QLAB_GEMM=bogus fails" env QLAB_GEMM=bogus "$qlab" version
has "$tmp/err" "QLAB_GEMM=bogus: expected auto" "names the variable and its values"
exit "$fail"
