#!/usr/bin/python3
"""Build the tiny-MLA training / held-out corpora from unpacked Debian packages.

Called by prepare_corpus.sh (which downloads and unpacks the .deb files);
stdlib only, so it runs under Debian's /usr/bin/python3.

Two corpora:
  prose  English documentation prose (kernel rst/txt, Python rst sources,
         PostgreSQL and SQLite HTML converted to text, git asciidoc, perl pod)
  code   source code (glibc C sources and headers, Python stdlib + test
         suite, Linux UAPI headers)

Every input file is one document.  Documents are ordered by (package, path),
split into train / held-out by a hash of "corpus:package:path" (disjoint by
document), and written as one byte stream per split: each document's text
(UTF-8, LF line ends, ending in one newline) followed by one empty line.

Outputs:
  <out>/prose.train.txt.xz, <out>/code.train.txt.xz          (git-ignored)
  <heldout>/prose.txt.gz, <heldout>/code.txt.gz, manifest.json (committed)
  <provenance json>
"""
import argparse
import gzip
import hashlib
import html.parser
import io
import json
import lzma
import os
import re
import sys
import tarfile

MAX_DOC_BYTES = 1 << 20      # skip single files above 1 MiB (tables, changelogs)
MIN_DOC_BYTES = 200          # skip stubs
HELDOUT_FRACTION = 0.05      # candidate fraction by hash
HELDOUT_CAP = 2_000_000      # raw bytes of held-out text per corpus
SEP = "\n"                   # after each document's final newline: one empty line


# --------------------------------------------------------------------------
# HTML -> text
class _Html2Text(html.parser.HTMLParser):
    BLOCK = {"p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "li", "tr", "table",
             "pre", "br", "dt", "dd", "dl", "ul", "ol", "blockquote", "hr",
             "section", "article", "header", "footer", "caption", "figure",
             "title", "body", "html", "center", "form"}
    DROP = {"script", "style", "head", "noscript", "svg", "button", "select",
            "textarea"}
    DROP_CLASSES = {"navheader", "navfooter", "nosearch", "menu", "mainmenu",
                    "submenu", "searchmenu", "toc", "fancy_toc", "sphinxsidebar",
                    "related", "footer"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out = []
        self.skip_tag = None
        self.skip_depth = 0
        self.pre = 0

    def _nl(self, n=1):
        self.out.append("\n" * n)

    def handle_starttag(self, tag, attrs):
        if self.skip_tag is not None:
            if tag == self.skip_tag:
                self.skip_depth += 1
            return
        cls = ""
        for k, v in attrs:
            if k == "class" and v:
                cls = v
        if tag in self.DROP or (cls and set(cls.split()) & self.DROP_CLASSES):
            if tag in ("br", "hr", "img", "input", "meta", "link"):
                return
            self.skip_tag, self.skip_depth = tag, 1
            return
        if tag == "pre":
            self.pre += 1
            self._nl(2)
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6", "p", "table", "dl",
                     "ul", "ol", "blockquote"):
            self._nl(2)
        elif tag == "li":
            self._nl()
            self.out.append("- ")
        elif tag in self.BLOCK:
            self._nl()
        elif tag in ("td", "th"):
            self.out.append(" ")

    def handle_endtag(self, tag):
        if self.skip_tag is not None:
            if tag == self.skip_tag:
                self.skip_depth -= 1
                if self.skip_depth == 0:
                    self.skip_tag = None
            return
        if tag == "pre":
            self.pre = max(0, self.pre - 1)
            self._nl(2)
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6", "p", "table", "dl",
                     "ul", "ol", "blockquote"):
            self._nl(2)
        elif tag in self.BLOCK:
            self._nl()

    def handle_data(self, data):
        if self.skip_tag is not None:
            return
        if self.pre:
            self.out.append(data)
        else:
            self.out.append(re.sub(r"[ \t\r\n\f\v]+", " ", data))

    def text(self):
        s = "".join(self.out)
        lines = [ln.rstrip() for ln in s.split("\n")]
        # strip a single leading space that inline collapsing leaves behind
        lines = [ln[1:] if ln.startswith(" ") and not ln.startswith("  ") else ln
                 for ln in lines]
        s = "\n".join(lines)
        s = re.sub(r"\n{3,}", "\n\n", s)
        return s.strip("\n") + "\n"


def html_to_text(s):
    p = _Html2Text()
    p.feed(s)
    p.close()
    return p.text()


