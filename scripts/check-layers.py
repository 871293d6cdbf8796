#!/usr/bin/env python3
"""scripts/check-layers.py [ROOT] — the library's areas include only the
areas below them (docs/architecture.md). Every #include "..." of a file in
lib/<area>/ names a public header (qmla/<name>.h, owned by the area in OWNER)
or a private one (<area>/<name>.h, owned by its folder); an include of an
area that ALLOWED does not list for the including area is printed as
FILE:LINE: area -> area (header) and the script exits 1. Public headers in
include/qmla/ are checked the same way under their owner's rules."""
import os
import re
import sys

root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))
OWNER = {
    'status': 'core', 'exec': 'core', 'engine': 'core', 'outpath': 'core', 'pyrandom': 'core', 'hash': 'core',
    'table': 'io', 'export': 'io', 'text': 'io',
    'quant': 'quant', 'quant_core': 'quant',
    'attention': 'attention', 'rope': 'attention', 'norms': 'attention',
    'capture': 'capture', 'synth': 'capture',
    'sweep': 'sweep', 'part': 'sweep', 'results': 'sweep', 'response': 'sweep',
    'jvp': 'operator', 'predict': 'operator', 'intervene': 'operator',
    'transform': 'transform', 'learn': 'transform', 'tfeval': 'transform', 'tmethod': 'transform',
    'model': 'engine', 'capture_native': 'engine', 'ppl': 'engine',
    'kvcache': 'cache', 'decode': 'cache', 'bench_results': 'cache', 'allocation': 'cache',
    'allocate': 'allocate',
    'serve_sim': 'serve',
    'job': 'driver',
}
# Each area and the areas it may include (besides itself), lowest first.
ALLOWED = {
    'core': set(),
    'quant': {'core'},
    'io': {'core'},
    'attention': {'core'},
    'cache': {'core', 'quant', 'io'},
    'capture': {'core', 'io', 'quant', 'attention'},
    'sweep': {'core', 'io', 'quant', 'attention', 'capture'},
    'operator': {'core', 'io', 'quant', 'attention', 'capture', 'sweep'},
    'transform': {'core', 'io', 'quant', 'attention', 'capture', 'cache'},
    'engine': {'core', 'io', 'quant', 'attention', 'capture', 'cache', 'transform'},
    'serve': {'core', 'io', 'cache'},
    'allocate': {'core', 'io', 'quant', 'attention', 'capture', 'sweep', 'operator', 'cache',
                 'transform'},
    'driver': {'core', 'io', 'quant', 'attention', 'capture', 'sweep', 'operator', 'transform',
               'engine', 'cache', 'serve', 'allocate'},
}
inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
bad = 0
files = []
for area in sorted(os.listdir(os.path.join(root, 'lib'))):
    d = os.path.join(root, 'lib', area)
    if os.path.isdir(d):
        if area not in ALLOWED:
            print('lib/%s: an area docs/architecture.md and this script do not know' % area)
            bad += 1
            continue
        files += [(area, os.path.join(d, f)) for f in sorted(os.listdir(d)) if f.endswith(('.c', '.h'))]
for f in sorted(os.listdir(os.path.join(root, 'include', 'qmla'))):
    name = f[:-2]
    if name not in OWNER:
        print('include/qmla/%s: a public header with no owning area in scripts/check-layers.py' % f)
        bad += 1
        continue
    files.append((OWNER[name], os.path.join(root, 'include', 'qmla', f)))
for area, path in files:
    for n, line in enumerate(open(path, encoding='utf-8'), 1):
        m = inc.match(line)
        if not m:
            continue
        h = m.group(1)
        if h.startswith('qmla/'):
            to = OWNER.get(h[5:-2])
        elif '/' in h:
            to = h.split('/')[0]
        else:
            continue  # generated (qmla_config.h, qmla_commit.h) or same folder
        if to is None:
            print('%s:%d: includes %s, which has no owning area' % (os.path.relpath(path, root), n, h))
            bad += 1
        elif to != area and to not in ALLOWED[area]:
            print('%s:%d: %s -> %s (%s)' % (os.path.relpath(path, root), n, area, to, h))
            bad += 1
print('%d layering violation(s)' % bad, file=sys.stderr)
sys.exit(1 if bad else 0)
