"""The manifest, ``tfrecorder.json``: what a finished conversion wrote, and its JSON.

``metadata.build`` makes one from the shards' statistics and ``metadata.read_manifest``
reads one back (or describes a TFRecorder 2.0 folder as one, through ``legacy``); the
writer (``output``) and every reader (``loading``, ``inspection``, ``access``) share
these types. This module defines them and their text only, so it imports no tfrecorder
module but ``layout`` and ``index`` (for the names a manifest may list).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from tfrecorder import _index as index, _layout as layout
from tfrecorder._layout import FeatureSpec

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
    """One split: its totals, its shards in index order, and its rows per label name."""

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
    #: (``mode``: "convert", "update" or "append"), the match key, and the records each
    #: split gained, lost and kept (``{split: {"added", "retired", "kept"}}``).
    version: int | None = None
    parent: int | None = None
    published: str | None = None
    source: str | None = None
    mode: str | None = None
    key: str | None = None
    changes: dict | None = None

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
        for name in ("version", "parent", "published", "source", "mode", "key", "changes"):
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
        for s in d["splits"].values():
            for x in s["shards"]:
                if layout.ShardName.parse(x.get("file")) is None:
                    raise ValueError(f"it lists {x.get('file')!r} as a shard file, which is "
                                     f"not a shard name tfrecorder writes")
                # A shard's index file has one name, derived from the shard's: any other
                # entry (``../x``, ``/etc/x``, a file of the user's, another shard's
                # index) would be read by every reader and removed by ``overwrite``.
                if x.get("index") is not None and x["index"] != index.name(x["file"]):
                    raise ValueError(
                        f"it lists {x['index']!r} as the index file of shard {x['file']}, "
                        f"which is not the index file name tfrecorder writes for it "
                        f"({index.name(x['file'])!r})")
                # The same for its rows file and live index: names of this shard only.
                if x.get("rows") is not None and x["rows"] != layout.rows_file(x["file"]):
                    raise ValueError(f"it lists {x['rows']!r} as the rows file of shard "
                                     f"{x['file']}, which is not the name tfrecorder writes")
                live = x.get("live_index")
                if live is not None and (layout.parse_live_index(live) or (0, ""))[1] != x["file"]:
                    raise ValueError(f"it lists {live!r} as the live index of shard "
                                     f"{x['file']}, which is not a name tfrecorder writes")
        splits = {
            name: SplitInfo(s["name"], s["num_examples"], s["num_bytes"],
                            [ShardInfo(**x) for x in s["shards"]], dict(s.get("label_counts", {})))
            for name, s in sorted(d["splits"].items(), key=lambda kv: layout.split_order(kv[0]))
        }
        return cls(
            name=d["name"], compression=d["compression"],
            features={k: FeatureSpec(**v) for k, v in d["features"].items()},
            vocabularies={k: list(v) for k, v in d["vocabularies"].items()},
            splits=splits, rows_in=d["rows_in"], rows_written=d["rows_written"],
            rows_quarantined=d["rows_quarantined"], format_version=d["format_version"],
            image_options=dict(d.get("image_options", {})),
            generation=str(d.get("generation", "")),
            quality=_quality_file(d.get("quality")),
            version=d.get("version"), parent=d.get("parent"), published=d.get("published"),
            source=d.get("source"), mode=d.get("mode"), key=d.get("key"),
            changes=d.get("changes"),
        )

    def to_bytes(self) -> bytes:
        """The text of ``tfrecorder.json``."""
        return json_bytes(self.to_json())

    @classmethod
    def from_bytes(cls, data: bytes) -> "Manifest":
        """The Manifest in the text of a ``tfrecorder.json``; ValueError, KeyError,
        TypeError or AttributeError when the text is not one."""
        return cls.from_json(json.loads(data))


def _quality_file(name) -> str | None:
    # Names of ours only (``quality.json``, an update's ``versions/KKKKK/quality.json``):
    # a manifest that lists another file would have readers read it and ``overwrite``
    # remove it.
    if name is not None and name != layout.QUALITY and not layout.is_version_quality(name):
        raise ValueError(f"it lists {name!r} as its data report, which is not the file "
                         f"name tfrecorder writes ({layout.QUALITY!r})")
    return name


def json_bytes(value) -> bytes:
    """``value`` as tfrecorder writes its JSON metadata files (this one and TFDS's):
    sorted keys, indented, UTF-8 unescaped, a final newline; same value, same bytes."""
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
