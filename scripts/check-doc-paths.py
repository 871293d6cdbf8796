#!/usr/bin/env python3
"""scripts/check-doc-paths.py [ROOT] — every repository path that a document
(README.md, docs/*.md, and the README.md of every folder) cites must exist in
the tree: a path is a word that starts with one of the project's top-level
folders (lib/, cli/, tests/, docs/, ...) or is one of its top-level files.
Globs (*, ?, {a,b}) must match at least one file. Paths under build
directories and $OUT-style run folders are not repository paths and are
skipped. Prints each missing path as FILE:LINE: PATH and exits 1 if any."""
import glob, os, re, sys
root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))
tops = ('lib', 'cli', 'tests', 'docs', 'bench', 'kernels', 'scripts', 'experiments',
        'python', 'plots', 'include', 'data', 'models', 'fuzz')
word = re.compile(r'(?<![A-Za-z0-9_.$/~-])((?:%s)/[A-Za-z0-9_*?{},./+-]*)' % '|'.join(tops))
def expand(p):
    m = re.search(r'\{([^{}]*)\}', p)
    if not m:
        return [p]
    return [q for alt in m.group(1).split(',') for q in expand(p[:m.start()] + alt + p[m.end():])]
docs = [os.path.join(root, 'README.md')] + glob.glob(os.path.join(root, 'docs', '*.md'))
for d, _, fs in os.walk(root):
    rel = os.path.relpath(d, root)
    if rel.startswith(('build', '.', 'docs/evidence')) or '/.' in rel:
        continue
    if rel != '.' and 'README.md' in fs:
        docs.append(os.path.join(d, 'README.md'))
bad = 0
for doc in sorted(set(docs)):
    for n, line in enumerate(open(doc, encoding='utf-8'), 1):
        for p in word.findall(line):
            p = p.rstrip('.,:;')
            if not p or p.endswith('/') and os.path.isdir(os.path.join(root, p)):
                continue
            if any(glob.glob(os.path.join(root, q)) for q in expand(p)):
                continue
            print('%s:%d: %s' % (os.path.relpath(doc, root), n, p))
            bad += 1
print('%d missing path(s) cited' % bad, file=sys.stderr)
sys.exit(1 if bad else 0)
