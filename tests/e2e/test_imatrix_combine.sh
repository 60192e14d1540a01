#!/bin/sh
# qlab imatrix --in-file A --in-file B -o OUT combines importance matrices as llama-imatrix
# b4747 does (IMatrixCollector::load_imatrix, then save_imatrix): per entry the stored
# sums add and the call counts add, so the importance is the count-weighted mean of the
# files'; an entry of one file is kept. Checked against a hand-computed case (two .dat
# files written byte by byte here; the golden data has no combined file), the golden
# imatrix combined with itself (the same importance, so the same quantized bytes), the
# text's statistics added to a file's, GGUF output and the errors.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
golden="$QLAB_SHARED/golden/imatrix/imatrix-stories260K-tscalib-c128.dat"
need_file "$golden"
export OMP_NUM_THREADS=1

# Little-endian int32 (0..255) and the name/value bytes of a legacy .dat.
i32() { printf "\\$(printf '%03o' "$1")\\000\\000\\000"; }
str() { i32 "${#1}"; printf '%s' "$1"; }
# float32 bytes of the few values used (IEEE 754, little endian)
f() {
    case "$1" in
    2) printf '\000\000\000\100' ;; 4) printf '\000\000\200\100' ;;
    12) printf '\000\000\100\101' ;; 0.5) printf '\000\000\000\077' ;;
    14) printf '\000\000\140\101' ;; 4.5) printf '\000\000\220\100' ;;
    3) printf '\000\000\100\100' ;; 6) printf '\000\000\300\100' ;;
    esac
}
# A: blk.0.x.weight, 2 calls, stored [2, 4] (importance [1, 2]); 2 chunks of "ta".
{ i32 1; str blk.0.x.weight; i32 2; i32 2; f 2; f 4; i32 2; str ta; } >"$tmp/a.dat"
# B: blk.0.x.weight, 6 calls, stored [12, 0.5] (importance [2, 1/12]); blk.1.y.weight,
# 3 calls, [3, 6]; 6 chunks of "tb".
{ i32 2; str blk.0.x.weight; i32 6; i32 2; f 12; f 0.5; str blk.1.y.weight; i32 3; i32 2; f 3; f 6
  i32 6; str tb; } >"$tmp/b.dat"
# By hand: blk.0.x.weight 8 calls, stored [2 + 12, 4 + 0.5] = [14, 4.5]: importance
# [14/8, 4.5/8] = [1.75, 0.5625] = (2 x [1, 2] + 6 x [2, 1/12]) / 8, the count-weighted
# mean; blk.1.y.weight as in B; 8 chunks; .dat keeps one dataset name, the last.
{ i32 2; str blk.0.x.weight; i32 8; i32 2; f 14; f 4.5; str blk.1.y.weight; i32 3; i32 2; f 3; f 6
  i32 8; str tb; } >"$tmp/want.dat"

expect 0 "combine two .dat files" "$qlab" imatrix --in-file "$tmp/a.dat" --in-file "$tmp/b.dat" -o "$tmp/ab.dat"
has "$tmp/out" "2 entries combined from 2 files, 8 chunks" "the summary line"
if cmp -s "$tmp/ab.dat" "$tmp/want.dat"; then ok "the combination is the hand-computed file, byte for byte"
else bad "combined bytes differ from the hand-computed ones"; od -An -tx1 "$tmp/ab.dat"; od -An -tx1 "$tmp/want.dat"; fi
# The other order: the same figures, the entries in the order first met.
expect 0 "combine in the other order" "$qlab" imatrix --in-file "$tmp/b.dat" --in-file "$tmp/a.dat" -o "$tmp/ba.dat"
{ i32 2; str blk.0.x.weight; i32 8; i32 2; f 14; f 4.5; str blk.1.y.weight; i32 3; i32 2; f 3; f 6
  i32 8; str ta; } >"$tmp/want-ba.dat"
if cmp -s "$tmp/ba.dat" "$tmp/want-ba.dat"; then ok "B then A: the same statistics (the last dataset name is A's)"
else bad "B then A differs"; od -An -tx1 "$tmp/ba.dat"; fi
# a GGUF imatrix combined with a .dat: the .dat's counts become tokens (4-token chunks)
"$qlab" imatrix-convert "$tmp/a.dat" "$tmp/a.gguf" --chunk-size 4 >/dev/null 2>&1 || bad "convert a"
expect 0 "combine a GGUF and a .dat" "$qlab" imatrix --in-file "$tmp/a.gguf" --in-file "$tmp/b.dat" -o "$tmp/mixed.dat"
if cmp -s "$tmp/mixed.dat" "$tmp/want.dat"; then ok "GGUF + .dat gives the same combination"
else bad "GGUF + .dat differs"; od -An -tx1 "$tmp/mixed.dat"; fi

