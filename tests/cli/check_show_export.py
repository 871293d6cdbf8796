"""check_show_export.py QMLA FILE... — for every file: `qmla show` exits 0
and prints the key numbers of each group it holds (read here with h5py,
formatted %.6g as show prints them); `qmla export --list` names every table
(each group's 1-D datasets of one length: GROUP, GROUP:LEN for the other
lengths, nested groups by path) and `--table NAME` (tsv, csv, json) equals
the h5py data of that table. Prints "ok ..." or "FAIL ..." lines."""
import csv, io, json, math, subprocess, sys
import h5py, numpy as np

qmla, files = sys.argv[1], sys.argv[2:]

def run(*a):
    p = subprocess.run([qmla, *a], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr

def g6(x):
    return "%.6g" % x

def check(cond, what):
    print(("ok " if cond else "FAIL ") + what)

def expected_tables(f):
    """name -> {column: numpy array} of every table of f."""
    out = {}
    def visit(name, obj):
        if not isinstance(obj, h5py.Group):
            return
        lens, cols = [], {}
        for k in obj:  # creation order is not needed: compare by column name
            d = obj[k]
            if isinstance(d, h5py.Dataset) and d.ndim == 1:
                cols.setdefault(d.shape[0], {})[k] = d
                lens.append(d.shape[0])
        if not lens:
            return
        order = []
        for l in lens:
            if l not in order:
                order.append(l)
        # the main length: most columns; ties: first created (h5py lists by
        # name, so use the creation order where tracked, else object address)
        main = max(order, key=lambda l: (len(cols[l]), -first_index(obj, cols[l])))
        for l in order:
            out[name if l == main else "%s:%d" % (name, l)] = cols[l]
    f.visititems(visit)
    return out

def first_index(g, cols):
    return min(h5py.h5o.get_info(g[k].id).addr for k in cols)

def same(a, b):
    if isinstance(a, str):
        return a == b
    return (math.isnan(a) and math.isnan(b)) or a == b

def parse_cell(s, ref):
    if isinstance(ref, (bytes, str)):
        return s
    return float(s)

for path in files:
    f = h5py.File(path, "r")
    rc, out = run("show", path)
    check(rc == 0, "%s: show exits 0 (got %d: %s)" % (path, rc, out.strip()[-200:] if rc else ""))
    # --- key numbers of every group --------------------------------------
    def has(s, what):
        check(s in out, "%s: show prints %s (%s)" % (path, what, s))
    a = f.attrs
    if "part" in f:
        p = f["part"]
        items = int(np.sum(p["n_seq"][...][p["selected"][...] != 0]))
        held = int(np.sum(f["responses/path"].asstr()[...] == "content"))
        has("shard %d of %d" % (p.attrs["shard"], p.attrs["n_shards"]), "the shard")
        has("%d of the plan's %d" % (held, items), "the coverage")
        check("model mean over layers" not in out, "%s: part file: no model mean" % path)
    elif "summary" in f:
        has("model mean over layers", "the sweep summary")
    for grp in ("jvp", "predict"):
        if grp not in f:
            continue
        g = f[grp]
        has(g6(g.attrs["spearman_jvp_vs_finite"]), grp + " Spearman")
        if grp == "predict":
            for k in ("spearman", "median_abs_log_error", "mae_log_ratio_operator_allocation",
                      "mae_log_ratio_cache_only", "mae_log_ratio_operator_only"):
                has(g6(g.attrs[k]), "predict " + k)
        L, P, D = g["layer"][...], g["path"][...], g["degenerate"][...]
        for l in dict.fromkeys(L.tolist()):
            for pth in (0, 1):
                m = (L == l) & (P == pth) & (D == 0)
                for col in ("g_jvp", "g_finite"):
                    has(g6(g[col][...][m].mean()), "%s layer %d path %d mean %s" % (grp, l, pth, col))
    if "interventions" in f:
        g = f["interventions"].attrs
        for c in ("sign", "permute", "isotropic"):
            for p in ("content", "rope"):
                k = "gain_ratio_%s_%s" % (c, p)
                line = [ln for ln in out.splitlines() if ln.split()[:2] == [c, p]]
                want = [g6(g[k]), g6(g[k + "_ci_low"]), g6(g[k + "_ci_high"])]
                check(len(line) == 1 and line[0].split()[2:5] == want,
                      "%s: interventions %s %s: %s" % (path, c, p, want))
    if "eval" in f:
        g = f["eval"]
        meth, lay = g["method"].asstr()[...], g["layer"][...]
        for m in dict.fromkeys(meth.tolist()):
            per = [g["nmse_out"][...][(meth == m) & (lay == l)].mean()
                   for l in dict.fromkeys(lay[meth == m].tolist())]
            line = [ln for ln in out.splitlines() if ln.split()[:2] == [m, "model"]]
            check(len(line) == 1 and line[0].split()[2] == g6(np.mean(per)),
                  "%s: eval %s model nmse_out %s" % (path, m, g6(np.mean(per))))
    if "ppl_table" in f:
        for x in f["ppl_table/bits_per_byte"][...]:
            has(g6(x), "ppl bits/byte")
    if "serve_sim" in f:
        for col in ("throughput", "preemptions"):
            for x in f["serve_sim/" + col][...]:
                has(g6(x), "serve-sim " + col)
    if a.get("format") == "qmla-bench":
        for x in f["rows/ratio_to_bf16"][...]:
            has(g6(x), "bench ratio")
    if a.get("format") == "qmla-transforms":
        have = sorted(int(k) for k in f["layers"])
        has("layers present (%d): %s" % (len(have), " ".join(map(str, have))), "layers present")
        has("complete                           %d" % a["complete"], "complete flag")
        has("method                             %s" % a["method"], "method")
    # the root provenance (a sweep's summary is printed as `qmla sweep -v`
    # printed it, without the block)
    for k in ("git_commit", "created_utc", "capture_sha256"):
        v = a.get(k) if ("summary" not in f or "part" in f) else None
        if isinstance(v, str) and v:
            has(v, "provenance " + k)
    # --- export ----------------------------------------------------------
    want = expected_tables(f)
    rc, out = run("export", path, "--list")
    listed = [ln.split()[0] for ln in out.splitlines()[1:] if ln.strip()]
    check(rc == 0 and set(want) <= set(listed),
          "%s: export --list names every table (missing %s)" % (path, sorted(set(want) - set(listed))))
    for name, cols in want.items():
        for fmt in ("tsv", "csv", "json"):
            rc, text = run("export", path, "--table", name, "--format", fmt)
            if rc:
                check(False, "%s: export --table %s --format %s: %s" % (path, name, fmt, text[-200:]))
                continue
            if fmt == "json":
                j = json.loads(text)
                got = {c["name"]: c for c in j["columns"]} if "columns" in j else None
                rows = j.get("rows")
                names = [c["name"] for c in j["columns"]]
                data = {n: [r[i] if isinstance(r, list) else r[n] for r in rows] for i, n in enumerate(names)}
            else:
                lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
                rd = list(csv.reader(io.StringIO("\n".join(lines)), delimiter="\t" if fmt == "tsv" else ","))
                names = rd[0]
                data = {n: [r[i] for r in rd[1:]] for i, n in enumerate(names)}
            good = sorted(names) == sorted(cols)
            for n, d in cols.items():
                if not good:
                    break
                ref = d.asstr()[...] if d.dtype.kind == "O" else d[...]
                g = data[n]
                if len(g) != len(ref):
                    good = False
                    break
                for x, r in zip(g, ref):
                    if isinstance(r, str):
                        if fmt == "tsv":
                            x = x.replace("\\t", "\t").replace("\\n", "\n").replace("\\\\", "\\")
                        ok = x == r
                    else:
                        xv = float("nan") if x is None or x == "nan" else float(x)
                        ok = same(xv, float(r))
                    if not ok:
                        good = False
                        break
            check(good, "%s: export --table %s --format %s equals the h5py data" % (path, name, fmt))
