#!/usr/bin/env bash
# tests/cli/test_figures.sh — `qmla export`, `qmla show` and `qmla figures` end to
# end, on small results files made here (two synthetic sweeps, plus files
# edited with h5py: extra tables, units/descriptions, odd strings, a model the
# paper has, a file lacking /responses):
#  - every exported table (tsv, csv, md, json) equals the HDF5 data read by
#    h5py, every row and column, exactly; the provenance equals the root
#    attributes; units and descriptions are carried;
#  - responses_by_layer equals an independent NumPy computation, and its
#    response means equal /summary;
#  - `qmla show` prints the table `qmla sweep -v` printed;
#  - every figure renders as a valid PNG (header + IHDR size), SVG and PDF of
#    the size the figure table gives; Table 4 holds the summary attributes and
#    the paper's row beside a matching model;
#  - a file lacking a figure's data gives the "needs ..." line and no figure;
#  - bad or missing files give exit 2 and a message naming the file.
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT, QMLA_PYTHON. Needs gnuplot
# (gnuplot-nox) and /usr/bin/python3 with numpy + h5py.
set -u
. "$(dirname "$0")/../support/cli_lib.sh"
# python check: prints "ok N" or FAIL lines; counted here
pycheck() {
  local what=$1; shift
  "$PY" "$@" >"$work/py" 2>&1
  local rc=$?
  local n; n=$(grep -c '^ok' "$work/py")
  pass=$((pass + n))
  if [ $rc != 0 ] || grep -q '^FAIL' "$work/py"; then
    fail=$((fail + 1)); echo "FAIL: $what" >&2; grep -v '^ok' "$work/py" | head -20 | sed 's/^/    /' >&2
  fi
}

need_python
command -v gnuplot >/dev/null || { echo "FAIL: gnuplot not found (apt-get install gnuplot-nox)"; echo "0 passed, 1 failed"; exit 1; }

# --- small results files -----------------------------------------------------
expect 0 "synth A" -- "$QMLA" synth -o "$work/capA.h5" --seed 3 --tokens 40 --seqs 2 --cells 2
expect 0 "synth B" -- "$QMLA" synth -o "$work/capB.h5" --seed 5 --tokens 40 --seqs 3 --cells 1
expect 0 "sweep A" -- "$QMLA" sweep "$work/capA.h5" -o "$work/A.h5" --threads 2 -v
cp "$work/out" "$work/sweepA.txt"
expect 0 "sweep B (nu 1e-3)" -- "$QMLA" sweep "$work/capB.h5" -o "$work/B.h5" --threads 2 --nmse 0.001
# C: A plus an extra table of odd types and strings, units and descriptions
cp "$work/A.h5" "$work/C.h5"
"$PY" - "$work/C.h5" <<'EOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    f["responses/nmse_out"].attrs["units"] = "1"
    f["responses/nmse_out"].attrs["description"] = "output NMSE, tab\there"
    g = f.create_group("extra")
    g.create_dataset("id", data=np.array([1, 2, 3, 4], dtype=np.uint16))
    g.create_dataset("neg", data=np.array([-5, 0, 7, -2**40], dtype=np.int64))
    g.create_dataset("x32", data=np.array([0.1, -2.5, 1e-30, 3.0], dtype=np.float32))
    g.create_dataset("xnf", data=np.array([np.nan, np.inf, -np.inf, 0.0]))
    g.create_dataset("fixed", data=np.array([b"ab", b"c", b"", b"defgh"], dtype="S5"))
    g.create_dataset("text", data=["plain", "tab\tcomma,quote\"", "new\nline|pipe", "ünïcødé ν"],
                     dtype=h5py.string_dtype())
    g["x32"].attrs["units"] = "s"
    g.attrs["note"] = "extra table"
    g.attrs["vec"] = np.array([1.5, 2.5])
    f.attrs["odd"] = "comma, \"quote\" and\ttab"
EOF
# D: the summary of A under a model the paper has, and no /responses
cp "$work/A.h5" "$work/D.h5"
"$PY" - "$work/D.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    del f["responses"]
    f.attrs["model"] = "deepseek-ai/DeepSeek-V2-Lite"
EOF

# --- export equals the HDF5 data ---------------------------------------------
for t in responses summary extra; do
  for fmt in tsv csv md json; do
    expect 0 "export C $t $fmt" -- "$QMLA" export "$work/C.h5" --table $t --format $fmt -o "$work/C.$t.$fmt"
  done
done
"$QMLA" export "$work/C.h5" --table summary > "$work/stdout.tsv" 2>&1
if cmp -s "$work/stdout.tsv" "$work/C.summary.tsv"; then ok; else bad "export to stdout differs from -o"; fi
cat > "$work/check_export.py" <<'EOF'
import csv, io, json, math, sys, h5py, numpy as np
path, d = sys.argv[1], sys.argv[2]
f = h5py.File(path, "r")

def want_cols(g):
    cols = []
    for name in g:            # order is checked separately (creation order)
        ds = g[name]
        v = ds[...]
        if v.dtype.kind in "SO":
            v = [x.decode() if isinstance(x, bytes) else x for x in v.tolist()]
        cols.append((name, v))
    return dict(cols)

def same_num(text, x):
    if isinstance(x, (float, np.floating)):
        if math.isnan(x):
            return text in ("nan", None)
        if math.isinf(x):
            return text == ("inf" if x > 0 else "-inf") or text is None
        return float(text) == float(x)
    return int(text) == int(x)

def check_rows(t, header, rows, fmt, unescape=lambda s: s):
    g = f[t]
    want = want_cols(g)
    if sorted(header) != sorted(want):
        print("FAIL", t, fmt, "columns", header, "expected", sorted(want)); return
    n = len(next(iter(want.values())))
    if len(rows) != n:
        print("FAIL", t, fmt, "rows", len(rows), "expected", n); return
    bad = 0
    for r, row in enumerate(rows):
        for c, name in enumerate(header):
            x = want[name][r]
            cell = row[c]
            if isinstance(x, str):
                good = unescape(cell) == x
            else:
                good = same_num(cell, x)
            if not good:
                bad += 1
                if bad < 5:
                    print("FAIL", t, fmt, "row", r, "column", name, "found", repr(cell), "expected", repr(x))
    if not bad:
        print("ok", t, fmt, n, "rows x", len(header), "columns")

def root_attr_text(v):
    if isinstance(v, bytes): v = v.decode()
    if isinstance(v, str): return v
    if isinstance(v, np.ndarray): return ", ".join(root_attr_text(x) for x in v.tolist())
    if isinstance(v, (float, np.floating)): return repr(float(v))
    return str(int(v))

