#!/bin/sh
# Downloads named entries of datasets/manifest.tsv into datasets/cache/<file> and checks
# their size and sha256 against the manifest. qlab finds files there by name (see
# core/base/data.h for the search order), so after a fetch `qlab data verify NAME` passes.
#
#   datasets/fetch.sh NAME...            fetch from the entry's source URL
#   datasets/fetch.sh --list             which entries can be fetched directly
#   QLAB_MIRROR=URL datasets/fetch.sh NAME...
#                                        fetch <URL>/<file> instead, from a mirror laid out
#                                        like ../shared (models/, datasets/, golden/)
#
# An entry whose source column is one URL is downloaded from that URL. An entry whose
# source describes how the file was derived (a split, a slice, a file inside an archive)
# cannot be fetched directly: the script says so and where to put the file once made,
# unless QLAB_MIRROR is set. Nothing is left under the final name unless its sha256
# matches. Exit codes: 0 all fetched (or already present), 1 a fetch failed, 2 usage.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=${QLAB_ROOT:-$(dirname "$here")}
manifest="$root/datasets/manifest.tsv"
cache="$root/datasets/cache"

usage() {
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
}

[ -f "$manifest" ] || { echo "fetch.sh: no manifest at $manifest" >&2; exit 1; }
command -v curl >/dev/null || { echo "fetch.sh: curl is not installed" >&2; exit 1; }
command -v sha256sum >/dev/null || { echo "fetch.sh: sha256sum is not installed" >&2; exit 1; }

# The manifest row of a name, tab-separated: name kind file sha256 bytes source license.
row_of() {
    awk -F '\t' -v n="$1" '!/^#/ && $1 == n { print; found = 1; exit } END { exit !found }' \
        "$manifest"
}

# The source column when it is exactly one URL (https, http, or file for local
# mirrors), else nothing.
direct_url() {
    case "$1" in
    http://* | https://* | file://*)
        case "$1" in *' '*) ;; *) printf '%s\n' "$1" ;; esac ;;
    esac
}

sha_of() {
    sha256sum "$1" | cut -d ' ' -f 1
}

size_of() {
    wc -c <"$1" | tr -d ' '
}

if [ $# -eq 0 ]; then
    usage
fi
case "$1" in
-h | --help) usage ;;
--list)
    awk -F '\t' '!/^#/ && NF == 7 { print $1 "\t" $6 }' "$manifest" |
        while IFS="$(printf '\t')" read -r name source; do
            if [ -n "$(direct_url "$source")" ] || [ -n "${QLAB_MIRROR:-}" ]; then
                printf '%-28s fetchable\n' "$name"
            else
                printf '%-28s derived: %s\n' "$name" "$source"
            fi
        done
    exit 0 ;;
-*) echo "fetch.sh: unknown option '$1'" >&2; usage ;;
esac

status=0
for name in "$@"; do
    if ! row=$(row_of "$name"); then
        echo "fetch.sh: '$name' is not in $manifest (try --list)" >&2
        status=1
        continue
    fi
    file=$(printf '%s\n' "$row" | cut -f 3)
    sha=$(printf '%s\n' "$row" | cut -f 4)
    bytes=$(printf '%s\n' "$row" | cut -f 5)
    source=$(printf '%s\n' "$row" | cut -f 6)
    dest="$cache/$file"
    case "$file" in
    /usr/*)
        # A file a Debian package installs: apt installs it, fetch.sh does not.
        if [ -f "$file" ] && [ "$(sha_of "$file")" = "$sha" ]; then
            echo "$name: installed at $file"
        else
            echo "fetch.sh: $name is $file from a Debian package: $source" >&2
            echo "  install the package (apt-get install it), or put a copy in \$QLAB_DATA" >&2
            status=1
        fi
        continue
        ;;
    esac

    if [ -f "$dest" ] && [ "$(size_of "$dest")" = "$bytes" ] && [ "$(sha_of "$dest")" = "$sha" ]; then
        echo "$name: already present at $dest"
        continue
    fi
    if [ -n "${QLAB_MIRROR:-}" ]; then
        url="${QLAB_MIRROR%/}/$file"
    else
        url=$(direct_url "$source")
    fi
    if [ -z "$url" ]; then
        echo "fetch.sh: $name cannot be downloaded directly; its source is:" >&2
        echo "  $source" >&2
        echo "  make the file as described (sha256 $sha, $bytes bytes), put it at" >&2
        echo "  $dest, then run 'qlab data verify $name'" >&2
        echo "  (or set QLAB_MIRROR to a mirror laid out like ../shared)" >&2
        status=1
        continue
    fi

    mkdir -p "$(dirname "$dest")"
    part="$dest.part.$$"
    echo "$name: downloading $url"
    if ! curl --fail --location --retry 3 --connect-timeout 30 --show-error --progress-bar \
        --output "$part" "$url"; then
        rm -f "$part"
        echo "fetch.sh: $name: download from $url failed" >&2
        status=1
        continue
    fi
    got_bytes=$(size_of "$part")
    got_sha=$(sha_of "$part")
    if [ "$got_bytes" != "$bytes" ] || [ "$got_sha" != "$sha" ]; then
        rm -f "$part"
        echo "fetch.sh: $name: downloaded file does not match the manifest:" >&2
        echo "  expected $bytes bytes, sha256 $sha" >&2
        echo "  got      $got_bytes bytes, sha256 $got_sha" >&2
        status=1
        continue
    fi
    mv "$part" "$dest"
    echo "$name: OK ($bytes bytes, sha256 $sha) -> $dest"
done
exit $status
