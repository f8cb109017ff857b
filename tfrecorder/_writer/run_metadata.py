"""The metadata half of the on-disk contract: what an output directory holds besides
its shards, built for the pipeline's last step to write::

    OUT/
      tfrecorder.json                    the manifest, written last: without it the
                                         directory is incomplete
      dataset_info.json, features.json   TFDS metadata (tfds.builder_from_directory)
      <label>.labels.txt                 one label per line; line i is id i
      NAME-<split>.tfrecord-SSSSS-of-NNNNN[.gz]
      index/NAME-<split>.tfrecord-SSSSS-of-NNNNN.idx   each record's offset and length
      errors.jsonl                       one line per quarantined row

Every file is written with sorted keys and no timestamps, so the same input gives the
same bytes. The manifest's types and their JSON are ``_folder/manifest.py``'s, and
``_folder/metadata.py`` reads a directory's manifest back; this module builds their
content (and TFDS's, the labels files, the data report and the errors file) and checks
the error budget. It stands on the writer's floor, above the inputs' labels files and
the report's ``quality.json`` it writes.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
from typing import Any, Iterable, Mapping

from tfrecorder._inputs import labels as label_files
from tfrecorder._folder import garden, layout
from tfrecorder._report import quality
from tfrecorder._errors import ConversionError
from tfrecorder._folder.layout import DATASET_INFO, FEATURES, FeatureSpec
from tfrecorder._folder.manifest import Manifest, ShardInfo, SplitInfo, json_bytes

#: The TFDS dataset version dataset_info.json states (its key "version"): TFDS's, not
#: a version of the folder.
TFDS_DATASET_VERSION = "1.0.0"


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """What the run will write, known before the pipeline starts."""

    name: str
    compression: str | None
    features: dict[str, FeatureSpec]
    vocabularies: dict[str, list[str]]
    rows_in: int
    max_error_fraction: float = 1.0
    image_options: dict = dataclasses.field(default_factory=dict)  # pre-sizing, if any
    # Over the error budget the last step raises, failing the job (Dataflow). A local run
    # has it return instead, and the waiting caller raises: Beam's worker processes print
    # a failing step's traceback to the user's stderr.
    fail_in_pipeline: bool = True
    near_duplicates: bool = False    # the data report pairs near duplicates too
    near_distance: int = 8           # ... within this many bits (measures.MAX_DISTANCE)
    # The version's story (Manifest.source, .mode, .key); ``update`` is the
    # ``updating.Update`` an update publishes, None for a conversion (version 1).
    source: str | None = None
    mode: str = "create"
    key: str | None = None
    update: Any = None
    # The records' feature keys (garden.LAYOUTS), and for "model_garden" the class id
    # each label id is written as (the label map's).
    layout: str = "tfrecorder"
    class_ids: tuple = ()
    keypoints: dict | None = None    # Manifest.keypoints


def _row_key(row) -> tuple:
    if isinstance(row, (int, float)) and not isinstance(row, bool) and math.isfinite(row):
        return (0, row, "")
    return (1, 0, str(row))


def strict_json(value):
    """A row id (a CSV line number, or a DataFrame index label of any type) or a cell
    as strict JSON: numbers and text as they are; dates and times in ISO 8601
    (``2024-05-01T12:00:00``); a NaN or infinite number, a period, a duration, an
    interval and anything else as pandas prints it (``nan``, ``2024-05``,
    ``1 days 00:00:00``, ``(0, 1]``); a MultiIndex label as a list."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (tuple, list)):
        return [strict_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): strict_json(v) for k, v in value.items()}
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if getattr(value, "dtype", None) is not None and value.dtype.kind in "biuf":
        return strict_json(value.item())  # a NumPy number
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return str(value)


def _error_line(q) -> bytes:
    """One line of ``errors.jsonl`` for a Quarantined row: strict JSON (no NaN)."""
    return json.dumps(strict_json(q.to_json()), sort_keys=True, ensure_ascii=False,
                      allow_nan=False).encode() + b"\n"


@dataclasses.dataclass(frozen=True)
class Built:
    """Everything the last step writes, built in memory before anything is written."""

    manifest: Manifest
    manifest_bytes: bytes
    errors: bytes                    # errors.jsonl
    files: dict[str, bytes]          # labels files and TFDS metadata, by name
    shards: list[str]                # shard file names, in split and number order
    indexes: list[str]               # their index files (index.name), where written
    rows: list[str]                  # their rows files (layout.rows_file), where written
    rows_bad: int
    first_reasons: list[str]
    #: How many quarantined rows each kind of reason has (``reason_counts``).
    reasons: dict[str, int] = dataclasses.field(default_factory=dict)


