"""Matching, in the pipeline: every record keyed by its digest and by bands of its hash
(``keyed``), so that one grouping brings together the records that may match and
nothing else; what each group holds (``found``, where a near pair counts only when
the thumbnails agree too); the matches' records made whole from the rows files
(``full_refs``), and the same in memory (``matches``).

Its own module because it is the only work across records: the pipeline's grouping
wires it (no Beam here), and each group it looks at is bounded (``GROUP_LIMIT``,
``BAND_LIMIT``, ``MAX_PAIRS``) whatever the dataset's size.
"""

from __future__ import annotations

import array
import heapq
from typing import Iterable, Iterator

from tfrecorder._folder.layout import split_order
from tfrecorder._report.measures import MAX_DISTANCE, confirmed

#: Pairs written to quality.json at most; ``truncated`` counts the rest.
MAX_PAIRS = 10_000
#: Records of one group of identical bytes that are listed (a folder of blank images):
#: every pair among all of them is counted, the rest listed in ``truncated``.
GROUP_LIMIT = 256
#: Records of one band value that are compared, all against all (``found``). A band
#: of 9 bits holds about 1/512 of a large table's records whether they match or not
#: (about 400 of 200,000), so this bounds only very large tables or a band that many
#: alike pictures share (blank images); the rest are counted in ``truncated``.
BAND_LIMIT = 4096
#: Rows of the distance matrix a band's comparison holds at once (``_close``).
_CHUNK = 256


def bands(h: int, max_distance: int = MAX_DISTANCE) -> list[tuple[int, int]]:
    """``(band, value)`` of the ``max_distance + 1`` bands a 64-bit hash is cut into: two
    hashes within ``max_distance`` bits agree on at least one band (pigeonhole)."""
    n = max_distance + 1
    out, start = [], 0
    for b in range(n):
        width = 64 // n + (1 if b < 64 % n else 0)
        out.append((b, (h >> start) & ((1 << width) - 1)))
        start += width
    return out


#: Records per group of the exact search (``exact_buckets``).
EXACT_GROUP = 4096


