#!/bin/sh
# datasets/fetch.sh without the internet: curl fetches file:// URLs, so a temporary
# tree stands in for the download site. Covers a direct URL, a mirror, a sha256
# mismatch (nothing left under the final name), a derived entry, an unknown name,
# and that qlab then finds and verifies the fetched file by name.
set -u
qlab="$1"
fetch="$QLAB_SOURCE_ROOT/datasets/fetch.sh"
command -v curl >/dev/null || { echo "SKIP: curl not installed"; exit 77; }
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }

mkdir -p "$t/site/texts" "$t/root/datasets"
printf 'hello qlab\n' >"$t/site/texts/a.txt"
printf 'second file\n' >"$t/site/texts/b.txt"
sha_a=$(sha256sum "$t/site/texts/a.txt" | cut -d ' ' -f 1)
sha_b=$(sha256sum "$t/site/texts/b.txt" | cut -d ' ' -f 1)
zero=0000000000000000000000000000000000000000000000000000000000000000
{
    printf '# test manifest\n'
    printf 'a\ttext\ttexts/a.txt\t%s\t11\tfile://%s/site/texts/a.txt\tCC0\n' "$sha_a" "$t"
    printf 'wrong\ttext\ttexts/a.txt\t%s\t11\tfile://%s/site/texts/a.txt\tCC0\n' "$zero" "$t"
    printf 'derived\ttext\ttexts/b.txt\t%s\t12\thttps://example.org/x (first 12 bytes)\tCC0\n' "$sha_b"
} >"$t/root/datasets/manifest.tsv"
export QLAB_ROOT="$t/root"
unset QLAB_DATA QLAB_MIRROR

"$fetch" a >"$t/log" 2>&1 && [ -f "$t/root/datasets/cache/texts/a.txt" ] && ok "direct URL" ||
    { bad "direct URL"; cat "$t/log"; }
"$fetch" a 2>&1 | grep -q "already present" && ok "second fetch is a no-op" || bad "second fetch"
"$qlab" data verify a >/dev/null 2>&1 && ok "qlab verifies the fetched file" || bad "qlab verify a"

rm -rf "$t/root/datasets/cache"
# qlab data with the cache gone: list says missing; verify without names lists the
# missing entries but passes, verify of a named missing entry fails with the places looked.
"$qlab" data list >"$t/log" 2>&1 && grep -q '^a .* missing' "$t/log" && ok "data list: missing" ||
    { bad "data list"; cat "$t/log"; }
"$qlab" data verify >"$t/log" 2>&1 && grep -q '^missing  a' "$t/log" &&
    ok "data verify: missing entries do not fail" || { bad "data verify (all)"; cat "$t/log"; }
"$qlab" data verify a >"$t/log" 2>&1
[ $? -eq 1 ] && grep -q "looked in:" "$t/log" && grep -q "datasets/fetch.sh a" "$t/log" &&
    ok "data verify NAME: missing fails and says where it looked" ||
    { bad "data verify a (missing)"; cat "$t/log"; }
if "$fetch" wrong >"$t/log" 2>&1; then bad "sha256 mismatch accepted"; else
    grep -q "expected 11 bytes, sha256 $zero" "$t/log" && ok "sha256 mismatch reported" ||
        { bad "mismatch message"; cat "$t/log"; }
fi
[ -z "$(ls -A "$t/root/datasets/cache/texts" 2>/dev/null)" ] && ok "nothing left after a mismatch" ||
    bad "files left after a mismatch: $(ls "$t/root/datasets/cache/texts")"

if "$fetch" derived >"$t/log" 2>&1; then bad "derived entry fetched without a mirror"; else
    grep -q "cannot be downloaded directly" "$t/log" && grep -q "$t/root/datasets/cache/texts/b.txt" "$t/log" &&
        ok "derived entry explains where to put the file" || { bad "derived message"; cat "$t/log"; }
fi
QLAB_MIRROR="file://$t/site/" "$fetch" derived >"$t/log" 2>&1 &&
    cmp -s "$t/site/texts/b.txt" "$t/root/datasets/cache/texts/b.txt" && ok "mirror" ||
    { bad "mirror"; cat "$t/log"; }
"$fetch" nope >/dev/null 2>&1; [ $? -eq 1 ] && ok "unknown name exits 1" || bad "unknown name"
"$fetch" --bogus >/dev/null 2>&1; [ $? -eq 2 ] && ok "unknown option exits 2" || bad "unknown option"
"$fetch" --list | grep -q '^derived .*derived: https://example.org/x' && ok "--list" || bad "--list"
exit $fail