def label_names(spec: DatasetSpec) -> list[str]:
    """The names of the label ids (those of the feature whose role is the label), or []."""
    key = next((k for k, f in spec.features.items() if f.role == "label"), None)
    return list(spec.vocabularies.get(key, [])) if key else []


def build(spec: DatasetSpec, stats: Iterable, quarantined: Iterable,
          matches: tuple = ((), ())) -> Built:
    """The metadata of a run from the ShardStats of every shard and every Quarantined row,
    and its data report from them and the ``matches`` (exact groups, near pairs) the
    pipeline found (``quality.build``).

    Every file is built with sorted keys and no timestamps: the same input gives the same
    bytes, whatever order the shards finished in.
    """
    stats = sorted(stats, key=lambda s: (layout.split_order(s.split), s.number))
    quarantined = list(quarantined)
    # The shards an update keeps are there for the data report only.
    kept_stats = [s for s in stats if getattr(s, "kept", False)]
    stats = [s for s in stats if not getattr(s, "kept", False)]
    # By row; rows of one id (an index that repeats a label) by their lines, not in the
    # order the shards came in, which worker processes do not keep.
    lines = sorted((_row_key(q.row), _error_line(q), i) for i, q in enumerate(quarantined))
    bad = [quarantined[i] for _, _, i in lines]
    errors = b"".join(line for _, line, _ in lines)
    rows_bad = len(bad)

    names = label_names(spec)
    update = spec.update
    splits: dict[str, SplitInfo] = {}
    if update is not None:  # the parent's shards with live records, as this version sees them
        for split, kept in update.kept.items():
            splits[split] = SplitInfo(split, sum(x.live_examples for x in kept),
                                      sum(x.num_bytes for x in kept), list(kept),
                                      dict(update.label_counts.get(split, {})))
    channels: dict[int, int] = {}
    formats: set[str] = set()
    for s in stats:
        info = splits.get(s.split) or SplitInfo(s.split, 0, 0, [], {})
        counts = dict(info.label_counts)
        for label_id, n in s.labels.items():
            name = names[int(label_id)]
            counts[name] = counts.get(name, 0) + n
        splits[s.split] = SplitInfo(
            s.split, info.num_examples + s.num_examples, info.num_bytes + s.num_bytes,
            info.shards + [ShardInfo(s.filename, s.num_examples, s.num_bytes,
                                     s.index_file, rows=s.rows_file)], counts)
        for c, n in s.channels.items():
            channels[int(c)] = channels.get(int(c), 0) + n
        formats.update(f for f, n in s.formats.items() if n)
    splits = {k: splits[k] for k in sorted(splits, key=layout.split_order) if splits[k].shards}
    if update is None:
        version, parent, rows_in, kept_rows = 1, None, spec.rows_in, 0
        changes = {k: {"added": v.num_examples, "retired": 0, "kept": 0}
                   for k, v in splits.items()}
    else:
        version, parent, rows_in, kept_rows = (update.version, update.parent.version,
                                               update.rows_in, update.kept_rows)
        # What was added is what the workers wrote: a row quarantined is not added.
        written: dict[str, int] = {}
        for s in stats:
            written[s.split] = written.get(s.split, 0) + s.num_examples
        changes = {k: {**v, "added": written.get(k, 0)} for k, v in update.changes.items()}
        for c, n in update.channels.items():
            channels[int(c)] = channels.get(int(c), 0) + n
        formats.update(update.formats)
    manifest = Manifest(
        name=spec.name, compression=spec.compression, features=spec.features,
        vocabularies=spec.vocabularies, splits=splits, rows_in=rows_in,
        rows_written=kept_rows + sum(s.rows for s in stats), rows_quarantined=rows_bad,
        image_options=dict(spec.image_options),
        quality=(layout.QUALITY if update is None
                 else layout.version_quality(version, update.tag)),
        version=version, parent=parent, source=spec.source, mode=spec.mode, key=spec.key,
        changes=changes, layout=spec.layout, keypoints=spec.keypoints,
        tag=update.tag or None if update is not None else None,
    )
    manifest = with_generation(manifest, update.parent.generation if update else None,
                               [(s.filename, s.digest) for s in stats])
    files = {layout.labels_file(key): label_files.format_labels_file(vocab).encode("utf-8")
             for key, vocab in spec.vocabularies.items()}
    if spec.layout == garden.MODEL_GARDEN and spec.class_ids:
        key = manifest.label_key
        files[garden.label_map_file(key)] = garden.label_map(
            spec.vocabularies.get(key, []), spec.class_ids).encode("utf-8")
    # The data report: of an update, its new records against every live one (the kept
    # ones' digests come from their rows files); also the latest report at the top.
    files[layout.QUALITY] = json_bytes(quality.build(
        stats + kept_stats, *matches, label_names=names, multi_label=manifest.multi_label,
        near_duplicates=spec.near_duplicates, row_json=strict_json, version=version,
        near_distance=spec.near_distance))
    if manifest.quality != layout.QUALITY:
        files[manifest.quality] = files[layout.QUALITY]
    files[DATASET_INFO] = json_bytes(tfds_dataset_info(manifest))
    files[FEATURES] = json_bytes(tfds_features(manifest, image_channels(channels),
                                                decodable=TFDS_UNDECODABLE.isdisjoint(formats)))
    return Built(manifest, manifest.to_bytes(), errors, files,
                 [s.filename for s in stats],
                 [s.index_file for s in stats if s.index_file],
                 [s.rows_file for s in stats if s.rows_file], rows_bad,
                 [f"row {q.row}: {q.reason}" for q in bad[:5]],
                 reason_counts(q.reason for q in bad))


