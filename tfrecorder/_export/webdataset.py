"""One shard's live records as a tar file in WebDataset's layout, and the ``wids``
index of a split's tar files.

WebDataset reads a tar file as a stream of samples: the members that share a key (the
member's name up to its first dot) and follow each other make one sample, each member's
extension naming one of its fields. A record of ours is one sample:

- ``{key}.jpg`` (``.png``, ``.gif``, ...): the stored image bytes untouched, under the
  extension of their ``image_format``, so that WebDataset's decoders know them;
- ``{key}.cls``: the label id as decimal text, for a folder of one label per record;
- ``{key}.json``: every other feature as JSON: the label's name (a multi-label record's
  ids and names), the tabular columns, and the name of each categorical id.

A detection record has no ``.cls``: its ``.json`` holds ``image_id``, ``width``,
``height`` and ``objects`` as the Parquet export's (``objects``: COCO's pixel boxes, the
categories' ids and, as ``category_name``, their names), and each box's mask, where
held, is the member ``{key}.mask.{i}.png`` (``i`` the box's place), the PNG as stored.
A semantic segmentation record's mask of class ids is the member ``{key}.mask.png``.

Keys hold no dot, or a reader would cut them there. A key names the shard of ours the
record comes from (its split, the version that wrote it, its number) and the record's
place among the shard's live records, so keys stay unique across every tar of an export
and a tar reused from the previous export keeps its keys.

The tar is written the same way every time (no clock, no user, members in record order,
each record's members sorted), so that a tar whose shard is unchanged is the same bytes
and an export that reuses it may check it by its digest. ``wids`` reads a split by
position through its index, ``{split}.json``: the tar files (relative to the index,
where ``wids`` resolves them) with their records and bytes.
"""

from __future__ import annotations

import io
import json
import re
import tarfile

import numpy as np

from tfrecorder._errors import SchemaError
from tfrecorder._export import objects
from tfrecorder._folder import layout
from tfrecorder._folder.manifest import Manifest

#: Our ``image_format`` -> the extension WebDataset's decoders read it by.
EXTENSIONS = {"jpeg": "jpg", "png": "png", "gif": "gif", "bmp": "bmp", "webp": "webp",
              "tiff": "tiff"}
#: Features not exported: where the image was read from on the converting machine, and
#: its format, which the image's extension says.
LEFT_OUT = frozenset({layout.IMAGE_URI, layout.IMAGE_FORMAT})
#: Every member's time: a fixed one, so that the same records make the same bytes.
MTIME = 0


def name(split: str, shard: int) -> str:
    """The tar file of the ``shard``-th shard of ``split``: ``train-00003.tar``."""
    return f"{split}-{shard:05d}.tar"


def index_name(split: str) -> str:
    """The ``wids`` index of ``split``: ``train.json``."""
    return f"{split}.json"


def key_prefix(split: str, shard_file: str) -> str:
    """The start of the keys of the records of our shard ``shard_file``:
    ``train_v00002_00000`` for ``data-train-v00002.tfrecord-00000-of-00001``; a name of
    another form (an older folder's) with every character that is not a letter or a
    digit made ``_``."""
    parsed = layout.ShardName.parse(shard_file.rsplit("/", 1)[-1])
    if parsed is None:
        return re.sub(r"[^A-Za-z0-9]", "_", shard_file)
    return f"{split}_v{parsed.version:05d}_{parsed.number:05d}"


def features(manifest: Manifest) -> dict:
    """What the files hold, for the export's settings: an export whose features differ
    reuses no file of the previous one."""
    out = {"label": manifest.label_key, "multi_label": manifest.multi_label,
           "vocabularies": {k: list(v) for k, v in sorted(manifest.vocabularies.items())},
           "features": sorted(_json_keys(manifest)), "image": manifest.image_key}
    if objects.is_detection(manifest):
        out["objects"] = objects.fields(manifest)
    return out


