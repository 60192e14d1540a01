# bash completion for qlab (installed as bash-completion/completions/qlab).
# Commands and options come from the program's own --help texts, so they never
# differ from what it takes: `qlab --help` lists the commands, `qlab CMD --help`
# the options (with llama.cpp's other names, "(also --ctx-size)"); internal options
# are not listed there, so they are never offered. Values: type names for the type
# options, sweep files for `qlab sweep`, files otherwise.

_qlab_help_cache=()

# The long options of `qlab WORDS...` (cached per command line words).
_qlab_options() {
    local key="$*" i
    for ((i = 0; i < ${#_qlab_help_cache[@]}; i += 2)); do
        if [[ ${_qlab_help_cache[i]} == "$key" ]]; then
            printf '%s\n' "${_qlab_help_cache[i + 1]}"
            return
        fi
    done
    local opts
    opts=$("${_qlab_bin:-qlab}" "$@" --help 2>/dev/null | awk '
        /^  (-[A-Za-z0-9], |    )--[a-z]/ { s = $0; sub(/^  (-[A-Za-z0-9], |    )/, "", s); sub(/[ =].*/, "", s); print s }
        /\(also --/ { s = $0; sub(/.*\(also /, "", s); sub(/\).*/, "", s); n = split(s, a, " "); for (i = 1; i <= n; i++) print a[i] }
        END { print "--help" }' | sort -u)
    _qlab_help_cache+=("$key" "$opts")
    printf '%s\n' "$opts"
}

_qlab_commands() {
    "${_qlab_bin:-qlab}" --help 2>/dev/null | awk '/^commands:/ { f = 1; next } f && /^  [a-z]/ { print $1 } f && /^$/ { exit }'
}

# Type names as qlab spells them (the weight types quantize lists).
_qlab_types() {
    "${_qlab_bin:-qlab}" quantize --help 2>/dev/null | awk '
        /--type T/ { f = 1 } f { for (i = 1; i <= NF; i++) if ($i ~ /^[A-Z][A-Z0-9_]+$/) print $i }
        f && /--head-type/ { exit }' | sort -u
}

_qlab() {
    local cur prev words cword
    if declare -F _init_completion >/dev/null; then
        _init_completion || return
    else
        cur=${COMP_WORDS[COMP_CWORD]}
        prev=${COMP_WORDS[COMP_CWORD - 1]}
        words=("${COMP_WORDS[@]}")
        cword=$COMP_CWORD
    fi
    _qlab_bin=${words[0]}
    if ((cword == 1)); then
        mapfile -t COMPREPLY < <(compgen -W "$(_qlab_commands) --help --version" -- "$cur")
        return
    fi
    local -a cmd=("${words[1]}")
    case ${words[1]} in
    bench) [[ ${words[2]:-} == @(quant|act|forward) ]] && ((cword > 2)) && cmd+=("${words[2]}") ;;
    data) [[ ${words[2]:-} == @(list|verify) ]] && ((cword > 2)) && cmd+=("${words[2]}") ;;
    esac
    if ((cword == 2)) && [[ ${words[1]} == bench ]]; then
        mapfile -t COMPREPLY < <(compgen -W "quant act forward --help" -- "$cur")
        return
    fi
    if ((cword == 2)) && [[ ${words[1]} == data ]]; then
        mapfile -t COMPREPLY < <(compgen -W "list verify --help" -- "$cur")
        return
    fi
    case $prev in
    --type | --head-type | --embd-type | --output-tensor-type | --token-embedding-type)
        mapfile -t COMPREPLY < <(compgen -W "$(_qlab_types) same" -- "$cur")
        return
        ;;
    --kv-type)
        mapfile -t COMPREPLY < <(compgen -W "f32 f16 q8_0 q4_0" -- "$cur")
        return
        ;;
    --act-mode)
        mapfile -t COMPREPLY < <(compgen -W "f32 native q8_0 q8_1 q8_K q8x2" -- "$cur")
        return
        ;;
    --format)
        mapfile -t COMPREPLY < <(compgen -W "dat gguf" -- "$cur")
        return
        ;;
    esac
    if [[ $cur == -* ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$(_qlab_options "${cmd[@]}")" -- "$cur")
        return
    fi
    if [[ ${words[1]} == sweep ]]; then
        mapfile -t COMPREPLY < <(compgen -f -X '!*.sweep' -- "$cur"; compgen -d -- "$cur")
    else
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    fi
}
complete -o filenames -o bashdefault -F _qlab qlab
