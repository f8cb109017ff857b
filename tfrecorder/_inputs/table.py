"""The Table every source is read into, and the columns it is read as.

A ``Table`` is what each reader of a source (a DataFrame, a CSV file, an image
directory, JSON files) yields, chunk by chunk; ``ColumnFrame`` is the lighter frame
most of them fill instead of a DataFrame. Its own module, below every reader, so that
the readers and the row path (``spill``) share one definition without importing each
other.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tfrecorder._errors import Problem, SchemaError
from tfrecorder._inputs.schema import Schema


class _Column:
    __slots__ = ("values",)

    def __init__(self, values: list):
        self.values = values

    def tolist(self) -> list:
        return self.values


class ColumnFrame:
    """A table as named columns of Python lists: as much of a DataFrame as
    validation reads (``columns``, ``len``, ``frame[c].tolist()``), without building
    one. CSV chunks are read into these; building DataFrames cost more than the rest."""

    __slots__ = ("data", "_n", "plain", "given")

    def __init__(self, data: dict[str, list], n: int, plain: bool = False,
                 given: list[str] | None = None):
        # plain: every cell is None or non-blank text, as the CSV reader fills them
        # (not the lists of AutoML's wide multi-label rows).
        self.data, self._n, self.plain = data, n, plain
        self.given = given  # the header's names, for messages about missing columns

    @property
    def columns(self) -> list[str]:
        return list(self.data)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, column: str) -> _Column:
        return _Column(self.data[column])


@dataclasses.dataclass
class Table:
    """A source read into memory: the frame, an id per row, and where paths resolve."""

    frame: Any                # pandas.DataFrame with the schema's column names
    row_ids: list             # CSV line numbers, DataFrame index labels, or relative paths
    base_dir: str | None      # relative image paths resolve against this
    kind: str                 # "dataframe", "csv", "directory", "jsonl" or "detection"


def match_columns(names, schema: Schema) -> dict[str, str]:
    """Maps the table's column names to the schema's, ignoring case and blanks.

    Two columns that match one schema column are a SchemaError naming them.
    """
    wanted = {c.lower(): c for c in schema}
    out: dict = {}
    seen: dict[str, list] = {}
    for name in names:
        key = str(name).strip().lower()
        if key in wanted:
            seen.setdefault(wanted[key], []).append(name)
            out.setdefault(name, wanted[key])
    twice = {c: found for c, found in seen.items() if len(found) > 1}
    if twice:
        raise SchemaError([
            Problem(None, c, [str(n) for n in found],
                    f"{len(found)} columns are named {c!r} (ignoring case); keep or rename "
                    f"all but one") for c, found in twice.items()])
    return out
