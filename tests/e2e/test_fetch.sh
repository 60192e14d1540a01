#!/bin/sh
# datasets/fetch.sh without the internet: curl fetches file:// URLs, so a temporary
# tree stands in for the download site. Covers a direct URL, a mirror, a sha256
# mismatch (nothing left under the final name), a derived entry, an unknown name,
# and that qlab then finds and verifies the fetched file by name.
set -u
qlab="$1"
# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
fetch="$QLAB_SOURCE_ROOT/datasets/fetch.sh"
command -v curl >/dev/null || skip "curl not installed"

mkdir -p "$tmp/site/texts" "$tmp/root/datasets"
printf 'hello qlab\n' >"$tmp/site/texts/a.txt"
printf 'second file\n' >"$tmp/site/texts/b.txt"
sha_a=$(sha256sum "$tmp/site/texts/a.txt" | cut -d ' ' -f 1)
sha_b=$(sha256sum "$tmp/site/texts/b.txt" | cut -d ' ' -f 1)
zero=0000000000000000000000000000000000000000000000000000000000000000
{
    printf '# test manifest\n'
    printf 'a\ttext\ttexts/a.txt\t%s\t11\tfile://%s/site/texts/a.txt\tCC0\n' "$sha_a" "$tmp"
    printf 'wrong\ttext\ttexts/a.txt\t%s\t11\tfile://%s/site/texts/a.txt\tCC0\n' "$zero" "$tmp"
    printf 'derived\ttext\ttexts/b.txt\t%s\t12\thttps://example.org/x (first 12 bytes)\tCC0\n' "$sha_b"
} >"$tmp/root/datasets/manifest.tsv"
export QLAB_ROOT="$tmp/root"
unset QLAB_DATA QLAB_MIRROR

"$fetch" a >"$tmp/log" 2>&1 && [ -f "$tmp/root/datasets/cache/texts/a.txt" ] && ok "direct URL" ||
    { bad "direct URL"; cat "$tmp/log"; }
"$fetch" a 2>&1 | grep -q "already present" && ok "second fetch is a no-op" || bad "second fetch"
"$qlab" data verify a >/dev/null 2>&1 && ok "qlab verifies the fetched file" || bad "qlab verify a"

rm -rf "$tmp/root/datasets/cache"
# qlab data with the cache gone: list says missing; verify without names lists the
# missing entries but passes, verify of a named missing entry fails with the places looked.
"$qlab" data list >"$tmp/log" 2>&1 && grep -q '^a .* missing' "$tmp/log" && ok "data list: missing" ||
    { bad "data list"; cat "$tmp/log"; }
"$qlab" data verify >"$tmp/log" 2>&1 && grep -q '^missing  a' "$tmp/log" &&
    ok "data verify: missing entries do not fail" || { bad "data verify (all)"; cat "$tmp/log"; }
"$qlab" data verify a >"$tmp/log" 2>&1
[ $? -eq 1 ] && grep -q "looked in:" "$tmp/log" && grep -q "datasets/fetch.sh a" "$tmp/log" &&
    ok "data verify NAME: missing fails and says where it looked" ||
    { bad "data verify a (missing)"; cat "$tmp/log"; }
if "$fetch" wrong >"$tmp/log" 2>&1; then bad "sha256 mismatch accepted"; else
    grep -q "expected 11 bytes, sha256 $zero" "$tmp/log" && ok "sha256 mismatch reported" ||
        { bad "mismatch message"; cat "$tmp/log"; }
fi
[ -z "$(ls -A "$tmp/root/datasets/cache/texts" 2>/dev/null)" ] && ok "nothing left after a mismatch" ||
    bad "files left after a mismatch: $(ls "$tmp/root/datasets/cache/texts")"

if "$fetch" derived >"$tmp/log" 2>&1; then bad "derived entry fetched without a mirror"; else
    grep -q "cannot be downloaded directly" "$tmp/log" && grep -q "$tmp/root/datasets/cache/texts/b.txt" "$tmp/log" &&
        ok "derived entry explains where to put the file" || { bad "derived message"; cat "$tmp/log"; }
fi
QLAB_MIRROR="file://$tmp/site/" "$fetch" derived >"$tmp/log" 2>&1 &&
    cmp -s "$tmp/site/texts/b.txt" "$tmp/root/datasets/cache/texts/b.txt" && ok "mirror" ||
    { bad "mirror"; cat "$tmp/log"; }
"$fetch" nope >/dev/null 2>&1; [ $? -eq 1 ] && ok "unknown name exits 1" || bad "unknown name"
"$fetch" --bogus >/dev/null 2>&1; [ $? -eq 2 ] && ok "unknown option exits 2" || bad "unknown option"
"$fetch" --list | grep -q '^derived .*derived: https://example.org/x' && ok "--list" || bad "--list"
exit $fail
