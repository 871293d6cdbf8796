#!/bin/sh
# Build the tiny-MLA corpora from Debian 12 documentation / source packages.
#
# Run on the development machine (Debian 12, apt sources reachable), from any
# directory:   sh experiments/tiny-mla/prepare_corpus.sh
#
# Writes
#   .corpus/prose.train.txt.xz .corpus/code.train.txt.xz   (git-ignored; carried
#                                                           to the device with carry=[".corpus"])
#   data/heldout/prose.txt.gz data/heldout/code.txt.gz data/heldout/manifest.json
#   experiments/tiny-mla/corpus-provenance.json
#
# Package versions are pinned (bookworm + bookworm-security as of 2026-11);
# QMLA_CORPUS_UNPINNED=1 takes the current candidates instead (the provenance
# file records what was used either way).  Needs: apt-get, dpkg-deb,
# sha256sum, /usr/bin/python3 (stdlib only).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=${QMLA_CORPUS_WORK:-/tmp/qmla-corpus-work}

PKGS="linux-doc-6.1=6.1.192-3
python3.11-doc=3.11.2-6+deb12u9
postgresql-doc-15=15.20-0+deb12u1
sqlite3-doc=3.40.1-2+deb12u2
git-doc=1:2.39.5-0+deb12u3
perl-doc=5.36.0-7+deb12u4
glibc-source=2.36-9+deb12u14
libpython3.11-stdlib=3.11.2-6+deb12u9
libpython3.11-testsuite=3.11.2-6+deb12u9
linux-libc-dev=6.1.192-3"

rm -rf "$work"
mkdir -p "$work/debs" "$work/unpacked"
cd "$work/debs"
for spec in $PKGS; do
    name=${spec%%=*}
    if [ "${QMLA_CORPUS_UNPINNED:-0}" = 1 ]; then
        apt-get download "$name"
    else
        apt-get download "$spec"
    fi
done

# package -> version, file, sha256, size  (json, built by python for quoting)
: > "$work/debs.tsv"
for spec in $PKGS; do
    name=${spec%%=*}
    deb=$(ls "$work/debs/${name}_"*.deb)
    ver=$(dpkg-deb -f "$deb" Version)
    arch=$(dpkg-deb -f "$deb" Architecture)
    sum=$(sha256sum "$deb" | cut -d' ' -f1)
    size=$(stat -c %s "$deb")
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$ver" "$arch" "$(basename "$deb")" "$sum" "$size" >> "$work/debs.tsv"
    mkdir -p "$work/unpacked/$name"
    dpkg-deb -x "$deb" "$work/unpacked/$name"
done
/usr/bin/python3 - "$work/debs.tsv" "$work/debs.json" <<'EOF'
import json, sys
out = {}
for line in open(sys.argv[1]):
    n, v, a, f, s, z = line.rstrip("\n").split("\t")
    out[n] = {"version": v, "architecture": a, "deb": f, "sha256": s, "deb_bytes": int(z)}
json.dump(out, open(sys.argv[2], "w"), indent=1, sort_keys=True)
EOF

/usr/bin/python3 "$here/build_corpus.py" \
    --unpacked "$work/unpacked" --debs "$work/debs.json" \
    --train-out "$repo/.corpus" --heldout-out "$repo/data/heldout" \
    --provenance "$here/corpus-provenance.json"

ls -l "$repo/.corpus" "$repo/data/heldout"
rm -rf "$work"