def unescape_tsv(s):
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s):
            out.append({"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}[s[i + 1]]); i += 2
        else:
            out.append(s[i]); i += 1
    return "".join(out)

for t in ("responses", "summary", "extra"):
    # tsv
    lines = open(f"{d}/C.{t}.tsv", encoding="utf-8").read().split("\n")
    comments = [l for l in lines if l.startswith("#")]
    data = [l for l in lines if l and not l.startswith("#")]
    header = data[0].split("\t")
    check_rows(t, header, [l.split("\t") for l in data[1:]], "tsv", unescape_tsv)
    # creation order (h5py lists name order): the writer follows the row
    # table of include/qmla/response.h, which starts layer, cell, seq, path
    if t == "responses" and header[:4] != ["layer", "cell", "seq", "path"]:
        print("FAIL responses column order", header[:4])
    # provenance: every root attribute as '# key: value'
    prov = {}
    for l in comments[1:]:
        k, _, v = l[2:].partition(": ")
        prov[k] = unescape_tsv(v)
    missing = 0
    for k, v in f.attrs.items():
        got = prov.get(k)
        want = root_attr_text(v)
        if isinstance(v, (float, np.floating)):
            good = got is not None and float(got) == float(v)
        else:
            good = got == want
        if not good:
            missing += 1; print("FAIL", t, "tsv provenance", k, repr(got), "expected", repr(want))
    for k, v in f[t].attrs.items():
        got = prov.get(f"{t}.{k}")
        if got is None:
            missing += 1; print("FAIL", t, "tsv table attribute", k)
        elif not isinstance(v, (str, bytes)) and np.ndim(v) == 0 and float(got) != float(v):
            missing += 1; print("FAIL", t, "tsv table attribute", k, got, v)
    if not missing:
        print("ok", t, "tsv provenance", len(f.attrs), "+", len(f[t].attrs))
    # csv (pandas-style: comment lines, then RFC 4180)
    text = open(f"{d}/C.{t}.csv", encoding="utf-8", newline="").read()
    body = "".join(l for l in io.StringIO(text, newline="").readlines() if not l.startswith("#"))
    rows = list(csv.reader(io.StringIO(body, newline="")))
    check_rows(t, rows[0], rows[1:], "csv")
    # json
    j = json.load(open(f"{d}/C.{t}.json", encoding="utf-8"))
    header = [c["name"] for c in j["columns"]]
    jrows = [[r[h] for h in header] for r in j["rows"]]
    jrows = [[c if isinstance(c, str) or c is None else (repr(c) if isinstance(c, float) else str(c)) for c in r] for r in jrows]
    check_rows(t, header, jrows, "json")
    if j["provenance"].get("model") == f.attrs["model"] and j["table"] == t and j["n_rows"] == len(j["rows"]):
        print("ok", t, "json provenance")
    else:
        print("FAIL", t, "json provenance", j["provenance"].get("model"))
    units = {c["name"]: c["units"] for c in j["columns"]}
    for name in f[t]:
        u = f[t][name].attrs.get("units", "")
        if units[name] != (u.decode() if isinstance(u, bytes) else u):
            print("FAIL", t, "json units of", name, units[name])
    # md: | a | b | rows after the |---| line
    md = [l for l in open(f"{d}/C.{t}.md", encoding="utf-8").read().split("\n") if l.startswith("|")]
    def cells(l):
        parts, cur, i = [], "", 1
        while i < len(l):
            if l[i] == "\\" and i + 1 < len(l) and l[i + 1] == "|":
                cur += "|"; i += 2; continue
            if l[i] == "|":
                parts.append(cur.strip()); cur = ""
            else:
                cur += l[i]
            i += 1
        return parts
    header = [h.split(" [")[0] for h in cells(md[0])]
    mdrows = [cells(l) for l in md[2:]]
    # md turns line breaks into spaces
    want = want_cols(f[t])
    for name in want:
        if len(want[name]) and isinstance(want[name][0], str):
            want[name] = [s.replace("\n", " ").strip() for s in want[name]]
    g_cols = want
    bad = 0
    for r, row in enumerate(mdrows):
        for c, name in enumerate(header):
            x = g_cols[name][r]
            good = row[c] == x if isinstance(x, str) else same_num(row[c], x)
            bad += not good
    print("ok" if bad == 0 and len(mdrows) == len(next(iter(g_cols.values()))) else "FAIL", t, "md", bad, "bad cells")

# units / description line for the annotated column
tsv = open(f"{d}/C.responses.tsv", encoding="utf-8").read()
if "# column nmse_out [1]: output NMSE, tab\\there\n" in tsv:
    print("ok units and description comment line")
else:
    print("FAIL no '# column nmse_out [1]: ...' line")
md = open(f"{d}/C.extra.md", encoding="utf-8").read()
print("ok md units header" if "| x32 [s] |" in md else "FAIL md header lacks 'x32 [s]'")
EOF
pycheck "exported tables equal the HDF5 data" "$work/check_export.py" "$work/C.h5" "$work"

# --- the derived per-layer table ---------------------------------------------
expect 0 "export responses_by_layer" -- "$QMLA" export "$work/A.h5" --table responses_by_layer -o "$work/A.bylayer.tsv"
# --list names every table --table takes, the derived one included, with its size
expect 0 "export --list" -- "$QMLA" export "$work/A.h5" --list
for t in responses summary cells; do contains "^$t " "export --list"; done
nl=$(($(wc -l < "$work/A.bylayer.tsv") - $(grep -c '^#' "$work/A.bylayer.tsv") - 1))
contains "^responses_by_layer *$nl " "export --list (derived table, $nl rows)"
cat > "$work/check_bylayer.py" <<'EOF'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
r = f["responses"]
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[2]) if not l.startswith("#")]
head, body = rows[0], rows[1:]
col = {h: np.array([float(b[i]) for b in body]) for i, h in enumerate(head)}
layer = r["layer"][...]; cell = r["cell"].asstr()[...]; path = r["path"].asstr()[...]
deg = r["degenerate"][...]
layers = sorted(set(layer.tolist()))
bad = 0
for name in r:
    if r[name].dtype.kind != "f":
        continue
    x = r[name][...]
    for p in ("content", "rope"):
        got = col[f"{p}_{name}"]
        for li, L in enumerate(layers):
            cm = []
            for c in sorted(set(cell.tolist())):
                m = (layer == L) & (path == p) & (cell == c) & (deg == 0)
                if m.any():
                    cm.append(x[m].mean())
            want = np.mean(cm)
            if not (abs(got[li] - want) <= 1e-12 * max(abs(want), 1e-300)):
                bad += 1; print("FAIL", p, name, "layer", L, got[li], want)
print("ok by-layer means" if not bad else "FAIL by-layer means")
s = f["summary"]
for p, sc in (("content", "response_content"), ("rope", "response_rope")):
    d = np.abs(col[f"{p}_response"] - s[sc][...]) / np.abs(s[sc][...])
    print("ok", sc, "equals summary" if d.max() <= 1e-12 else "FAIL", sc, d.max())
if col["layer"].tolist() == [float(x) for x in s["layer"][...]]:
    print("ok layers")
else:
    print("FAIL layers", col["layer"])
EOF
pycheck "responses_by_layer equals NumPy" "$work/check_bylayer.py" "$work/A.h5" "$work/A.bylayer.tsv"
# F: unequal sequence counts per cell and a degenerate row (mean over cells
# of the mean over sequences differs from the plain mean; degenerate rows are
# left out); its /summary recomputed by the same rule in NumPy
"$PY" - "$work/A.h5" "$work/F.h5" <<'EOF2'
import sys, h5py, numpy as np
src, dst = sys.argv[1], sys.argv[2]
with h5py.File(src, "r") as a, h5py.File(dst, "w") as b:
    for k, v in a.attrs.items():
        b.attrs[k] = v
    r = a["responses"]
    cell = r["cell"].asstr()[...]; seq = r["seq"][...]
    keep = ~((cell == cell[0]) & (seq == 1))
    g = b.create_group("responses")
    for name in r:
        x = r[name][...][keep]
        if name == "response":
            x[0] *= 100.0
        if name == "degenerate":
            x[0] = 1
        g.create_dataset(name, data=x)
    layer = g["layer"][...]; path = g["path"].asstr()[...]; cell = g["cell"].asstr()[...]
    deg = g["degenerate"][...]; resp = g["response"][...]
    Ls = sorted(set(layer.tolist()))
    s = b.create_group("summary")
    s.create_dataset("layer", data=np.array(Ls, dtype=np.int32))
    for p, name in (("content", "response_content"), ("rope", "response_rope")):
        v = []
        for L in Ls:
            cm = [resp[(layer == L) & (path == p) & (cell == c) & (deg == 0)].mean()
                  for c in sorted(set(cell.tolist()))
                  if ((layer == L) & (path == p) & (cell == c) & (deg == 0)).any()]
            v.append(np.mean(cm))
        s.create_dataset(name, data=np.array(v))
EOF2
expect 0 "export F responses_by_layer" -- "$QMLA" export "$work/F.h5" --table responses_by_layer -o "$work/F.bylayer.tsv"
pycheck "responses_by_layer with unequal cells and a degenerate row" "$work/check_bylayer.py" "$work/F.h5" "$work/F.bylayer.tsv"

# --- show prints what sweep printed ------------------------------------------
expect 0 "show A" -- "$QMLA" show "$work/A.h5"
sed -n '/^layer/,/^model mean/p' "$work/sweepA.txt" > "$work/t1"
sed -n '/^layer/,/^model mean/p' "$work/out" > "$work/t2"
if [ -s "$work/t1" ] && cmp -s "$work/t1" "$work/t2"; then ok; else bad "show table differs from sweep -v"; diff "$work/t1" "$work/t2" | head >&2; fi
grep '^quant' "$work/sweepA.txt" > "$work/t1"; grep '^quant' "$work/out" > "$work/t2"
if cmp -s "$work/t1" "$work/t2"; then ok; else bad "show quant line differs from sweep"; fi
cp "$work/out" "$work/showA.txt"
if grep -q '^dispersion over sequences' "$work/showA.txt" && grep -q '^model ' "$work/showA.txt"; then ok; else bad "show prints the dispersion block"; fi
sed -n '/^dispersion over/,$p' "$work/sweepA.txt" > "$work/t1"
sed -n '/^dispersion over/,$p' "$work/showA.txt" > "$work/t2"
if [ -s "$work/t1" ] && cmp -s "$work/t1" "$work/t2"; then ok; else bad "show dispersion differs from sweep -v"; fi

