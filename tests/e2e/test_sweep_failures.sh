#!/bin/sh
# A config that fails at run time (README, "qlab sweep"): kv_type q4_0 on stories260K,
# whose heads are 8 wide while a q4_0 K/V cache needs a multiple of 32. The failure is
# stored with its error and the sweep goes on to the next config; exit 0 without
# --strict and 1 with it; the next run of the sweep retries the failed config (attempts
# 2) and skips the done one; --strict exits 0 when nothing failed.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
need_file "$QLAB_SHARED/models/stories260K.gguf"

# The failing config comes first (grid order), so the done one shows the sweep went on.
write_sweep() { # FILE KV_TYPES
    cat >"$1" <<END
[sweep]
name    = failures
model   = stories260K
text    = ts-eval
ctx     = 64
chunks  = 4
threads = 1

[grid]
weight_type = Q8_0
kv_type     = $2
END
}
write_sweep "$tmp/f.sweep" "q4_0 f32"
db="$tmp/f.db"
sweep() { "$qlab" sweep "$@" --db "$db" --cache-dir "$tmp/cache"; }
state() { # KV_TYPE: status,attempts of that config's run
    rows "$db" "SELECT r.status, r.attempts FROM runs r JOIN configs c ON c.id = r.config_id
        WHERE c.kv_type = '$1'"
}
why="head size 8 is not a multiple of 32"

"$qlab" sweep "$tmp/f.sweep" --list >"$tmp/list"
if head -n 1 "$tmp/list" | grep -q ', 2 configs$' &&
    [ "$(awk '!/^#/ && /kv_type=q4_0/ { print $1 }' "$tmp/list")" = 0 ]; then
    ok "the failing config is the first of two"
else
    bad "config order"; cat "$tmp/list"
fi

expect 0 "a failed config does not fail the sweep" sweep "$tmp/f.sweep"
has "$tmp/out" "2 configs (1 run, 0 already done, 1 failed)" "summary: one run, one failed"
has "$tmp/err" "config 0 (Q8_0 kv_type=q4_0) failed: K/V cache type Q4_0: $why" \
    "stderr names the config and its error"
has "$tmp/err" "1 config failed; their errors are stored" "stderr says the error is stored"
[ "$(state q4_0)" = "failed,1" ] && ok "the failure is stored (attempt 1)" ||
    bad "q4_0 run is '$(state q4_0)', expected failed,1"
[ "$(state f32)" = "done,1" ] && ok "the sweep went on: the next config is done" ||
    bad "f32 run is '$(state f32)', expected done,1"
rows "$db" "SELECT kv_type, error FROM failed_runs r JOIN configs c ON c.hash = r.config_hash" \
    >"$tmp/failed"
has "$tmp/failed" "q4_0,K/V cache type Q4_0: $why" "failed_runs holds the error"
[ "$(wc -l <"$tmp/failed")" -eq 1 ] && ok "one failed run" || bad "failed runs: $(cat "$tmp/failed")"
"$qlab" query --db "$db" failed >"$tmp/q" 2>&1
has "$tmp/q" "$why" "'qlab query failed' lists it"

# The next run retries the failed config, skips the done one; --strict exits 1.
expect 1 "--strict exits 1 when a config failed" sweep "$tmp/f.sweep" --strict
has "$tmp/out" "2 configs (0 run, 1 already done, 1 failed)" "summary: retried, failed again"
has "$tmp/err" "config 0 (Q8_0 kv_type=q4_0) failed" "the failed config ran again"
[ "$(state q4_0)" = "failed,2" ] && ok "retried: attempts 2" ||
    bad "q4_0 run is '$(state q4_0)' after the retry, expected failed,2"
[ "$(state f32)" = "done,1" ] && ok "the done config was not run again" ||
    bad "f32 run is '$(state f32)' after the retry, expected done,1"
[ "$(rows "$db" "SELECT count(*) FROM runs")" = 2 ] && ok "still one run per config" ||
    bad "$(rows "$db" "SELECT count(*) FROM runs") runs, expected 2"

# --strict with nothing failed: exit 0.
write_sweep "$tmp/ok.sweep" "f32"
expect 0 "--strict exits 0 when no config failed" sweep "$tmp/ok.sweep" --strict
has "$tmp/out" "(0 run, 1 already done, 0 failed)" "the done config is reused"
# A quantized file as the sweep's model is refused before anything runs, saying what to
# do instead (it would be quantized again and reported as the unquantized reference).
q4="$QLAB_SHARED/golden/llamacpp-reference/quantized/stories260K-Q4_0.gguf"
if [ -f "$q4" ]; then
    sed "s|^model .*|model   = $q4|" "$tmp/f.sweep" >"$tmp/q.sweep"
    expect 1 "a quantized model as the reference is refused" "$qlab" sweep "$tmp/q.sweep" --db "$tmp/q.db"
    has "$tmp/err" "is quantized (token_embd.weight is Q4_0)" "the message names the tensor"
    has "$tmp/err" "the quantized file as a config" "and says what to do"
fi
exit "$fail"
