"""tests/cli/check_report.py — checks of a `qmla report` page against the
HDF5 files it was made from, read here independently with h5py and NumPy.

  check_report.py dom PAGE.html FIGDIR RESULTS.h5 [MORE.h5 ...]
      PAGE.html: the DOM chromium dumped after the page's load handler ran.
      - the render verdict the page's script wrote is "ok N svg 0 img" with
        N = the number of <figure> elements = the SVG files `qmla figures
        --format svg` wrote into FIGDIR for the same inputs (same names);
      - every table of every input: each shown cell equals the dataset value
        (floats exactly, through the data-v attribute; strings as text), the
        row count is the dataset length, and every table of the file is there;
      - every root attribute is in the input's provenance table;
      - the ranking: (layer, path) in decreasing /summary response, the
        responses and the /predict development-direction mean gains equal
        NumPy's, the suggested widths equal a NumPy rerun of the greedy
        allocation, the uniform --config the exhaustive search's, and the
        sink count the rule's on /predict's sensitivities.
  check_report.py rank PAGE.html RESULTS.h5 [MORE.h5 ...]
      the ranking and suggestion checks only (on the page as written).
  check_report.py escape PAGE.html HOSTILE...
      the page's own markup only: exactly one <script> element (the page's),
      no <img>, <iframe> or on* attribute, and every HOSTILE string present as
      text (escaped, not parsed as markup).
Prints "ok ..." per check, "FAIL ..." otherwise; exit 1 on any failure."""
import sys
from html.parser import HTMLParser

import h5py
import numpy as np

fails = 0


def ok(msg):
    print("ok", msg)


def fail(msg):
    global fails
    fails += 1
    print("FAIL", msg)


