#!/bin/sh
# The command-line contract of every qlab command and notebook program (core/cli/opt.h):
# help, version, exit codes 0 (ok), 1 (runtime), 2 (usage); one usage-error style,
# "PROG: error: WHAT" then "Try 'PROG --help'.", for an unknown or ambiguous option, a
# missing or malformed value, a value given to a flag, a missing or surplus argument;
# --opt=value, llama.cpp's short aliases, abbreviations and options after the arguments
# giving what the long spelling before them gives; OMP_NUM_THREADS as --threads' default.
set -u
qlab="$1"
pareto="$2"
act_cost="$3"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
# The checks set it where they need it.
unset OMP_NUM_THREADS

# usage_error LABEL PROG TEXT CMD...: CMD exits 2 and prints two lines on stderr, the
# first "PROG: error: ..." containing the fixed string TEXT, the second the --help hint.
# libgomp's own complaint about a malformed OMP_NUM_THREADS (before main) is left out.
usage_error() {
    label=$1; prog=$2; text=$3; shift 3
    "$@" >"$tmp/out" 2>"$tmp/err.all"; got=$?
    grep -v '^libgomp: \|^$' "$tmp/err.all" >"$tmp/err"
    first=$(sed -n 1p "$tmp/err"); second=$(sed -n 2p "$tmp/err")
    if [ "$got" -ne 2 ]; then
        bad "$label: exit $got, expected 2"; cat "$tmp/out" "$tmp/err"
    elif [ "$(wc -l <"$tmp/err")" -ne 2 ]; then
        bad "$label: $(wc -l <"$tmp/err") lines on stderr, expected 2"; cat "$tmp/err"
    elif case "$first" in "$prog: error: "*) false ;; *) true ;; esac; then
        bad "$label: '$first' does not start with '$prog: error: '"
    elif ! printf '%s\n' "$first" | grep -qF -- "$text"; then
        bad "$label: '$first' lacks '$text'"
    elif [ "$second" != "Try '$prog --help'." ]; then
        bad "$label: second line '$second', expected the --help hint"
    else
        ok "$label"
    fi
}
# same LABEL A B: files A and B hold the same bytes.
same() {
    if cmp -s "$2" "$3"; then ok "$1"; else bad "$1: $2 and $3 differ"; diff "$2" "$3" | head -20; fi
}

# ---------------------------------------------------------------- every program
expect 0 "qlab --help" "$qlab" --help
expect 0 "qlab version" "$qlab" version
"$qlab" version >"$tmp/v1"
expect 0 "qlab --version" "$qlab" --version
same "--version prints what 'qlab version' prints" "$tmp/v1" "$tmp/out"
# The commit is the source tree's HEAD, not the one the build directory was configured at
# (a rebuild after a commit refreshes it).
src=$(cd "$(dirname "$0")/../.." && pwd)
if head=$(git -C "$src" rev-parse --short=12 HEAD 2>/dev/null); then
    if grep -qF "(commit $head)" "$tmp/v1"; then ok "version names HEAD ($head)"
    else bad "version: '$(cat "$tmp/v1")', HEAD is $head"; fi
fi
usage_error "no command" "qlab" "missing the command" "$qlab"
usage_error "unknown command" "qlab" "unknown command 'frobnicate'" "$qlab" frobnicate
"$qlab" --help >"$tmp/help"
has "$tmp/help" "usage: qlab" "--help has a usage line"
has "$tmp/help" "OMP_NUM_THREADS" "--help states the default of --threads"

# The error classes every program shares, whatever its options.
cmds=$("$qlab" --help | awk '/^commands:/{f=1;next} f && /^  [a-z]/{print $1}')
[ "$(echo "$cmds" | wc -w)" -ge 16 ] && ok "16 commands listed" || bad "commands: $cmds"
for cmd in "" $cmds "bench quant" "bench act" "bench forward" "data list" "data verify"; do
    prog=$(echo "qlab $cmd" | sed 's/ *$//')
    # shellcheck disable=SC2086 # cmd holds the subcommand words
    {
        expect 0 "$prog --help" "$qlab" $cmd --help
        has "$tmp/out" "  -h, --help" "$prog --help lists -h"
        usage_error "$prog: unknown option" "$prog" "unknown option '--frobnicate'" "$qlab" $cmd --frobnicate
        usage_error "$prog: unknown short option" "$prog" "unknown option '-Z'" "$qlab" $cmd -Z
        usage_error "$prog: a value for a flag" "$prog" "--help takes no value (got '--help=yes')" "$qlab" $cmd --help=yes
    }
