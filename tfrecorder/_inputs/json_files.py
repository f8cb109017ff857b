"""Which JSON files a source names: Vertex AI JSON Lines (a ``.jsonl`` file, a
pattern, a list, a folder of ``.jsonl`` files, ``vertex.from_vertex()``) or COCO files
(a ``.json`` file, or a dict of one per split).

Its own module: telling a JSON source from a CSV or an image directory, and expanding
its patterns and folders into files, is decided before any file is read; ``vertex``
and ``coco`` read the files.
"""

from __future__ import annotations

import os
from typing import Mapping

from tfrecorder import _storage as storage
from tfrecorder._inputs import splits, vertex
from tfrecorder._folder import split_names
from tfrecorder._errors import ConfigError
from tfrecorder._inputs.image_tree import is_litter


#: File names that say what a file holds; other files are told by their first byte.
JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")


def find(source) -> tuple[str, list] | None:
    """``("jsonl" or "coco", [(path, split or None)])`` for a source of JSON files:
    Vertex AI JSON Lines (a ``.jsonl`` file, a pattern, a list, a folder holding ``.jsonl``
    files, ``vertex.from_vertex()``) or COCO (a ``.json`` file, or a dict of one per
    split); None for any other source."""
    if isinstance(source, vertex.JsonLines):
        return "jsonl", [(path, split) for pattern, split in source.files
                         for path in _expanded(pattern, "JSON Lines")]
    if isinstance(source, Mapping):
        return "coco", _coco_splits(source)
    if isinstance(source, (list, tuple)):
        if not source:
            raise ConfigError("an empty list of files; give the JSON Lines files to read")
        paths = [p for item in source for p in _expanded(_path_of(item), "JSON Lines")]
        return "jsonl", [(p, None) for p in _json_lines(paths)]
    if not isinstance(source, (str, os.PathLike)):
        return None
    path = os.fspath(source)
    name = path.lower()
    if name.endswith(".csv"):
        return None
    if storage.is_pattern(path) and not storage.exists(path):
        return "jsonl", [(p, None) for p in _json_lines(_expanded(path, "JSON Lines"))]
    if storage.isdir(path):
        found = _json_lines_in(path)
        return ("jsonl", [(p, None) for p in found]) if found else None
    if name.endswith(".json") and storage.exists(path):
        return "coco", [(path, None)]
    if storage.exists(path) and _is_json_lines(path):
        return "jsonl", [(path, None)]
    return None


def _path_of(item) -> str:
    if isinstance(item, (str, os.PathLike)):
        return os.fspath(item)
    raise ConfigError(f"{item!r} in the list of files; give paths (or patterns) of JSON Lines "
                      f"files")


def _expanded(pattern: str, kind: str) -> list[str]:
    """The files ``pattern`` names: itself, the files it matches, or a folder's
    ``.jsonl`` files. ConfigError when there are none."""
    if storage.is_pattern(pattern) and not storage.exists(pattern):
        found = storage.glob(pattern)
        if not found:
            raise ConfigError(f"{pattern!r} matches no file; give the {kind} files' pattern "
                              f"(e.g. gs://bucket/export/*.jsonl)")
        return found
    if storage.isdir(pattern):
        found = _json_lines_in(pattern)
        if not found:
            raise ConfigError(f"folder {pattern!r} is not a folder of .jsonl files (and no "
                              f"other folders); give the {kind} files")
        return found
    if not storage.exists(pattern):
        raise ConfigError(f"{pattern!r} does not exist; give the {kind} files")
    return [pattern]


def _json_lines_in(folder: str) -> list[str]:
    """The ``.jsonl`` files of a folder of JSON Lines files (an export's); [] for a folder
    with subfolders too: an image directory, which may hold a JSON Lines file of its own
    (Hugging Face's ``metadata.jsonl``) beside its label folders."""
    names = [n for n in storage.listdir(folder) if not is_litter(n)]
    found = [storage.join(folder, n) for n in names if n.lower().endswith(JSON_LINES_SUFFIXES)]
    if not found or any(storage.isdir(storage.join(folder, n)) for n in names
                        if not n.lower().endswith(JSON_LINES_SUFFIXES)):
        return []
    return found


def _is_json_lines(path: str) -> bool:
    """True for a file named ``.jsonl``, or one not named ``.csv`` whose first non-blank
    character is ``{`` (a custom training job's ``training-00000-of-00004``)."""
    name = path.lower()
    if name.endswith(JSON_LINES_SUFFIXES):
        return True
    if name.endswith((".csv", ".json", ".txt", ".tsv")):
        return False
    try:
        head = storage.read_range(path, 0, 4096)
    except OSError:
        return False
    return head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{"


def _json_lines(paths: list[str]) -> list[str]:
    """``paths``, checked to be JSON Lines files (a list or pattern reads those only)."""
    other = [p for p in paths if not _is_json_lines(p)]
    if other:
        raise ConfigError(
            f"{other[0]!r} is not a JSON Lines file; a list of files, a pattern or a folder "
            f"of .jsonl files is read as Vertex AI JSON Lines (give one CSV on its own)")
    return paths


def _coco_splits(source: Mapping) -> list[tuple[str, str]]:
    """``[(path, split)]`` of a dict of COCO files per split."""
    out = []
    for key, value in source.items():
        try:
            split = splits.canonical(key)
        except (split_names.UnknownSplit, TypeError):
            split = None
        if split is None:
            raise ConfigError(f"{key!r} in the dict of COCO files; give each file's split: "
                              f"train, validation or test")
        path = _path_of(value)
        if not path.lower().endswith(".json"):
            raise ConfigError(f"{split}: {path!r}; a dict of files maps each split to its "
                              f"COCO .json file (instances_train2017.json)")
        if not storage.exists(path):
            raise ConfigError(f"{split}: {path!r} does not exist")
        out.append((path, split))
    if not out:
        raise ConfigError("an empty dict of COCO files; give {'train': 'instances_train.json'}")
    return out
