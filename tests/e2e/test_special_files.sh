#!/bin/sh
# Special files given where qlab reads a file (issue 16, item 5): a FIFO that no
# writer ever opens, /dev/zero, a directory. Every command must refuse at once with
# exit 1 and one line naming the file and what it is, never block (each run has a
# time limit) nor read without end.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
model="$QLAB_SHARED/models/stories260K.gguf"
need_file "$model"
command -v timeout >/dev/null || skip "timeout(1) not found"
fifo="$tmp/fifo"
mkfifo "$fifo" || skip "cannot make a FIFO in $tmp"
mkdir "$tmp/dir"
# A refusal must come well within this many seconds (a read of /dev/zero until memory
# runs out, or a FIFO open, would take longer or forever).
limit=30

# refuse LABEL FILE KIND CMD...: CMD exits 1 within the limit with one line on stderr
# naming FILE and KIND.
refuse() {
    r_label=$1 r_file=$2 r_kind=$3
    shift 3
    timeout "$limit" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -eq 124 ]; then
        bad "$r_label: still running after ${limit}s"
    elif refused "$r_label" "$rc" "qlab: error: " "$r_file" &&
        refused "$r_label" "$rc" "qlab: error: " "$r_kind"; then
        ok "$r_label: $(cat "$tmp/err")"
    fi
}

cat >"$tmp/ok.sweep" <<EOF
[sweep]
name = special
model = $model
text = ts-eval
imatrix = $fifo
[grid]
weight_type = Q4_0
EOF

for f in "$fifo" /dev/zero "$tmp/dir"; do
    case "$f" in
    "$fifo") kind="is a FIFO (named pipe), expected a regular file" ;;
    /dev/zero) kind="is a character device, expected a regular file" ;;
    *) kind="is a directory, expected a regular file" ;;
    esac
    n=$(basename "$f")
    refuse "sweep $n" "$f" "$kind" "$qlab" sweep "$f" --db "$tmp/r.db"
    refuse "inspect $n" "$f" "GGUF file $kind" "$qlab" inspect "$f"
    refuse "quantize $n" "$f" "$kind" "$qlab" quantize "$f" "$tmp/q.gguf" --type Q8_0
    refuse "quantize --imatrix $n" "$f" "importance matrix $kind" \
        "$qlab" quantize "$model" "$tmp/q.gguf" --type Q4_0 --imatrix "$f"
    refuse "imatrix-convert $n" "$f" "importance matrix $kind" \
        "$qlab" imatrix-convert "$f" "$tmp/out.gguf"
    refuse "eval model $n" "$f" "$kind" "$qlab" eval "$f" --text ts-eval
    refuse "eval --text $n" "$f" "$kind" "$qlab" eval "$model" --text "$f"
    refuse "tokenize --file $n" "$f" "$kind" "$qlab" tokenize "$model" --file "$f"
    refuse "query --db $n" "$f" "results database $kind" "$qlab" query --db "$f" "SELECT 1"
    refuse "fit --imatrix $n" "$f" "$kind" \
        "$qlab" fit "$model" --imatrix "$f" --budget bpw:6 -o "$tmp/fit.gguf"
done
# A sweep file naming a FIFO as its importance matrix fails before anything runs.
refuse "sweep imatrix = FIFO" "$fifo" "is a FIFO (named pipe)" \
    "$qlab" sweep "$tmp/ok.sweep" --db "$tmp/r.db"
[ -e "$tmp/q.gguf" ] && bad "an output file was written"
exit "$fail"
