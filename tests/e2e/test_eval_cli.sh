#!/bin/sh
# qlab generate and qlab eval end to end on stories260K: greedy decoding from BOS gives the
# golden ids of ../shared/models/stories260K.listing.txt; a short eval prints running PPL
# lines and the final line; usage and runtime errors give exit 2 and 1 with clear messages.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
golden="1 403 407 261 378 432 383 286 261 376 298 315 421 395 317 426 338 401 396 267 337 410 408 419 292 411 322 265 282 295 433 426 385 328 432 358 394 261 370 432 352"
expect 0 "generate from BOS" "$qlab" generate stories260K -n 40 --ids
[ "$(cat "$tmp/out")" = "$golden" ] || { echo "FAIL: greedy ids differ: $(cat "$tmp/out")"; fail=1; }
expect 0 "generate text" "$qlab" generate stories260K -p "Once upon a time" -n 12
grep -q "Once upon a time, there was a little girl" "$tmp/out" || { echo "FAIL: text: $(cat "$tmp/out")"; fail=1; }
expect 0 "eval 3 chunks" "$qlab" eval stories260K --text ts-eval --ctx 64 --chunks 3 --threads 1
grep -q "^PPL = [0-9.]* ± [0-9.]*$" "$tmp/out" || { echo "FAIL: no final PPL line"; fail=1; }
grep -q "3 chunks of 64, 31 scored per chunk" "$tmp/err" || { echo "FAIL: no summary"; fail=1; }
# the running PPL per chunk as llama-perplexity prints it, before the final line
grep -q "^\[1\][0-9]*\.[0-9]\{4\},\[2\][0-9.]*,\[3\][0-9.]*,$" "$tmp/out" ||
    { echo "FAIL: no [1]x,[2]y,[3]z, line: $(cat "$tmp/out")"; fail=1; }
[ "$(sed -n 2p "$tmp/out" | cut -c1-6)" = "PPL = " ] || { echo "FAIL: PPL line not last"; fail=1; }
# the last [i] figure is the final PPL to 4 decimals
last=$(sed -n 1p "$tmp/out" | sed 's/.*\[3\]\([0-9.]*\),$/\1/')
final=$(sed -n 2p "$tmp/out" | awk '{ printf "%.4f", $3 }')
[ "$last" = "$final" ] || { echo "FAIL: [3]$last but PPL $final"; fail=1; }
# a progress line with the rate (plain, stderr is not a terminal)
grep -q "^eval: 189/189 (100%), [0-9.]* tok/s, elapsed" "$tmp/err" || { echo "FAIL: no progress line"; cat "$tmp/err"; fail=1; }
grep -q "warning" "$tmp/err" && { echo "FAIL: a warning at ctx 64"; fail=1; }
# a context beyond the trained one (stories260K: 2048) is warned about, as llama-perplexity does
expect 0 "eval beyond the training context" "$qlab" eval stories260K -f ts-eval --ctx-size 2560 --chunks 1 -t 1
grep -q "qlab: warning: .*stories260K.gguf: the model was trained on only 2048 context tokens (2560 specified)" "$tmp/err" ||
    { echo "FAIL: no n_ctx_train warning: $(cat "$tmp/err")"; fail=1; }
expect 0 "imatrix beyond the training context warns too" "$qlab" imatrix stories260K -f ts-calib -c 4096 --chunks 1 -o "$tmp/x.dat" -t 1
grep -q "trained on only 2048 context tokens (4096 specified)" "$tmp/err" || { echo "FAIL: imatrix: $(cat "$tmp/err")"; fail=1; }
# --quiet: the final line alone
expect 0 "eval --quiet" "$qlab" eval stories260K --text ts-eval --ctx 64 --chunks 2 --threads 1 -q
[ "$(wc -l <"$tmp/out")" -eq 1 ] || { echo "FAIL: --quiet printed $(cat "$tmp/out")"; fail=1; }
printf 'too short' > "$tmp/short.txt"
expect 1 "eval text shorter than a chunk" "$qlab" eval stories260K --text "$tmp/short.txt" --ctx 64
grep -q "short.txt" "$tmp/err" || { echo "FAIL: error does not name the text"; fail=1; }
expect 1 "eval unknown text" "$qlab" eval stories260K --text no-such-dataset
expect 2 "eval without text" "$qlab" eval stories260K
expect 2 "eval bad ctx" "$qlab" eval stories260K --text ts-eval --ctx 2
expect 2 "eval bad kv type" "$qlab" eval stories260K --text ts-eval --kv-type q4_K
expect 2 "eval bad act mode" "$qlab" eval stories260K --text ts-eval --act-mode q8_2
grep -q "did you mean" "$tmp/err" || { echo "FAIL: no suggestion: $(cat "$tmp/err")"; fail=1; }
# stories260K's heads are 8 wide: llama.cpp cannot hold a quantized K/V cache for them
expect 1 "eval q4_0 cache on 8-wide heads" "$qlab" eval stories260K --text ts-eval --kv-type q4_0
grep -q "head size 8 is not a multiple of 32" "$tmp/err" || { echo "FAIL: $(cat "$tmp/err")"; fail=1; }
expect 0 "eval q8_0 activations" "$qlab" eval stories260K --text ts-eval --ctx 64 --chunks 2 --act-mode q8_0 --threads 1
grep -q "activations q8_0" "$tmp/err" || { echo "FAIL: mode not shown: $(cat "$tmp/err")"; fail=1; }
# the 172-wide ffn_down inputs cannot take q8_0 blocks: rounded to f16, and said so
grep -q "blk.0.ffn_down.weight: q8_0 activations need rows of a multiple of 32 values; 172-wide input rounded to f16" "$tmp/err" ||
    { echo "FAIL: no fallback note: $(cat "$tmp/err")"; fail=1; }
expect 2 "generate without model" "$qlab" generate -n 3
expect 1 "generate missing model" "$qlab" generate "$tmp/none.gguf"
exit $fail
