"""The data report, ``quality.json``: built in the last step from the matches and every
shard's statistics (``build``: duplicates, leaks between splits, label conflicts,
groups of copies, image problems, statistics and Vertex AI's warnings), and checked
field by field when it is read back (``wrong``).

Each shard writer looks at every image it already holds (``looker.Looker``, with the
figures of ``measures``); the pipeline matches them (``matching``); this module turns
what they found into the file. No step holds a row per record of the whole table.

Pure functions on plain values: no Beam here, the pipeline only wires them.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Any

from tfrecorder._errors import shown_json
from tfrecorder._folder.layout import split_order
from tfrecorder._report import boxes
from tfrecorder._report.looker import Looker
from tfrecorder._report.matching import MAX_PAIRS, pair_order, ref_order
from tfrecorder._report.measures import (HASH, ISSUES, MAX_DISTANCE, MIN_CORRELATION,
                                         MIN_DETAIL_CORRELATION, THUMB)

#: CleanVision 0.3's default threshold of ``odd_size``, as ``measures``' others: a size
#: (square root of the area) more than this many interquartile ranges beyond the
#: quartiles of the dataset's sizes.
ODD_SIZE_IQR = 3.0
#: Vertex AI's dataset warnings: fewer images than this for a label ...
FEW_IMAGES = 10
#: ... and more than this ratio between the largest and the smallest label.
IMBALANCE = 100


def _median(counts: dict) -> list[int]:
    """[min, median, max] of the values a ``{value: count}`` histogram holds."""
    if not counts:
        return []
    items = sorted((int(k), n) for k, n in counts.items())
    total = sum(n for _, n in items)
    half, seen = (total - 1) // 2, 0
    median = items[-1][0]
    for value, n in items:
        seen += n
        if seen > half:
            median = value
            break
    return [items[0][0], median, items[-1][0]]


def _merge(into: dict, counts: dict) -> None:
    for k, n in counts.items():
        into[k] = into.get(k, 0) + n


def build(shards: list, exact: list, near: list, *, label_names: list[str],
          multi_label: bool, near_duplicates: bool, row_json, version: int = 1,
          near_distance: int = MAX_DISTANCE) -> dict:
    """quality.json's content from every shard's stats (with their ``Looker``), the
    ``matching.found`` exact groups and near pairs. ``row_json`` turns a row id into
    strict JSON."""
    offsets: dict[tuple, int] = {}
    by_split: dict[str, list] = {}
    for s in sorted(shards, key=lambda s: s.number):
        by_split.setdefault(s.split, []).append(s)
    for split, ss in by_split.items():
        at = 0
        for s in ss:
            offsets[(split, s.number)] = at
            at += s.num_examples

    def side(ref) -> dict:
        # a place whose rows file was not there to read (``matching.full_refs``): its
        # place only
        split, shard, pos, row, uri, labels = ref if len(ref) == 6 else (*ref, None, None, ())
        names = [label_names[i] for i in labels if 0 <= i < len(label_names)]
        return {"split": split, "row": row_json(row), "image_uri": uri,
                "label": names if multi_label else (names[0] if names else None),
                "position": offsets.get((split, shard), 0) + pos}

    counts = {"leaks": {"exact": 0, "near": 0}, "duplicates": {"exact": 0, "near": 0},
              "conflicts": 0}
    members = 0
    conflicts = []
    # Groups come in the order the grouping handed the shards over, which worker
    # processes do not keep: in the order of their first record, as pairs are.
    exact = sorted(exact, key=lambda e: (ref_order(e[1][0]), e[0]))
    for sha, refs, c in exact:
        if not multi_label and len({r[5] if len(r) == 6 else None for r in refs}) > 1:
            counts["conflicts"] += 1
            if len(conflicts) < MAX_PAIRS:
                # each record's whole set of labels: a detection image's boxes
                # [sky] against [sky, tree], where "label" names the first only
                conflicts.append({"sha256": sha, "rows": [
                    dict(side(r), labels=[label_names[i] for i in (r[5] if len(r) == 6 else ())
                                          if 0 <= i < len(label_names)]) for r in refs]})
    for c in [e[-1] for e in exact] + [e[-1] for e in near]:
        members += c["members"]
        for finding in ("leaks", "duplicates"):
            for kind in ("exact", "near"):
                counts[finding][kind] += c[finding][kind]

    def every_pair():
        for _, refs, _ in exact:
            for a, b in itertools.combinations(refs, 2):
                yield 0, "exact", a, b
        for pairs, _ in near:
            yield from pairs

    issues, counts["issues"] = _issues(shards, side)
    groups = _groups(exact, near, side)
    counts["groups"] = {k: sum(g["kind"] == k for g in groups) for k in ("exact", "near")}
    # The pairs listed: the first MAX_PAIRS in order, never all of them held at once.
    listed = heapq.nsmallest(MAX_PAIRS, every_pair(), key=pair_order)
    total = sum(counts[f][k] for f in ("leaks", "duplicates") for k in ("exact", "near"))
    truncated = {"pairs": max(0, total - len(listed)), "members": members}
    written = [{"kind": kind, "distance": d, "a": side(a), "b": side(b)}
               for d, kind, a, b in listed]
    return {
        "version": version,
        "near_duplicates": ({"hash": HASH, "max_distance": near_distance,
                             "confirmed_by": f"{THUMB}x{THUMB} thumbnail correlation "
                                             f">= {MIN_CORRELATION}, >= "
                                             f"{MIN_DETAIL_CORRELATION} without its plane"}
                            if near_duplicates else None),
        "counts": counts,
        "pairs": written,
        "conflicts": conflicts,
        "groups": groups[:MAX_PAIRS],
        "issues": issues,
        "stats": _stats(by_split, label_names),
        "warnings": _warnings(by_split, label_names),
        "truncated": truncated,
    }


def _quartiles(areas: dict) -> tuple[float, float]:
    """The first and third quartiles of the sizes a ``{size: records}`` histogram holds,
    interpolated as NumPy's (and so CleanVision's) percentile."""
    items = sorted(areas.items())
    total = sum(n for _, n in items)

    def at(i: int) -> int:  # the i-th smallest size
        seen = 0
        for value, n in items:
            seen += n
            if i < seen:
                return value
        return items[-1][0]

    def percentile(p: float) -> float:
        x = (total - 1) * p
        lo = math.floor(x)
        return at(lo) + (at(min(lo + 1, total - 1)) - at(lo)) * (x - lo)

    return percentile(0.25), percentile(0.75)


def _issues(shards: list, side) -> tuple[list, dict]:
    """Every record's image problems (``Looker.issues``) and those of odd size among
    the ends of each shard's sizes, as CleanVision tells them: beyond ODD_SIZE_IQR
    interquartile ranges from the quartiles of every image's size (of any size but the
    middle one where all are alike). The listed ones, up to MAX_PAIRS in ISSUES order,
    then split and file order, and the count of each."""
    counts: dict = {}
    listed = []
    areas: dict = {}
    for s in shards:
        if s.look is None:
            continue
        _merge(counts, s.look.issue_counts)
        _merge(areas, s.look.areas)
        listed += s.look.issues
    if areas:
        q1, q3 = _quartiles(areas)
        lo, hi = q1 - ODD_SIZE_IQR * (q3 - q1), q3 + ODD_SIZE_IQR * (q3 - q1)
        mid, gap = (lo + hi) / 2, hi - lo

        def odd(size: int) -> bool:
            return size < lo or size > hi if gap else size != mid

        odd_count = sum(n for size, n in areas.items() if odd(size))
        if odd_count:
            counts["odd_size"] = odd_count
            for s in shards:
                if s.look is not None:
                    listed += [("odd_size", round(1 - min(1.0, abs(size - mid) / (gap or mid)), 4),
                                ref) for size, ref in s.look.extremes() if odd(size)]
    order = {name: i for i, name in enumerate(ISSUES + boxes.ISSUES)}
    listed = heapq.nsmallest(MAX_PAIRS, listed,
                             key=lambda x: (order.get(x[0], len(order)), ref_order(x[2])))
    out = []
    for issue, score, ref in listed:
        entry = side(ref)
        entry.pop("labels", None)
        out.append({"issue": issue, "score": score, **entry})
    return out, {k: counts[k] for k in ISSUES + boxes.ISSUES if counts.get(k)}


def _groups(exact: list, near: list, side) -> list[dict]:
    """The records that are copies of one image, together: each set of records with the
    same bytes, joined with every near pair found between their records (a resized copy
    of an image stored twice makes one group of three). ``kind`` is ``"exact"`` where
    every member has the same bytes, else ``"near"``; ``size`` counts the members, also
    those of a very large group left out of ``rows`` (``matching.GROUP_LIMIT``). In the
    order of their first record. A member that shares its bytes with another member has
    ``same_bytes``: the number (1, 2, ...) of that set of identical files within its
    group, so that a near group tells which of its members are the very same file (a
    picture shipped under several names beside its resized copies)."""
    parent: dict = {}

    def root(p):
        while parent.setdefault(p, p) != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    refs: dict = {}
    skipped: dict = {}
    bytes_of: dict = {}  # place -> the digest it shares with another record
    for sha, members, c in exact:
        for r in members:
            refs[r[:3]] = r
            bytes_of[r[:3]] = sha
            parent[root(r[:3])] = root(members[0][:3])
        skipped[members[0][:3]] = c["members"]
    linked = set()
    for pairs, _ in near:
        for _, _, a, b in pairs:
            refs.setdefault(a[:3], a)
            refs.setdefault(b[:3], b)
            ra, rb = root(a[:3]), root(b[:3])
            parent[ra] = rb
            linked.add(a[:3])
    by_root: dict = {}
    for place in refs:
        by_root.setdefault(root(place), []).append(place)
    near_roots = {root(p) for p in linked}
    out = []
    for r, places in by_root.items():
        places.sort(key=ref_order)
        extra = sum(skipped.get(p, 0) for p in places)
        sets: dict = {}  # digest -> its number in this group, in the members' order
        rows = []
        for p in places:
            row = side(refs[p])
            if p in bytes_of:
                row["same_bytes"] = sets.setdefault(bytes_of[p], len(sets) + 1)
            rows.append(row)
        out.append({"kind": "near" if r in near_roots else "exact",
                    "size": len(places) + extra, "rows": rows})
    out.sort(key=lambda g: (split_order(g["rows"][0]["split"]), g["rows"][0]["split"],
                            g["rows"][0]["position"]))
    return out


def _stats(by_split: dict, label_names: list[str]) -> dict:
    out = {}
    for split, ss in by_split.items():
        labels: dict[str, int] = {}
        formats: dict[str, int] = {}
        reencoded: dict[str, list[int]] = {}
        turned = [0, 0, 0, 0]
        widths: dict = {}
        heights: dict = {}
        colours = Looker()  # the split's colour sums, added up as a shard's are
        unmeasured = 0
        for s in ss:
            for i, n in s.labels.items():
                name = label_names[int(i)] if 0 <= int(i) < len(label_names) else str(i)
                labels[name] = labels.get(name, 0) + n
            _merge(formats, s.formats)
            for fmt, cost in s.reencoded.items():
                reencoded[fmt] = [a + b for a, b in zip(reencoded.get(fmt, [0, 0, 0]), cost)]
            turned = [a + b for a, b in zip(turned, s.turned)]
            look = s.look
            if look is None:
                continue
            _merge(widths, look.widths)
            _merge(heights, look.heights)
            unmeasured += look.unmeasured
            if look.sums is not None:
                colours.add_sums(look.sums, True)
        entry: dict[str, Any] = {
            "rows": sum(s.rows for s in ss), "records": sum(s.num_examples for s in ss),
            "labels": dict(sorted(labels.items())), "formats": dict(sorted(formats.items())),
            "width": _median(widths), "height": _median(heights),
            "stored_bytes": sum(s.num_bytes for s in ss),
            "source_bytes": sum(s.source_bytes for s in ss)}
        if reencoded:  # images, their files' bytes, the bytes stored, per source format
            entry["reencoded"] = {f: dict(zip(("images", "source_bytes", "stored_bytes"), c))
                                  for f, c in sorted(reencoded.items())}
        if any(turned):  # JPEGs turned upright by their EXIF orientation, the same three,
            # and those kept in the sensor's frame as their source sizes them so
            entry["turned"] = dict(zip(("images", "source_bytes", "stored_bytes",
                                        "sensor_frame"), turned))
        sums = colours.sums
        if sums is not None and sums[0] and not unmeasured:
            # Only where every image record of the split was measured: the figures of
            # some of its records would pass for the split's.
            n = sums[0]
            mean = [v / (255 * n) for v in sums[1]]
            entry["mean"] = [round(m, 4) for m in mean]
            entry["std"] = [round(math.sqrt(max(0.0, q / (255 * 255 * n) - m * m)), 4)
                            for q, m in zip(sums[2], mean)]
        out[split] = entry
    return out


def _warnings(by_split: dict, label_names: list[str]) -> list[dict]:
    """Vertex AI's dataset warnings, over every split together."""
    totals = {name: 0 for name in label_names}
    for ss in by_split.values():
        for s in ss:
            for i, n in s.labels.items():
                if 0 <= int(i) < len(label_names):
                    totals[label_names[int(i)]] += n
    # Labels with rows only, as the imbalance below: a vocabulary's unused names (or the
    # ids between integer labels) are no label of the dataset's.
    out = [{"kind": "few_images", "label": name, "rows": n}
           for name, n in sorted(totals.items()) if 0 < n < FEW_IMAGES]
    present = {k: n for k, n in totals.items() if n}
    if len(present) > 1:
        largest = max(present, key=lambda k: (present[k], k))
        smallest = min(present, key=lambda k: (present[k], k))
        ratio = present[largest] / present[smallest]
        if ratio > IMBALANCE:
            out.append({"kind": "imbalance", "largest": largest, "smallest": smallest,
                        "ratio": round(ratio, 1)})
    return out