def exact_buckets(records: int) -> int:
    """Into how many groups the exact search puts ``records`` records (by their digest):
    a few thousand records each, so that a grouping moves a few elements per shard, not
    one per record, and no group outgrows a worker whatever the dataset's size."""
    return max(1, records // EXACT_GROUP)


def keyed(seen: Iterable[tuple], near: bool, buckets: int = 1,
          distance: int = MAX_DISTANCE) -> Iterator[tuple]:
    """The grouping keys of one shard's records: ``(("x", bucket), (digests, split,
    shard, positions))`` for exact matches, the shard's records of each of ``buckets``
    groups of digests (``exact_buckets``) together (``digests``: their SHA-256 values,
    32 bytes each, one after the other; ``positions``: ``array("q")`` bytes, in the same
    order), and with ``near`` ``(("n", distance, band, value), (hash, sha, place,
    thumbnail))`` per band of ``distance``, for each record with enough detail to match.
    Bytes travel through a grouping for almost nothing; a tuple per record cost the
    decoding of each.

    A record is under ``distance + 1`` band keys: those carry only what matching needs,
    the hash, 64 bits of the digest (to leave out records of the same bytes), the
    record's place ``(split, shard, position)`` and its 64-byte thumbnail; the last step finds the rest of a pair's records
    in their rows files (``full_refs``). A grouping holds every key's values at once
    (the DirectRunner, in memory): the whole ref under each band key held four times
    as much."""
    by_bucket: dict[int, tuple[list, array.array]] = {}
    split = shard = None
    for sha, h, ref in seen:
        split, shard = ref[0], ref[1]  # the same for every record of the shard
        digests, positions = by_bucket.setdefault(int(sha[:15], 16) % buckets,
                                                  ([], array.array("q")))
        digests.append(sha)
        positions.append(ref[2])
        if near and h is not None and h[1] is not None:
            small = (h[0], sha[:16], ref[:3], h[1])
            for b, value in bands(h[0], distance):
                yield ("n", distance, b, value), small
    for bucket, (digests, positions) in by_bucket.items():
        yield ("x", bucket), (bytes.fromhex("".join(digests)), split, shard,
                              positions.tobytes())


def ref_order(ref: tuple) -> tuple:
    # train before validation before test, then file order: the same pair, the same way
    return (split_order(ref[0]), ref[0], ref[1], ref[2])


def pair_order(p: tuple) -> tuple:
    """Leaks first, exact before near, closest first, then by the two records' places."""
    d, kind, a, b = p
    return (a[0] == b[0], kind != "exact", d, ref_order(a), ref_order(b))


def _pair_counts(pairs: Iterable[tuple]) -> dict:
    counts = {"leaks": {"exact": 0, "near": 0}, "duplicates": {"exact": 0, "near": 0}}
    for _, kind, a, b in pairs:
        counts["leaks" if a[0] != b[0] else "duplicates"][kind] += 1
    return counts


def _bounded(members: list, ref_of, limit: int = GROUP_LIMIT) -> list:
    """The first ``limit`` of ``members`` (in ``ref_order``), where the first member
    of every split the group spans is one: a group cut to the records of one split
    would count its leaks and list none of them."""
    if len(members) <= limit:
        return members
    firsts: dict[str, int] = {}
    for i, m in enumerate(members):
        firsts.setdefault(ref_of(m)[0], i)
    chosen = set(firsts.values())
    for i in range(len(members)):
        if len(chosen) >= limit:
            break
        chosen.add(i)
    return [members[i] for i in sorted(chosen)]


def _same_bytes(sha: str, refs: list) -> tuple:
    """``("exact", sha256, refs, counts)`` of records with the same bytes (``found``)."""
    refs.sort(key=ref_order)
    per_split: dict[str, int] = {}
    for r in refs:
        per_split[r[0]] = per_split.get(r[0], 0) + 1
    k = len(refs)
    within = sum(n * (n - 1) // 2 for n in per_split.values())
    counts = {"leaks": {"exact": k * (k - 1) // 2 - within, "near": 0},
              "duplicates": {"exact": within, "near": 0},
              "members": max(0, k - GROUP_LIMIT)}
    return "exact", sha, _bounded(refs, lambda r: r), counts


def found(key: tuple, members: Iterable) -> Iterator[tuple]:
    """What one group holds, bounded whatever its size:

    - for a group of digests (``keyed``), ``("exact", sha256, refs, counts)`` per digest
      several records have: the first GROUP_LIMIT refs, and ``counts`` of every pair
      among all of them (``{"leaks": {"exact": n, ...}, "duplicates": {...},
      "members": left out}``);
    - ``("near", pairs, counts)`` for the records of a band: the pairs
      ``(distance, "near", ref_a, ref_b)`` within the key's distance whose bytes differ
      and whose thumbnails agree (``confirmed``), each found in the first band its two
      hashes agree on, at most MAX_PAIRS of them, and
      the counts of all that were found among the first GROUP_LIMIT members.
    """
    if key[0] == "x":
        by_sha: dict[bytes, list] = {}
        for digests, split, shard, positions in members:  # each shard's, of this group
            at = array.array("q")
            at.frombytes(positions)
            for i, pos in enumerate(at):
                by_sha.setdefault(digests[32 * i:32 * i + 32], []).append((split, shard, pos))
        for sha, refs in by_sha.items():
            if len(refs) > 1:
                yield _same_bytes(sha.hex(), refs)
        return
    members = list(members)
    if len(members) < 2:
        return
    distance, band = key[1], key[2]
    members.sort(key=lambda m: ref_order(m[2]))
    skipped = max(0, len(members) - BAND_LIMIT)
    members = _bounded(members, lambda m: m[2], BAND_LIMIT)
    pairs = []
    for i, j, d in _close(members, distance):
        (ha, _, ra, ta), (hb, _, rb, tb) = members[i], members[j]
        first = next(b for (b, x), (_, y) in zip(bands(ha, distance), bands(hb, distance))
                     if x == y)
        # The thumbnails last: few pairs come this far.
        if first == band and confirmed(ta, tb):
            pairs.append((d, "near", ra, rb))
    if pairs or skipped:
        counts = _pair_counts(pairs)
        counts["members"] = skipped
        yield "near", heapq.nsmallest(MAX_PAIRS, pairs, key=pair_order), counts


def _close(members: list, distance: int) -> Iterator[tuple[int, int, int]]:
    """``(i, j, bits)`` for each pair ``i < j`` of a band's members whose hashes differ in
    at most ``distance`` bits and whose bytes differ (the 64 bits of digest they carry):
    all against all in NumPy, ``_CHUNK`` rows at a time. A band of a large table holds
    hundreds of records, a loop over their pairs in Python took most of a 200,000-row
    conversion's time."""
    import numpy as np

    hashes = np.array([m[0] for m in members], dtype=np.uint64)
    ids: dict = {}  # the same bytes, the same number
    digests = np.array([ids.setdefault(m[1], len(ids)) for m in members], dtype=np.int64)
    n = len(members)
    for start in range(0, n - 1, _CHUNK):
        rows = slice(start, min(start + _CHUNK, n))
        bits = _popcount(hashes[rows, None] ^ hashes[None, :])
        near = (bits <= distance) & (digests[rows, None] != digests[None, :])
        # each pair once: j after i
        near &= np.arange(n)[None, :] > np.arange(rows.start, rows.stop)[:, None]
        for i, j in zip(*np.nonzero(near)):
            yield start + int(i), int(j), int(bits[i, j])


def _popcount(x):
    """The bits set in each element of a uint64 array."""
    import numpy as np

    if hasattr(np, "bitwise_count"):  # NumPy 2
        return np.bitwise_count(x)
    table = np.array([bin(v).count("1") for v in range(256)], dtype=np.uint8)
    return table[x.view(np.uint8)].reshape(*x.shape, 8).sum(-1)


def full_refs(near: list, rows_of, exact: list = ()) -> tuple[list, list]:
    """The near pairs and exact groups ``found`` gives (each record a place ``(split,
    shard, position)``) with each record's whole ref, ``(split, shard, position, row,
    image_uri, label ids)``: ``(near, exact)``. ``rows_of(split, shard)`` gives a shard's
    records' ``(row, image_uri, label ids)`` by position (its rows file), or None where
    there is none (its records keep their places); each shard is asked once, and only
    shards that hold a record of a pair or group."""
    needed: dict[tuple, set] = {}
    places = [p for pairs, _ in near for _, _, a, b in pairs for p in (a, b)]
    places += [r for _, refs, _ in exact for r in refs]
    for place in places:
        needed.setdefault(place[:2], set()).add(place[2])
    whole: dict[tuple, tuple] = {}
    for (split, shard), positions in needed.items():
        found = rows_of(split, shard)
        if found is None:
            continue
        for pos in positions:
            whole[(split, shard, pos)] = (split, shard, pos, *found[pos])
    return ([([(d, kind, whole.get(a[:3], a), whole.get(b[:3], b)) for d, kind, a, b in pairs],
              counts) for pairs, counts in near],
            [(sha, [whole.get(r[:3], r) for r in refs], counts) for sha, refs, counts in exact])


def matches(shards: Iterable, near: bool) -> tuple[list, list]:
    """``(exact, near)`` as the pipeline finds them (``keyed``, a grouping, ``found``),
    in memory: for an update that writes no shard, whose last step runs on the driver."""
    groups: dict[tuple, list] = {}
    for s in shards:
        if s.look is not None:
            for key, value in keyed(s.look.seen, near, distance=s.look.distance):
                groups.setdefault(key, []).append(value)
    exact, pairs = [], []
    for key, members in groups.items():
        for e in found(key, members):
            (exact if e[0] == "exact" else pairs).append(e[1:])
    return exact, pairs
