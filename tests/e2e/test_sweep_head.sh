#!/bin/sh
# The head and embedding axes in a sweep: weight_type Q4_0 with head_type F32 stores
# output.weight as F32 in tensor_errors (no fallback: it is what was asked), the rest
# in Q4_0, and the sweep table shows the effect: a larger model with a lower KLD than
# the all-Q4_0 config; embd_type Q8_0 changes token_embd only.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"

cat >"$tmp/head.sweep" <<'END'
[sweep]
name    = head-test
model   = stories260K
text    = ts-eval
ctx     = 64
chunks  = 8
threads = 1

[grid]
weight_type = Q4_0
head_type   = same F32
embd_type   = same Q8_0
END
"$qlab" sweep "$tmp/head.sweep" --db "$tmp/h.db" --cache-dir "$tmp/cache" >"$tmp/out" 2>"$tmp/err" \
    || { bad "head sweep failed"; cat "$tmp/err"; }
has "$tmp/out" "4 configs (4 run, 0 already done, 0 failed)" "four configs evaluated"
type_of() { # HEAD EMBD TENSOR
    rows "$tmp/h.db" "SELECT t.used_type FROM tensor_errors t JOIN runs r ON r.id = t.run_id
        JOIN configs c ON c.id = r.config_id WHERE c.head_type = '$1' AND c.embd_type = '$2'
        AND t.tensor = '$3'"
}
[ "$(type_of F32 same output.weight)" = F32 ] && ok "head_type F32: output.weight stored as F32" \
    || bad "head F32: output.weight is '$(type_of F32 same output.weight)'"
[ "$(type_of same same output.weight)" = Q4_0 ] && ok "head_type same: output.weight in Q4_0" \
    || bad "head same: output.weight is '$(type_of same same output.weight)'"
[ "$(type_of F32 same blk.0.attn_q.weight)" = Q4_0 ] && ok "the body stays Q4_0" \
    || bad "body type '$(type_of F32 same blk.0.attn_q.weight)'"
[ "$(type_of same Q8_0 token_embd.weight)" = Q8_0 ] && [ "$(type_of same Q8_0 output.weight)" = Q4_0 ] \
    && ok "embd_type Q8_0: token_embd.weight only" || bad "embd_type Q8_0 types"
fb=$(rows "$tmp/h.db" "SELECT DISTINCT fallback FROM tensor_errors WHERE tensor = 'output.weight' AND used_type = 'F32'")
[ "$fb" = 0 ] && ok "an F32 head is requested, not a fallback" || bad "F32 head fallback flag '$fb'"
cmp=$(rows "$tmp/h.db" "SELECT (SELECT bytes FROM results WHERE head_type = 'F32' AND embd_type = 'same')
    > (SELECT bytes FROM results WHERE head_type = 'same' AND embd_type = 'same') AS bigger,
    (SELECT kld_mean FROM results WHERE head_type = 'F32' AND embd_type = 'same')
    < (SELECT kld_mean FROM results WHERE head_type = 'same' AND embd_type = 'same') AS better")
[ "$cmp" = "1,1" ] && ok "the F32 head is larger and moves the distribution less" || bad "F32 head effect: '$cmp'"
exit "$fail"