def with_generation(manifest: Manifest, parent_generation: str | None,
                    digests: Iterable[tuple[str, str]]) -> Manifest:
    """``manifest`` with its generation: a fingerprint of its content (not its history:
    the same records and metadata give the same generation, whichever version publishes
    them), its parent's generation where it has a parent, and ``(file, digest)`` of each
    shard it wrote (the digest of its records' lengths and checksums)."""
    content = dataclasses.replace(manifest, version=None, parent=None, published=None,
                                  source=None, mode=None, changes=None, generation="")
    fingerprint = hashlib.blake2b(content.to_bytes(), digest_size=16)
    if parent_generation is not None:
        fingerprint.update(f"{parent_generation}\n".encode())
    for name, digest in digests:
        fingerprint.update(f"{name} {digest}\n".encode())
    return dataclasses.replace(manifest, generation=fingerprint.hexdigest())


def published(manifest: Manifest) -> Manifest:
    """``manifest`` stamped with the time of its publication (UTC, to the second)."""
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    return dataclasses.replace(manifest, published=now.strftime("%Y-%m-%dT%H:%M:%SZ"))


def reason_kind(reason: str) -> str:
    """What a quarantine reason says without its particulars (the file, the decoder's
    words): ``image file not found: /x.jpg`` is ``image file not found``."""
    cut = min((i for i in (reason.find(": "), reason.find(" (")) if i > 0),
              default=len(reason))
    return reason[:cut]


def reason_counts(reasons: Iterable[str]) -> dict[str, int]:
    """Quarantined rows per kind of reason, the most common first."""
    counts: dict[str, int] = {}
    for reason in reasons:
        kind = reason_kind(str(reason))
        counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def counted(counts: Mapping[str, int]) -> str:
    """``9 not a readable image, 1 truncated JPEG``."""
    return ", ".join(f"{n} {kind}" for kind, n in counts.items())


#: What to do about the rows of a kind of reason, said before the rows themselves.
_FIXES = {
    "image file not found": "check where the table's image paths point (relative ones "
                            "start from images_dir=, --images-dir on the command line, "
                            "else from the table's folder)",
    "not a readable image": "convert those files to a format Pillow reads (JPEG, PNG, "
                            "WebP, GIF, BMP, TIFF; not SVG), or leave their rows out",
    "image file too large": "raise max_image_bytes (--max-image-bytes)",
    "SVG is not supported": "convert the SVG files to PNG (cairosvg, Inkscape or a browser "
                            "renders them at the size you train at), or leave their rows out",
}


def over_budget(spec: DatasetSpec, rows_bad: int, first_reasons: list[str],
                errors_path: str, reasons: Mapping[str, int] | None = None
                ) -> ConversionError | None:
    """The ConversionError of a run whose quarantined rows exceed its error budget, or
    that wrote nothing at all: what happened, what to do, the rows per kind of reason
    (``reasons``), then the first rows. Its ``parts`` are what happened, the fix and
    the rest, for a better fix found later (``runners.explained``) to take its place."""
    if not spec.rows_in:
        return None
    if rows_bad < spec.rows_in and rows_bad / spec.rows_in <= spec.max_error_fraction:
        return None
    why = ("every row was quarantined, so nothing was written" if rows_bad >= spec.rows_in
           else f"more than max_error_fraction={spec.max_error_fraction:g}")
    head = f"{rows_bad} of {spec.rows_in} rows were quarantined: {why}."
    fix = next((_FIXES[k] for k in reasons or {} if k in _FIXES), None)
    fix = f"Fix: {fix}." if fix else ""
    # Three rows show what the reasons look like; the errors file has every one.
    rest = (f"{'Reasons: ' + counted(reasons) + '. ' if reasons else ''}"
            f"First rows: {'; '.join(first_reasons[:3])}. Every bad row is listed in "
            f"{errors_path}.")
    failure = ConversionError(" ".join(p for p in (head, fix, rest) if p))
    failure.parts = (head, fix, rest)
    return failure


