#!/bin/sh
# compare_results.sh QLAB A.db B.db
#
# Exits 0 when two results databases hold the same results by natural keys:
# models and texts by sha256, configs by hash, runs by (config, model, text, ctx,
# chunks) with their status, error, metrics version, metrics, tensor errors,
# per-chunk sums and sweep memberships. Row ids and provenance (paths, timings,
# host, pid, threads, qlab commit, attempts, started/finished, BLAS kernel, memory
# plan, which pass a run shared) are left out: they
# differ between a single-process sweep and merged shards run on other nodes.
# Otherwise prints what differs and exits 1; two databases without runs are no
# evidence of anything and exit 1 too. Reads through `qlab query --csv`,
# which prints reals in their shortest exact form, so equal means bit-equal.
set -u
qlab="$1"
a="$2"
b="$3"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# columns TABLE ALIAS EXCLUDED-REGEX: ", alias.col" for the table's other columns.
columns() {
    "$qlab" query --db "$a" --csv "SELECT name FROM pragma_table_info('$1') ORDER BY cid" |
        tail -n +2 | grep -vxE "$3" | sed "s/^/, $2./" | tr -d '\n'
}

key="c.hash, mo.sha256, d.sha256, r.ctx, r.chunks"
join="JOIN configs c ON c.id = r.config_id JOIN models mo ON mo.id = r.model_id"
join="$join JOIN datasets d ON d.id = r.dataset_id"
provenance="id|config_id|model_id|dataset_id|ctx|chunks|started|finished|seconds|quantize_seconds|ref_seconds|quant_seconds|threads|host|pid|qlab_commit|attempts|blas_kernel|mem_budget|group_chunks|body_of|forward_alone_seconds|shared_blocks"

cat >"$tmp/queries" <<END
models	SELECT m.sha256$(columns models m 'id|path|sha256') FROM models m ORDER BY m.sha256
datasets	SELECT d.sha256, t.sha256 AS tokens_model$(columns datasets d 'id|path|sha256|tokens_model_id') FROM datasets d LEFT JOIN models t ON t.id = d.tokens_model_id ORDER BY d.sha256
configs	SELECT c.hash$(columns configs c 'id|hash') FROM configs c ORDER BY c.hash
runs	SELECT $key$(columns runs r "$provenance") FROM runs r $join ORDER BY 1, 2, 3, 4, 5
metrics	SELECT $key$(columns metrics x run_id) FROM metrics x JOIN runs r ON r.id = x.run_id $join ORDER BY 1, 2, 3, 4, 5
tensor_errors	SELECT $key$(columns tensor_errors x run_id) FROM tensor_errors x JOIN runs r ON r.id = x.run_id $join ORDER BY 1, 2, 3, 4, 5, 6
chunk_metrics	SELECT $key$(columns chunk_metrics x run_id) FROM chunk_metrics x JOIN runs r ON r.id = x.run_id $join ORDER BY 1, 2, 3, 4, 5, 6
sweep_runs	SELECT s.sweep, $key FROM sweep_runs s JOIN runs r ON r.id = s.run_id $join ORDER BY 1, 2, 3, 4, 5, 6
END

status=0
while IFS='	' read -r name sql; do
    for db in a b; do
        if [ "$db" = a ]; then path=$a; else path=$b; fi
        if ! "$qlab" query --db "$path" --csv "$sql" >"$tmp/$name.$db" 2>"$tmp/err"; then
            echo "compare_results: $path: $name: $(cat "$tmp/err")"
            exit 1
        fi
    done
    if ! cmp -s "$tmp/$name.a" "$tmp/$name.b"; then
        echo "compare_results: $name differ between $a and $b:"
        diff "$tmp/$name.a" "$tmp/$name.b" | head -20
        status=1
    fi
done <"$tmp/queries"
runs=$(($(wc -l <"$tmp/runs.a") - 1))
if [ "$status" -eq 0 ] && [ "$runs" -eq 0 ]; then
    echo "compare_results: $a and $b hold no runs: nothing to compare"
    status=1
fi
[ "$status" -eq 0 ] && echo "compare_results: $a and $b hold the same results ($runs runs)"
exit "$status"
