"""A table's splits: its split cells read (by the names of ``_folder.split_names``), the
fractions checked, and the deterministic assignment of UNASSIGNED rows.
"""

from __future__ import annotations

import hashlib
import math
import os
from typing import Callable, Mapping, Sequence

from tfrecorder import _storage as storage
from tfrecorder._errors import Problems
from tfrecorder._folder import split_names
from tfrecorder._folder.split_names import ALIASES, SPLITS
from tfrecorder._inputs.labels import is_null

#: AutoML's default when a row has no split.
DEFAULT_FRACTIONS: Mapping[str, float] = {"train": 0.8, "validation": 0.1, "test": 0.1}


def canonical(value) -> str | None:
    """The lowercase split for a table's split cell ``value``, or None when the row is
    unassigned (``split_names.canonical``).

    Null values (None, NaN, pandas.NA) and empty strings are unassigned.
    """
    if is_null(value):
        return None
    return split_names.canonical(value)


def check_fractions(fractions: Mapping[str, float]) -> dict[str, float]:
    """``fractions`` checked: known split names, non-negative, summing to 1."""
    try:
        given = dict(fractions)  # a mapping, or (split, fraction) pairs
    except (TypeError, ValueError):
        raise ValueError(f"split_fractions={fractions!r}; give a dict of split names to "
                         "fractions, e.g. {'train': 0.8, 'validation': 0.1, 'test': 0.1}"
                         ) from None
    out = {}
    for name, frac in given.items():
        split = ALIASES.get(str(name).strip().lower())
        if split is None:
            raise ValueError(f"split_fractions: unknown split {name!r}; use train, validation, test")
        if not (isinstance(frac, (int, float)) and 0 <= frac <= 1):
            raise ValueError(f"split_fractions[{name!r}] = {frac!r}; use a number in [0, 1]")
        out[split] = float(frac)
    total = sum(out.values())
    if not math.isclose(total, 1.0, abs_tol=1e-6):
        raise ValueError(f"split_fractions add up to {total:g}; make them add up to 1")
    return {s: out[s] for s in SPLITS if out.get(s, 0) > 0}


def hashed_name(location: str) -> str:
    """What the split of an unassigned row with the image at ``location`` (resolved: a
    URI, or an absolute local path) is a hash of: a URI as it is; for a local file, the
    name of its folder and its own name (``images/cat_1.jpg``).

    Taken from where the path leads, so every spelling of one file (relative to a CSV's
    folder, to the working folder, absolute) gives the same split; and only from the end
    of it, so a copy of the same folder tree on another machine, or at another place,
    gives the same splits too (a table next to its images, ``images/cat_1.jpg``, hashes
    what it writes). Links are not followed: which disk a link leads to differs between
    machines, and a path is resolved without a call to the file system.
    """
    if storage.is_remote(location):
        return location
    return "/".join(location.rsplit(os.sep, 2)[-2:])  # one call: the driver's hot loop


#: ``stored(key as written, location)``: the split the folder an update writes into
#: already holds that image in, or None (``stored_records.StoredSplits``).
StoredSplit = Callable[[str, str], "str | None"]


def assign(key: str, fractions: Mapping[str, float]) -> str:
    """The split for an unassigned row, from a hash of ``key`` (``hashed_name`` of its
    image, or its row id in a table without images).

    The same key always lands in the same split, on every machine and in every run.
    """
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    point = int.from_bytes(digest, "big") / 2.0**64
    edge = 0.0
    last = None
    for split, frac in fractions.items():
        edge += frac
        last = split
        if point < edge:
            return split
    return last


def group_by_image(keys: Sequence[str | None], row_splits: Sequence[str | None],
                   row_ids: Sequence, column: str, fractions: Mapping[str, float],
                   problems: Problems, locate: Callable[[str], str],
                   stored: StoredSplit | None = None) -> list[tuple[str, list[int], str]]:
    """Rows that name the same image, as ``(key, row positions, split)`` groups.

    Used where several input rows become one record (multi-label rows, detection boxes).
    A group takes the split its rows give, else the split ``stored`` holds its image in,
    else one assigned from where ``locate(key)`` says the image is; rows of one image
    that give different splits are a problem (and no group). Rows whose key is None are
    left out. Groups come in the order their first row appears.
    """
    groups: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        if key is not None:
            groups.setdefault(key, []).append(i)
    out = []
    for key, members in groups.items():
        explicit = {row_splits[i] for i in members if row_splits[i] is not None}
        if len(explicit) > 1:
            problems.add(row_ids[members[0]], column, key,
                         f"the same image is in splits {sorted(explicit)} on rows "
                         f"{[row_ids[j] for j in members]}; give it one split")
            continue
        if explicit:
            out.append((key, members, explicit.pop()))
            continue
        location = locate(key)
        out.append((key, members, (stored and stored(key, location))
                    or assign(hashed_name(location), fractions)))
    return out
