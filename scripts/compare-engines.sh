#!/bin/sh
# The streaming engine against an earlier qlab (README, "Real model sizes"): the same
# sweep (Q8_0, Q4_K, Q4_0, IQ4_XS, each with f32 and q8_0 activations, on the 30M-parameter
# synthetic model, wikitext-2, ctx 256, 4 chunks) run by two qlab binaries into two
# stores, then every config's KLD and PPL side by side with their relative difference
# and the largest of each. Run by hand; the old binary is a build of an earlier commit
# (for the engine before streaming: 49b7249):
#   git worktree add /tmp/old 49b7249 && meson setup /tmp/old/build /tmp/old &&
#   meson compile -C /tmp/old/build && scripts/compare-engines.sh /tmp/old/build/core/qlab
#   usage: scripts/compare-engines.sh OLD_QLAB [NEW_QLAB]
set -eu
cd "$(dirname "$0")/.."
old=${1:?usage: scripts/compare-engines.sh OLD_QLAB [NEW_QLAB]}
new=${2:-build/core/qlab}
dir=results/compare-engines
rm -rf "$dir"
mkdir -p "$dir"
cat >"$dir/engines.sweep" <<END
[sweep]
name    = engines
model   = synth:30M
text    = wikitext-2-test
ctx     = 256
chunks  = 4
threads = 2

[grid]
weight_type = Q8_0 Q4_K Q4_0 IQ4_XS
act_mode    = f32 q8_0
END
for e in old new; do
    eval bin=\$$e
    echo "running the sweep with $e: $bin"
    "$bin" sweep "$dir/engines.sweep" --db "$dir/$e.db" --cache-dir "$dir/cache-$e" \
        >"$dir/$e.out" 2>"$dir/$e.err" || { echo "$e failed:"; tail -3 "$dir/$e.err"; exit 1; }
done
q="SELECT c.weight_type || ' act=' || c.act_mode, printf('%.17g', m.kld_mean),
          printf('%.17g', m.ppl), printf('%.17g', m.top1_agree)
   FROM runs r JOIN configs c ON c.id = r.config_id JOIN metrics m ON m.run_id = r.id
   WHERE r.status = 'done' ORDER BY c.hash"
sqlite3 -separator ' ' "$dir/old.db" "$q" >"$dir/old.txt"
sqlite3 -separator ' ' "$dir/new.db" "$q" >"$dir/new.txt"
paste -d ' ' "$dir/old.txt" "$dir/new.txt" | awk '
    function rel(a, b) { d = a - b; if (d < 0) d = -d; return a == 0 ? d : d / (a < 0 ? -a : a) }
    BEGIN { printf "%-16s %12s %12s %9s %12s %12s %9s %8s\n", "config", "KLD old",
            "KLD new", "rel diff", "PPL old", "PPL new", "rel diff", "top-1 =" }
    $1 != $6 || $2 != $7 { print "configs do not match: " $0; bad = 1; exit 1 }
    { rk = rel($3, $8); rp = rel($4, $9)
      if (rk > mk) mk = rk; if (rp > mp) mp = rp
      printf "%-16s %12.6e %12.6e %9.2e %12.4f %12.4f %9.2e %8s\n", $1 " " $2, $3, $8, rk,
             $4, $9, rp, ($5 == $10 ? "same" : "differs") }
    END { if (!bad) printf "largest relative difference: KLD %.2e, PPL %.2e\n", mk, mp }'