# --------------------------------------------------------------------------
# sources: (corpus, package, how to enumerate documents)
def _walk(root, sub):
    base = os.path.join(root, sub)
    out = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for fn in sorted(filenames):
            p = os.path.join(dirpath, fn)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            out.append(os.path.relpath(p, root))
    return sorted(out)


def _read(root, rel):
    with open(os.path.join(root, rel), "rb") as f:
        data = f.read()
    if rel.endswith(".gz"):
        data = gzip.decompress(data)
    return data


def docs_fs(root, sub, pattern, convert=None, exclude=None):
    rx = re.compile(pattern)
    ex = re.compile(exclude) if exclude else None
    for rel in _walk(root, sub):
        if not rx.search(rel) or (ex and ex.search(rel)):
            continue
        yield rel, _read(root, rel), convert


def docs_tar(root, tar_rel, pattern, exclude=None):
    rx = re.compile(pattern)
    ex = re.compile(exclude) if exclude else None
    with tarfile.open(os.path.join(root, tar_rel), "r:xz") as tf:
        members = [m for m in tf.getmembers() if m.isfile()]
        members.sort(key=lambda m: m.name)
        for m in members:
            if not rx.search(m.name) or (ex and ex.search(m.name)):
                continue
            if m.size > MAX_DOC_BYTES:
                yield tar_rel + ":" + m.name, None, None
                continue
            yield tar_rel + ":" + m.name, tf.extractfile(m).read(), None


SOURCES = [
    # ---- prose
    ("prose", "linux-doc-6.1",
     lambda r: docs_fs(r, "usr/share/doc/linux-doc-6.1/Documentation",
                       r"\.(rst|txt)\.gz$")),
    ("prose", "python3.11-doc",
     lambda r: docs_fs(r, "usr/share/doc/python3.11/html/_sources",
                       r"\.rst\.txt$")),
    ("prose", "postgresql-doc-15",
     lambda r: docs_fs(r, "usr/share/doc/postgresql-doc-15/html", r"\.html$",
                       convert="html")),
    ("prose", "sqlite3-doc",
     lambda r: docs_fs(r, "usr/share/doc/sqlite3", r"\.html$", convert="html")),
    ("prose", "git-doc",
     lambda r: docs_fs(r, "usr/share/doc/git-doc", r"\.txt$")),
    ("prose", "perl-doc",
     lambda r: docs_fs(r, "usr/share/perl", r"\.pod$")),
    # ---- code
    ("code", "glibc-source",
     lambda r: docs_tar(r, "usr/src/glibc/glibc-2.36.tar.xz", r"\.(c|h|sh)$",
                        exclude=r"/(localedata|iconvdata|po)/")),
    ("code", "libpython3.11-stdlib",
     lambda r: docs_fs(r, "usr/lib/python3.11", r"\.py$")),
    ("code", "libpython3.11-testsuite",
     lambda r: docs_fs(r, "usr/lib/python3.11/test", r"\.py$")),
    ("code", "linux-libc-dev",
     lambda r: docs_fs(r, "usr/include", r"\.h$")),
]


def normalise(raw, convert):
    """bytes -> str or None (not UTF-8)."""
    try:
        s = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if convert == "html":
        s = html_to_text(s)
    s = s.replace("\r\n", "\n").replace("\r", "\n")
    s = s.replace("\x00", "")
    s = s.strip("\n")
    if not s.strip():
        return ""
    return s + "\n"


