#!/bin/sh
# One path rule for a sweep file (issue 25, item 5): every path it names (model, text,
# an imatrix file, a calib: text, a file: config, a tensor_types recipe) is relative to
# the sweep file's directory, so the same sweep runs the same from any directory (the
# results bit for bit the same); a manifest name is still found by name. A path that
# leads nowhere is refused before anything runs, with the line and the path looked at;
# the names offered for `model` are models only; `--list` checks the inputs too.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
need_file "$QLAB_SHARED/models/stories260K.gguf"
need_file "$QLAB_SHARED/datasets/tinystories/tinystories_valid_first1000.txt"

proj="$tmp/proj"
mkdir -p "$proj/exp/recipes" "$proj/models" "$proj/texts" "$proj/im" "$proj/q"
cp "$QLAB_SHARED/models/stories260K.gguf" "$proj/models/tiny.gguf"
head -c 60000 "$QLAB_SHARED/datasets/tinystories/tinystories_valid_first1000.txt" >"$proj/texts/eval.txt"
tail -c 30000 "$QLAB_SHARED/datasets/tinystories/tinystories_valid_first1000.txt" >"$proj/texts/calib.txt"
echo "attn_v=Q8_0" >"$proj/exp/recipes/v8.txt"
expect 0 "an imatrix file" "$qlab" imatrix "$proj/models/tiny.gguf" --text "$proj/texts/calib.txt" \
    -o "$proj/im/tiny.imatrix" --ctx 64 --chunks 2 --quiet
expect 0 "a quantized file" "$qlab" quantize --pure "$proj/models/tiny.gguf" "$proj/q/q4_0.gguf" Q4_0

# in_dir DIR CMD...: CMD run in DIR (for expect, whose checks must count here).
in_dir() { (cd "$1" && shift && "$@"); }

# sweep MODEL: the sweep file, every path in it relative to proj/exp.
sweep() {
    cat >"$proj/exp/paths.sweep" <<END
[sweep]
name   = paths
model  = $1
text   = ../texts/eval.txt
ctx    = 64
chunks = 4

[grid]
weight_type  = Q4_0
imatrix      = none ../im/tiny.imatrix calib:../texts/calib.txt,chunks=2 calib:tinystories-calib,chunks=2
tensor_types = none recipes/v8.txt

[grid]
weight_type = file:../q/q4_0.gguf
END
}
sweep ../models/tiny.gguf

# The same sweep from three directories: the sweep file's own, its project's and /.
(cd "$proj/exp" && "$qlab" sweep paths.sweep --db "$tmp/a.db" --cache-dir "$tmp/cache" --quiet \
    >"$tmp/a.out" 2>"$tmp/a.err") && ok "from the sweep file's directory" || { bad "from the sweep file's directory"; cat "$tmp/a.err"; }
(cd "$proj" && "$qlab" sweep exp/paths.sweep --db "$tmp/b.db" --cache-dir "$tmp/cache" --quiet \
    >"$tmp/b.out" 2>"$tmp/b.err") && ok "from the project's directory" || { bad "from the project's directory"; cat "$tmp/b.err"; }
(cd / && "$qlab" sweep "$proj/exp/paths.sweep" --db "$tmp/c.db" --cache-dir "$tmp/cache" --quiet \
    >"$tmp/c.out" 2>"$tmp/c.err") && ok "from /" || { bad "from /"; cat "$tmp/c.err"; }
has "$tmp/b.out" "sweep paths: 9 configs (9 run, 0 already done, 0 failed)" "every config ran"
for db in b c; do
    "$(dirname "$0")/compare_results.sh" "$qlab" "$tmp/a.db" "$tmp/$db.db" >"$tmp/cmp" 2>&1 &&
        ok "$db: the same results bit for bit" || { bad "$db: results differ"; cat "$tmp/cmp"; }
done
# Every imatrix was the one the file names: the file's and the two calib: texts differ.
n=$(rows "$tmp/b.db" "SELECT count(DISTINCT imatrix_sha256) FROM runs WHERE imatrix_sha256 IS NOT NULL")
[ "$n" = 3 ] && ok "three importance matrices" || bad "importance matrices: $n"
sha=$(sha256sum "$proj/im/tiny.imatrix" | cut -d' ' -f1)
n=$(rows "$tmp/b.db" "SELECT count(*) FROM runs WHERE imatrix_sha256 = '$sha'")
[ "$n" = 2 ] && ok "the imatrix file beside the sweep" || bad "runs with the file's imatrix: $n"
n=$(rows "$tmp/b.db" "SELECT count(*) FROM tensor_errors t JOIN runs r ON r.id = t.run_id JOIN configs c ON c.id = r.config_id WHERE c.tensor_types != '' AND t.tensor LIKE '%attn_v%' AND t.used_type = 'Q8_0'")
[ "$n" -gt 0 ] && ok "the recipe beside the sweep" || bad "recipe rules not applied"

# Errors: the line, the path looked at; model names only for a model.
sweep ../models/none.gguf
expect 1 "a missing model" in_dir / "$qlab" sweep "$proj/exp/paths.sweep" --db "$tmp/x.db" --quiet
has "$tmp/err" "qlab: error: $proj/exp/paths.sweep:3: model: '../models/none.gguf' is neither an existing file $proj/exp/../models/none.gguf nor a model name (model names: stories260K" \
    "the line, the path looked at, the model names"
if grep -q "tinystories-valid" "$tmp/err"; then bad "text names offered for a model"; else ok "no text names offered for a model"; fi
[ ! -e "$tmp/x.db" ] && ok "nothing ran" || bad "a store was written"
expect 1 "--list with a missing model" in_dir / "$qlab" sweep "$proj/exp/paths.sweep" --list
has "$tmp/err" "paths.sweep:3: model: '../models/none.gguf' is neither an existing file" "--list checks the model"
sweep tinystories-valid
expect 1 "a text as the model" "$qlab" sweep "$proj/exp/paths.sweep" --db "$tmp/x.db" --quiet
has "$tmp/err" "paths.sweep:3: model: 'tinystories-valid' is a text of the data manifest, not a model" "a text named as the model"
sweep ../models/tiny.gguf
sed -i 's|\.\./im/tiny\.imatrix|../im/gone.imatrix|' "$proj/exp/paths.sweep"
expect 1 "a missing imatrix file" "$qlab" sweep "$proj/exp/paths.sweep" --db "$tmp/x.db" --quiet
has "$tmp/err" "paths.sweep:10: imatrix: '../im/gone.imatrix': no such file $proj/exp/../im/gone.imatrix" \
    "an imatrix file: its line and the path looked at"
sed -i 's|\.\./im/gone\.imatrix|../im/tiny.imatrix|' "$proj/exp/paths.sweep"
expect 0 "--list with every input there" in_dir / "$qlab" sweep "$proj/exp/paths.sweep" --list
sed -i 's|calib:\.\./texts/calib\.txt|calib:../texts/gone.txt|' "$proj/exp/paths.sweep"
expect 1 "--list with a missing calib: text" in_dir / "$qlab" sweep "$proj/exp/paths.sweep" --list
has "$tmp/err" "paths.sweep:10: imatrix calib:../texts/gone.txt: '../texts/gone.txt' is neither an existing file $proj/exp/../texts/gone.txt nor a text name (text names: " \
    "a calib: text: its line, the path looked at, the text names"
exit "$fail"