# --- quality.json read back -------------------------------------------------------------
# What ``build`` writes, field by field, so that a file that parses but holds another
# type anywhere (``"pairs": null``, a ``distance`` that is text) is told by its first
# wrong field when it is read back, not found as a TypeError in the middle of a report
# or as markup in the HTML one.

class _Obj:
    """An object's fields (each checked where present) and those it must have. Any
    other spec is ``[spec]`` (a list of), ``{"*": spec}`` (an object of names to), or
    ``(what it is, test)`` for a value."""

    def __init__(self, fields: dict, required: tuple = ()):
        self.fields, self.required = fields, required


def _int(v) -> bool:
    return type(v) is int  # noqa: E721 (a bool is no count)


def _num(v) -> bool:
    return type(v) in (int, float)  # noqa: E721


def _scalar(v) -> bool:
    return v is None or type(v) in (int, float, str, bool)  # noqa: E721


_COUNT = ("a whole number >= 0", lambda v: _int(v) and v >= 0)
_TEXT = ("text", lambda v: isinstance(v, str))
_SIDE = _Obj({
    "split": _TEXT,
    "row": ("a row number or index label", lambda v: _scalar(v) or (
        isinstance(v, list) and all(map(_scalar, v)))),
    "image_uri": ("text or null", lambda v: v is None or isinstance(v, str)),
    "label": ("a label name, a list of them, or null", lambda v: v is None or isinstance(
        v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v))),
    "position": ("a whole number >= 0 or null", lambda v: v is None or (_int(v) and v >= 0)),
    "labels": ("a list of label names", lambda v: isinstance(v, list) and all(
        isinstance(x, str) for x in v)),
    "same_bytes": ("a whole number >= 1", lambda v: _int(v) and v >= 1),
}, required=("split", "row", "label"))
_BOTH = _Obj({"exact": _COUNT, "near": _COUNT})
_KIND = ("'exact' or 'near'", lambda v: v in ("exact", "near"))
_SIZES = ("[min, median, max] in pixels", lambda v: isinstance(v, list) and len(v) in (
    0, 3) and all(map(_int, v)))
