#!/bin/sh
# Shared blocks (issue 27): configs that differ only in the head compute their head alone
# on the hidden states of the pass of the first of them, and every figure is the one
# their own whole pass gives, bit for bit:
#   - a dense model (stories260K): weight_type x head_type, shared against --no-share:
#     every metric and per-chunk sum identical; runs.body_of names the config whose pass
#     was shared (NULL for the configs that ran their own), forward_alone_seconds the time
#     that pass took;
#   - with layer_metrics and on a mixture of experts (the per-layer divergence and the
#     routing come from the blocks: held with the hidden states), the same;
#   - configs whose head differs but whose blocks do not come one after the other in the
#     grid still share (the run order groups them);
#   - configs that differ only from a later block on (tensor_types recipes touching the last
#     blocks) start their pass there from the residual streams of the one before, with
#     the head sharing too: the same figures; runs.shared_blocks says how many blocks.
# usage: test_sweep_shared.sh QLAB
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
need_file "$QLAB_SHARED/models/stories260K.gguf"
moe="$QLAB_SHARED/golden/moe"
need_file "$moe/moe-llama-f32.gguf"

# Everything a run stores but its timings, provenance and body_of (the same run ids on
# both sides: the run order does not depend on --no-share); a query that fails fails.
figures() { # DB
    for q in "SELECT c.canonical, m.* FROM metrics m JOIN runs r ON r.id = m.run_id
                  JOIN configs c ON c.id = r.config_id ORDER BY c.canonical" \
             "SELECT c.canonical, k.* FROM chunk_metrics k JOIN runs r ON r.id = k.run_id
                  JOIN configs c ON c.id = r.config_id ORDER BY c.canonical, k.chunk" \
             "SELECT c.canonical, l.* FROM layer_metrics l JOIN runs r ON r.id = l.run_id
                  JOIN configs c ON c.id = r.config_id ORDER BY c.canonical, l.layer" \
             "SELECT c.canonical, e.* FROM expert_load e JOIN runs r ON r.id = e.run_id
                  JOIN configs c ON c.id = r.config_id ORDER BY c.canonical, e.layer, e.expert"; do
        "$qlab" query --db "$1" --csv "$q" || { bad "query failed: $q"; return; }
    done
}

# shared_vs_alone NAME SWEEP SAID OFF: SWEEP into $tmp/NAME-shared.db (its header saying
# SAID; its output kept in $tmp/NAME-shared.out) and with --no-share into NAME-alone.db
# (saying OFF), the same figures in both.
shared_vs_alone() {
    expect 0 "$1: sweep" "$qlab" sweep "$2" --db "$tmp/$1-shared.db" --cache-dir "$tmp/c"
    cp "$tmp/out" "$tmp/$1-shared.out"
    has "$tmp/err" "$3" "$1: the header says which configs share"
    expect 0 "$1: sweep --no-share" "$qlab" sweep "$2" --no-share --db "$tmp/$1-alone.db" \
        --cache-dir "$tmp/c"
    has "$tmp/err" "$4" "$1: --no-share said"
    figures "$tmp/$1-shared.db" >"$tmp/$1-shared.txt"
    figures "$tmp/$1-alone.db" >"$tmp/$1-alone.txt"
    n=$(grep -c 'weight_type=' "$tmp/$1-shared.txt")
    [ "$n" -gt 0 ] && cmp -s "$tmp/$1-shared.txt" "$tmp/$1-alone.txt" &&
        ok "$1: every figure identical to each config's own pass" ||
        { bad "$1: shared and alone differ"; diff "$tmp/$1-shared.txt" "$tmp/$1-alone.txt" | head; }
}

