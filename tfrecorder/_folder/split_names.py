"""Split names: the splits a folder holds, in their order, and the spellings a split is
given by (AutoML / Vertex AI aliases). Names only: what a table's cell says is read by
``_inputs.splits``.
"""

from __future__ import annotations

#: The splits, in the order results list them; on disk they are always lowercase.
SPLITS = ("train", "validation", "test")

#: Accepted spellings (compared case-insensitively, surrounding blanks ignored).
#: None means "unassigned": the row's split is chosen by ``_inputs.splits.assign``.
ALIASES: dict[str, str | None] = {
    "train": "train",
    "training": "train",
    "validation": "validation",
    "validate": "validation",
    "valid": "validation",
    "val": "validation",
    "test": "test",
    "testing": "test",
    "unassigned": None,
    "": None,
}


class UnknownSplit(ValueError):
    """Raised by ``canonical`` for a split value that is not a known spelling."""


def canonical(value) -> str | None:
    """The lowercase split a split name ``value`` spells, or None for an unassigned one
    (None, blank, ``UNASSIGNED``); UnknownSplit for any other."""
    if value is None:
        return None
    key = str(value).strip().lower()
    if key not in ALIASES:
        raise UnknownSplit(
            "unknown split; use one of TRAIN, VALIDATION (or VALIDATE), TEST, or "
            "UNASSIGNED / empty to let tfrecorder choose"
        )
    return ALIASES[key]
