# Sourced by the bench scripts: bench_model PRESET QLAB prints the path of the F16 model of
# PRESET's shapes under results/bench/, writing it with `qlab synth` when missing (the 8B one
# is 16 GB and takes about 16 minutes to write).
bench_model() {
    _model=results/bench/$1-F16.gguf
    if [ ! -f "$_model" ]; then
        mkdir -p results/bench
        echo "writing $_model" >&2
        "$2" synth --preset "$1" --type F16 -o "$_model.tmp" >/dev/null
        mv "$_model.tmp" "$_model"
    fi
    printf '%s\n' "$_model"
}

# bench_chunks PRESET: how many 512-token chunks to time; fewer where a chunk is long (the
# figure is per token either way).
bench_chunks() {
    case $1 in
    *8b*) echo 1 ;;
    *0.5b* | *0.6b*) echo 2 ;;
    *) echo 8 ;;
    esac
}