_CHANNELS = ("a list of numbers", lambda v: isinstance(v, list) and all(map(_num, v)))
_FILE = _Obj({
    "version": _COUNT,
    "near_duplicates": ("null or an object", lambda v: v is None or isinstance(v, dict)),
    "counts": _Obj({"leaks": _BOTH, "duplicates": _BOTH, "conflicts": _COUNT,
                    "groups": _BOTH, "issues": {"*": _COUNT}}),
    "pairs": [_Obj({"kind": _KIND,
                    "distance": _COUNT, "a": _SIDE, "b": _SIDE},
                   required=("kind", "distance", "a", "b"))],
    "conflicts": [_Obj({"sha256": _TEXT, "rows": [_SIDE]}, required=("sha256", "rows"))],
    "groups": [_Obj({"kind": _KIND, "size": _COUNT, "rows": [_SIDE]},
                    required=("kind", "size", "rows"))],
    "stats": {"*": _Obj({
        "rows": _COUNT, "records": _COUNT, "labels": {"*": _COUNT}, "formats": {"*": _COUNT},
        "width": _SIZES, "height": _SIZES, "stored_bytes": _COUNT, "source_bytes": _COUNT,
        "mean": _CHANNELS, "std": _CHANNELS,
        "reencoded": {"*": _Obj({"images": _COUNT, "source_bytes": _COUNT,
                                 "stored_bytes": _COUNT},
                                required=("images", "source_bytes", "stored_bytes"))},
        "turned": _Obj({"images": _COUNT, "source_bytes": _COUNT, "stored_bytes": _COUNT,
                        "sensor_frame": _COUNT},
                       required=("images", "source_bytes", "stored_bytes"))})},
    "warnings": [_Obj({"kind": _TEXT, "label": _TEXT, "rows": _COUNT, "largest": _TEXT,
                       "smallest": _TEXT,
                       "ratio": ("a number", _num)}, required=("kind",))],
    "truncated": _Obj({"pairs": _COUNT, "members": _COUNT}),
    "issues": [_Obj({**_SIDE.fields, "issue": _TEXT, "score": ("a number", _num)},
                    required=("issue", "score", "split", "row", "label"))],
}, required=("counts", "pairs", "conflicts", "stats", "warnings", "truncated"))