# A GGUF output of .dat inputs needs their chunk size.
expect 1 "GGUF output of .dat inputs without --ctx" "$qlab" imatrix --in-file "$tmp/a.dat" --in-file "$tmp/b.dat" -o "$tmp/ab.gguf"
has "$tmp/err" "give --ctx N (the context they were computed with)" "says what is missing"
expect 0 "GGUF output with --ctx" "$qlab" imatrix --in-file "$tmp/a.dat" --in-file "$tmp/b.dat" -o "$tmp/ab4.gguf" -c 4
"$qlab" imatrix-convert "$tmp/ab4.gguf" "$tmp/ab4.dat" >/dev/null 2>&1
if cmp -s "$tmp/ab4.dat" "$tmp/want.dat"; then ok "the GGUF combination holds the same statistics"
else bad "GGUF combination differs"; od -An -tx1 "$tmp/ab4.dat"; fi

# Entries of another length are not the same weight.
{ i32 1; str blk.0.x.weight; i32 1; i32 1; f 2; i32 1; str tc; } >"$tmp/c.dat"
expect 1 "an entry of another length" "$qlab" imatrix --in-file "$tmp/a.dat" --in-file "$tmp/c.dat" -o "$tmp/x.dat"
has "$tmp/err" "entry 'blk.0.x.weight': 2 values in 1 matrices in" "names the entry and both lengths"
has "$tmp/err" "c.dat: not the same weight" "names the other file"
expect 1 "a missing input" "$qlab" imatrix --in-file "$tmp/a.dat" --in-file "$tmp/none.dat" -o "$tmp/x.dat"
has "$tmp/err" "none.dat" "names the missing file"
expect 2 "neither MODEL nor --in-file" "$qlab" imatrix -o "$tmp/x.dat"
has "$tmp/err" "missing MODEL" "usage error"
expect 2 "MODEL without --text" "$qlab" imatrix stories260K --in-file "$tmp/a.dat" -o "$tmp/x.dat"
has "$tmp/err" "missing --text FILE|NAME (or --in-file alone to combine files)" "says both ways"

# The golden imatrix (llama-imatrix's) with itself: the importance is unchanged, so
# quantizing with the combination writes the same tensor bytes.
expect 0 "golden + golden" "$qlab" imatrix --in-file "$golden" --in-file "$golden" -o "$tmp/gg.dat"
has "$tmp/out" "35 entries combined from 2 files, 1212 chunks" "606 + 606 chunks"
"$qlab" quantize -q "$QLAB_SHARED/models/stories260K.gguf" "$tmp/q1.gguf" Q4_K_M --imatrix "$golden" --stats >"$tmp/s1" 2>&1 || bad "quantize golden"
"$qlab" quantize -q "$QLAB_SHARED/models/stories260K.gguf" "$tmp/q2.gguf" Q4_K_M --imatrix "$tmp/gg.dat" --stats >"$tmp/s2" 2>&1 || bad "quantize gg"
grep "^error, model:" "$tmp/s1" >"$tmp/e1"; grep "^error, model:" "$tmp/s2" >"$tmp/e2"
if [ -s "$tmp/e1" ] && cmp -s "$tmp/e1" "$tmp/e2"; then ok "the same quantization error with golden and golden + golden"
else bad "quantized differently"; cat "$tmp/e1" "$tmp/e2"; fi
"$qlab" eval "$tmp/q1.gguf" -f ts-eval -c 64 --chunks 3 -q >"$tmp/p1" 2>/dev/null
"$qlab" eval "$tmp/q2.gguf" -f ts-eval -c 64 --chunks 3 -q >"$tmp/p2" 2>/dev/null
if [ -s "$tmp/p1" ] && cmp -s "$tmp/p1" "$tmp/p2"; then ok "and the same PPL ($(cat "$tmp/p1"))"
else bad "PPL differs"; cat "$tmp/p1" "$tmp/p2"; fi

# A text's statistics added to a file's (llama-imatrix -f TEXT --in-file F).
expect 0 "text + --in-file" "$qlab" imatrix stories260K -f ts-calib -c 128 --chunks 4 --in-file "$golden" -o "$tmp/tg.dat"
has "$tmp/out" "combined with 1 --in-file files: 35 entries, 610 chunks" "606 + 4 chunks"
exit "$fail"
