#!/bin/sh
# An existing GGUF as a sweep config (weight_type = file:PATH) on stories260K: qlab's own
# pure Q4_0 file, given as a config, gives the sweep's Q4_0 config's figures bit for bit
# (KLD, PPL, sizes, weight errors; with f32 and native activations), per-tensor records
# with requested = used = the file's type and choice "file", a config hash that carries
# the file's SHA-256 (a changed file is a new config, an unchanged one is skipped); a
# file of another model, a missing file and a file config with a weight axis set are
# refused before anything runs, naming the line and the difference.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
need_file "$QLAB_SHARED/models/stories260K.gguf"
need_file "$QLAB_SHARED/models/tiny256.gguf"
mkdir -p "$tmp/sw/files"
expect 0 "quantize Q4_0" "$qlab" quantize --pure "$QLAB_SHARED/models/stories260K.gguf" \
    "$tmp/sw/files/q4_0.gguf" Q4_0
# sweep FILE_VALUE EXTRA: a sweep file of Q4_0 and the file config, f32 and native.
sweep() {
    cat >"$tmp/sw/f.sweep" <<END
[sweep]
name   = filecfg
model  = stories260K
text   = ts-eval
ctx    = 64
chunks = 6
$2

[grid]
weight_type = Q4_0 $1
act_mode    = f32 native
END
}
db="$tmp/r.db"
sweep file:files/q4_0.gguf ""
expect 0 "sweep with a file config" "$qlab" sweep "$tmp/sw/f.sweep" --db "$db" --quiet
has "$tmp/out" "file:q4_0.gguf act_mode=native" "the file config by its name"
# Every figure of the file config is the Q4_0 config's, bit for bit.
for act in f32 native; do
    for col in kld_mean kld_max ppl ppl_ref dp_rms top1_agree bytes bpw rmse max_err; do
        a=$(rows "$db" "SELECT m.$col FROM results m WHERE m.weight_type = 'Q4_0' AND m.act_mode = '$act'")
        b=$(rows "$db" "SELECT m.$col FROM results m WHERE m.weight_type LIKE 'file:%' AND m.act_mode = '$act'")
        if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "$act $col: $a"; else bad "$act $col: Q4_0 $a, file $b"; fi
    done
done
sha=$(sha256sum "$tmp/sw/files/q4_0.gguf" | cut -d' ' -f1)
n=$(rows "$db" "SELECT COUNT(*) FROM configs WHERE weight_type = 'file:files/q4_0.gguf@$sha'")
[ "$n" = 2 ] && ok "the config carries the file's SHA-256" || bad "configs with the sha: $n"
# Per-tensor records: the file's types, chosen by the file.
q=$(rows "$db" "SELECT COUNT(*) FROM tensor_errors t JOIN runs r ON r.id = t.run_id JOIN configs c ON c.id = r.config_id WHERE c.weight_type = 'Q4_0'")
f=$(rows "$db" "SELECT COUNT(*) FROM tensor_errors t JOIN runs r ON r.id = t.run_id JOIN configs c ON c.id = r.config_id WHERE c.weight_type LIKE 'file:%' AND t.choice = 'file' AND t.requested_type = t.used_type")
[ "$q" -gt 0 ] && [ "$q" = "$f" ] && ok "$f per-tensor records, choice file" || bad "records: Q4_0 $q, file $f"
d=$(rows "$db" "SELECT COUNT(*) FROM (SELECT t.tensor, t.used_type, t.bytes, t.rmse FROM tensor_errors t JOIN runs r ON r.id = t.run_id JOIN configs c ON c.id = r.config_id WHERE c.weight_type = 'Q4_0' EXCEPT SELECT t.tensor, t.used_type, t.bytes, t.rmse FROM tensor_errors t JOIN runs r ON r.id = t.run_id JOIN configs c ON c.id = r.config_id WHERE c.weight_type LIKE 'file:%')")
[ "$d" = 0 ] && ok "the same types, bytes and errors per tensor" || bad "$d tensor records differ"
# Unchanged: nothing to do. Changed: the file configs are new, Q4_0's are done.
expect 0 "the same sweep again" "$qlab" sweep "$tmp/sw/f.sweep" --db "$db" --quiet
has "$tmp/out" "0 run, 4 already done" "unchanged file: skipped"
expect 0 "quantize Q4_1 over it" "$qlab" quantize --pure "$QLAB_SHARED/models/stories260K.gguf" \
    "$tmp/sw/files/q4_0.gguf" Q4_1
expect 0 "the sweep with the changed file" "$qlab" sweep "$tmp/sw/f.sweep" --db "$db" --quiet
has "$tmp/out" "2 run, 2 already done" "changed file: new configs"
t=$(rows "$db" "SELECT DISTINCT t.used_type FROM tensor_errors t JOIN runs r ON r.id = t.run_id JOIN configs c ON c.id = r.config_id WHERE c.weight_type LIKE 'file:%' AND c.weight_type NOT LIKE '%$sha' AND t.tensor = 'blk.0.attn_q.weight'")
[ "$t" = Q4_1 ] && ok "the changed file's types" || bad "changed file's type: $t"

# Refusals, before anything runs.
cp "$QLAB_SHARED/models/tiny256.gguf" "$tmp/sw/files/tiny.gguf"
sweep file:files/tiny.gguf ""
expect 1 "a file of another model" "$qlab" sweep "$tmp/sw/f.sweep" --db "$tmp/x.db" --quiet
has "$tmp/err" "f.sweep:10: weight_type file:files/tiny.gguf: not a quantization of the sweep's model:" "names the line"
has "$tmp/err" "tiny.gguf: block_count 2, the reference" "names the difference"
[ -z "$(rows "$tmp/x.db" "SELECT id FROM runs" 2>/dev/null)" ] && ok "no run stored" || bad "runs stored"
sweep file:files/none.gguf ""
expect 1 "a missing file" "$qlab" sweep "$tmp/sw/f.sweep" --db "$tmp/x.db" --quiet
has "$tmp/err" "f.sweep:10: weight_type: file:files/none.gguf:" "a missing file named"
sweep file:files/tiny.gguf "head_type = Q8_0"
expect 1 "a weight axis with a file" "$qlab" sweep "$tmp/sw/f.sweep" --db "$tmp/x.db" --quiet
has "$tmp/err" "head_type Q8_0: weight_type file:files/tiny.gguf takes every tensor as the file has it" "weight axes refused"
exit "$fail"