same_as_alone() { # NAME SWEEP N_SHARED
    shared_vs_alone "$1" "$2" "shared blocks: $3 of the configs differ from an earlier one only in the head" \
        "shared blocks: off (--no-share)"
    n=$(rows "$tmp/$1-shared.db" "SELECT count(*) FROM runs WHERE body_of IS NOT NULL")
    [ "$n" = "$3" ] && ok "$1: $3 runs record the pass they shared" || bad "$1: $n runs shared"
    n=$(rows "$tmp/$1-alone.db" "SELECT count(*) FROM runs WHERE body_of IS NOT NULL")
    [ "$n" = 0 ] && ok "$1: with --no-share none" || bad "$1: $n runs shared with --no-share"
    # body_of is the hash of a config of the same weight type that ran its own pass, and
    # what it would have cost alone is that pass's time.
    n=$(rows "$tmp/$1-shared.db" "SELECT count(*) FROM runs r JOIN configs c ON c.id = r.config_id
        JOIN configs b ON b.hash = r.body_of JOIN runs rb ON rb.config_id = b.id
        WHERE b.weight_type = c.weight_type AND rb.body_of IS NULL
        AND r.forward_alone_seconds = rb.quant_seconds")
    [ "$n" = "$3" ] && ok "$1: body_of names the pass, forward_alone_seconds its time" ||
        bad "$1: body_of/forward_alone_seconds consistent for $n of $3"
}

cat >"$tmp/dense.sweep" <<'END'
[sweep]
name    = shared-dense
model   = stories260K
text    = ts-eval
ctx     = 64
chunks  = 6
threads = 2

[grid]
weight_type = Q4_0 Q8_0
head_type   = same Q8_0 F16

[grid]
weight_type = Q4_0
head_type   = Q5_0
END
# Q8_0 head_type=Q8_0 is Q8_0 head_type=same: 6 configs, 4 sharing (the last grid's
# Q4_0 head Q5_0 with the first grid's Q4_0 configs).
same_as_alone dense "$tmp/dense.sweep" 4

# Shared prefixes: the recipes change attn_v of block 4, then of blocks 3 and 4. The run
# order takes the second first (it differs from the first config already at block 3), so
# each config after the first starts at block 3 from the one before's streams (in the
# sweep's order the last would have to run whole: the one before it starts at block 4);
# each head sibling computes its head alone on its pass (stories260K has 5 blocks).
cat >"$tmp/prefix.sweep" <<'END'
[sweep]
name    = shared-prefix
model   = stories260K
text    = ts-eval
ctx     = 64
chunks  = 6
threads = 2

[grid]
weight_type  = Q4_0
tensor_types = none blk\.4\.attn_v=Q8_0 blk\.(3|4)\.attn_v=Q8_0
head_type    = same Q8_0
END
shared_vs_alone prefix "$tmp/prefix.sweep" "shared prefixes: 2 of the configs differ from the one before them" \
    "shared prefixes: off (--no-share)"
has "$tmp/prefix-shared.out" "3 configs computed only the head on the pass of a config differing only in the head, 2 started at a later block" \
    "prefix: the summary counts both"
got=$(rows "$tmp/prefix-shared.db" "SELECT group_concat(n, ' ') FROM (SELECT count(*) AS n
    FROM runs GROUP BY shared_blocks ORDER BY shared_blocks)")
[ "$got" = "1 2 3" ] && ok "prefix: shared_blocks 0 (own pass) once, 3 twice, 5 (head only) three times" ||
    bad "prefix: runs by shared_blocks: $got"
n=$(rows "$tmp/prefix-shared.db" "SELECT count(*) FROM runs r JOIN configs c ON c.id = r.config_id
    JOIN configs b ON b.hash = r.body_of WHERE r.shared_blocks = 3 AND b.head_type = c.head_type")
[ "$n" = 2 ] && ok "prefix: body_of names the config the prefix came from" || bad "prefix: body_of $n"
n=$(rows "$tmp/prefix-alone.db" "SELECT count(*) FROM runs WHERE body_of IS NOT NULL OR shared_blocks != 0")
[ "$n" = 0 ] && ok "prefix: with --no-share none" || bad "prefix: $n runs shared with --no-share"

cat >"$tmp/layers.sweep" <<'END'
[sweep]
name          = shared-layers
model         = stories260K
text          = ts-eval
ctx           = 64
chunks        = 4
threads       = 2
layer_metrics = yes

[grid]
weight_type = Q4_0
head_type   = same F16
END
same_as_alone layers "$tmp/layers.sweep" 1

cat >"$tmp/moe.sweep" <<END
[sweep]
name    = shared-moe
model   = $moe/moe-llama-f32.gguf
text    = tinystories-valid
ctx     = 128
chunks  = 3
threads = 2

[grid]
weight_type = Q4_K
head_type   = same Q8_0
END
same_as_alone moe "$tmp/moe.sweep" 1
n=$(rows "$tmp/moe-shared.db" "SELECT count(*) FROM expert_load")
[ "$n" -gt 0 ] 2>/dev/null && ok "moe: expert loads stored for every run" || bad "moe: no expert loads"
exit "$fail"