def write(records, manifest: Manifest, prefix: str, where: str,
          ids=None) -> tuple[bytes, int]:
    """The tar file of ``records`` (their features as ``access.values`` gives them, in
    order), keyed ``{prefix}_{n:06d}``, as bytes; and the number of records.
    ``where`` names the shard in errors; ``ids(place)`` is the ``image_id`` of the
    ``place``-th record of a detection folder that stores none."""
    sink = io.BytesIO()
    n = 0
    # USTAR: no PAX header (it would carry times); our names are far under its 100 bytes.
    with tarfile.open(fileobj=sink, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for n, values in enumerate(records, 1):
            given = ids(n - 1) if ids else n - 1
            for member, data in sorted(sample(values, manifest, where, given).items()):
                _add(tar, f"{prefix}_{n - 1:06d}.{member}", data)
    return sink.getvalue(), n


def sample(values: dict, manifest: Manifest, where: str,
           image_id: int = 0) -> dict[str, bytes]:
    """One record's members: ``{extension: bytes}``; ``image_id`` that of a detection
    record that stores none."""
    out = {}
    image = manifest.image_key
    if image and values.get(image) is not None:
        kind = values.get(layout.IMAGE_FORMAT, b"")
        kind = kind.decode("ascii", "replace") if isinstance(kind, bytes) else str(kind)
        out[EXTENSIONS.get(kind.lower(), kind.lower() or "bin")] = bytes(values[image])
    if values.get(layout.SEGMENTATION_MASK) is not None:  # the PNG of class ids
        out["mask.png"] = bytes(values[layout.SEGMENTATION_MASK])
    label = manifest.label_key
    doc = {}
    if objects.is_detection(manifest):
        doc = objects.record(values, manifest, image_id, where)
        boxes = doc["objects"]
        for i, png in enumerate(boxes.pop("mask", [])):
            out[f"mask.{i}.png"] = png
        names = manifest.vocabularies.get(label) or []
        boxes["category_name"] = [names[i] if 0 <= i < len(names) else None
                                  for i in boxes["category"]]
        label = None  # no .cls: the categories are in the objects
    elif label and label in values and not manifest.multi_label:
        out["cls"] = str(int(values[label])).encode()
    for key in _json_keys(manifest):
        if key not in values:
            continue
        value = _plain(values[key], key, where)
        names = manifest.vocabularies.get(key)
        if key != label or manifest.multi_label:
            doc[key] = value
        if names is not None:  # the ids' names beside them: a reader has no vocabulary
            doc[f"{key}_names" if isinstance(value, list) else f"{key}_name"] = (
                [names[i] for i in value] if isinstance(value, list) else names[value])
    out["json"] = json.dumps(doc, sort_keys=True, ensure_ascii=False).encode()
    return out


def index(split: str, shards: list[tuple[str, int, int]]) -> bytes:
    """The ``wids`` index of ``split``'s tar files ``shards`` (name, records, bytes):
    ``wids.ShardListDataset`` reads the split by position through it, resolving each
    ``url`` against the index's own folder."""
    doc = {"__kind__": "wids-shard-index-v1", "wids_version": 1, "name": split,
           "shardlist": [{"url": url, "nsamples": n, "filesize": size}
                         for url, n, size in shards if n]}
    return json.dumps(doc, indent=1).encode() + b"\n"


def _json_keys(manifest: Manifest) -> list[str]:
    """The features the ``.json`` member holds: all but the image, and the label too
    (by its name; its id is the ``.cls``)."""
    taken = set(objects.taken(manifest)) if objects.is_detection(manifest) else set()
    taken.add(layout.SEGMENTATION_MASK)  # its own member, .mask.png
    return [k for k in manifest.features
            if k != manifest.image_key and k not in LEFT_OUT and k not in taken]


def _add(tar: tarfile.TarFile, member: str, data: bytes) -> None:
    info = tarfile.TarInfo(member)
    info.size = len(data)
    info.mtime = MTIME
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def _plain(value, key: str, where: str):
    """A feature's value as JSON holds it: text for bytes, lists for arrays."""
    if isinstance(value, np.ndarray):
        return [_plain(v, key, where) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [_plain(v, key, where) for v in value]
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise SchemaError(
                f"{where}: feature {key!r} holds bytes that are not UTF-8 text "
                f"({value[:20]!r}...), which a WebDataset export holds as JSON text; "
                f"convert the table with that column as text") from None
    if isinstance(value, np.generic):
        return value.item()
    return value