def image_channels(counts: Mapping[int, int]) -> int:
    """The channel count TFDS should decode to: the one all images share, else 3."""
    kinds = {c for c, n in counts.items() if n}
    if len(kinds) == 1 and next(iter(kinds)) in (1, 3, 4):
        return next(iter(kinds))
    return 3


# --- TFDS -----------------------------------------------------------------------------

_TFDS = "tensorflow_datasets.core.features."


def tfds_template(s: SplitInfo) -> str | None:
    """The file-name template of a split whose live records are whole shards under one
    template (every shard of one version, all listed, none with retired records), else
    None: TFDS reads a split by one template, and would read retired records."""
    names = [layout.ShardName.parse(x.file) for x in s.shards]
    versions = {(n.version, n.tag) for n in names if n is not None}
    if (len(versions) != 1 or None in names or any(x.live_index for x in s.shards)
            or sorted(n.number for n in names) != list(range(names[0].count))):
        return None
    return layout.tfds_template(*versions.pop())


def tfds_dataset_info(m: Manifest) -> dict:
    """dataset_info.json: every split that TFDS can read by one file-name template (an
    update's split holding records of two versions is left out: docs/format.md)."""
    splits = [
        {
            "filepathTemplate": tfds_template(s),
            "name": s.name,
            "numBytes": str(s.num_bytes),
            "shardLengths": [str(x.num_examples) for x in s.shards],
        }
        for s in sorted(m.splits.values(), key=lambda s: layout.split_order(s.name))
        if tfds_template(s) is not None
    ]
    info: dict[str, Any] = {
        "description": "Written by tfrecorder." + (
            " Images with a shorter side over {shorter_side} px were downscaled to it and "
            "re-encoded (JPEG quality {jpeg_quality}).".format(**m.image_options)
            if m.image_options else ""),
        "fileFormat": "tfrecord",
        "name": m.name,
        "splits": splits,
        "version": TFDS_DATASET_VERSION,
    }
    if m.image_key and m.label_key:
        info["supervisedKeys"] = {"tuple": {"items": [
            {"featureKey": m.image_key}, {"featureKey": m.label_key}]}}
    return info


#: Stored formats TFDS's Image feature cannot decode: it decodes a GIF or a WebP, even
#: of one frame, to [frames, H, W, C] (TensorFlow's ``decode_image`` gives a WebP's
#: frames as a GIF's), which its [H, W, C] shape refuses.
TFDS_UNDECODABLE = frozenset({"gif", "webp"})


def tfds_features(m: Manifest, channels: int, decodable: bool = True) -> dict:
    """features.json; with ``decodable=False`` (a GIF or WebP is stored) the image is declared as
    its encoded bytes, so TFDS reads every record and the caller decodes them."""
    feats: dict[str, Any] = {}
    for key, f in m.features.items():
        if f.role == "image" and not decodable:
            feats[key] = {"pythonClassName": _TFDS + "tensor_feature.Tensor",
                          "tensor": {"dtype": "string", "encoding": "none", "shape": {}}}
        elif f.role == "image":
            feats[key] = {"pythonClassName": _TFDS + "image_feature.Image",
                          "image": {"dtype": "uint8",
                                    "shape": {"dimensions": ["-1", "-1", str(channels)]}}}
        elif f.varlen:
            continue  # variable length: TFDS would need a Sequence feature
        elif f.role == "label" or key in m.vocabularies:
            feats[key] = {"pythonClassName": _TFDS + "class_label_feature.ClassLabel",
                          "classLabel": {"numClasses": str(len(m.vocabularies.get(key, [])))}}
        elif f.dtype == "bytes":
            feats[key] = {"pythonClassName": _TFDS + "text_feature.Text", "text": {}}
        else:
            dtype = "int64" if f.dtype == "int64" else "float32"
            feats[key] = {"pythonClassName": _TFDS + "tensor_feature.Tensor",
                          "tensor": {"dtype": dtype, "encoding": "none", "shape": {}}}
    return {"featuresDict": {"features": feats},
            "pythonClassName": _TFDS + "features_dict.FeaturesDict"}