# --- dispersion (docs/math.md §3.1) against NumPy ----------------------------
# per-layer standard errors by the two-stage formula from /responses (a
# pooled sd, or degenerate rows counted, gives other numbers); the exported
# <path>_response_se equal them; intervals hold the means; B and seed
# recorded; one sequence per cell gives NaN everywhere
cat > "$work/check_se.py" <<'EOF'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
r, s = f["responses"], f["summary"]
layer = r["layer"][...]; cell = r["cell"].asstr()[...]; path = r["path"].asstr()[...]
deg = r["degenerate"][...]; resp = r["response"][...]
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[2]) if not l.startswith("#")]
col = {h: np.array([float(b[i]) for b in rows[1:]]) for i, h in enumerate(rows[0])}
single = sys.argv[3] == "single"
for p, name in (("content", "response_content"), ("rope", "response_rope")):
    want = []
    for L in s["layer"][...]:
        terms, one = [], False
        for c in sorted(set(cell.tolist())):
            x = resp[(layer == L) & (path == p) & (cell == c) & (deg == 0)]
            if len(x) == 1:
                one = True
            elif len(x) > 1:
                terms.append(x.var(ddof=1) / len(x))
        want.append(np.nan if one or not terms else np.sqrt(np.sum(terms)) / len(terms))
    want = np.array(want); got = s[name + "_se"][...]
    if single:
        print("ok", name, "se NaN" if np.all(np.isnan(got)) and np.all(np.isnan(s[name + "_lo"][...])) and np.all(np.isnan(col[p + "_response_se"])) else "FAIL not NaN")
        continue
    good = np.all(np.isfinite(want)) and np.allclose(got, want, rtol=1e-12, atol=0)
    print("ok" if good else "FAIL", name + "_se", got, want)
    good = np.allclose(col[p + "_response_se"], want, rtol=1e-12, atol=0)
    print("ok" if good else "FAIL", p + "_response_se (responses_by_layer)", col[p + "_response_se"])
    lo, hi, m = s[name + "_lo"][...], s[name + "_hi"][...], s[name][...]
    print("ok" if np.all((lo <= m) & (m <= hi) & (lo < hi)) else "FAIL", name, "interval", lo, m, hi)
a = s.attrs
print("ok" if a["bootstrap_replicates"] == 2000 and a["bootstrap_seed"] == 26 else "FAIL", "B and seed", a["bootstrap_replicates"], a["bootstrap_seed"])
for q in ("model_response_content", "model_response_rope", "model_ratio"):
    if single:
        print("ok" if all(np.isnan(a[q + k]) for k in ("_se", "_lo", "_hi")) else "FAIL", q, "NaN")
    else:
        print("ok" if a[q + "_lo"] <= a[q] <= a[q + "_hi"] and a[q + "_se"] > 0 else "FAIL", q, a[q + "_lo"], a[q], a[q + "_hi"])
EOF
pycheck "standard errors equal NumPy's two-stage formula" "$work/check_se.py" "$work/A.h5" "$work/A.bylayer.tsv" several
expect 0 "synth one sequence per cell" -- "$QMLA" synth -o "$work/cap1.h5" --seed 4 --tokens 24 --seqs 1 --cells 2
expect 0 "sweep one sequence per cell" -- "$QMLA" sweep "$work/cap1.h5" -o "$work/S1.h5" --threads 2 -v
contains "^dispersion: none" "sweep, one sequence per cell"
expect 0 "export S1 responses_by_layer" -- "$QMLA" export "$work/S1.h5" --table responses_by_layer -o "$work/S1.bylayer.tsv"
pycheck "one sequence per cell: no dispersion" "$work/check_se.py" "$work/S1.h5" "$work/S1.bylayer.tsv" single
# a file whose /summary predates the dispersion: show recomputes it from
# /responses, the same block as the file that records it
cp "$work/A.h5" "$work/Aold.h5"
"$PY" -c "
import h5py, sys
s = h5py.File(sys.argv[1], 'r+')['summary']
for k in list(s):
    if k.endswith(('_se', '_lo', '_hi')): del s[k]
for k in list(s.attrs):
    if k.endswith(('_se', '_lo', '_hi')) or k.startswith('bootstrap'): del s.attrs[k]
" "$work/Aold.h5"
expect 0 "show a file without recorded dispersion" -- "$QMLA" show "$work/Aold.h5"
contains "dispersion recomputed from /responses" "show Aold"
sed -n '/^dispersion over/,$p' "$work/showA.txt" > "$work/d1"
sed -n '/^dispersion over/,/^model /p' "$work/out" > "$work/d2"
if [ -s "$work/d1" ] && cmp -s "$work/d1" "$work/d2"; then ok; else bad "recomputed dispersion differs from the recorded one"; diff "$work/d1" "$work/d2" | head >&2; fi
cp "$work/D.h5" "$work/Dold.h5"
"$PY" -c "
import h5py, sys
s = h5py.File(sys.argv[1], 'r+')['summary']
for k in list(s):
    if k.endswith(('_se', '_lo', '_hi')): del s[k]
" "$work/Dold.h5"
expect 0 "show: no dispersion and no /responses" -- "$QMLA" show "$work/Dold.h5"
contains "dispersion: not recorded in this file" "show Dold"
expect 0 "figures without dispersion columns" -- "$QMLA" figures "$work/Dold.h5" -o "$work/figDold" --only fig2-responses
contains "wrote .*fig2-responses.png" "fig2 of a file without dispersion"
if grep -q "response_content_lo" "$work/figDold/data/m1.summary.tsv"; then ok; else bad "figures data lacks the NaN interval columns"; fi

expect 0 "show --brief" -- "$QMLA" show "$work/A.h5" --brief
lacks "R_P/R_C" "show --brief"
contains "model mean over layers" "show --brief"

# --- figures: every format, sizes from the figure table ---------------------
cat > "$work/check_images.py" <<'EOF'
import re, struct, sys, os
d, fmt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
# sizes of the figure table (cli/cmd_figures.c): w + w_model n, h + h_model n
sizes = {"fig2-responses": (420 + 360 * n, 460), "fig6-atlas": (1000, 300 + 100 * n),
         "routes": (120 + 400 * n, 460)}
for name, (w, h) in sizes.items():
    p = f"{d}/{name}.{fmt}"
    if not os.path.exists(p) or os.path.getsize(p) < 1000:
        print("FAIL", p, "missing or smaller than 1000 bytes"); continue
    b = open(p, "rb").read()
    if fmt == "png":
        if b[:8] != b"\x89PNG\r\n\x1a\n" or b[12:16] != b"IHDR":
            print("FAIL", p, "not a PNG"); continue
        W, H = struct.unpack(">II", b[16:24])
        good = (W, H) == (w, h) and b[-8:-4] == b"IEND"
    elif fmt == "svg":
        t = b.decode("utf-8", "replace")
        m = re.search(r'<svg[^>]*width="(\d+)"[^>]*height="(\d+)"', t)
        good = bool(m) and (int(m.group(1)), int(m.group(2))) == (w, h) and t.rstrip().endswith("</svg>")
    else:
        m = re.search(rb"/MediaBox \[\s*0 0 ([\d.]+) ([\d.]+)\s*\]", b)
        good = b[:5] == b"%PDF-" and b"%%EOF" in b[-32:] and bool(m) and \
            abs(float(m.group(1)) - w * 0.72) < 1 and abs(float(m.group(2)) - h * 0.72) < 1
    print("ok" if good else "FAIL", p, fmt, "size", w, "x", h)
EOF
expect 0 "figures A B png" -- "$QMLA" figures "$work/A.h5" "$work/B.h5" -o "$work/figs"
# a sweep file has no /eval, /ppl_table, /predict, /interventions or the
# allocation tables, so transforms-nmse (qmla eval's figure), ppl-bits (qmla
# ppl's), the three Fig. 7 figures and Tables 5 and 6 (qmla predict's and intervene's), the two
# allocate figures (scripts/allocate-validate.sh's), the serving benchmark's
# (scripts/serving-table.py's) and Fig. 5 with Tables 9 and 10 (qmla storage,
# the decode benchmark, qmla serve-sim) are the ones skipped
contains "4 written, 15 skipped" "figures A B png"
contains "skipped fig5a-storage: needs storage" "figures A B png"
contains "skipped fig5b-latency: needs table9" "figures A B png"
contains "skipped table10: needs serve_sim" "figures A B png"
contains "skipped serving-bench: needs serving_bench" "figures A B png"
contains "skipped fig7-gains: needs predict" "figures A B png"
contains "skipped fig7-validation: needs predict_pairs" "figures A B png"
contains "skipped fig7-interventions: needs intervention_ratios" "figures A B png"
contains "skipped allocate-pareto: needs allocate_pareto" "figures A B png"
contains "skipped transforms-nmse: needs eval" "figures A B png"
contains "skipped ppl-bits: needs ppl_table" "figures A B png"
pycheck "figures png" "$work/check_images.py" "$work/figs" png 2
# --exclude (scripts/run-main.sh leaves out the allocate figures): those are
# neither rendered nor reported skipped, the rest as without it; a name that
# is no figure is refused
expect 0 "figures --exclude" -- "$QMLA" figures "$work/A.h5" -o "$work/figsX" \
  --exclude allocate-pareto,allocate-strip,fig6-atlas
