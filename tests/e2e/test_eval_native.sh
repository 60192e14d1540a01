#!/bin/sh
# act_mode native on a GGUF file llama-quantize wrote: qlab eval with llama.cpp's CPU
# activation rounding for each weight's type and its default f16 K/V cache must give
# llama-perplexity's PPL on the same file and text (ctx 128, all chunks;
# ../shared/golden/llamacpp-reference/README.md section 5.1).
# Usage: test_eval_native.sh QLAB FILE_TAG EXPECTED_PPL
set -u
qlab="$1"; tag="$2"; want="$3"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
# Measured (qlab vs llama.cpp): Q8_0 +0.005%, Q4_0 +0.007%, Q5_0 -0.001%, IQ4_NL
# +0.002%, Q4_K_M -0.009%, Q3_K_M +0.0004%, Q4_1 +0.016%, Q5_1 +0.010%, Q5_K_M +0.014%:
# summation order and the x86 activation quantizer's ties. (Without the q8_1 block-sum
# term of actquant.h, Q4_1/Q5_1/Q5_K_M were +0.040/+0.035/+0.053%.)
# The bound is the README's claim, 0.02% (the issue asked for 0.05%): 0.004 points above
# the worst case, Q4_1. qlab's results do not depend on the thread count; another machine's
# BLAS kernels change only the summation order, far below that margin.
TOL_REL=0.0002
model="$QLAB_SHARED/golden/llamacpp-reference/quantized/stories260K-$tag.gguf"
need_file "$model"
# One thread: meson runs tests side by side (results do not depend on it).
ppl_near "$tag native" "$want" "$TOL_REL" "$qlab" eval "$model" --text ts-eval --ctx 128 \
    --kv-type f16 --act-mode native --threads 1 --quiet
exit "$fail"
