"""The near search's comparison inside one band (``matching.found``): every record of a
band compared with every other, however many unrelated records share the band."""

from __future__ import annotations

import random

import numpy as np

from tfrecorder._report import matching, measures


def _thumb(seed: int) -> bytes:
    return np.random.default_rng(seed).integers(-100, 100, 64, dtype=np.int8).tobytes()


def _near_pairs(members: list, band: int, distance: int = measures.MAX_DISTANCE) -> list:
    return [p for kind, *rest in matching.found(("n", distance, band, 0), members)
            if kind == "near" for p in rest[0]]


def test_a_band_of_a_large_table_is_compared_whole():
    # A 9-bit band holds about 1/512 of a large table's records, alike or not: 600
    # unrelated records here. A pair placed after the first 256 of them in the band's
    # order is found (it was left out uncompared when a band was cut at 256).
    rng = random.Random(7)
    members = [(rng.getrandbits(64), f"{rng.getrandbits(64):016x}", ("train", 0, k), _thumb(k))
               for k in range(600)]
    h = members[-1][0]
    copy = (h ^ 0b11, f"{rng.getrandbits(64):016x}", ("validation", 0, 0), members[-1][3])
    band = next(b for (b, x), (_, y) in zip(matching.bands(h), matching.bands(copy[0]))
                if x == y)
    assert _near_pairs([*members, copy], band) == [(2, "near", ("train", 0, 599),
                                                    ("validation", 0, 0))]


def test_a_band_compares_all_pairs_and_nothing_else():
    # Against a plain loop over every pair: the same pairs and distances, the records of
    # the same bytes (their digests agree) never a near pair, each pair once.
    rng = random.Random(3)
    base = [rng.getrandbits(64) for _ in range(40)]
    members = []
    for k in range(300):
        h = base[k % 40] ^ (1 << rng.randrange(64)) if k >= 40 else base[k]
        sha = f"{k % 45:016x}"  # some records share their bytes
        members.append((h, sha, ("train", k // 100, k), _thumb(k % 40)))
    expected = set()
    for i in range(len(members)):
        for j in range(i + 1, len(members)):
            a, b = members[i], members[j]
            d = (a[0] ^ b[0]).bit_count()
            first = next((band for (band, x), (_, y)
                          in zip(matching.bands(a[0]), matching.bands(b[0])) if x == y), None)
            if d <= measures.MAX_DISTANCE and a[1] != b[1] and first == 0:
                expected.add((d, a[2], b[2]))
    found = _near_pairs(members, 0)
    assert len(found) == len(set(found))
    assert {(d, a, b) for d, _, a, b in found} == expected
    assert expected  # the comparison has pairs to find


def test_popcount_without_numpy_2_counts_the_same():
    x = np.array([0, 1, 2**64 - 1, 0xF0F0, 2**63], dtype=np.uint64)
    assert matching._popcount(x).tolist() == [0, 1, 64, 8, 1]
    # the table fallback, for NumPy before 2.0
    table = np.array([bin(v).count("1") for v in range(256)], dtype=np.uint8)
    assert table[x.view(np.uint8)].reshape(*x.shape, 8).sum(-1).tolist() == [0, 1, 64, 8, 1]