contains "3 written, 13 skipped" "figures --exclude"
if grep -q "allocate-\|fig6-atlas" "$work/out"; then bad "figures --exclude still names an excluded figure"; else ok; fi
if [ -e "$work/figsX/fig6-atlas.png" ] || [ ! -s "$work/figsX/fig2-responses.png" ]; then
  bad "figures --exclude: fig6-atlas drawn or fig2-responses missing"; else ok; fi
expect 2 "figures unknown --exclude" -- "$QMLA" figures "$work/A.h5" -o "$work/x" --exclude allocate-nope
contains "--exclude: no figure \"allocate-nope\"" "figures unknown --exclude"
for fmt in svg pdf; do
  expect 0 "figures A $fmt" -- "$QMLA" figures "$work/A.h5" -o "$work/figs-$fmt" --format $fmt
  pycheck "figures $fmt" "$work/check_images.py" "$work/figs-$fmt" $fmt 1
done
# the exported data the scripts read equal qmla export's
"$QMLA" export "$work/B.h5" --table summary > "$work/Bsum.tsv" 2>&1
if tail -n +2 "$work/Bsum.tsv" | cmp -s - <(tail -n +2 "$work/figs/data/m2.summary.tsv"); then ok; else bad "figures data/m2.summary.tsv differs from qmla export"; fi
# labels: same model, different nu -> the nu is added
if grep -q "label\[2\] = 'synthetic tiny, ν=0.001'" "$work/figs/data/inputs.gp"; then ok; else bad "label of B lacks its nu"; cat "$work/figs/data/inputs.gp" >&2; fi

