"""A checked table's rows: ``Row``, one row as the writer takes it, and ``Block``, rows
of one split as columns, as the spill writes them and the staging reads them back.
Pure: no I/O, no Beam.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from typing import Any, Iterator, Sequence


@dataclasses.dataclass(slots=True)
class Row:
    """One validated row: where it goes and what it holds besides the image."""

    row: Any                       # CSV line number or DataFrame index label
    split: str
    image_uri: str | None          # resolved path, or None for tables without images
    features: dict[str, bytes]     # encoded non-image features
    values: tuple                  # the row's original values, for the errors file
    labels: tuple[int, ...] = ()   # label ids, counted per split in the manifest
    merged: tuple = ()             # (row, values) of other input rows merged into this record


@dataclasses.dataclass
class Block:
    """Rows of one split as columns, as they are spilled and staged: the fields of
    ``block.Row`` but the split, one sequence each (``features`` one per feature,
    ``values`` one per schema column; ``merged`` None when no row merges others)."""

    row_ids: Sequence
    uris: Sequence
    feature_names: list[str]
    features: list[Sequence]
    values: list[Sequence]
    labels: Sequence
    merged: Sequence | None = None

    def __len__(self) -> int:
        return len(self.row_ids)

    def take(self, picked: list[int]) -> "Block":
        """The rows at indices ``picked``, in that order."""
        if len(picked) == len(self.row_ids) and picked == list(range(len(picked))):
            return self
        if len(picked) < 2:  # itemgetter of one position gives the item, not a tuple
            gather = lambda column: [column[i] for i in picked]  # noqa: E731
        else:
            gather = operator.itemgetter(*picked)
        taken: dict[int, Sequence] = {}

        def get(column):  # a column held twice (image_uri as value and uri) is taken once
            if column is None:
                return None
            if id(column) not in taken:
                taken[id(column)] = gather(column)
            return taken[id(column)]

        return Block(get(self.row_ids), get(self.uris), self.feature_names,
                     [get(f) for f in self.features], [get(v) for v in self.values],
                     get(self.labels), get(self.merged))

    def as_tuple(self) -> tuple:
        """The columns to pickle; a value column that is the ``uris`` column itself (the
        image column, which needed no resolving) is written once, as None."""
        values = [None if v is self.uris else v for v in self.values]
        return (self.row_ids, self.uris, self.feature_names, self.features, values,
                self.labels, self.merged)

    @classmethod
    def from_tuple(cls, columns: tuple) -> "Block":
        row_ids, uris, feature_names, features, values, labels_, merged = columns
        return cls(row_ids, uris, feature_names, features,
                   [uris if v is None else v for v in values], labels_, merged)

    def rows(self, split: str) -> Iterator[Row]:
        """``block.Row`` of each row; rows with the same features share one dict."""
        features = feature_dicts(self.feature_names, self.features, len(self))
        merged = itertools.repeat(()) if self.merged is None else self.merged
        values = zip(*self.values) if self.values else itertools.repeat((), len(self))
        return map(Row, self.row_ids, itertools.repeat(split), self.uris, features, values,
                   self.labels, merged)


def feature_dicts(names: list[str], columns: list, n: int) -> Iterator[dict[str, bytes]]:
    """Each of ``n`` rows' features as a dict, from one column of encoded values per
    feature name; rows with the same features share one dict (the first 100,000
    distinct ones), so a label column of a few values makes a few dicts."""
    shared: dict[tuple, dict] = {}
    for key in zip(*columns) if names else itertools.repeat((), n):
        found = shared.get(key)
        if found is None:
            found = dict(zip(names, key))
            if len(shared) < 100_000:
                shared[key] = found
        yield found
