"""A look inside an output directory: the first records of a split, as files and as a
thumbnail grid in a notebook, with counts per split and per label.

It reads records with tfrecorder's own reader and parser (``records``, ``example``)
through ``storage``, so it needs no TensorFlow and works on ``gs://`` as on local disk.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import html
import io
import os
import re
import tempfile
from typing import Iterator

from tfrecorder import _storage as storage
from tfrecorder._folder import records
from tfrecorder._folder import index, layout, legacy, stored_keys, view
from tfrecorder._readers import preview
from tfrecorder._folder import split_names
from tfrecorder._errors import ConfigError, CorruptRecordError, IncompleteOutputError

_EXT = {"jpeg": ".jpg", "png": ".png", "gif": ".gif", "bmp": ".bmp", "webp": ".webp"}
#: The CSV ``inspect`` writes, under TFRecorder's name for it.
CSV_NAME = "data.csv"
#: The list of the files ``inspect`` wrote in its folder, one name a line: a later
#: ``inspect`` into the same folder replaces those, and no file it did not write.
WRITTEN_NAME = ".tfrecorder-inspect"


@dataclasses.dataclass
class Inspection:
    """What ``inspect`` found; renders as a grid of thumbnails in a notebook (each
    image's longest side at most 128 pixels, JPEG or, with transparency, PNG; the files
    written to ``output_dir`` are the stored images, whole).

    It is also the path of the folder it wrote (``os.PathLike``), as TFRecorder's
    ``inspect`` returned that folder: ``os.path.join(tfrecorder.inspect(d), "data.csv")``.
    """

    tfrecord_dir: str
    split: str
    output_dir: str
    csv_path: str
    rows: list[dict]                          # non-image features, label name, image file
    images: list[tuple[bytes, str, str]]      # (stored bytes, format, caption)
    split_counts: dict[str, int]
    label_counts: dict[str, dict[str, int]]   # split -> label name -> rows

    def __fspath__(self) -> str:
        return self.output_dir

    def __str__(self) -> str:
        lines = [f"{self.tfrecord_dir}: " + ", ".join(
            f"{s} {n if n >= 0 else '?'}" for s, n in self.split_counts.items())]
        lines.append(f"first {len(self.rows)} records of {self.split} written to {self.output_dir}")
        for row in self.rows:
            shown = {k: v for k, v in row.items() if k != "image_file"}
            lines.append(f"  {shown}")
        return "\n".join(lines)

    # A REPL shows the repr: the summary, not the images' bytes.
    __repr__ = __str__

    def _repr_html_(self) -> str:
        esc = html.escape
        cells = []
        for data, fmt, caption in self.images:
            # A thumbnail, not the stored file: the notebook keeps it (8 phone photos
            # embedded as stored made a 7 MB cell).
            small = preview.thumbnail(data)
            img = (f"<img src='{preview.data_uri(*small)}'/>" if small is not None else
                   f"<div style='width:{preview.THUMBNAIL_SIDE}px'>({esc(fmt)}: not "
                   f"decodable here)</div>")
            cells.append(
                "<figure style='display:inline-block;margin:4px;text-align:center;"
                f"vertical-align:top'>{img}<figcaption>{esc(caption)}</figcaption></figure>")
        labels = sorted({name for c in self.label_counts.values() for name in c})
        head = "".join(f"<th>{esc(s)}</th>" for s in self.split_counts)
        body = "".join(
            f"<tr><td>{esc(name)}</td>"
            + "".join(f"<td style='text-align:right'>{self.label_counts.get(s, {}).get(name, 0)}</td>"
                      for s in self.split_counts) + "</tr>"
            for name in labels)
        totals = "".join(f"<td style='text-align:right'><b>{n}</b></td>"
                         for n in self.split_counts.values())
        return (
            f"<div class='tfrecorder-inspection'><b>{esc(self.tfrecord_dir)}</b>, split "
            f"<b>{esc(self.split)}</b>: first {len(self.images)} records"
            f"<div>{''.join(cells)}</div>"
            f"<table><tr><th>label</th>{head}</tr>{body}<tr><td><b>all</b></td>{totals}</tr></table>"
            f"<div>Files: <code>{esc(self.output_dir)}</code></div></div>")


def shard_records(path: str, compression: str | None) -> Iterator[bytes]:
    """Every record of one shard file, checksums verified.

    Any damage, a broken gzip stream included, is a CorruptRecordError naming the file;
    a folder in its place too. A missing shard is an IncompleteOutputError naming it.
    """
    try:
        opened = storage.open_file(path, "rb")
    except IsADirectoryError:
        raise CorruptRecordError(f"{path} is a folder where the manifest lists a shard file; "
                                 f"convert again with mode='overwrite'") from None
    except FileNotFoundError:
        raise IncompleteOutputError(f"{path}: the manifest lists this shard, but it is "
                                    f"missing; convert again with mode='overwrite'") from None
    with opened as raw:
        f = gzip.GzipFile(fileobj=raw, mode="rb") if compression == "gzip" else raw
        try:
            yield from records.read_records(f, path)
        except records.CorruptRecordError:
            raise
        except (EOFError, OSError) as e:  # gzip.BadGzipFile is an OSError
            raise records.CorruptRecordError(f"{path}: {e}") from None


def iter_records(v: view.View) -> Iterator[bytes]:
    """Every live record of the split of view ``v``, in file order, checksums verified:
    a shard whose version retired records is read through its live index."""
    for i, shard in enumerate(v.shards):
        path = v.path(i)
        if shard.live_index is None:
            yield from shard_records(path, v.manifest.compression)
            continue
        v.refuse_retired(i)
        for offset, length in v.entries(i):
            yield records.unframe(storage.read_range(path, offset, length), length,
                                  f"{path}, record at byte {offset}")


@dataclasses.dataclass(frozen=True)
class Verification:
    """Every shard of a directory read in full, checksums and counts checked."""

    tfrecord_dir: str
    files: int
    records: int
    records_per_split: dict[str, int]
    #: The version verified (1 for a folder without versions).
    version: int = 1


def verify(tfrecord_dir: str, version: int | None = None) -> Verification:
    """Reads every record of every shard of version ``version`` (None: the latest),
    checking each CRC, every shard's count and every index file the manifest lists
    (each entry must match the shard's framing) and every shard's size; where the version retired records of
    a shard, its live index must list records of the shard, as many as the manifest's
    ``live``. ``records`` counts the live records.

    Raises CorruptRecordError naming the damaged file, IncompleteOutputError, or
    ConfigError for a version the folder does not hold.
    """
    return verify_version(view.open_version(str(tfrecord_dir), version))


def verify_version(opened: view.Version) -> Verification:
    """``verify`` of the version ``opened`` (``Folder.verify``)."""
    tfrecord_dir = opened.output_dir
    manifest = opened.manifest
    per_split, files = {}, 0
    for split in manifest.splits:
        v = opened.view(split)
        total = 0
        for i, shard in enumerate(v.shards):
            path = v.path(i)
            framed = [records.framed_length(r)
                      for r in shard_records(path, manifest.compression)]
            n = len(framed)
            if n != shard.num_examples and shard.num_examples >= 0:  # -1: not recorded
                raise records.CorruptRecordError(
                    f"{path}: {n} records, the manifest says {shard.num_examples}")
            # Sound records of the right count are not enough: a file replaced by
            # another run's shard of as many records is another size.
            size = storage.size(path)
            if shard.num_bytes > 0 and size != shard.num_bytes:
                raise records.CorruptRecordError(
                    f"{path}: {size} bytes, the manifest says {shard.num_bytes}: it is not "
                    f"the shard this version published; convert again with mode='overwrite'")
            if shard.index:  # the index the manifest lists must describe the shard exactly
                index.check(index.read(tfrecord_dir, shard.file), framed,
                            index.path(tfrecord_dir, shard.file))
            if shard.live_index:  # every entry one of the shard's records, none twice
                whole = set(index.offsets(framed))
                for line, entry in enumerate(v.read_entries(i), 1):
                    if entry not in whole:
                        raise CorruptRecordError(
                            f"{v.path(i, shard.live_index)}, line {line}: {entry[0]} "
                            f"{entry[1]} is no record of {shard.file}; the live index is "
                            f"damaged")
                n = shard.live_examples
            total += n
            files += 1
        per_split[split] = total
    return Verification(tfrecord_dir, files, sum(per_split.values()), per_split,
                        opened.number)


def _safe_name(name: str) -> str:
    name = re.sub(r"[^\w.\- ]", "_", name).lstrip(".") or "image"
    return name[:100]


#: First characters that make a spreadsheet read a cell as a formula (OWASP's list).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value):
    """``value`` as a CSV cell that a spreadsheet shows as text: one that would start a
    formula (a label ``=cmd|...``) gets a leading single quote. Numbers stay numbers."""
    if isinstance(value, list):
        value = str(value)
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def inspect(tfrecord_dir: str, split: str = "train", num_records: int = 5,
            output_dir: str | None = None, version: int | None = None) -> Inspection:
    """Writes the first ``num_records`` of ``split`` as a CSV plus image files.

    The CSV ``data.csv`` has one row per record: every non-image feature, the label
    name, and the image file's name. ``output_dir`` defaults to a new temporary folder.
    ``version=k`` inspects version ``k`` of an updated folder (None: the latest): its
    live records and its label names.
    """
    return inspect_version(view.open_version(str(tfrecord_dir), version), split,
                           num_records, output_dir)


def inspect_version(opened: view.Version, split: str = "train", num_records: int = 5,
                    output_dir: str | None = None) -> Inspection:
    """``inspect`` of the version ``opened`` (``Folder.inspect``)."""
    tfrecord_dir = opened.output_dir
    manifest = opened.manifest
    name = opened.split_name(split)
    if output_dir is None:
        output_dir = tempfile.mkdtemp(prefix="tfrecorder-inspect-")
    output_dir = str(os.fspath(output_dir))
    image_key, label_key = manifest.image_key, manifest.label_key
    names = manifest.label_names

    shown, images, files = [], [], {}
    v = opened.view(name)
    for i, raw in zip(range(num_records), iter_records(v)):
        try:
            feats = stored_keys.parse(raw, manifest)  # in our keys, either layout
        except CorruptRecordError as e:  # a feature of another kind than declared
            raise CorruptRecordError(f"{v.where(i)}: {e}") from None
        row: dict = {"record": i}
        for key, (_, values) in sorted(feats.items()):
            if key == image_key:
                continue
            values = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in values]
            row[key] = values[0] if len(values) == 1 else values
        if label_key in feats and names:
            row["label_name"] = " ".join(names[v] for v in feats[label_key][1] if 0 <= v < len(names))
        if image_key in feats:
            data = feats[image_key][1][0]
            if manifest.format_version == legacy.FORMAT_VERSION:  # raw pixels: save a PNG
                data = legacy.png(data, row[layout.IMAGE_HEIGHT], row[layout.IMAGE_WIDTH])
                row[layout.IMAGE_FORMAT] = "png"
            fmt = row.get(layout.IMAGE_FORMAT, "png")
            fname = f"{i:05d}_{_safe_name(str(row.get(layout.IMAGE_NAME, 'image')))}"
            ext = _EXT.get(fmt, ".png")
            if not fname.lower().endswith((".jpg", ".jpeg") if fmt == "jpeg" else (ext,)):
                fname += ext
            files[fname] = data
            row["image_file"] = fname
            images.append((data, fmt, row.get("label_name", str(row.get(label_key, "")))))
        shown.append(row)

    columns = list(dict.fromkeys(k for r in shown for k in r))
    text = io.StringIO()
    w = csv.DictWriter(text, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    w.writerows({k: _cell(v) for k, v in row.items()} for row in shown)
    files[CSV_NAME] = text.getvalue().encode("utf-8")
    _write_files(output_dir, files)
    csv_path = storage.join(output_dir, CSV_NAME)
    return Inspection(
        tfrecord_dir=tfrecord_dir, split=name, output_dir=output_dir, csv_path=csv_path,
        rows=shown, images=images,
        split_counts={s: i.num_examples for s, i in manifest.splits.items()},
        label_counts={s: dict(sorted(i.label_counts.items())) for s, i in manifest.splits.items()},
    )


def _write_files(output_dir: str, files: dict[str, bytes]) -> None:
    """Writes ``files`` (name -> bytes) into ``output_dir``, made if need be. A name that
    is there already and that no earlier ``inspect`` wrote (``WRITTEN_NAME`` lists what it
    did) is the user's file: nothing is written and a ConfigError names it. The list is
    written before the files, so that files of an interrupted run are known as ours."""
    if storage.exists(output_dir) and not storage.isdir(output_dir):
        raise ConfigError(f"output_dir {output_dir!r} is a file; give a folder for the "
                          f"records' CSV and images (a new one is made)")
    listed = storage.join(output_dir, WRITTEN_NAME)
    ours: list[str] = []
    if storage.isdir(output_dir):
        if storage.exists(listed):
            ours = storage.read_bytes(listed).decode("utf-8", "replace").splitlines()
        there = set(storage.listdir(output_dir)) - set(ours)
        theirs = sorted(set(files) & there)
        if theirs:
            more = f" (and {len(theirs) - 1} more)" if len(theirs) > 1 else ""
            raise ConfigError(
                f"{storage.join(output_dir, theirs[0])}{more} is there already, and inspect "
                f"did not write it; nothing was replaced. Give an output folder that is new "
                f"or empty, or one inspect wrote before")
    storage.makedirs(output_dir)
    names = list(dict.fromkeys([*ours, *files]))
    storage.write_bytes(listed, "".join(n + "\n" for n in names).encode("utf-8"))
    for name, data in files.items():
        storage.write_bytes(storage.join(output_dir, name), data)


def check_tfrecords(tfrecord_dir: str | None = None, split: str = "train", num_records: int = 1,
                    output_dir: str = "output", file_pattern: str | None = None) -> Inspection:
    """TFRecorder's ``check_tfrecords``: ``inspect`` under its name and arguments.

    ``file_pattern`` (``/path/train*.tfrecord.gz``, its 1.x form) gives the folder and the
    split in one.
    """
    if file_pattern is not None:
        tfrecord_dir, split = pattern_target(file_pattern, split)
    if tfrecord_dir is None:
        raise ConfigError("check_tfrecords needs tfrecord_dir= (or file_pattern=)")
    return inspect(tfrecord_dir, split, num_records, output_dir)


def pattern_target(file_pattern: str, default_split: str = "train") -> tuple[str, str]:
    """``(folder, split)`` of a shard file pattern: ``/d/train*.tfrecord.gz``
    (TFRecorder's files) or ``/d/data-train*`` (ours)."""
    folder, pattern = os.path.split(str(file_pattern))
    stem = pattern.split("*")[0].split(".")[0].rstrip("-")
    split = next((p for p in reversed(stem.split("-")) if _known_split(p)), default_split)
    return folder, split


def _known_split(name: str) -> bool:
    try:
        return split_names.canonical(name) is not None
    except split_names.UnknownSplit:
        return False
