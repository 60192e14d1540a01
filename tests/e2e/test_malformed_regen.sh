#!/bin/sh
# The malformed corpora are what their generators write: gen_malformed and
# gen_imatrix_malformed, each run into an empty directory (they create what they
# need there, imatrix/misfit/ included), write exactly the committed .gguf and .dat
# files of tests/malformed, byte for byte, and no file the corpus lacks.
#   test_malformed_regen.sh GEN_MALFORMED GEN_IMATRIX_MALFORMED CORPUS_DIR
set -u
gen="$1"
gen_imatrix="$2"
corpus="$3"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"

# same_files LABEL GENERATED COMMITTED: the .gguf/.dat files under both, by relative path.
same_files() {
    (cd "$2" && find . -type f \( -name '*.gguf' -o -name '*.dat' \) | sort) >"$tmp/got"
    (cd "$3" && find . -type f \( -name '*.gguf' -o -name '*.dat' \) | sort) >"$tmp/want"
    if cmp -s "$tmp/got" "$tmp/want"; then
        ok "$1: the generator writes every corpus file, no other ($(wc -l <"$tmp/want") files)"
    else
        bad "$1: generated and committed file lists differ:"; diff "$tmp/want" "$tmp/got"
    fi
    n_diff=0
    while read -r f; do
        [ -f "$3/$f" ] || continue
        cmp -s "$2/$f" "$3/$f" || { bad "$1: $f differs from the committed file"; n_diff=1; }
    done <"$tmp/got"
    [ "$n_diff" -eq 0 ] && ok "$1: every generated file equals the committed one"
}

mkdir "$tmp/gguf" "$tmp/imatrix"
expect 0 "gen_malformed into an empty directory" "$gen" "$tmp/gguf"
# The GGUF corpus without its imatrix/ and sweep/ subdirectories (their own corpora).
mkdir "$tmp/committed-gguf"
cp -R "$corpus"/*.gguf "$corpus/valid" "$tmp/committed-gguf/"
same_files "GGUF corpus" "$tmp/gguf" "$tmp/committed-gguf"
expect 0 "gen_imatrix_malformed into an empty directory" "$gen_imatrix" "$tmp/imatrix"
same_files "imatrix corpus" "$tmp/imatrix" "$corpus/imatrix"
exit "$fail"
