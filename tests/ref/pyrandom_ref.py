# tests/ref/pyrandom_ref.py — the expected values of tests/core/test_pyrandom.c: one line per
# seed, Python's random.Random(seed) through the same sequence of calls as
# ops() there. tests/ref/pyrandom_expected.h is this script's output under
# /usr/bin/python3 3.11.2 (used when no Python is available at test time).
import random
for seed in (0, 1, 2, 42, 12345, 4294967295, 4294967296, 2**63 + 5):
    r = random.Random(seed)
    out = [r.getrandbits(32) for _ in range(4)]
    out += [r.getrandbits(1), r.getrandbits(17), r.getrandbits(33), r.getrandbits(64)]
    out += [r.randint(0, 0), r.randint(0, 1), r.randint(0, 7), r.randint(3, 10)]
    out += [r.randint(0, 1999817 - 8 * 511) for _ in range(3)]
    out += [r.randint(0, 2**40), r.randint(5, 2**62)]
    rest = [r.getrandbits(32) for _ in range(1300)]
    out += [rest[600], rest[623], rest[624], rest[1299]]
    print(" ".join(str(v) for v in out))
