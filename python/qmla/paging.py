"""python/qmla/paging.py — the host side of the paged MLA cache (issue 21):
page sizes, the free-page pool, block tables and slots, the sink/window
protection rule and the plan buckets, in plain Python (no torch, no NumPy),
so that qmla.torch.MLAPagedCache's bookkeeping is tested on a machine
without torch (tests/serve/test_paging.py).

Layout and rule: include/qmla/kvcache.h, docs/decode.md. A page holds
PAGE = 64 tokens; a sequence's block table maps its logical page i to a
physical page; slot = page * 64 + offset. One block table serves every
layer (each layer has its own pool with the same page numbering), as in
vLLM.
"""

PAGE = 64
D_C, D_R = 512, 64
D = D_C + D_R

CONFIGS = ("C4R4", "C2R4", "C8R8", "BF16")
# metadata formats of the packed pages (include/qmla/kvcache.h, qmla_kv_config.meta):
# the code the qmla:: operators take as cfg[5]
METAS = {"f16": 0, "q8": 2}
# q8 pages: the configurations and decode variants that read them
# (kernels/decode.cu q8_variant: decode_fast_q8_kernel, H200 decode run 13);
# every other variant, C8R8 and the gather read f16 metadata only
Q8_CONFIGS = ("C4R4", "C2R4")
Q8_VARIANTS = (0, 1, 3, 4, 7)


class PagingError(ValueError):
    """A refused request: the message names what was asked and what is left."""


def parse_config(name, sink=4, window=128, group=64, meta="f16"):
    """'C4R4' / 'C2R4' / 'C8R8' / 'BF16' -> dict(c_bits, r_bits, group, sink,
    window, meta) as the decode kernels take it (the BF16 cache keeps no
    separate protection buffers: sink = window = 0, and no metadata: meta
    f16). meta: 'f16' or 'q8' (C4R4 / C2R4 only: Q8_CONFIGS)."""
    if meta not in METAS:
        raise PagingError(f"cache config {name!r}: metadata {meta!r}: expected one of "
                          f"{', '.join(METAS)}")
    if name.upper() == "BF16":
        if meta != "f16":
            raise PagingError(f"cache config {name!r} with {meta} metadata: a BF16 cache "
                              "stores no metadata (expected meta 'f16', the default)")
        return dict(c_bits=16, r_bits=16, group=group, sink=0, window=0, meta="f16")
    if name not in CONFIGS:
        raise PagingError(f"cache config {name!r}: expected one of {', '.join(CONFIGS)} "
                          "(the configurations the decode kernel is built for)")
    if meta == "q8" and name not in Q8_CONFIGS:
        raise PagingError(f"cache config {name!r} with q8 metadata: the decode kernel reads "
                          f"q8 pages for {' / '.join(Q8_CONFIGS)} only (variants "
                          f"{', '.join(map(str, Q8_VARIANTS))}); {name} reads f16 metadata")
    c, r = (int(v) for v in name[1:].split("R"))
    if group != 64:
        raise PagingError(f"group {group}: the decode kernel takes groups of 64")
    if sink < 0 or window < 0:
        raise PagingError(f"sink {sink} / window {window}: expected >= 0")
    return dict(c_bits=c, r_bits=r, group=group, sink=int(sink), window=int(window), meta=meta)


def split_cache_name(name):
    """'C4R4q8' -> ('C4R4', 'q8'); 'C4R4' -> ('C4R4', 'f16'): the names the
    experiments use for a configuration with its metadata (as
    tests/cache/test_decode_cuda.c names C4R4q8)."""
    if name.endswith("q8"):
        return name[:-2], "q8"
    return name, "f16"


def check_variant(cfg, variant, name=None):
    """Refuse (PagingError) a decode variant that does not read this cache's
    pages: q8 pages are read by Q8_VARIANTS only (kernels/decode.cu
    q8_variant; the plan refuses the others too, this says it before any
    device work). The message names configuration, variant and metadata."""
    if cfg.get("meta", "f16") == "q8" and int(variant) not in Q8_VARIANTS:
        nm = name or f"C{cfg['c_bits']}R{cfg['r_bits']}"
        raise PagingError(f"cache config {nm} with q8 metadata: decode variant {variant} reads "
                          "f16-metadata pages only; q8 pages are read by variants "
                          f"{', '.join(map(str, Q8_VARIANTS))} (7 the default)")


def cfg_list(cfg):
    """The int[] cfg of the qmla:: operators: [c_bits, r_bits, group, sink,
    window, meta] (meta: METAS' code, 0 f16, 2 q8; the operators also take
    the first five alone, f16)."""
    return [cfg["c_bits"], cfg["r_bits"], cfg["group"], cfg["sink"], cfg["window"],
            METAS[cfg.get("meta", "f16")]]