class Page(HTMLParser):
    """Elements with attributes, tables as lists of rows of (attrs, text)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags = []          # (tag, attrs dict)
        self.tables = []        # (attrs, rows); row = list of (tag, attrs, text)
        self.stack = []         # open tables
        self.cell = None
        self.texts = []
        self.spans = {}         # data-* span attribute -> text
        self.span = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "table":
            self.stack.append((a, []))
        elif tag == "tr" and self.stack:
            self.stack[-1][1].append([])
        elif tag in ("td", "th") and self.stack:
            self.cell = [tag, a, ""]
        elif tag == "span" and len(a) == 1 and next(iter(a)).startswith("data-"):
            self.span = [next(iter(a)), ""]

    def handle_endtag(self, tag):
        if tag == "table" and self.stack:
            self.tables.append(self.stack.pop())
        elif tag in ("td", "th") and self.cell is not None and self.stack:
            self.stack[-1][1][-1].append(tuple(self.cell))
            self.cell = None
        elif tag == "span" and self.span:
            self.spans[self.span[0]] = self.span[1]
            self.span = None

    def handle_data(self, data):
        self.texts.append(data)
        if self.cell is not None:
            self.cell[2] += data
        if self.span:
            self.span[1] += data


def parse(path):
    p = Page()
    with open(path, encoding="utf-8") as f:
        p.feed(f.read())
    return p


def same(x, want):
    """data-v text x against the stored number want: exact."""
    try:
        v = float(x)
    except ValueError:
        return False
    if np.isnan(want):
        return np.isnan(v)
    return v == float(want)


def file_tables(f):
    """{(group, length): {column: 1-D array}}: the 1-D datasets of each group
    by length (qmla names the most common length GROUP, each other GROUP:L)."""
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Group):
            for k, v in obj.items():
                if isinstance(v, h5py.Dataset) and v.ndim == 1:
                    out.setdefault((name, v.shape[0]), {})[k] = v[()]

    f.visititems(visit)
    return out


def text_of(v):
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def check_tables(page, idx, path):
    with h5py.File(path, "r") as f:
        want = file_tables(f)
        root = dict(f.attrs)
    got = {}
    for a, rows in page.tables:
        if a.get("class") == "data" and a.get("data-file") == str(idx):
            g, _, L = a["data-table"].partition(":")
            got[(g, int(L) if L else int(a["data-rows"]))] = (a, rows)
    for (g, n), cols in want.items():
        name = "%s (length %d)" % (g, n)
        if (g, n) not in got:
            fail("%s: table %s absent from the page" % (path, name))
            continue
        a, rows = got[(g, n)]
        header = [c[1]["data-col"] for c in rows[0]]
        if sorted(header) != sorted(cols) or int(a["data-rows"]) != n:
            fail("%s: table %s: columns %s rows %s, expected %s rows %d" %
                 (path, name, header, a["data-rows"], sorted(cols), n))
            continue
        shown = int(a["data-shown"])
        if len(rows) - 1 != shown or not (shown == n or shown == 200):
            fail("%s: table %s: %d rows shown, attribute says %d of %d" % (path, name, len(rows) - 1, shown, n))
            continue
        bad = 0
        for r in range(shown):
            for c, (tag, at, txt) in zip(header, rows[r + 1]):
                v = cols[c][r]
                if isinstance(v, (bytes, str)):
                    good = txt == text_of(v)
                else:
                    good = same(at.get("data-v", ""), v)
                if not good:
                    bad += 1
                    if bad < 4:
                        print("    %s/%s row %d: page %r / %r, file %r" % (name, c, r, txt, at.get("data-v"), v))
        if bad:
            fail("%s: table %s: %d cells differ from the file" % (path, name, bad))
        else:
            ok("%s: table %s: %d rows x %d columns equal the file" % (path, name, shown, len(header)))
    extra = sorted(set(got) - set(want))
    (fail if extra else ok)("%s: no table in the page that the file lacks %s" % (path, extra if extra else ""))
    # provenance: every root attribute with its value
    tabs = [rows for a, rows in page.tables
            if "root" in a.get("class", "") and a.get("data-input") == str(idx)]
    if not tabs:
        fail("%s: no provenance table" % path)
        return
    have = {r[0][2]: r[1][2] for rows in tabs for r in rows[1:]}
    bad = [k for k, v in root.items()
           if k not in have or (isinstance(v, (bytes, str)) and have[k] != text_of(v))
           or (not isinstance(v, (bytes, str)) and np.ndim(v) == 0 and not same(have[k], v))]
    if bad:
        fail("%s: root attributes missing or different in the provenance table: %s" % (path, bad))
    else:
        ok("%s: all %d root attributes in the provenance table" % (path, len(root)))


def check_ranking(page, idx, path):
    with h5py.File(path, "r") as f:
        s = {k: f["summary"][k][()] for k in f["summary"]}
        d = np.array([f.attrs["d_c"], f.attrs["d_r"]], dtype=float)
        p = {k: f["predict"][k][()] for k in f["predict"]} if "predict" in f else None
    layers = [int(x) for x in s["layer"]]
    R = {(L, 0): s["response_content"][i] for i, L in enumerate(layers)}
    R.update({(L, 1): s["response_rope"][i] for i, L in enumerate(layers)})
    deg = s.get("degenerate", np.zeros(len(layers)))
    key = {k: (np.nan if deg[layers.index(k[0])] else v) for k, v in R.items()}
    order = sorted(key, key=lambda k: (np.isnan(key[k]), -key[k] if not np.isnan(key[k]) else 0,
                                       layers.index(k[0]), k[1]))
    tabs = [rows for a, rows in page.tables if a.get("class") == "rank" and a.get("data-file") == str(idx)]
    if not tabs:
        fail("%s: no ranking table" % path)
        return
    rows = tabs[0][1:]
    got = [(int(r[1][2]), 0 if r[2][2] == "content" else 1) for r in rows]
    if got != order:
        fail("%s: ranking %s, expected %s" % (path, got, order))
    else:
        ok("%s: %d (layer, path) ranked by decreasing response" % (path, len(order)))
    bad = [k for k, r in zip(got, rows) if not same(r[3][1]["data-v"], R[k])]
    (fail if bad else ok)("%s: ranked responses equal /summary%s" % (path, " at %s" % bad if bad else ""))
    if p is not None:
        sel = (p["heldout"] == 0) & (p["degenerate"] == 0)
        badg = []
        for k, r in zip(got, rows):
            m = sel & (p["layer"] == k[0]) & (p["path"] == k[1])
            for col, name in ((6, "g_finite"), (7, "g_jvp")):
                want = p[name][m].mean() if m.any() else np.nan
                v = float(r[col][1]["data-v"])
                if not (np.isnan(want) and np.isnan(v)) and not abs(v - want) <= 1e-12 * abs(want):
                    badg.append((k, name, v, want))
        (fail if badg else ok)("%s: ranked /predict development-direction mean gains equal NumPy's%s"
                               % (path, " %s" % badg[:3] if badg else ""))
    # the greedy allocation, rerun here
    widths = [2, 3, 4, 8]
    bud = [a["data-budget"] for t, a in page.tags if t == "div" and a.get("data-file") == str(idx)][0]
    bud = (int(bud[1]), int(bud[3]))
    items = [(L, q) for L in layers for q in (0, 1)]
    use = {k: np.isfinite(key[k]) and key[k] > 0 for k in items}
    bits = {k: (2 if use[k] else bud[k[1]]) for k in items}
    left = sum(d[q] * bud[q] for L, q in items) - sum(d[k[1]] * bits[k] for k in items)
    while True:
        best, pick = 0.0, None
        for k in items:
            if not use[k] or bits[k] == 8:
                continue
            nb = widths[widths.index(bits[k]) + 1]
            cost = d[k[1]] * (nb - bits[k])
            if cost > left + 1e-9:
                continue
            g = key[k] * (4.0 ** -bits[k] - 4.0 ** -nb) / cost
            if g > best:
                best, pick = g, (k, nb)
        if pick is None:
            break
        left -= d[pick[0][1]] * (pick[1] - bits[pick[0]])
        bits[pick[0]] = pick[1]
    want_line = ",".join("%d:C%dR%d" % (L, bits[(L, 0)], bits[(L, 1)]) for L in layers)
    got_line = page.spans.get("data-per-layer", "")
    (ok if got_line == want_line else fail)("%s: per-layer suggestion %s (NumPy: %s)" % (path, got_line, want_line))
    got_bits = [int(r[10][2]) for r in rows]
    (ok if got_bits == [bits[k] for k in got] else fail)("%s: bits column equals the allocation" % path)

    def err(u):
        return sum(key[k] * 4.0 ** -u[k[1]] for k in items if use[k])
    best, be = bud, err(bud)
    for x in widths:
        for y in widths:
            if d[0] * x + d[1] * y <= d[0] * bud[0] + d[1] * bud[1] + 1e-9 and err((x, y)) < be * (1 - 1e-12):
                best, be = (x, y), err((x, y))
    uni = [a.get("data-uniform") for t, a in page.tags if "data-uniform" in a]
    (ok if uni == ["C%dR%d" % best] else fail)("%s: uniform suggestion %s (NumPy: C%dR%d)" % (path, uni, *best))
    if p is not None:
        S, off, T = p["sensitivity"], p["sens_offset"], p["sens_T"]
        series = []
        for o, t in zip(off, T):
            series += [S[o:o + t], S[o + t:o + 2 * t]]
        lim = min(T) // 4
        s_ = 0
        while s_ < lim and 2 * sum(x[s_] >= 8 * x.mean() for x in series) >= len(series):
            s_ += 1
        want_pol = "sink%d/local128" % s_ if s_ else "none"
        got_pol = page.spans.get("data-policy", "")
        (ok if got_pol == want_pol else fail)("%s: policy %s (NumPy: %s)" % (path, got_pol, want_pol))


def main():
    mode = sys.argv[1]
    page = parse(sys.argv[2])
    if mode == "dom":
        figdir, inputs = sys.argv[3], sys.argv[4:]
        import os
        verdict = [a.get("data-render-check") for t, a in page.tags if t == "html"][0]
        figs = [a["data-figure"] for t, a in page.tags if t == "figure"]
        svgs = sorted(x[:-4] for x in os.listdir(figdir) if x.endswith(".svg"))
        (ok if sorted(figs) == svgs and svgs else fail)(
            "figures in the page %s = qmla figures' SVG files %s" % (sorted(figs), svgs))
        want = "ok %d svg 0 img" % len(figs)
        (ok if verdict == want else fail)("render check %r (expected %r)" % (verdict, want))
        for i, path in enumerate(inputs):
            check_tables(page, i, path)
            check_ranking(page, i, path)
    elif mode == "rank":
        for i, path in enumerate(sys.argv[3:]):
            check_ranking(page, i, path)
    else:
        scripts = [t for t, a in page.tags if t == "script"]
        (ok if len(scripts) == 1 else fail)("%d <script> elements (the page's own: 1)" % len(scripts))
        badtags = [t for t, a in page.tags if t in ("img", "iframe", "object", "embed")]
        onattr = [(t, k) for t, a in page.tags for k in a if k.startswith("on")]
        (ok if not badtags and not onattr else fail)(
            "no injected element or handler (%s %s)" % (badtags, onattr))
        text = "".join(page.texts)
        for h in sys.argv[3:]:
            (ok if h in text else fail)("hostile string %r shown as text" % h)
    sys.exit(1 if fails else 0)


main()
