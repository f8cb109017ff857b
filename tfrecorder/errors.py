"""Exceptions raised by tfrecorder.

Every exception the library raises on purpose derives from ``TFRecorderError`` and
also from the builtin that fits, so ``except ValueError`` keeps working::

    TFRecorderError
     ├── SchemaError(ValueError)             the input table has problems; .problems lists them
     ├── ConfigError(ValueError)             options that cannot work together
     ├── OutputExistsError(FileExistsError)  the output directory holds data; pass overwrite=True
     │    └── OutputBusyError                another conversion is writing that directory now
     ├── IncompleteOutputError(FileNotFoundError)  no complete tfrecorder.json: no run finished
     ├── CorruptRecordError(OSError)         a shard fails its checksum or lost records
     └── ConversionError(RuntimeError)       the run failed: over the error budget, nothing written

A bad image is not an exception: its row is quarantined with the reason.
"""

from __future__ import annotations

import dataclasses
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

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        lines = [f"The input table has {len(self.problems)} problem(s):"]
        lines += [f"  - {p}" for p in self.problems[: self.SHOWN]]
        if len(self.problems) > self.SHOWN:
            lines.append(
                f"  ... and {len(self.problems) - self.SHOWN} more (see SchemaError.problems)"
            )
        super().__init__("\n".join(lines))

    def to_frame(self):
        """The problems as a pandas DataFrame with columns row, column, value, reason."""
        import pandas as pd

        return pd.DataFrame([dataclasses.asdict(p) for p in self.problems],
                            columns=["row", "column", "value", "reason"])


class Problems:
    """Collects the problems found in a table, then raises them together.

    ``add`` records one; ``raise_if_any`` raises one SchemaError holding every problem
    collected so far. Validation code passes this object around instead of a list.
    """

    def __init__(self) -> None:
        self._items: list[Problem] = []

    def add(self, row: Any, column: str | None, value: Any, reason: str) -> None:
        self._items.append(Problem(row, column, value, reason))

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self):
        return iter(self._items)

    def raise_if_any(self) -> None:
        if self._items:
            raise SchemaError(self._items)


class ConfigError(TFRecorderError, ValueError):
    """Options that cannot work: an unknown runner, a missing project, a bad path..."""


class OutputExistsError(TFRecorderError, FileExistsError):
    """The output directory already holds files and ``overwrite=True`` was not given."""


class OutputBusyError(OutputExistsError):
    """Another conversion is writing the output directory now; the message names it."""


class IncompleteOutputError(TFRecorderError, FileNotFoundError):
    """The directory has no complete ``tfrecorder.json``: no conversion finished there."""


class CorruptRecordError(TFRecorderError, OSError):
    """A TFRecord file is damaged (bad length or checksum); the message names the file."""


class ConversionError(TFRecorderError, RuntimeError):
    """The pipeline ran but the conversion failed, for example over the error budget."""
