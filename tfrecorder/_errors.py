"""Exceptions raised by tfrecorder.

Every exception the library raises on purpose derives from ``TFRecorderError`` and
also from the builtin that fits, so ``except ValueError`` keeps working::

    TFRecorderError
     ├── SchemaError(ValueError)             the input table has problems; .problems lists them
     ├── ConfigError(ValueError)             options that cannot work together
     ├── OutputExistsError(FileExistsError)  the output directory holds data; pass mode="overwrite"
     │    └── OutputBusyError                another conversion (or export) is writing it now
     ├── IncompleteOutputError(FileNotFoundError)  no complete tfrecorder.json: no run finished
     ├── CorruptRecordError(OSError)         a shard fails its checksum or lost records
     │    └── OutputChangedError             the directory was converted again while read
     └── ConversionError(RuntimeError)       the run failed: over the error budget, nothing written

A bad image is not an exception: its row is quarantined with the reason.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any


class TFRecorderError(Exception):
    """Base class of every error tfrecorder raises on purpose."""


@dataclasses.dataclass(frozen=True)
class Problem:
    """One problem found in the input table.

    ``row`` is the CSV line number of the record (1-based, header included) for a CSV
    source, the index label for a DataFrame, or None for a problem with the whole table.
    """

    row: Any
    column: str | None
    value: Any
    reason: str

    def __str__(self) -> str:
        where = "table" if self.row is None else f"row {self.row}"
        if self.column is not None:
            where += f", column {self.column!r}"
        if self.value is None:
            return f"{where}: {self.reason}"
        return f"{where}: value {self.value!r}: {self.reason}"


class SchemaError(TFRecorderError, ValueError):
    """The input table has problems; ``problems`` lists every one found.

    Raised before any pipeline is built, so fixing the table and calling again is safe.
    """

    #: How many problems the message spells out; all of them stay in ``problems``.
    SHOWN = 20

    def __init__(self, problems: list[Problem], unlisted: dict[str, int] | None = None):
        self.problems = list(problems)
        #: Problems past the listing cap, counted per reason.
        self.unlisted = dict(unlisted or {})
        total = len(self.problems) + sum(self.unlisted.values())
        lines = [f"The input table has {total} problem(s):"]
        lines += [f"  - {p}" for p in self.problems[: self.SHOWN]]
        if len(self.problems) > self.SHOWN:
            lines.append(
                f"  ... and {len(self.problems) - self.SHOWN} more (see SchemaError.problems)"
            )
        for reason, n in sorted(self.unlisted.items(), key=lambda kv: -kv[1])[:10]:
            lines.append(f"  ... {n} more not listed: {reason}")
        super().__init__("\n".join(lines))

    def to_frame(self):
        """The problems as a pandas DataFrame with columns row, column, value, reason."""
        import pandas as pd

        return pd.DataFrame([dataclasses.asdict(p) for p in self.problems],
                            columns=["row", "column", "value", "reason"])


class Problems:
    """Collects the problems found in a table, then raises them together.

    ``add`` records one; ``raise_if_any`` raises one SchemaError holding every problem
    collected so far. Validation code passes this object around instead of a list. Past
    ``limit`` problems (a table with millions of bad rows) only their number per reason
    is kept.
    """

    #: Problems listed one by one; the rest are counted per reason.
    LIMIT = 1000

    def __init__(self, limit: int | None = None) -> None:
        self._items: list[Problem] = []
        self._limit = self.LIMIT if limit is None else limit
        self._unlisted: dict[str, int] = {}

    def add(self, row: Any, column: str | None, value: Any, reason: str) -> None:
        if len(self._items) < self._limit:
            self._items.append(Problem(row, column, value, reason))
        else:
            key = f"column {column!r}: {reason}" if column is not None else reason
            self._unlisted[key] = self._unlisted.get(key, 0) + 1

    def extend(self, error: "SchemaError") -> None:
        """Adds the problems of ``error`` (a chunk's), listed and counted."""
        for p in error.problems:
            self.add(p.row, p.column, p.value, p.reason)
        for key, n in error.unlisted.items():
            self._unlisted[key] = self._unlisted.get(key, 0) + n

    def __len__(self) -> int:
        return len(self._items) + sum(self._unlisted.values())

    def __iter__(self):
        return iter(self._items)

    def raise_if_any(self) -> None:
        if len(self):
            raise SchemaError(self._items, self._unlisted)


class ConfigError(TFRecorderError, ValueError):
    """Options that cannot work: an unknown runner, a missing project, a bad path..."""


class OutputExistsError(TFRecorderError, FileExistsError):
    """The output directory already holds files and ``mode="overwrite"`` was not given."""


class OutputBusyError(OutputExistsError):
    """Another conversion is writing the output directory now, or another export the
    export's destination; the message names it."""


class IncompleteOutputError(TFRecorderError, FileNotFoundError):
    """The directory has no complete ``tfrecorder.json``: no conversion finished there."""


class CorruptRecordError(TFRecorderError, OSError):
    """A TFRecord file is damaged (bad length or checksum); the message names the file."""


class OutputChangedError(CorruptRecordError):
    """The directory was written again (a new manifest generation) while a reader had it
    open: its shards may be another conversion's. Open the directory again."""


class ConversionError(TFRecorderError, RuntimeError):
    """The pipeline ran but the conversion failed, for example over the error budget."""


def shown_json(value, limit: int = 40) -> str:
    """A value read from one of tfrecorder's JSON files, as JSON cut short, for the
    message that names it as the wrong one."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= limit else text[:limit] + "..."