def _packed_bytes(n, bits):
    return (n * bits + 7) // 8


def meta_bytes(cfg, groups):
    """Metadata bytes per token of one path of `groups` groups
    (include/qmla/kvcache.h): f16 4 per group (float16 step and minimum);
    q8 4 + 2 per group (float16 super-scales S, M and a step code and a
    minimum code per group)."""
    return 4 + 2 * groups if cfg.get("meta", "f16") == "q8" else 4 * groups


def page_bytes(cfg):
    """Bytes of one page (include/qmla/kvcache.h): 64 tokens of codes and
    metadata (meta_bytes) of each path; BF16: 64 x 576 x 2. C4R4 G 64:
    20736 (f16), 20096 (q8)."""
    if cfg["c_bits"] == 16:
        return PAGE * D * 2
    G = cfg["group"]
    cb = (D_C // G) * _packed_bytes(G, cfg["c_bits"]) + (D_R // G) * _packed_bytes(G, cfg["r_bits"])
    meta = meta_bytes(cfg, D_C // G) + meta_bytes(cfg, D_R // G)
    return PAGE * (cb + meta)


def bytes_per_token(cfg, context, layers=1):
    """Persistent cache bytes per token of one sequence of `context` tokens
    in this cache: whole pages, the BF16 sink/window rows, int32 block-table
    entries; times the layers (block table once). The per-layer figure
    (layers=1) without the page rounding is `qmla storage`'s."""
    pages = -(-context // PAGE)
    per_layer = pages * page_bytes(cfg) + (cfg["sink"] + cfg["window"]) * D * 2
    return (layers * per_layer + 4 * pages) / context


class PagePool:
    """Free physical pages 0 .. n_pages-1; the lowest free page first."""

    def __init__(self, n_pages):
        if n_pages < 1:
            raise PagingError(f"page pool of {n_pages} pages: expected >= 1")
        self.n_pages = n_pages
        self._free = list(range(n_pages - 1, -1, -1))     # pop() gives the lowest

    @property
    def free(self):
        return len(self._free)

    def alloc(self, k):
        if k > len(self._free):
            raise PagingError(f"page pool exhausted: {k} pages asked, {len(self._free)} of "
                              f"{self.n_pages} free")
        return [self._free.pop() for _ in range(k)]

    def release(self, pages):
        seen = set(self._free)
        for p in pages:
            if not 0 <= p < self.n_pages or p in seen:
                raise PagingError(f"page {p}: not an allocated page of this pool")
            seen.add(p)
        self._free.extend(sorted(pages, reverse=True))
        self._free.sort(reverse=True)


class BlockTables:
    """Per sequence: its length and its pages. `grow` reserves the pages a
    new length needs; `slots` gives the slots of positions; `table` the
    [batch][max_pages] rows (unused entries 0) the decode kernel reads."""

    def __init__(self, batch, max_len, pool):
        if batch < 1 or max_len < 1:
            raise PagingError(f"batch {batch}, max_len {max_len}: expected >= 1")
        self.batch, self.max_len, self.pool = batch, max_len, pool
        self.max_pages = -(-max_len // PAGE)
        self.pages = [[] for _ in range(batch)]
        self.lengths = [0] * batch

    def grow(self, seq, new_len):
        """Reserve pages so that sequence `seq` holds new_len tokens; returns
        the pages added. Refuses a length above max_len or a shrink."""
        if not 0 <= seq < self.batch:
            raise PagingError(f"sequence {seq}: expected 0 .. {self.batch - 1}")
        if new_len > self.max_len:
            raise PagingError(f"sequence {seq}: {new_len} tokens above the cache's max_len "
                              f"{self.max_len}")
        if new_len < self.lengths[seq]:
            raise PagingError(f"sequence {seq}: length {new_len} below its {self.lengths[seq]}")
        need = -(-new_len // PAGE) - len(self.pages[seq])
        added = self.pool.alloc(need) if need > 0 else []
        self.pages[seq].extend(added)
        self.lengths[seq] = new_len
        return added

    def grow_all(self, new_len):
        """Every sequence to at least new_len tokens, all or nothing: the
        pages the sequences below new_len need are counted first and the
        request refused (PagingError, nothing changed) when the pool has
        fewer free; were a sequence's growth to fail anyway, the ones grown
        before it are undone. Returns the growth record [(seq, old_len,
        added_pages)] of the sequences whose length changed (undo takes it)."""
        if new_len > self.max_len:
            raise PagingError(f"{new_len} tokens above the cache's max_len {self.max_len}: "
                              "nothing reserved")
        todo = [s for s in range(self.batch) if self.lengths[s] < new_len]
        need = sum(max(0, -(-new_len // PAGE) - len(self.pages[s])) for s in todo)
        if need > self.pool.free:
            raise PagingError(f"page pool exhausted: {len(todo)} sequences to {new_len} tokens "
                              f"need {need} pages, {self.pool.free} of {self.pool.n_pages} "
                              "free: nothing reserved")
        done = []
        try:
            for s in todo:
                old = self.lengths[s]
                done.append((s, old, self.grow(s, new_len)))
        except BaseException:
            self.undo(done)
            raise
        return done

    def undo(self, grown):
        """Undo a growth record of grow_all: each sequence back to its old
        length, its added pages back to the pool (the free list as before)."""
        for s, old, added in reversed(grown):
            if added:
                del self.pages[s][len(self.pages[s]) - len(added):]
                self.pool.release(added)
            self.lengths[s] = old

    def slots(self, seq, positions):
        ps = self.pages[seq]
        out = []
        for t in positions:
            if not 0 <= t < self.lengths[seq]:
                raise PagingError(f"sequence {seq}: position {t} outside its {self.lengths[seq]} "
                                  "tokens")
            out.append(ps[t // PAGE] * PAGE + t % PAGE)
        return out

    def release(self, seq):
        self.pool.release(self.pages[seq])
        self.pages[seq] = []
        self.lengths[seq] = 0

    def table(self):
        return [ps + [0] * (self.max_pages - len(ps)) for ps in self.pages]


def reserve(tables, new_len, upload):
    """Grow every sequence of `tables` to at least new_len tokens and hand
    the changed block-table rows to upload(seqs, rows) (MLAPagedCache: the
    copy into the device table), all or nothing: a refused growth changes
    nothing (BlockTables.grow_all), and when upload raises the growth is
    undone before the error goes on, so that the host tables never claim
    rows the device table lacks. Returns the sequences whose rows changed
    (a sequence that stays inside its last page changes no row)."""
    grown = tables.grow_all(new_len)
    changed = [s for s, _, added in grown if added]
    if changed:
        tab = tables.table()
        try:
            upload(changed, [tab[s] for s in changed])
        except BaseException:
            tables.undo(grown)
            raise
    return changed


def protected(cfg, t, length):
    """1 when token t of a sequence of `length` tokens is served from its
    BF16 row (t < sink or t >= length - window), as the kernels decide."""
    return t < cfg["sink"] or t >= length - cfg["window"]


def window_row(cfg, t):
    """Row of the window ring that holds token t (t mod W)."""
    return t % cfg["window"]


def plan_bucket(max_len, cap):
    """The max_len a decode plan is made for: the next power of two >= max_len
    (at least one page), at most `cap` (the block tables' reach), so that one
    plan serves every layer and many steps."""
    b = PAGE
    while b < max_len:
        b *= 2
    return max(min(b, cap), max_len)


FINE_FROM = 4096


def plan_bucket_fine(max_len, cap, per_octave=8):
    """The max_len MLAPagedCache makes a decode plan for (since serving run
    7): the smallest of the per_octave lengths that split each octave
    (2^k, 2^(k+1)] evenly, rounded up to whole pages, that is >= max_len,
    at most `cap`. So a plan covers at most 1 / per_octave more pages than
    the sequence has (a power-of-two bucket: up to twice as many, and
    variant 7 spreads the pages over the blocks of one wave by max_len, so
    a plan made for twice the pages leaves about half its packed blocks
    without pages), while one plan still serves every layer and many steps.
    Up to FINE_FROM (4096) tokens it is the power-of-two bucket
    (plan_bucket), so short sequences keep their plans (tiny-mla and the
    families of experiments/serving/generate.py stay below 1024 tokens;
    the benchmark's bucket is its cap either way)."""
    b = PAGE
    while b < max_len:
        b *= 2
    if max_len > FINE_FROM:
        lo, step = b // 2, b // 2 / per_octave
        k = 1
        while lo + k * step < max_len:
            k += 1
        b = min(b, -(-int(lo + k * step) // PAGE) * PAGE)
    return max(min(b, cap), max_len)


def chunks(T, heads, max_rows=1024):
    """[(start, stop)] pieces of T query tokens so that heads * piece <= max_rows
    (QMLA_DECODE_MAX_ROWS): a long prefill goes through the decode kernel in pieces."""
    per = max(1, max_rows // heads)
    if heads > max_rows:
        raise PagingError(f"{heads} heads above the decode kernel's {max_rows} query rows")
    return [(s, min(s + per, T)) for s in range(0, T, per)]
