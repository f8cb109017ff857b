"""The manifest, ``tfrecorder.json``: what a finished conversion wrote, and its JSON.

The writer's ``run_metadata.build`` makes one from the shards' statistics and
``metadata.read_manifest`` reads one back (or describes a TFRecorder 2.0 folder as one, through ``legacy``); the
writer (``publishing``) and every reader (``loading``, ``inspection``, ``access``) share
these types. This module defines them, their text and the one policy for a damaged
one (``damaged``), so it imports no tfrecorder module but ``layout`` and ``index``
(for the names a manifest may list) and ``errors``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from tfrecorder._folder import index, layout
from tfrecorder._errors import IncompleteOutputError
from tfrecorder._folder.layout import FeatureSpec

#: Manifest.format_version of the directories tfrecorder writes (``legacy`` has 0):
#: 2 since folders hold versions and rows files (docs/format.md, "format 2").
FORMAT_VERSION = 2


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """One shard file of a split: its name in the output folder, records and bytes."""

    file: str
    num_examples: int
    num_bytes: int
    #: The shard's index file (``index.name(file)``), or None: gzip shards, and outputs
    #: written before index files existed (``tfrecorder index`` adds them).
    index: str | None = None
    #: Records of the file live in this version (None: all of them), and where a
    #: version retired some, the index of the live ones (``layout.live_index``).
    live: int | None = None
    live_index: str | None = None
    #: Its rows file (``layout.rows_file(file)``); None in folders written before them.
    rows: str | None = None

    @property
    def live_examples(self) -> int:
        """Records of the shard live in this version."""
        return self.num_examples if self.live is None else self.live


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    """One split: its totals, its shards in number order, and its rows per label name."""

    name: str
    num_examples: int
    num_bytes: int
    shards: list[ShardInfo]
    label_counts: dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Manifest:
    """The content of ``tfrecorder.json``."""

    name: str
    compression: str | None
    features: dict[str, FeatureSpec]
    vocabularies: dict[str, list[str]]
    splits: dict[str, SplitInfo]
    rows_in: int
    rows_written: int
    rows_quarantined: int
    format_version: int = FORMAT_VERSION
    #: How images were changed at conversion: {"shorter_side": N, "jpeg_quality": Q};
    #: empty when every image is stored as it was.
    image_options: dict = dataclasses.field(default_factory=dict)
    #: A fingerprint of this conversion's content (every record's length and checksum,
    #: and the metadata): readers check that the files they read are still of the
    #: conversion whose manifest they opened. The same input gives the same generation,
    #: as it gives the same bytes; "" in directories written before it existed.
    generation: str = ""
    #: The data report's file (``layout.QUALITY``), or None where none was written.
    quality: str | None = None
    #: Format 2: the version's number (1 for a conversion), its parent's (None for 1),
    #: when it was published (UTC, ISO 8601; the only timestamp of a folder), what it
    #: was made from (``source``: the table's file name, or "DataFrame"), how
    #: (``mode``: "create" for version 1, written new or over another conversion,
    #: "update" or "append", the words ``mode=`` takes, or "compact"; ``made_by`` reads older manifests' words), the match key, and the records each
    #: split gained, lost and kept (``{split: {"added", "retired", "kept"}}``).
    version: int | None = None
    parent: int | None = None
    published: str | None = None
    source: str | None = None
    mode: str | None = None
    key: str | None = None
    changes: dict | None = None
    #: The records' feature keys (``garden.LAYOUTS``): "tfrecorder" (ours, and every
    #: folder written before layouts) or "model_garden"; ``features`` are ours either
    #: way, ``garden.stored_specs`` gives the keys a model_garden record holds.
    layout: str = "tfrecorder"
    #: Where records hold ``objects/keypoints``: category name -> ``{"keypoints": its
    #: keypoint names, "skeleton": pairs of 1-based keypoint numbers}``, as COCO gives
    #: them; a box of a category not named has none. None otherwise.
    keypoints: dict | None = None
    #: The tag (``layout.run_tag``) of the run that published a version after the
    #: first: in the names of the files it wrote, its folder ``versions/KKKKK-TAG/``
    #: included. None for version 1 and for versions written before tags.
    tag: str | None = None

    @property
    def label_key(self) -> str | None:
        return next((k for k, f in self.features.items() if f.role == "label"), None)

    @property
    def label_names(self) -> list[str]:
        """Names of the label ids (id i is ``label_names[i]``); [] without a label."""
        return list(self.vocabularies.get(self.label_key, [])) if self.label_key else []

    @property
    def image_key(self) -> str | None:
        return next((k for k, f in self.features.items() if f.role == "image"), None)

    def files(self, split: str) -> list[str]:
        return [s.file for s in self.splits[split].shards]

    def index_files(self) -> list[str]:
        """The index files the manifest lists (``index/<shard>.idx``), every split."""
        return [s.index for info in self.splits.values() for s in info.shards if s.index]

    @property
    def multi_label(self) -> bool:
        """A label list per record, one record per image (not object detection)."""
        key = self.label_key
        return (key is not None and self.features[key].shape is None
                and not any(k.startswith("objects/") for k in self.features))

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["format"] = "tfrecorder"
        if self.multi_label:  # said in words too; readers derive it from the label's shape
            d["multi_label"] = True
        if self.quality is None:
            del d["quality"]
        if self.layout == "tfrecorder":  # absent: our layout, as in older folders
            del d["layout"]
        for name in ("version", "parent", "published", "source", "mode", "key", "changes",
                     "keypoints", "tag"):
            if d[name] is None:
                del d[name]
        for split in d["splits"].values():
            for shard in split["shards"]:
                for name in ("live", "live_index", "rows"):
                    if shard[name] is None:
                        del shard[name]
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Manifest":
        """The Manifest of a ``tfrecorder.json``'s JSON, format 1 or 2: the one parse of
        the format, which every reader, the writer and the versions' list share. Every
        name is checked to be one its conversion writes (``check_names``), and each
        shard's live records to be some of its records; a split's ``num_examples`` is
        its live records. ValueError, KeyError, TypeError or AttributeError when ``d``
        is not a manifest."""
        check_names(d)
        splits = {}
        for name, s in sorted(d["splits"].items(), key=lambda kv: layout.split_order(kv[0])):
            shards = [_shard(x) for x in s["shards"]]
            total = sum(x.live_examples for x in shards) if shards else s["num_examples"]
            splits[name] = SplitInfo(s["name"], total, s["num_bytes"], shards,
                                     dict(s.get("label_counts", {})))
        return cls(
            name=d["name"], compression=d["compression"],
            features={k: FeatureSpec(**v) for k, v in d["features"].items()},
            vocabularies={k: list(v) for k, v in d["vocabularies"].items()},
            splits=splits, rows_in=d["rows_in"], rows_written=d["rows_written"],
            rows_quarantined=d["rows_quarantined"], format_version=d["format_version"],
            image_options=dict(d.get("image_options", {})),
            generation=str(d.get("generation", "")),
            quality=d.get("quality"),
            version=d.get("version"), parent=d.get("parent"), published=d.get("published"),
            source=d.get("source"), mode=d.get("mode"), key=d.get("key"),
            changes=d.get("changes"), layout=_layout(d.get("layout", "tfrecorder")),
            keypoints=d.get("keypoints"), tag=d.get("tag"),
        )

    @property
    def made_by(self) -> str:
        """How the version was made, in today's words: ``mode``, where manifests written
        before said "convert" for a conversion (create or overwrite, not told apart) and
        those written before versions say nothing: both read as "create"."""
        return "create" if self.mode in (None, "convert") else self.mode

    def to_bytes(self) -> bytes:
        """The text of ``tfrecorder.json``."""
        return json_bytes(self.to_json())

    @classmethod
    def from_bytes(cls, data: bytes) -> "Manifest":
        """The Manifest in the text of a ``tfrecorder.json``; ValueError, KeyError,
        TypeError or AttributeError when the text is not one."""
        return cls.from_json(loads(data))


def _layout(value) -> str:
    if value not in ("tfrecorder", "model_garden"):
        raise ValueError(f"layout {value!r} is none tfrecorder writes ('tfrecorder' or "
                         f"'model_garden')")
    return value


def _shard(x: Mapping[str, Any]) -> ShardInfo:
    """A shard's entry read; ValueError unless its live records are some of its records
    (``live`` of a shard without a live index is all of them)."""
    shard = ShardInfo(**x)
    n, live = int(shard.num_examples), shard.live_examples
    if not isinstance(live, int) or (shard.live_index is None and live != n) or live < 0 \
            or (n >= 0 and live > n):
        raise ValueError(f"shard {shard.file}: live {live} of {n} records"
                         + ("" if shard.live_index else " without a live index"))
    return shard


def damaged(path: str, error: Exception) -> IncompleteOutputError:
    """The error for a manifest file that is not one a conversion wrote: the one policy
    for a damaged manifest. ``tfrecorder.json`` is replaced whole by each conversion,
    so a damaged one is a conversion that did not finish; a version's own manifest is
    never rewritten, so a damaged one was changed since, and nothing it lists is read
    or removed."""
    why = f"{type(error).__name__}: {error}"
    if path.rstrip("/").rsplit("/", 1)[-1] == layout.MANIFEST:
        return IncompleteOutputError(
            f"{path} is not a complete tfrecorder manifest ({why}); the conversion that "
            f"wrote it did not finish cleanly. Convert again with mode='overwrite'.")
    return IncompleteOutputError(
        f"{path} is not a manifest tfrecorder wrote ({why}), so nothing it lists is read "
        f"or removed. Put back the file tfrecorder wrote, or convert into another folder")


def check_names(d: Mapping[str, Any]) -> None:
    """ValueError, naming the entry, unless every file the manifest's JSON ``d`` lists is
    one its conversion writes for a feature, split or shard it declares.

    Every reader reads what a manifest lists, and ``overwrite`` and ``vacuum`` remove
    it: a name of ours is not enough. A labels file of a feature it does not declare
    (``notes``: ``notes.labels.txt``), a shard of another dataset or split, a shard of a
    later version, the index, rows or live index file of another shard: each may be a
    file of the user's."""
    features, vocabularies = d["features"], d["vocabularies"]
    undeclared = sorted(k for k in vocabularies if k not in features)
    if undeclared:
        raise ValueError(f"it lists a vocabulary for {undeclared[0]!r}, which is not one of "
                         f"its features {sorted(features)}, so "
                         f"{layout.labels_file(undeclared[0])!r} is no file of its")
    declared = layout.Declared(d["name"], frozenset(d["splits"]), frozenset(vocabularies))
    version = d.get("version") or 1
    gzip = d["compression"] == "gzip"
    for split, s in d["splits"].items():
        for x in s["shards"]:
            file = x.get("file")
            shard = layout.ShardName.parse(file)
            if shard is None:
                raise ValueError(f"it lists {file!r} as a shard file, which is not a shard "
                                 f"name tfrecorder writes")
            if (not declared.writes(file) or shard.split != split or shard.version > version
                    or shard.gzip != gzip):
                raise ValueError(
                    f"it lists {file!r} as a shard of split {split!r}, which is not a name "
                    f"tfrecorder writes for that split of dataset {d['name']!r} by version "
                    f"{version} ({d['name']}-{split}.tfrecord-SSSSS-of-NNNNN"
                    f"{'.gz' if gzip else ''})")
            # A shard's index, rows and live index files have one name each, derived
            # from the shard's (a live index's version: this one or an earlier one).
            if x.get("index") is not None and x["index"] != index.name(file):
                raise ValueError(
                    f"it lists {x['index']!r} as the index file of shard {file}, which is "
                    f"not the index file name tfrecorder writes for it ({index.name(file)!r})")
            if x.get("rows") is not None and x["rows"] != layout.rows_file(file):
                raise ValueError(f"it lists {x['rows']!r} as the rows file of shard {file}, "
                                 f"which is not the name tfrecorder writes for it "
                                 f"({layout.rows_file(file)!r})")
            live = x.get("live_index")
            at = layout.parse_live_index(live) if live is not None else (version, file)
            if at is None or at[1] != file or at[0] > version:
                raise ValueError(f"it lists {live!r} as the live index of shard {file}, "
                                 f"which is not a name tfrecorder writes for it")
    tag = d.get("tag")
    if tag is not None and (not layout.is_tag(tag) or not tag or version < 2):
        raise ValueError(f"its tag {tag!r} is not a tag tfrecorder writes for version "
                         f"{version} (8 hex digits, from version 2 on)")
    # The root report, or this version's own (``versions/KKKKK-TAG/quality.json``).
    quality = d.get("quality")
    if quality is not None and quality not in (layout.QUALITY,
                                               layout.version_quality(version, tag or "")):
        raise ValueError(f"it lists {quality!r} as its data report, which is not a file name "
                         f"tfrecorder writes for version {version} ({layout.QUALITY!r})")


def loads(data):
    """The JSON ``data`` of one of our files read back (a manifest, a ledger, a lock,
    TFDS's metadata): ``json.loads``, where JSON nested too deep to read is a ValueError
    like any other text that is no such file (Python's parser recurses per level and
    raises RecursionError past about a thousand)."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deep to read") from None


def json_bytes(value) -> bytes:
    """``value`` as tfrecorder writes its JSON metadata files (this one and TFDS's):
    sorted keys, indented, UTF-8 unescaped, a final newline; same value, same bytes."""
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
