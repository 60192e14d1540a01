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

# QLAB_GEMM=dot (qlab's own kernel for the weight products) on the F16 copy of the model
# (its rows read directly): 1 and 3 threads bit-identical, the kernel recorded; a value
# that is neither blas nor dot is an error naming it.
sed -e 's/^name    = threads/name    = threads-dot/' \
    -e 's/^model   = synth:\(.*\)/model   = synth:\1,type=F16/' "$tmp/t.sweep" >"$tmp/d.sweep"
for n in 1 3; do
    expect 0 "QLAB_GEMM=dot sweep with $n threads" env QLAB_GEMM=dot \
        "$qlab" sweep "$tmp/d.sweep" --threads "$n" --db "$tmp/d$n.db" --cache-dir "$tmp/e$n"
done
if "$(dirname "$0")/compare_results.sh" "$qlab" "$tmp/d1.db" "$tmp/d3.db" >"$tmp/cmp" 2>&1; then
    ok "QLAB_GEMM=dot: 1 and 3 threads bit-identical"
else
    bad "QLAB_GEMM=dot: 1 and 3 threads differ"; cat "$tmp/cmp"
fi
sqlite3 "$tmp/d1.db" "SELECT DISTINCT blas_kernel FROM runs" >"$tmp/kernel"
has "$tmp/kernel" " + weights qlab-dot" "the runs record qlab's kernel"
expect 1 "QLAB_GEMM=bogus fails" env QLAB_GEMM=bogus "$qlab" version
has "$tmp/err" "QLAB_GEMM=bogus: expected blas" "names the variable and its values"
exit "$fail"