# --labels replaces the default labels, in the data the scripts read
expect 0 "figures --labels" -- "$QMLA" figures "$work/A.h5" "$work/B.h5" -o "$work/figsL" --only fig2-responses --labels "first,it's B"
if grep -q "label\[1\] = 'first'" "$work/figsL/data/inputs.gp" && grep -q "label\[2\] = 'it''s B'" "$work/figsL/data/inputs.gp"; then ok; else bad "--labels not in inputs.gp"; cat "$work/figsL/data/inputs.gp" >&2; fi
pycheck "figures --labels png" - "$work/figsL/fig2-responses.png" <<'EOF2'
import struct, sys
b = open(sys.argv[1], "rb").read()
print("ok" if b[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", b[16:24]) == (1140, 460) else "FAIL", "labelled fig2 size")
EOF2
# Table 4: our model-level values, exactly; the paper's row beside a match
cat > "$work/check_table4.py" <<'EOF'
import csv, sys, h5py
d, files = sys.argv[1], sys.argv[2:]
rows = list(csv.DictReader(open(f"{d}/table4.csv")))
ours = [r for r in rows if r["source"].startswith("ours")]
paper = [r for r in rows if r["source"] == "paper"]
if len(ours) != len(files) or len(paper) != 6:
    print("FAIL rows", len(ours), len(paper))
for r, p in zip(ours, files):
    s = h5py.File(p, "r")["summary"].attrs
    good = all(float(r[k]) == float(s[a]) for k, a in (("content_response", "model_response_content"),
               ("rope_response", "model_response_rope"), ("ratio", "model_ratio")))
    print("ok" if good else "FAIL", "table4 values of", p)
i = next(k for k, r in enumerate(rows) if r["source"].startswith("ours") and "DeepSeek-V2-Lite" in r["model"]) if any("DeepSeek-V2-Lite" in r["model"] and r["source"].startswith("ours") for r in rows) else None
if i is not None:
    nxt = rows[i + 1]
    good = nxt["source"] == "paper" and nxt["model"] == "DeepSeek-V2-Lite" and nxt["ratio"] == "6.331"
    print("ok" if good else "FAIL", "paper row beside the matching model")
EOF
pycheck "table4 A B" "$work/check_table4.py" "$work/figs" "$work/A.h5" "$work/B.h5"

# --- a file lacking a figure's data: the needs line, no figure ---------------
expect 0 "figures D (no /responses)" -- "$QMLA" figures "$work/D.h5" -o "$work/figsD"
contains "skipped fig6-atlas: needs responses_by_layer (per-layer means of /responses)" "figures D"
contains "skipped routes: needs" "figures D"
contains "no table /responses" "figures D"
contains "wrote $work/figsD/fig2-responses.png" "figures D"
if [ ! -e "$work/figsD/fig6-atlas.png" ] && [ ! -e "$work/figsD/routes.png" ]; then ok; else bad "figures D drew a figure without its data"; fi
pycheck "table4 D (paper row beside DeepSeek-V2-Lite)" "$work/check_table4.py" "$work/figsD" "$work/D.h5"
# A with D: all inputs must have the data
expect 0 "figures A D" -- "$QMLA" figures "$work/A.h5" "$work/D.h5" -o "$work/figsAD" --only routes
contains "skipped routes: needs" "figures A D"
# summary without its attributes: Table 4 skipped
cp "$work/A.h5" "$work/E.h5"
"$PY" -c "import h5py,sys; f=h5py.File(sys.argv[1],'r+'); del f['summary'].attrs['model_ratio']" "$work/E.h5"
expect 0 "figures E (no model_ratio)" -- "$QMLA" figures "$work/E.h5" -o "$work/figsE" --only table4
contains "skipped table4: needs summary with @model_response_content,@model_response_rope,@model_ratio" "figures E"
contains "attribute model_ratio absent" "figures E"

# --- bad input never crashes: exit 2 and a message ----------------------------
printf 'not hdf5\n' > "$work/garbage.h5"
head -c 3000 "$work/A.h5" > "$work/truncated.h5"
for cmd in "export" "show" "figures"; do
  extra=(); [ $cmd = figures ] && extra=(-o "$work/figsX")
  expect 2 "$cmd missing file" -- "$QMLA" $cmd "$work/missing.h5" "${extra[@]}"
  contains "missing.h5: cannot open" "$cmd missing file"
  expect 2 "$cmd garbage file" -- "$QMLA" $cmd "$work/garbage.h5" "${extra[@]}"
  contains "garbage.h5: not an HDF5 file" "$cmd garbage file"
  expect 2 "$cmd truncated file" -- "$QMLA" $cmd "$work/truncated.h5" "${extra[@]}"
  contains "truncated.h5" "$cmd truncated file"
  expect 0 "$cmd --help" -- "$QMLA" $cmd --help
  contains "examples:" "$cmd --help"
done
expect 2 "show on a capture" -- "$QMLA" show "$work/capA.h5"
contains "root attribute format: expected \"qmla-results\"" "show on a capture"
expect 2 "export unknown table" -- "$QMLA" export "$work/A.h5" --table nope
contains "no table /nope (expected one of: cells, responses, summary)" "export unknown table"
expect 2 "export bad format" -- "$QMLA" export "$work/A.h5" --format xml
contains "expected tsv, csv, md or json, found \"xml\"" "export bad format"
expect 2 "export a capture's group that is not a table" -- "$QMLA" export "$work/capA.h5" --table layers
contains "expected a 1-D dataset" "export non-table"
expect 2 "figures bad format" -- "$QMLA" figures "$work/A.h5" -o "$work/x" --format gif
expect 2 "figures without -o" -- "$QMLA" figures "$work/A.h5"
expect 2 "figures unknown --only" -- "$QMLA" figures "$work/A.h5" -o "$work/x" --only fig99
expect 2 "figures wrong label count" -- "$QMLA" figures "$work/A.h5" -o "$work/x" --labels a,b
expect 2 "figures without gnuplot" -- "$QMLA" figures "$work/A.h5" -o "$work/x" --gnuplot /nonexistent/gnuplot --only routes
contains "cannot run \"/nonexistent/gnuplot\"" "figures without gnuplot"
expect 0 "figures --list" -- "$QMLA" figures --list
for f in fig2-responses fig6-atlas routes table4 table5 table6 fig7-gains fig7-validation fig7-interventions serving-bench \
         fig5a-storage fig5b-latency fig5c-serving table9 table10; do
  contains "$f" "figures --list"; done

# ppl-bits from a qmla ppl file (one panel per text: 120 + 840 x 460)
expect 0 "ppl for ppl-bits" -- "$QMLA" ppl "$ROOT/models/tiny-mla" --text "$ROOT/data/heldout/prose.txt.gz" \
  --text "$ROOT/data/heldout/code.txt.gz" --config bf16,C4R4 --policy none,sink4/local128 --tokens 512 \
  --threads 2 -o "$work/ppl.h5"
expect 0 "figures ppl-bits" -- "$QMLA" figures "$work/ppl.h5" -o "$work/figsP" --only ppl-bits
pycheck "ppl-bits png" - "$work/figsP/ppl-bits.png" "$work/figsP/data/m1.ppl_table.tsv" <<'EOF2'
import struct, sys
b = open(sys.argv[1], "rb").read()
print("ok" if b[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", b[16:24]) == (960, 460) else "FAIL", "ppl-bits size")
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[2]) if not l.startswith("#")]
h, rows = rows[0], rows[1:]
d = {(r[h.index("text_index")], r[h.index("config")], r[h.index("policy")]): float(r[h.index("delta_bits_per_byte")]) for r in rows}
bpb = {(r[h.index("text_index")], r[h.index("config")], r[h.index("policy")]): float(r[h.index("bits_per_byte")]) for r in rows}
good = len(rows) == 6 and all(abs(d[k] - (bpb[k] - bpb[(k[0], "bf16", "none")])) < 1e-12 for k in d) and d[("0", "bf16", "none")] == 0
print("ok" if good else "FAIL", "ppl_table deltas against the bf16 row of the same text")
EOF2
# Fig. 7 from qmla predict and qmla intervene on the synthetic capture A:
# sizes; the exported rows against NumPy on the HDF5 groups (the pairs of
# /predict and their log ratios, MAE = the file's attribute, Spearman from
# NumPy's ranks; the interventions' ratios = the attributes); the SVG key
# shows that Spearman and MAE
expect 0 "predict A" -- "$QMLA" predict "$work/capA.h5" -o "$work/op.h5" --threads 2
expect 0 "intervene A" -- "$QMLA" intervene "$work/capA.h5" -o "$work/op.h5" --reps 4 --bootstrap 200 --threads 2
expect 0 "export --list op" -- "$QMLA" export "$work/op.h5" --list
contains "predict_pairs .*(derived from predict)" "export --list names predict_pairs"
contains "intervention_ratios .*(derived from interventions)" "export --list names intervention_ratios"
expect 2 "export predict_pairs of a sweep" -- "$QMLA" export "$work/A.h5" --table predict_pairs
contains "no table /predict" "predict_pairs without /predict"
for fmt in png svg; do
  expect 0 "figures fig7 $fmt" -- "$QMLA" figures "$work/op.h5" -o "$work/fig7-$fmt" --format $fmt \
    --only fig7-gains,fig7-validation,fig7-interventions
  contains "3 written, 0 skipped" "figures fig7 $fmt"
done
cat > "$work/check_fig7.py" <<'EOF2'
import math, re, struct, sys, h5py, numpy as np
d, dsvg, path = sys.argv[1:4]
for name, (w, h) in {"fig7-gains": (540, 460), "fig7-validation": (760, 500),
                     "fig7-interventions": (540, 460)}.items():
    b = open(f"{d}/{name}.png", "rb").read()
    good = b[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", b[16:24]) == (w, h) and len(b) > 5000
    print("ok" if good else "FAIL", name, "png size", w, "x", h)
def tsv(p):
    rows = [l.rstrip("\n").split("\t") for l in open(p) if not l.startswith("#")]
    return rows[0], rows[1:]
f = h5py.File(path, "r")
g = f["predict"]
col = {k: g[k][...] for k in ("layer", "cell", "seq", "path", "bits", "group", "nmse", "degenerate",
                              "g_finite", "pred_alloc", "heldout", "g_jvp")}
n = len(col["layer"])
h, rows = tsv(f"{d}/data/m1.predict.tsv")
print("ok" if len(rows) == n else "FAIL", "predict.tsv rows", len(rows), "of", n)
key = lambda i: (int(col["layer"][i]), col["cell"][i], int(col["seq"][i]), int(col["bits"][i]),
                 int(col["group"][i]), float(col["nmse"][i]))
rope = {key(i): i for i in range(n) if col["path"][i] == 1 and not col["degenerate"][i]}
pairs = [(i, rope[key(i)]) for i in range(n) if col["path"][i] == 0 and not col["degenerate"][i] and key(i) in rope]
meas = np.array([math.log(col["g_finite"][j] / col["g_finite"][i]) for i, j in pairs])
pred = np.array([math.log(col["pred_alloc"][j] / col["pred_alloc"][i]) for i, j in pairs])
h, rows = tsv(f"{d}/data/m1.predict_pairs.tsv")
X = np.array([float(r[h.index("log_ratio_measured")]) for r in rows])
Y = np.array([float(r[h.index("log_ratio_pred_alloc")]) for r in rows])
good = len(rows) == len(pairs) == int(g.attrs["n_pairs"]) and np.allclose(X, meas, rtol=0, atol=1e-12) \
    and np.allclose(Y, pred, rtol=0, atol=1e-12)
print("ok" if good else "FAIL", "predict_pairs: the", len(pairs), "pairs of /predict and their log ratios")
mae = np.abs(pred - meas).mean()
good = abs(mae - float(g.attrs["mae_log_ratio_operator_allocation"])) < 1e-12
print("ok" if good else "FAIL", "MAE", mae, "= /predict mae_log_ratio_operator_allocation")
def ranks(v):
    o = np.argsort(v, kind="stable"); r = np.empty(len(v))
    i = 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and v[o[j + 1]] == v[o[i]]: j += 1
        r[o[i:j + 1]] = (i + j) / 2 + 1; i = j + 1
    return r
rho = np.corrcoef(ranks(meas), ranks(pred))[0, 1]
R1 = np.array([float(r[h.index("rank_measured")]) for r in rows])
R2 = np.array([float(r[h.index("rank_pred_alloc")]) for r in rows])
print("ok" if np.array_equal(R1, ranks(meas)) and np.array_equal(R2, ranks(pred)) else "FAIL", "rank columns")
svg = open(f"{dsvg}/fig7-validation.svg", encoding="utf-8").read()
good = ("Spearman %.3f" % rho) in svg and ("MAE %.3f" % mae) in svg and ("(%d pairs" % len(pairs)) in svg
print("ok" if good else "FAIL", "the key says Spearman %.3f, MAE %.3f" % (rho, mae))
dirs = sorted({(int(col["bits"][i]), int(col["group"][i]), float(col["nmse"][i])) for i, _ in pairs})
print("ok" if len(set(r[h.index("direction")] for r in rows)) == len(dirs) else "FAIL", len(dirs), "directions")
a = f["interventions"].attrs
h, rows = tsv(f"{d}/data/m1.intervention_ratios.tsv")
good = len(rows) == 6
for r in rows:
    c, p = r[h.index("control")], r[h.index("path")]
    for colname, attr in (("gain_ratio", f"gain_ratio_{c}_{p}"), ("ci_low", f"gain_ratio_{c}_{p}_ci_low"),
                          ("ci_high", f"gain_ratio_{c}_{p}_ci_high"), ("median", f"median_gain_ratio_{c}_{p}")):
        good &= float(r[h.index(colname)]) == float(a[attr])
    good &= float(r[h.index("ci_low")]) <= float(r[h.index("gain_ratio")]) <= float(r[h.index("ci_high")])
print("ok" if good else "FAIL", "intervention_ratios = the /interventions attributes")
# the gains figure's points: the development direction (heldout 0) of both paths
dev = [(int(col["layer"][i]), int(col["path"][i])) for i in range(n) if col["heldout"][i] == 0 and col["g_jvp"][i] > 0]
print("ok" if {p for _, p in dev} == {0, 1} and len(dev) > 0 else "FAIL", "development points of both paths")
EOF2
pycheck "fig7" "$work/check_fig7.py" "$work/fig7-png" "$work/fig7-svg" "$work/op.h5"

# serving-bench from the committed H200 benchmark, converted again from its TSV
# (scripts/serving-table.py): 1260 x 760; the exported rows equal the TSV's
sv=$ROOT/docs/evidence/serving/bench_serving-h200-2026-12-02.tsv
expect 0 "serving-table" -- "$PY" "$ROOT/scripts/serving-table.py" "$sv" "$work/serving.h5"
expect 2 "serving-table bad status" -- "$PY" "$ROOT/scripts/serving-table.py" \
  <(sed 's/\tdoes not fit\t/\tmaybe\t/' "$sv") "$work/serving-bad.h5"
contains "status: expected one of 'ok', 'does not fit', 'error', 'out of memory', 'not run (time)', found 'maybe'" "serving-table bad status"
# every cache bench_serving.py can write is read (C8R8, other graph variants:
# cache_index -1, not drawn); a name it cannot write is refused
expect 0 "serving-table C8R8 rows" -- "$PY" "$ROOT/scripts/serving-table.py" \
  <(sed '0,/^C4R4\t/s//C8R8-graph-v10\t/; s/^C4R4\t/C8R8\t/' "$sv") "$work/serving-c8.h5"
pycheck "serving-table C8R8 index" - "$work/serving-c8.h5" <<'EOF2'
import sys, h5py
g = h5py.File(sys.argv[1])["serving_bench"]
c = [x.decode() if isinstance(x, bytes) else x for x in g["cache"][:]]
i = list(g["cache_index"][:])
bad = [(a, b) for a, b in zip(c, i) if a.startswith("C8R8") and b != -1]
print("ok" if "C8R8" in c and "C8R8-graph-v10" in c and not bad else "FAIL", "C8R8 rows index -1", bad[:3])
EOF2
expect 2 "serving-table bad cache" -- "$PY" "$ROOT/scripts/serving-table.py" \
  <(sed 's/^C4R4\t/C9R9\t/' "$sv") "$work/serving-bad2.h5"
contains "cache: expected C4R4, C2R4, C4R4q8, C2R4q8 (q8 metadata), C8R8 or BF16 (optionally -graph-vN, N 0-10), or dynamic, found 'C9R9'" "serving-table bad cache"
expect 0 "figures serving-bench" -- "$QMLA" figures "$work/serving.h5" -o "$work/figsS" --only serving-bench
pycheck "serving-bench png" - "$work/figsS/serving-bench.png" "$work/figsS/data/m1.serving_bench.tsv" "$sv" <<'EOF2'
import struct, sys
b = open(sys.argv[1], "rb").read()
print("ok" if b[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", b[16:24]) == (1260, 760) else "FAIL", "serving-bench size")
def rows(p):
    r = [l.rstrip("\n").split("\t") for l in open(p) if l.strip() and not l.startswith("#")]
    return r[0], r[1:]
h, ex = rows(sys.argv[2])
hs, src = rows(sys.argv[3])
good = len(ex) == len(src) == 36
for a, s in zip(ex, src):
    good &= a[h.index("cache")] == s[hs.index("cache")] and int(a[h.index("batch")]) == int(s[hs.index("batch")])
    good &= int(a[h.index("fits")]) == (s[hs.index("status")] == "ok")
    t = s[hs.index("tok_s_aggregate")]
    good &= (t == "" and a[h.index("tok_s_aggregate")] == "nan") or abs(float(a[h.index("tok_s_aggregate")]) - float(t or "nan")) < 1e-9
    good &= abs(float(a[h.index("cache_gib")]) * 2 ** 30 - float(s[hs.index("cache_bytes")])) < 1
print("ok" if good else "FAIL", "serving-bench data: 36 rows equal the TSV's")
EOF2
# run 6's file: the eager rows and the CUDA-graph rows (caches 3-6, decode
# variants), 82 rows; every exported row names its cache by the index
# scripts/serving-table.py documents, and its status and tokens/s are the TSV's
sv6=$ROOT/docs/evidence/serving/bench_serving-h200-2026-12-03-run6.tsv
expect 0 "serving-table run 6" -- "$PY" "$ROOT/scripts/serving-table.py" "$sv6" "$work/serving6.h5"
expect 0 "figures serving-bench run 6" -- "$QMLA" figures "$work/serving6.h5" -o "$work/figsS6" --only serving-bench
pycheck "serving-bench run 6" - "$work/figsS6/serving-bench.png" "$work/figsS6/data/m1.serving_bench.tsv" "$sv6" <<'EOF2'
import struct, sys
b = open(sys.argv[1], "rb").read()
print("ok" if b[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", b[16:24]) == (1260, 760) else "FAIL", "serving-bench run 6 size")
def rows(p):
    r = [l.rstrip("\n").split("\t") for l in open(p) if l.strip() and not l.startswith("#")]
    return r[0], r[1:]
caches = ["C4R4", "BF16", "dynamic", "C4R4-graph-v0", "C4R4-graph-v1", "BF16-graph-v0", "BF16-graph-v3"]
h, ex = rows(sys.argv[2])
hs, src = rows(sys.argv[3])
good = len(ex) == len(src) == 82
seen = set()
for a, s in zip(ex, src):
    c = s[hs.index("cache")]
    seen.add(c)
    good &= a[h.index("cache")] == c and int(a[h.index("cache_index")]) == caches.index(c)
    good &= int(a[h.index("fits")]) == {"ok": 1, "does not fit": 0}[s[hs.index("status")]]
    t = s[hs.index("tok_s_aggregate")]
    good &= (t == "" and a[h.index("tok_s_aggregate")] == "nan") or abs(float(a[h.index("tok_s_aggregate")]) - float(t or "nan")) < 1e-9
print("ok" if good and seen == set(caches) else "FAIL", "serving-bench run 6 data: 82 rows of the 7 caches equal the TSV's")
EOF2
# run 7's file: the default plan's rows (C4R4-graph-v7, cache index 7) and two
# rows with status "error" (fits -1)
sv7=$ROOT/docs/evidence/serving/bench_serving-h200-2026-12-03-run7.tsv
expect 0 "serving-table run 7" -- "$PY" "$ROOT/scripts/serving-table.py" "$sv7" "$work/serving7.h5"
expect 0 "figures serving-bench run 7" -- "$QMLA" figures "$work/serving7.h5" -o "$work/figsS7" --only serving-bench
pycheck "serving-bench run 7" - "$work/figsS7/serving-bench.png" "$work/figsS7/data/m1.serving_bench.tsv" "$sv7" <<'EOF2'
import struct, sys
b = open(sys.argv[1], "rb").read()
print("ok" if b[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", b[16:24]) == (1260, 760) else "FAIL", "serving-bench run 7 size")
def rows(p):
    r = [l.rstrip("\n").split("\t") for l in open(p) if l.strip() and not l.startswith("#")]
    return r[0], r[1:]
caches = ["C4R4", "BF16", "dynamic", "C4R4-graph-v0", "C4R4-graph-v1", "BF16-graph-v0", "BF16-graph-v3", "C4R4-graph-v7"]
h, ex = rows(sys.argv[2])
hs, src = rows(sys.argv[3])
good = len(ex) == len(src) == 82
seen, errs = set(), 0
for a, s in zip(ex, src):
    c = s[hs.index("cache")]
    seen.add(c)
    good &= a[h.index("cache")] == c and int(a[h.index("cache_index")]) == caches.index(c)
    st = s[hs.index("status")]
    errs += st == "error"
    good &= int(a[h.index("fits")]) == {"ok": 1, "does not fit": 0, "error": -1}[st]
    t = s[hs.index("tok_s_aggregate")]
    good &= (t == "" and a[h.index("tok_s_aggregate")] == "nan") or abs(float(a[h.index("tok_s_aggregate")]) - float(t or "nan")) < 1e-9
print("ok" if good and errs == 2 and seen == set(caches) - {"C4R4-graph-v0"} else "FAIL", "serving-bench run 7 data: 82 rows (2 errors) equal the TSV's")
EOF2
# run 9's file: the C2R4 side measurement at 128K b 32 (cache indices 8, 9):
# kept in the table with its index, not drawn by serving-bench
sv9=$ROOT/docs/evidence/serving/bench_serving-h200-2026-12-04-run9.tsv
expect 0 "serving-table run 9" -- "$PY" "$ROOT/scripts/serving-table.py" "$sv9" "$work/serving9.h5"
expect 0 "figures serving-bench run 9" -- "$QMLA" figures "$work/serving9.h5" -o "$work/figsS9" --only serving-bench
pycheck "serving-bench run 9" - "$work/figsS9/data/m1.serving_bench.tsv" "$sv9" <<'EOF2'
import sys
def rows(p):
    r = [l.rstrip("\n").split("\t") for l in open(p) if l.strip() and not l.startswith("#")]
    return r[0], r[1:]
caches = ["C4R4", "BF16", "dynamic", "C4R4-graph-v0", "C4R4-graph-v1", "BF16-graph-v0", "BF16-graph-v3", "C4R4-graph-v7", "C2R4", "C2R4-graph-v7"]
h, ex = rows(sys.argv[1])
hs, src = rows(sys.argv[2])
good = len(ex) == len(src) == 72
c2 = 0
for a, s in zip(ex, src):
    c = s[hs.index("cache")]
    c2 += c.startswith("C2R4")
    good &= a[h.index("cache")] == c and int(a[h.index("cache_index")]) == caches.index(c)
print("ok" if good and c2 == 2 else "FAIL", "serving-bench run 9 data: 72 rows (2 of C2R4, indices 8 and 9) equal the TSV's")
EOF2
# Tables 5 and 6 from the same file: every value of ours equals the /predict
# or /interventions attribute exactly (CSV) and the rounding of it (Markdown);
# the paper's rows are those of plots/table5-paper.tsv and table6-paper.tsv
expect 0 "figures table5 table6" -- "$QMLA" figures "$work/op.h5" -o "$work/t56" --only table5,table6 --labels opA
contains "2 written, 0 skipped" "figures table5 table6"
expect 0 "figures table5 of a sweep" -- "$QMLA" figures "$work/A.h5" -o "$work/t56A" --only table5,table6
contains "skipped table5: needs predict" "table5 without /predict"
contains "skipped table6: needs interventions" "table6 without /interventions"
cat > "$work/check_t56.py" <<'EOF2'
import csv, sys, h5py
d, path, plots = sys.argv[1:4]
f = h5py.File(path, "r")
def paper(name):
    rows = [l.rstrip("\n").split("\t") for l in open(f"{plots}/{name}-paper.tsv") if not l.startswith("#") and l.strip()]
    return rows[0], rows[1:]
P = f["predict"].attrs
rows = list(csv.DictReader(open(f"{d}/table5.csv")))
ours = [r for r in rows if r["source"] == "ours (opA)"]
key = {"points": "n_pairs"}
good = len(ours) == 6 and all(float(r["value"]) == float(P[key.get(r["quantity"], r["quantity"])]) for r in ours)
print("ok" if good else "FAIL", "table5: ours = the /predict attributes")
h, pr = paper("table5")
got = [(r["model"], r["quantity"], r["value"]) for r in rows if r["source"] == "paper"]
print("ok" if got == [tuple(x) for x in pr] and len(pr) == 12 else "FAIL", "table5: the paper's 12 rows")
md = open(f"{d}/table5.md", encoding="utf-8").read()
print("ok" if ("| %.4f |" % P["spearman"]) in md and ("| %d |" % P["n_pairs"]) in md else "FAIL", "table5.md rounding")
I = f["interventions"].attrs
rows = list(csv.DictReader(open(f"{d}/table6.csv")))
ours = [r for r in rows if r["source"] == "ours (opA)"]
good = [r["control"] for r in ours] == ["sign", "permute", "isotropic"]
md = open(f"{d}/table6.md", encoding="utf-8").read()
for r in ours:
    for p in ("content", "rope"):
        a = f"gain_ratio_{r['control']}_{p}"
        good &= float(r[p]) == float(I[a]) and float(r[p + "_ci_low"]) == float(I[a + "_ci_low"]) \
            and float(r[p + "_ci_high"]) == float(I[a + "_ci_high"])
        good &= ("%.3f [%.3f, %.3f]" % (I[a], I[a + "_ci_low"], I[a + "_ci_high"])) in md
print("ok" if good else "FAIL", "table6: ours = the /interventions gain ratios and intervals")
h, pr = paper("table6")
got = [(r["model"], r["control"], r["content"], r["rope"]) for r in rows if r["source"] == "paper"]
print("ok" if got == [tuple(x) for x in pr] and len(pr) == 3 else "FAIL", "table6: the paper's 3 rows")
EOF2
pycheck "tables 5 and 6" "$work/check_t56.py" "$work/t56" "$work/op.h5" "$ROOT/plots"
# a malformed paper file is refused, naming the file and line
mkdir -p "$work/plotsbad" && cp "$ROOT"/plots/* "$work/plotsbad/"
printf 'model\tcontrol\tcontent\trope\nX\tflip\t1\t2\n' > "$work/plotsbad/table6-paper.tsv"
expect 2 "table6 bad paper file" -- "$QMLA" figures "$work/op.h5" -o "$work/t56bad" --only table6 --plots "$work/plotsbad"
contains "table6-paper.tsv:2: unknown control \"flip\"" "table6 bad paper file"
# --- Fig. 5 and Tables 9 and 10 ------------------------------------------
# fig5a-storage from `qmla storage -o`: /storage holds exactly the rows the
# TSV prints (every column, floats to the printed digits), config_index and
# series_index in order of first appearance; 1100 x 480 PNG and SVG
sargs=(--contexts 1024,4096,131072,1048576 --config BF16,C4R4,C2R4 --policy sink4/local128,none)
expect 0 "storage -o" -- "$QMLA" storage "${sargs[@]}" -o "$work/storage.h5"
"$QMLA" storage "${sargs[@]}" --format tsv >"$work/storage.tsv"
expect 0 "figures fig5a png" -- "$QMLA" figures "$work/storage.h5" -o "$work/f5a" --only fig5a-storage
contains "1 written, 0 skipped" "figures fig5a png"
expect 0 "figures fig5a svg" -- "$QMLA" figures "$work/storage.h5" -o "$work/f5a" --only fig5a-storage --format svg
pycheck "storage file and fig5a" - "$work/storage.h5" "$work/storage.tsv" "$work/f5a" <<'EOF2'
import struct, sys, h5py
f = h5py.File(sys.argv[1], "r")
g = f["storage"]
lines = [l.rstrip("\n").split("\t") for l in open(sys.argv[2])]
h, rows = lines[0], lines[1:]
print("ok" if f.attrs["format"] == "qmla-storage" and f.attrs["tool"] == "qmla storage" else "FAIL", "storage root attributes")
# BF16 once, C4R4 and C2R4 under both policies: 5 series x 4 contexts
good = len(rows) == g["context"].shape[0] == 20
col = {k: g[k][()] for k in g}
def s(x): return x.decode() if isinstance(x, bytes) else x
for i, r in enumerate(rows):
    d = dict(zip(h, r))
    good &= s(col["config"][i]) == d["config"] and s(col["meta"][i]) == d["meta"]
    for k in ("sink", "window", "context", "code_bytes", "meta_bytes", "protect_bytes", "table_bytes", "total_bytes"):
        good &= int(col[k][i]) == int(float(d[k]))
    good &= abs(col["bytes_per_token"][i] - float(d["bytes_per_token"])) < 1e-4
    good &= abs(col["ratio"][i] - float(d["ratio"])) < 1e-4
    good &= abs(col["total_bytes"][i] / col["context"][i] - col["bytes_per_token"][i]) < 1e-9
    pol = "none" if d["sink"] == "0" and d["window"] == "0" else "sink%s/local%s" % (d["sink"], d["window"])
    good &= s(col["policy"][i]) == pol
print("ok" if good else "FAIL", "/storage = the printed TSV, 20 rows")
first, ser = {}, {}
ci = [first.setdefault(s(c), len(first)) for c in col["config"]]
si = [ser.setdefault((s(c), s(m), s(p)), len(ser)) for c, m, p in zip(col["config"], col["meta"], col["policy"])]
print("ok" if list(col["config_index"]) == ci and list(col["series_index"]) == si and len(ser) == 5 else "FAIL", "config_index, series_index")
b = open(sys.argv[3] + "/fig5a-storage.png", "rb").read()
print("ok" if b[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", b[16:24]) == (1100, 480) else "FAIL", "fig5a png size")
v = open(sys.argv[3] + "/fig5a-storage.svg").read()
print("ok" if 'width="1100"' in v and "paper: C4R4 sink4/local128" in v else "FAIL", "fig5a svg: size, the paper's points in the key")
EOF2
printf 'not a storage file\n' >"$work/keep.txt"
expect 2 "storage -o a file of another kind" -- "$QMLA" storage -o "$work/keep.txt"
if [ "$(cat "$work/keep.txt")" = "not a storage file" ]; then ok; else bad "storage -o replaced a file of another kind"; fi
expect 2 "storage -o a results file" -- "$QMLA" storage -o "$work/A.h5"

# fig5b-latency and table9 from the H200 run 5 (scripts/decode-table.py): the
# /table9 rows are the TSV's variant-0 rows of H 16, s_q 1; table9's Δ are
# (C_us / BF16_us - 1) x 100 of those, exactly in the CSV; the paper's rows
# are plots/table9-paper.tsv's; the figure also draws a bench_decode HDF5
# file as written (run 24)
dv=$ROOT/docs/evidence/decode-h200-2026-12-02-run5/bench_variants.tsv
expect 0 "decode-table" -- "$PY" "$ROOT/scripts/decode-table.py" "$dv" "$work/dec.h5"
contains "15 points of 'decode h16 sq1', variant v0" "decode-table"
expect 2 "decode-table: no such variant" -- "$PY" "$ROOT/scripts/decode-table.py" "$dv" "$work/dec-bad.h5" --variant v9
contains "no row of kind 'decode h16 sq1' with a config of variant v9" "decode-table: no such variant"
expect 2 "decode-table: bad header" -- "$PY" "$ROOT/scripts/decode-table.py" <(sed '1s/median_us/med/' "$dv") "$work/dec-bad.h5"
contains ":1: expected the header" "decode-table: bad header"
expect 0 "figures fig5b table9" -- "$QMLA" figures "$work/dec.h5" -o "$work/f5b" --only fig5b-latency,table9 --labels run5
contains "2 written, 0 skipped" "figures fig5b table9"
# the /table9 check of both decode-table files: /table9 of H5 holds the
# TSV's rows of kind 'decode h16 sq1' whose config is one of LABELS (one
# per configuration), 60 of them at 15 points (imported from $work)
cat > "$work/table9rows.py" <<'EOF'
import h5py
def table9_rows(h5, tsv, labels):
    g = h5py.File(h5, "r")["table9"]
    want = {}
    for l in open(tsv):
        r = l.rstrip("\n").split("\t")
        if r[0] == "decode h16 sq1" and r[3] in labels:
            want[(int(r[1]), int(r[2]), r[3].split()[0])] = float(r[4])
    good = len(want) == 60 and g["batch"].shape[0] == 15
    for i in range(15):
        b, t = int(g["batch"][i]), int(g["context"][i])
        for c in ("BF16", "C4R4", "C2R4", "C8R8"):
            good &= g[c + "_us"][i] == want[(b, t, c)]
    return g, want, good
EOF
# each configuration's own variant (H200 run 13: the default kernels,
# BF16 v0, C4R4 / C2R4 v7, C8R8 v10): the rows of those configs exactly
dv13=$ROOT/docs/evidence/decode-h200-2026-12-04-run13/bench_variants.tsv
expect 0 "decode-table --config-variant" -- "$PY" "$ROOT/scripts/decode-table.py" "$dv13" "$work/dec13.h5" \
  --variant v7 --bf16-variant v0 --config-variant C8R8=v10
contains "15 points of 'decode h16 sq1', variant v7 (BF16=v0 C4R4=v7 C2R4=v7 C8R8=v10)" "decode-table --config-variant"
expect 2 "decode-table: bad --config-variant" -- "$PY" "$ROOT/scripts/decode-table.py" "$dv13" "$work/dec-bad.h5" \
  --config-variant C9R9=v1
contains "expected CFG=vN with CFG one of C4R4, C2R4, C8R8" "decode-table: bad --config-variant"
pycheck "decode-table --config-variant rows" - "$work/dec13.h5" "$dv13" "$work" <<'EOF2'
import sys
sys.path.insert(0, sys.argv[3])
from table9rows import table9_rows
g, want, good = table9_rows(sys.argv[1], sys.argv[2], ("BF16", "C4R4 v7", "C2R4 v7", "C8R8 v10"))
good &= g.attrs["variants"] == "BF16=v0 C4R4=v7 C2R4=v7 C8R8=v10"
print("ok" if good else "FAIL", "/table9 = the TSV's rows of each configuration's variant")
EOF2
expect 0 "figures fig5b of bench_decode's own file" -- "$QMLA" figures "$ROOT/docs/evidence/run24_bench_decode.h5" \
  -o "$work/f5b24" --only fig5b-latency,table9
contains "2 written, 0 skipped" "figures fig5b of bench_decode's own file"
pycheck "table9 and fig5b" - "$work/dec.h5" "$dv" "$work/f5b" "$ROOT/plots" "$work/f5b24" "$work" <<'EOF2'
import csv, math, struct, sys
sys.path.insert(0, sys.argv[6])
from table9rows import table9_rows
g, want, good = table9_rows(sys.argv[1], sys.argv[2], ("BF16", "C4R4 v0", "C2R4 v0", "C8R8 v0"))
print("ok" if good else "FAIL", "/table9 = the TSV's variant-0 rows of H 16, s_q 1")
d = sys.argv[3]
rows = list(csv.DictReader(open(d + "/table9.csv")))
pts = [r for r in rows if r["row"] == "point"]
good = len(pts) == 8 and {int(r["batch"]) for r in pts} == {8, 32}
md = open(d + "/table9.md", encoding="utf-8").read()
lo, hi = math.inf, -math.inf
for r in pts:
    b, t = int(r["batch"]), int(r["context"])
    for c in ("C4R4", "C2R4", "C8R8"):
        dd = (want[(b, t, c)] / want[(b, t, "BF16")] - 1.0) * 100.0
        good &= float(r[c + "_delta_pct"]) == dd and float(r[c + "_us"]) == want[(b, t, c)]
        good &= ("| %.2f | %+.2f %% |" % (want[(b, t, c)], dd)) in md
        if c == "C4R4":
            lo, hi = min(lo, dd), max(hi, dd)
print("ok" if good else "FAIL", "table9: times and deltas of batch 8 and 32")
summ = {r["row"]: r["value"] for r in rows if r["source"].startswith("ours")}
print("ok" if float(summ["c4r4_delta_min_pct"]) == lo and float(summ["c4r4_delta_max_pct"]) == hi else "FAIL", "table9: C4R4 range")
pr = [l.rstrip("\n").split("\t") for l in open(sys.argv[4] + "/table9-paper.tsv") if l.strip() and not l.startswith("#")][1:]
got = [(r["model"], r["row"], r["value"]) for r in rows if r["source"] == "paper"]
print("ok" if got == [tuple(x) for x in pr] and len(pr) == 3 else "FAIL", "table9: the paper's 3 rows")
for p in (d, sys.argv[5]):
    b = open(p + "/fig5b-latency.png", "rb").read()
    print("ok" if b[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", b[16:24]) == (1000, 460) else "FAIL", "fig5b png size", p)
EOF2

# fig5c-serving and table10 from `qmla serve-sim -o`: ours = /serve_sim's
# columns exactly, the paper's rows = plots/table10-paper.tsv; 540 x 460
expect 0 "serve-sim -o" -- "$QMLA" serve-sim "$ROOT/experiments/serving/paper-table10.scn" -o "$work/serve.h5"
expect 0 "figures fig5c table10" -- "$QMLA" figures "$work/serve.h5" -o "$work/f5c" --only fig5c-serving,table10 --labels sim
contains "2 written, 0 skipped" "figures fig5c table10"
pycheck "table10 and fig5c" - "$work/serve.h5" "$work/f5c" "$ROOT/plots" <<'EOF2'
import csv, struct, sys, h5py
g = h5py.File(sys.argv[1], "r")["serve_sim"]
cfg = [c.decode() if isinstance(c, bytes) else c for c in g["config"][()]]
d = sys.argv[2]
rows = list(csv.DictReader(open(d + "/table10.csv")))
ours = [r for r in rows if r["source"] == "ours (sim)"]
good = cfg == ["BF16", "C4R4"] and [r["metric"] for r in ours] == ["slots", "elapsed_s", "throughput", "preemptions", "recomputed_tokens"]
for r in ours:
    for i, c in enumerate(cfg):
        good &= float(r[c]) == float(g[r["metric"]][i])
print("ok" if good else "FAIL", "table10: ours = /serve_sim")
md = open(d + "/table10.md", encoding="utf-8").read()
print("ok" if ("| %.3f | %.3f |" % tuple(g["throughput"][()])) in md and "| 32 | 0 |" in md else "FAIL", "table10.md rounding")
pr = [l.rstrip("\n").split("\t") for l in open(sys.argv[3] + "/table10-paper.tsv") if l.strip() and not l.startswith("#")][1:]
got = [(r["model"], r["metric"], r["BF16"], r["C4R4"]) for r in rows if r["source"] == "paper"]
print("ok" if got == [tuple(x) for x in pr] and len(pr) == 5 else "FAIL", "table10: the paper's 5 rows")
b = open(d + "/fig5c-serving.png", "rb").read()
print("ok" if b[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", b[16:24]) == (540, 460) else "FAIL", "fig5c png size")
EOF2
finish test_figures