done
for nb in "$pareto" "$act_cost"; do
    prog=${nb##*/}
    expect 0 "$prog --help" "$nb" --help
    has "$tmp/out" "  -o, --out DIR" "$prog --help lists -o"
    usage_error "$prog: unknown option" "$prog" "unknown option '--frobnicate'" "$nb" --frobnicate
    usage_error "$prog: missing value" "$prog" "-o needs a value (DIR)" "$nb" -o
    usage_error "$prog: stray argument" "$prog" "unexpected argument 'x.db'" "$nb" x.db
done

# The short aliases each --help lists, as llama.cpp's tools spell them.
aliases() { # PROG-WORDS... -- ALIAS...
    words=""; while [ "$1" != "--" ]; do words="$words $1"; shift; done; shift
    # shellcheck disable=SC2086
    "$qlab" $words --help >"$tmp/h"
    for a in "$@"; do has "$tmp/h" "  $a" "qlab$words --help lists $a"; done
}
aliases eval -- "-m, --model MODEL" "-f, --text" "-c, --ctx N" "-t, --threads N" "-q, --quiet"
aliases imatrix -- "-m, --model" "-f, --text" "-o, --output OUT" "-c, --ctx N" "-t, --threads"
aliases generate -- "-m, --model" "-p, --prompt TEXT" "-n, --predict N" "-t, --threads"
aliases tokenize -- "-m, --model" "-p, --text STRING" "-f, --file PATH"
aliases fit -- "-m, --model" "-o, --output" "-c, --ctx N" "-t, --threads" "-q, --quiet"
aliases quantize -- "-t, --threads N" "-q, --quiet"
aliases sweep -- "-t, --threads N" "-j, --jobs N" "-q, --quiet"
aliases synth -- "-o, --output" "-s, --seed S"
aliases report -- "-o, --out DIR"
aliases imatrix-convert -- "-o, --output OUT"
aliases bench forward -- "-m, --model" "-c, --ctx N" "-t, --threads"
aliases bench quant -- "-t, --threads N"
aliases bench act -- "-t, --threads N"

# ---------------------------------------------------------------- each program's values
# No work starts before the options are checked, so none of these needs a real input.
m=stories260K
usage_error "eval: missing value" "qlab eval" "--ctx needs a value (N)" "$qlab" eval $m -f ts-eval --ctx
usage_error "eval: malformed value" "qlab eval" "-c: expected an integer in 4..1048576, got '64k'" "$qlab" eval $m -f ts-eval -c 64k
usage_error "eval: --opt= malformed" "qlab eval" "--kv-type: expected F32, F16, Q8_0 or Q4_0, got 'q4_K'" "$qlab" eval $m -f ts-eval --kv-type=q4_K
usage_error "eval: missing MODEL" "qlab eval" "missing MODEL" "$qlab" eval -f ts-eval
usage_error "eval: MODEL twice" "qlab eval" "MODEL given twice ('$m' and 'x' from -m)" "$qlab" eval $m -f ts-eval -m x
usage_error "eval: missing --text" "qlab eval" "missing --text FILE|NAME" "$qlab" eval $m
usage_error "eval: ambiguous" "qlab eval" "option '--c' is ambiguous (--ctx, --chunks)" "$qlab" eval $m -f ts-eval --c 8
usage_error "imatrix: missing -o" "qlab imatrix" "missing --output OUT" "$qlab" imatrix $m -f ts-calib
usage_error "imatrix: malformed --format" "qlab imatrix" "--format: expected dat or gguf, got 'npz'" "$qlab" imatrix $m -f ts-calib -o x.gguf --format=npz
usage_error "imatrix-convert: missing OUT" "qlab imatrix-convert" "missing OUT" "$qlab" imatrix-convert in.dat
usage_error "imatrix-convert: malformed value" "qlab imatrix-convert" "--chunk-size: expected an integer in 1..16777216, got '0'" "$qlab" imatrix-convert in.dat out.gguf --chunk-size=0
usage_error "generate: malformed -n" "qlab generate" "-n: expected an integer in 0..1048576, got 'x'" "$qlab" generate $m -n x
usage_error "generate: missing MODEL" "qlab generate" "missing MODEL" "$qlab" generate -n 3
usage_error "tokenize: empty --file" "qlab tokenize" "--file: expected PATH, got an empty value" "$qlab" tokenize $m --file=
usage_error "tokenize: missing MODEL" "qlab tokenize" "missing MODEL" "$qlab" tokenize -p hi
usage_error "quantize: missing TYPE" "qlab quantize" "expects a TYPE after OUT.gguf" "$qlab" quantize in.gguf out.gguf
usage_error "quantize: unknown type" "qlab quantize" "--type: unknown type 'Q9_9'" "$qlab" quantize in.gguf out.gguf --type=Q9_9
usage_error "quantize: missing value" "qlab quantize" "--head-type needs a value (T)" "$qlab" quantize in.gguf out.gguf --type Q4_0 --head-type
usage_error "quantize: three paths" "qlab quantize" "unexpected argument 'c'" "$qlab" quantize a b c --type Q4_0
usage_error "fit: missing MODEL" "qlab fit" "missing MODEL.gguf" "$qlab" fit --budget 1MiB --dry-run
usage_error "fit: malformed size" "qlab fit" "--budget: size '4G': unknown unit 'G'" "$qlab" fit $m --budget=4G --dry-run
usage_error "fit: malformed --envelope" "qlab fit" "--envelope: size 'lots'" "$qlab" fit $m --envelope lots --dry-run
usage_error "fit: missing value" "qlab fit" "--sample-rows needs a value (N)" "$qlab" fit $m --budget 1MiB --dry-run --sample-rows
usage_error "synth: missing -o" "qlab synth" "missing --output OUT.gguf" "$qlab" synth --dim 64
usage_error "synth: malformed value" "qlab synth" "--dim: expected an integer in 1..1048576, got '12x'" "$qlab" synth -o x.gguf --dim=12x
usage_error "synth: malformed type" "qlab synth" "--type: expected F32, F16 or BF16, got 'Q4_0'" "$qlab" synth -o x.gguf --type Q4_0
usage_error "inspect: missing FILE" "qlab inspect" "missing FILE.gguf" "$qlab" inspect
usage_error "inspect: malformed value" "qlab inspect" "--max-array: expected a number >= 0 or 'all', got '-1'" "$qlab" inspect --max-array=-1 x.gguf
usage_error "inspect: two files" "qlab inspect" "unexpected argument 'b.gguf'" "$qlab" inspect a.gguf b.gguf
usage_error "sweep: missing FILE" "qlab sweep" "missing the sweep FILE" "$qlab" sweep --list
usage_error "sweep: malformed -j" "qlab sweep" "-j: expected an integer in 1..256, got '0'" "$qlab" sweep x.sweep -j 0
usage_error "query: missing SQL" "qlab query" "missing the SQL statement or query NAME" "$qlab" query --csv
usage_error "query: missing value" "qlab query" "--db needs a value (PATH)" "$qlab" query "SELECT 1" --db
usage_error "report: missing value" "qlab report" "--sweep needs a value (NAME)" "$qlab" report --sweep
usage_error "report: stray argument" "qlab report" "unexpected argument 'extra'" "$qlab" report extra
usage_error "merge: missing databases" "qlab merge" "missing OUT.db and the input databases" "$qlab" merge
usage_error "data: missing subcommand" "qlab data" "missing the subcommand (list or verify)" "$qlab" data
usage_error "data list: stray argument" "qlab data list" "unexpected argument 'x'" "$qlab" data list x
usage_error "bench: missing benchmark" "qlab bench" "missing a benchmark name" "$qlab" bench
usage_error "bench: unknown benchmark" "qlab bench" "unknown benchmark 'nothing'" "$qlab" bench nothing
usage_error "bench quant: malformed value" "qlab bench quant" "--rows: expected an integer in 1..1048576, got '0'" "$qlab" bench quant --rows=0
usage_error "bench quant: malformed double" "qlab bench quant" "--min-seconds: expected a number in 0..3600, got 'soon'" "$qlab" bench quant --min-seconds soon
usage_error "bench act: malformed value" "qlab bench act" "--in: expected an integer in 256..1048576, got '100'" "$qlab" bench act --in 100
usage_error "bench forward: missing MODEL" "qlab bench forward" "missing MODEL" "$qlab" bench forward -c 64
usage_error "version: stray argument" "qlab version" "unexpected argument 'now'" "$qlab" version now
usage_error "act_cost: malformed value" "act_cost" "--resamples: expected an integer in 100..100000000, got '5'" "$act_cost" --resamples=5

# OMP_NUM_THREADS is read by every program with --threads, and only when --threads is
# not given: a malformed value is a usage error that names it.
omp="OMP_NUM_THREADS (the default of --threads): expected an integer in 1..4096, got 'lots'"
for c in "eval $m -f ts-eval" "imatrix $m -f ts-calib -o x.gguf" "generate $m" \
    "quantize in.gguf out.gguf --type Q8_0" "fit $m --budget 1MiB --dry-run" "sweep x.sweep" \
    "bench quant" "bench act" "bench forward $m"; do
    prog="qlab $(echo "$c" | awk '{print ($1 == "bench") ? $1 " " $2 : $1}')"
    # shellcheck disable=SC2086
    usage_error "$prog reads OMP_NUM_THREADS" "$prog" "$omp" env OMP_NUM_THREADS=lots "$qlab" $c
done
expect 0 "--threads wins over OMP_NUM_THREADS" env OMP_NUM_THREADS=lots \
    "$qlab" bench quant --types Q4_0 --rows 1 --cols 256 --min-seconds 0 -t 1

# ---------------------------------------------------------------- the same run, spelled otherwise
need_file "$QLAB_SHARED/models/stories260K.gguf"

# eval: short aliases, --opt=value, an abbreviation, options before MODEL.
"$qlab" eval $m --text ts-eval --ctx 64 --chunks 2 --threads 1 --quiet >"$tmp/eval.long" 2>/dev/null ||
    bad "eval, long spelling"
expect 0 "eval: -f -c -t, --chunks=2, options first" "$qlab" eval -f ts-eval -c64 --chunks=2 -t 1 -q $m
same "eval: the same PPL" "$tmp/eval.long" "$tmp/out"
expect 0 "eval: -m, abbreviations --te= --ch" "$qlab" eval --te=ts-eval --ch 2 -c 64 -m $m -q
same "eval: the same PPL with -m" "$tmp/eval.long" "$tmp/out"
# llama.cpp's long names (common/arg.cpp, llama-perplexity) for the same options.
expect 0 "eval: --file --ctx-size --threads --model" "$qlab" eval --file ts-eval --ctx-size 64 --chunks 2 --threads 1 -q --model $m
same "eval: the same PPL with llama.cpp's names" "$tmp/eval.long" "$tmp/out"
usage_error "eval: did you mean" "qlab eval" "unknown option '--chunsk'; did you mean '--chunks'?" "$qlab" eval $m -f ts-eval --chunsk 2
usage_error "eval: did you mean an alias" "qlab eval" "unknown option '--ctx_size'; did you mean '--ctx-size'?" "$qlab" eval $m -f ts-eval --ctx_size 2
usage_error "quantize: did you mean" "qlab quantize" "unknown option '--imatrx'; did you mean '--imatrix'?" "$qlab" quantize a b Q4_0 --imatrx x
usage_error "quantize: file type" "qlab quantize" "unknown file type 'Q4_KM'; did you mean 'Q4_K_M'?" "$qlab" quantize a b Q4_KM
usage_error "quantize: head type" "qlab quantize" "--head-type: unknown type 'Q8'; did you mean 'Q8_0'?" "$qlab" quantize a b --type Q4_0 --head-type Q8
usage_error "unknown command: did you mean" "qlab" "unknown command 'swep'; did you mean 'sweep'?" "$qlab" swep x
# An internal option is not listed and takes no prefix: --job is --jobs.
"$qlab" sweep --help >"$tmp/h"
grep -q "job-of" "$tmp/h" && bad "sweep --help lists the internal --job-of" || ok "sweep --help hides --job-of"
usage_error "sweep: --job is --jobs" "qlab sweep" "-j" "$qlab" sweep x.sweep --job 0
has "$tmp/err" "--jobs: expected an integer in 1..256, got '0'" "--job 2 is not ambiguous"
expect 1 "eval: a named model, did you mean" "$qlab" eval storie260K -f ts-eval
has "$tmp/err" "did you mean 'stories260K'?" "a dataset name gets a suggestion"
# OMP_NUM_THREADS (its first number) when --threads is not given.
expect 0 "eval: OMP_NUM_THREADS=7" env OMP_NUM_THREADS=7 "$qlab" eval $m -f ts-eval -c 64 --chunks 1 -q
has "$tmp/err" "; 7 threads" "eval runs OMP_NUM_THREADS threads"
expect 0 "eval: OMP_NUM_THREADS='3,2'" env OMP_NUM_THREADS=3,2 "$qlab" eval $m -f ts-eval -c 64 --chunks 1 -q
has "$tmp/err" "; 3 threads" "eval takes the first level of OMP_NUM_THREADS"
expect 0 "eval: --threads over OMP_NUM_THREADS" env OMP_NUM_THREADS=7 "$qlab" eval $m -f ts-eval -c 64 --chunks 1 -q --threads=1
has "$tmp/err" "; 1 threads" "eval: --threads wins"

# imatrix: the same file from either spelling; OMP_NUM_THREADS in its summary line.
"$qlab" imatrix $m --text ts-calib --output "$tmp/a.dat" --ctx 64 --chunks 2 --threads 1 --quiet \
    >/dev/null 2>&1 || bad "imatrix, long spelling"
expect 0 "imatrix: -m -f -o -c -t" env OMP_NUM_THREADS=7 "$qlab" imatrix -o "$tmp/b.dat" --chunks=2 -c 64 -f ts-calib -m $m
same "imatrix: the same file" "$tmp/a.dat" "$tmp/b.dat"
has "$tmp/err" "; 7 threads" "imatrix runs OMP_NUM_THREADS threads"

# imatrix-convert: IN -o OUT, --format=.
"$qlab" imatrix-convert "$tmp/a.dat" "$tmp/a.gguf" >/dev/null 2>&1 || bad "imatrix-convert, positional"
expect 0 "imatrix-convert: -o, --format=" "$qlab" imatrix-convert --format=gguf "$tmp/a.dat" -o "$tmp/b.bin"
same "imatrix-convert: the same file" "$tmp/a.gguf" "$tmp/b.bin"

# generate and tokenize: -p, -n, -m.
"$qlab" generate $m --prompt "Once upon" -n 8 --ids >"$tmp/gen.long" || bad "generate, long spelling"
expect 0 "generate: -m -p -n, --predict=" "$qlab" generate --ids --predict=8 -p "Once upon" -m $m -t 1
same "generate: the same tokens" "$tmp/gen.long" "$tmp/out"
"$qlab" tokenize $m --text "Once upon a time" --ids >"$tmp/tok.long" || bad "tokenize, long spelling"
expect 0 "tokenize: -p -m, options first" "$qlab" tokenize --ids -p "Once upon a time" -m $m
same "tokenize: the same ids" "$tmp/tok.long" "$tmp/out"
expect 0 "tokenize: --text=" "$qlab" tokenize $m --ids "--text=Once upon a time"
same "tokenize: the same ids with --text=" "$tmp/tok.long" "$tmp/out"

# quantize and fit: the same files.
model="$QLAB_SHARED/models/stories260K.gguf"
"$qlab" quantize "$model" "$tmp/q1.gguf" --type Q4_0 --head-type Q8_0 --quiet >/dev/null ||
    bad "quantize, long spelling"
expect 0 "quantize: --type= -t -q, options first" "$qlab" quantize --type=Q4_0 -t1 -q --head-type=Q8_0 "$model" "$tmp/q2.gguf"
same "quantize: the same file" "$tmp/q1.gguf" "$tmp/q2.gguf"
"$qlab" fit $m --budget 300000 -o "$tmp/f1.gguf" --no-cache --quiet >/dev/null || bad "fit, long spelling"
expect 0 "fit: --budget= --output= -q -m" "$qlab" fit -q --budget=300000 --no-cache --output="$tmp/f2.gguf" -m $m
same "fit: the same file" "$tmp/f1.gguf" "$tmp/f2.gguf"
expect 0 "fit: --envelope with -c" "$qlab" fit $m --envelope=8MiB -c 128 --dry-run --no-cache -q
has "$tmp/out" "ctx 128" "fit: -c is the KV-cache context"

# synth and inspect.
"$qlab" synth -o "$tmp/s1.gguf" --dim 64 --ff 128 --layers 1 --heads 2 --kv-heads 1 --seed 3 \
    >/dev/null || bad "synth, long spelling"
expect 0 "synth: --opt= and -s" "$qlab" synth --dim=64 --ff=128 --layers=1 --heads=2 --kv-heads=1 -s3 --output="$tmp/s2.gguf"
same "synth: the same file" "$tmp/s1.gguf" "$tmp/s2.gguf"
"$qlab" inspect "$tmp/s1.gguf" --max-array 2 >"$tmp/insp.long" || bad "inspect, long spelling"
expect 0 "inspect: --max-array= before '--' FILE" "$qlab" inspect --max-array=2 -- "$tmp/s1.gguf"
same "inspect: the same listing" "$tmp/insp.long" "$tmp/out"

# bench: the thread count of the second column.
expect 0 "bench quant: OMP_NUM_THREADS=7" env OMP_NUM_THREADS=7 "$qlab" bench quant --types=Q4_0 --rows=1 --cols=256 --min-seconds=0
has "$tmp/out" "1 and 7 threads" "bench quant runs OMP_NUM_THREADS threads"
expect 0 "bench act: OMP_NUM_THREADS=7" env OMP_NUM_THREADS=7 "$qlab" bench act --tokens=1 --in=256 --out=1 --min-seconds=0
has "$tmp/out" "(7 threads)" "bench act runs OMP_NUM_THREADS threads"
expect 0 "bench forward: -c, OMP_NUM_THREADS=7" env OMP_NUM_THREADS=7 "$qlab" bench forward -c 16 --chunks=1 $m
has "$tmp/out" "7 threads" "bench forward runs OMP_NUM_THREADS threads"

# sweep: OMP_NUM_THREADS is stored as the runs' thread count; --list either way.
cat >"$tmp/t.sweep" <<'EOF'
[sweep]
name   = cli-options
model  = stories260K
text   = ts-eval
ctx    = 64
chunks = 2

[grid]
weight_type = Q8_0 Q4_0
act_mode    = f32 q8_0
EOF
"$qlab" sweep "$tmp/t.sweep" --list >"$tmp/list.long" || bad "sweep --list, long spelling"
expect 0 "sweep: options first, --shard=" "$qlab" sweep --shard=0/1 --list "$tmp/t.sweep"
same "sweep: the same list" "$tmp/list.long" "$tmp/out"
db="$tmp/a.db"
expect 0 "sweep: OMP_NUM_THREADS=7, -q, --db=" env OMP_NUM_THREADS=7 "$qlab" sweep -q --no-summary --db="$db" --cache-dir "$tmp/cache" "$tmp/t.sweep"
[ "$(rows "$db" "SELECT DISTINCT threads FROM runs")" = 7 ] && ok "sweep runs OMP_NUM_THREADS threads" ||
    bad "sweep threads: $(rows "$db" "SELECT DISTINCT threads FROM runs")"

# query, report, merge and the notebooks on that database.
sql="SELECT weight_type, act_mode, ppl FROM results ORDER BY weight_type, act_mode"
"$qlab" query --db "$db" --csv "$sql" >"$tmp/q.long" || bad "query, long spelling"
expect 0 "query: --db=, options after SQL" "$qlab" query "$sql" --csv --db="$db"
same "query: the same rows" "$tmp/q.long" "$tmp/out"
expect 0 "query: '--' before a statement starting with '-'" "$qlab" query --db "$db" --csv -- "$(printf -- '-- a comment\nSELECT 41 + 1 AS x')"
[ "$(tail -n 1 "$tmp/out")" = 42 ] && ok "query: the statement after '--' ran" || bad "query after --: $(cat "$tmp/out")"
"$qlab" report --db "$db" --out "$tmp/r1" --no-plots >/dev/null || bad "report, long spelling"
expect 0 "report: -o, --db=" "$qlab" report --no-plots -o "$tmp/r2" --db="$db"
same "report: the same table" "$tmp/r1/cli-options/report.md" "$tmp/r2/cli-options/report.md"
expect 0 "merge: inputs after '--'" "$qlab" merge "$tmp/m.db" -- "$db"
has "$tmp/out" "4 runs added" "merge: the runs are added"
"$pareto" --db "$db" --out "$tmp/p1" --no-plots >/dev/null || bad "pareto, long spelling"
expect 0 "pareto: -o, --db=" "$pareto" --no-plots -o "$tmp/p2" --db="$db"
same "pareto: the same table" "$tmp/p1/pareto.md" "$tmp/p2/pareto.md"
"$act_cost" --db "$db" --out "$tmp/a1" --no-plots --resamples 200 --seed 5 >/dev/null || bad "act_cost, long spelling"
expect 0 "act_cost: --resamples= -s" "$act_cost" --no-plots --resamples=200 -s 5 -o "$tmp/a2" --db="$db"
same "act_cost: the same table" "$tmp/a1/act_cost.md" "$tmp/a2/act_cost.md"
expect 0 "data list" "$qlab" data list
exit "$fail"
