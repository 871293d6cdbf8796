#!/usr/bin/env python3
"""scripts/cubin-text-cmp.py BASE.cubin NEW.cubin — compare the machine code
of two CUDA cubins kernel by kernel (no cuobjdump needed): each .text.<kernel>
section byte for byte. Prints one line per kernel of BASE that differs or is
gone (with the number of differing 16-byte instructions), then a summary
line and the kernels only NEW has. Exit 0 when every kernel of BASE is
byte-identical in NEW, 1 otherwise. Used for "the f16 decode kernels compile
to the same code" (docs/decode.md, H200 run 13). Build the cubins with the
same nvcc flags, e.g. nvcc ... -arch=sm_90a -cubin -o X.cubin kernels/decode.cu.
"""
import struct
import sys


def text_sections(path):
    d = open(path, "rb").read()
    if d[:4] != b"\x7fELF" or d[4] != 2:
        sys.exit(f"{path}: not a 64-bit ELF cubin")
    shoff = struct.unpack_from("<Q", d, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
    sh = [struct.unpack_from("<IIQQQQ", d, shoff + i * shentsize) for i in range(shnum)]
    stro = sh[shstrndx][4]
    out = {}
    for name, _typ, _flags, _addr, off, size in sh:
        n = d[stro + name:d.index(b"\0", stro + name)].decode()
        if n.startswith(".text."):
            out[n[6:]] = d[off:off + size]
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: cubin-text-cmp.py BASE.cubin NEW.cubin")
    b, n = text_sections(sys.argv[1]), text_sections(sys.argv[2])
    same = 0
    for k in sorted(b):
        x, y = b[k], n.get(k)
        if y == x:
            same += 1
        elif y is None:
            print(f"GONE {k}")
        else:
            nd = sum(1 for i in range(0, max(len(x), len(y)), 16) if x[i:i + 16] != y[i:i + 16])
            print(f"DIFF {k}: {len(x)} -> {len(y)} bytes, {nd} instructions differ")
    print(f"kernels identical: {same} of {len(b)}; only in {sys.argv[2]}: "
          + (", ".join(sorted(set(n) - set(b))) or "none"))
    return 0 if same == len(b) else 1


if __name__ == "__main__":
    sys.exit(main())