def hash_unit(corpus, pkg, path):
    h = hashlib.sha256(f"{corpus}:{pkg}:{path}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2.0 ** 64, h.hex()[:16]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--unpacked", required=True, help="dir with one subdir per package")
    ap.add_argument("--debs", required=True, help="json: package -> {version, deb, sha256, size}")
    ap.add_argument("--train-out", required=True)
    ap.add_argument("--heldout-out", required=True)
    ap.add_argument("--provenance", required=True)
    a = ap.parse_args()

    with open(a.debs) as f:
        debs = json.load(f)
    os.makedirs(a.train_out, exist_ok=True)
    os.makedirs(a.heldout_out, exist_ok=True)

    prov = {"generator": "experiments/tiny-mla/prepare_corpus.sh + build_corpus.py",
            "format": ("each split is one UTF-8 byte stream: documents (one input file each, "
                       "LF line ends, ending in a newline) each followed by one empty line"),
            "split": (f"by document: sha256('corpus:package:path')[:8]/2^64 < {HELDOUT_FRACTION} "
                      f"are held-out candidates; candidates in hash order are held out until "
                      f"{HELDOUT_CAP} bytes per corpus, the rest of the candidates go to train"),
            "filters": {"max_doc_bytes": MAX_DOC_BYTES, "min_doc_bytes": MIN_DOC_BYTES,
                        "non_utf8": "skipped"},
            "packages": {}, "corpora": {}}
    manifest = {}

    for corpus in ("prose", "code"):
        docs = []   # (pkg, path, text)
        for c, pkg, gen in SOURCES:
            if c != corpus:
                continue
            root = os.path.join(a.unpacked, pkg)
            st = {"files_seen": 0, "documents": 0, "bytes": 0, "skipped_non_utf8": 0,
                  "skipped_too_large": 0, "skipped_too_small": 0}
            for rel, raw, conv in gen(root):
                st["files_seen"] += 1
                if raw is None or len(raw) > MAX_DOC_BYTES:
                    st["skipped_too_large"] += 1
                    continue
                s = normalise(raw, conv)
                if s is None:
                    st["skipped_non_utf8"] += 1
                    continue
                b = s.encode("utf-8")
                if len(b) < MIN_DOC_BYTES:
                    st["skipped_too_small"] += 1
                    continue
                st["documents"] += 1
                st["bytes"] += len(b)
                docs.append((pkg, rel, b))
            info = dict(debs[pkg])
            info["corpus"] = corpus
            info.update(st)
            prov["packages"][pkg] = info
            print(f"[{corpus}] {pkg}: {st}", file=sys.stderr)

        # split
        keyed = []
        for pkg, rel, b in docs:
            u, hx = hash_unit(corpus, pkg, rel)
            keyed.append((u, hx, pkg, rel, b))
        cands = sorted([k for k in keyed if k[0] < HELDOUT_FRACTION], key=lambda k: k[0])
        held, held_bytes = set(), 0
        for u, hx, pkg, rel, b in cands:
            if held_bytes + len(b) + 1 > HELDOUT_CAP:
                continue
            held.add((pkg, rel))
            held_bytes += len(b) + 1
        train_parts, held_parts = [], []
        held_list = []
        for pkg, rel, b in docs:          # original (package, path) order
            if (pkg, rel) in held:
                held_parts.append(b)
                held_parts.append(SEP.encode())
                held_list.append({"package": pkg, "path": rel, "bytes": len(b)})
            else:
                train_parts.append(b)
                train_parts.append(SEP.encode())
        train = b"".join(train_parts)
        heldout = b"".join(held_parts)

        tpath = os.path.join(a.train_out, f"{corpus}.train.txt.xz")
        with open(tpath, "wb") as f:
            f.write(lzma.compress(train, format=lzma.FORMAT_XZ, preset=6,
                                  check=lzma.CHECK_CRC64))
        hpath = os.path.join(a.heldout_out, f"{corpus}.txt.gz")
        bio = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=bio, compresslevel=9,
                           mtime=0) as g:
            g.write(heldout)
        with open(hpath, "wb") as f:
            f.write(bio.getvalue())

        def sha(p):
            with open(p, "rb") as f:
                return hashlib.sha256(f.read()).hexdigest()

        prov["corpora"][corpus] = {
            "documents": len(docs),
            "train": {"documents": len(docs) - len(held), "bytes": len(train),
                      "sha256_uncompressed": hashlib.sha256(train).hexdigest(),
                      "file": f".corpus/{corpus}.train.txt.xz",
                      "compressed_bytes": os.path.getsize(tpath),
                      "sha256_file": sha(tpath)},
            "heldout": {"documents": len(held), "bytes": len(heldout),
                        "sha256_uncompressed": hashlib.sha256(heldout).hexdigest(),
                        "file": f"data/heldout/{corpus}.txt.gz",
                        "compressed_bytes": os.path.getsize(hpath),
                        "sha256_file": sha(hpath)},
        }
        manifest[corpus] = held_list
        print(f"[{corpus}] train {len(train)} B, held-out {len(heldout)} B "
              f"({len(held)} docs)", file=sys.stderr)

    with open(a.provenance, "w") as f:
        json.dump(prov, f, indent=1, sort_keys=True)
        f.write("\n")
    with open(os.path.join(a.heldout_out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