def wrong(data) -> str | None:
    """The first field of a parsed ``quality.json`` that is not what ``build`` writes,
    as ``pairs[3].distance: '<b>' is not a whole number >= 0``; None when it is whole."""
    return _wrong(data, _FILE, "")


def _wrong(value, spec, at: str) -> str | None:
    if isinstance(spec, list):
        if not isinstance(value, list):
            return f"{at}: {shown_json(value)} is not a list"
        for i, v in enumerate(value):
            found = _wrong(v, spec[0], f"{at}[{i}]")
            if found:
                return found
        return None
    if isinstance(spec, dict):  # {"*": spec}: every value of an object keyed by names
        if not isinstance(value, dict):
            return f"{at}: {shown_json(value)} is not an object"
        for k, v in value.items():
            found = _wrong(v, spec["*"], f"{at}.{k}")
            if found:
                return found
        return None
    if isinstance(spec, _Obj):
        if not isinstance(value, dict):
            return f"{at or 'the file'}: {shown_json(value)} is not an object"
        missing = [k for k in spec.required if k not in value]
        if missing:
            return f"{at + ': ' if at else ''}no {', '.join(missing)}"
        for k, s in spec.fields.items():
            if k in value:
                found = _wrong(value[k], s, f"{at}.{k}" if at else k)
                if found:
                    return found
        return None
    what, ok = spec
    return None if ok(value) else f"{at}: {shown_json(value)} is not {what}"

