"""The live records of a folder's latest version, as an update finds them.

From the rows files (and live indexes) alone, never the shards: every live record by
the names a row of the edited table finds it by (its key, or its image's names), with
the signature that makes it unchanged (``stored``), and the split each stored image is
in (``StoredSplits``), which an unassigned row of that image keeps. Its own module
because both the reading of an update's table (its splits) and the update's decision
(``updating.plan``) match rows to stored records this one way.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Iterator

from tfrecorder import _storage as storage
from tfrecorder._folder import index, rows
from tfrecorder._folder.manifest import Manifest, ShardInfo
from tfrecorder._inputs import validation
from tfrecorder._folder.example import FLOAT, INT64

#: The dtypes of columns whose keys are compared as numbers (``matching_key``).
_NUMBERS = (INT64, FLOAT)


@dataclasses.dataclass(eq=False)
class _Stored:
    shard: ShardInfo
    position: int
    entry: dict
    taken: bool = False             # matched to a row already (rows match one to one)


def _live_entries(output_dir: str, parent: Manifest, read: dict) -> Iterator[tuple]:
    """``(shard, position, rows-file entry)`` of every live record of ``parent``; ``read``
    holds each rows file's entries by its name: those read already, and gets the others."""
    for info in parent.splits.values():
        for shard in info.shards:
            entries = read.get(shard.rows)
            if entries is None:
                entries = read[shard.rows] = rows.read(storage.inside(output_dir, shard.rows),
                                                       shard.num_examples)
            for position in index.live_positions(output_dir, shard):
                yield shard, position, entries[position]


def _relative(names: set) -> bool:
    """True where one of a stored image's ``names`` is a relative path, which rows find
    by the ends of where their image is (``rows.names``)."""
    return any(not (storage.is_remote(n) or os.path.isabs(n)) for n in names)


def stored(output_dir: str, parent: Manifest, content: bool = False,
           read: dict | None = None, specs: dict | None = None,
           key_spec=None) -> tuple[dict, list, bool]:
    """Every live record of ``parent`` by the names it is found by, and what makes it
    unchanged: ``({name: {signature: [_Stored, ...]}}, every record, whether rows look
    for stored relative paths by the ends of theirs)``, from the rows files (and live
    indexes) alone. A record is named by its key where the key is another column than
    the image (or there is no image), else by every name of its image
    (``rows.image_names``). The signatures of ``compare="content"`` hold digests instead
    of stamps; ``specs`` (feature -> FeatureSpec) compare other values as the records
    hold them, and ``key_spec`` (the key column's FeatureSpec) keys by their value
    (``matching_key``). ``read`` holds each rows file's entries by its name
    (``_live_entries``)."""
    by_name: dict[Any, dict] = {}
    every: list[_Stored] = []
    ends = False
    for shard, position, e in _live_entries(output_dir, parent, {} if read is None else read):
        if "sha256" not in e:
            image = None
        elif content:
            image = ("sha256", e["sha256"])
        else:
            image = ("stat", e.get("size"), e.get("stamp"))
        sig = _signature(e.get("split"), sorted(e.get("label") or []),
                         _comparable(e.get("features") or {}, specs), image)
        c = _Stored(shard, position, e)
        every.append(c)
        images = rows.image_names(e)
        ends = ends or _relative(images)
        names = images if "image_uri" not in e else ()  # else the key is another column
        for name in sorted(names) or [matching_key(e.get("key"), key_spec)]:
            by_name.setdefault(name, {}).setdefault(sig, []).append(c)
    return by_name, every, ends


class StoredSplits:
    """The split each image of ``parent`` (a folder's latest version) is in: called with
    a row's image ``(value as written, location)``, the split of the first of its names
    (``rows.names``) that a stored record's image answers to, or None. An unassigned row
    keeps it: its split was chosen once, when the folder first stored it. The rows files
    are read when first asked (a table with no unassigned row never asks), and held in
    ``read`` for the update to match its rows with (``plan``).

    A stored relative path found only as the end of the row's path (``cat.jpg`` for
    ``/data/batch2/cat.jpg``) names the row's image only where the file is the one
    stored (its size and modification time, as an update compares them): another image
    of the same name is a new image, whose split its own hash gives."""

    def __init__(self, output_dir: str, parent: Manifest):
        self.output_dir, self.parent = output_dir, parent
        self.read: dict = {}
        self._splits: dict | None = None
        self._stamps: dict = {}  # name -> the (size, stamp) of the records it names
        self._ends = False

    def _load(self) -> dict:
        found: dict = {}
        for _, _, e in _live_entries(self.output_dir, self.parent, self.read):
            names = rows.image_names(e)
            self._ends = self._ends or _relative(names)
            for name in names:
                # A name two records of other splits answer to says nothing ("").
                found[name] = e.get("split") if found.get(name, e.get("split")) == e.get(
                    "split") else ""
                self._stamps.setdefault(name, set()).add((e.get("size"), e.get("stamp")))
        return found

    def __call__(self, value: str, location: str) -> str | None:
        if self._splits is None:
            self._splits = self._load()
        found = self._splits.get(value) or self._splits.get(location)
        if found or not self._ends:  # the ends of the path only where they could name it
            return found or None
        now = None
        for name in rows.names(value, location, self._ends):
            split = self._splits.get(name)
            if split:
                if now is None:
                    try:
                        now = tuple(storage.stamp(location))
                    except OSError:
                        return None
                if now in self._stamps.get(name, ()):
                    return split
        return None


def matching_key(key: str | None, spec) -> str | None:
    """A key as rows files write it (``rows.key_text``), as the value its column's
    ``spec`` (a FeatureSpec; None: as it is) makes it, so that a key written ``3`` and
    one written ``3.0`` (pandas' ints beside a null) name one record in an
    IntegerInput column, as ``1`` and ``1.0`` do in a FloatInput one. A key that is not
    a number of the column's type stays as it is."""
    if key is None or spec is None or spec.dtype not in _NUMBERS:
        return key
    try:
        number = json.loads(key)
    except ValueError:  # text, "nan"
        return key
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        return key
    return rows.key_text(validation.comparable(spec.dtype, number))


def _comparable(features: dict, specs: dict | None) -> dict:
    """A row's other values as its record holds them (``validation.comparable``), so
    that a spelling of one value (3 read as 3.0 beside a null) is no change."""
    if not specs or not features:
        return features
    return {k: validation.comparable(specs[k].dtype, v) if k in specs else v
            for k, v in features.items()}


def _signature(split: str, labels: list, features: dict, image) -> tuple:
    """What must be equal for a row to be its stored record unchanged: split, labels,
    other values, the image's size and stamp (or digest). Where the key is another
    column than the image, the image is compared too (``_take``)."""
    values = json.dumps(features, sort_keys=True, ensure_ascii=False) if features else "{}"
    return split, tuple(labels), values, image


def _take(same: list | None, image: set | None) -> _Stored | None:
    """The first record of ``same`` not matched yet (whose image answers to one of the
    row's ``image`` names, where given), now matched; None where there is none."""
    for c in same or ():
        if not c.taken and (image is None or not rows.image_names(c.entry).isdisjoint(image)):
            c.taken = True
            return c
    return None
