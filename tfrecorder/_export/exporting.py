"""``tfrecorder.export``: one version of a folder written in another format.

One export is one story: the version opened once (``view.open_version``, as every
reader does), one file per shard of ours, each written from the shard's live records
(``access.Reader``) or taken as it is from the previous export where its shard is
unchanged (``target``); then what describes the files (for Parquet the dataset card
and the Croissant description, for WebDataset each split's ``wids`` index), the
version checked to be still the one opened, and the folder published whole; all of
it under ``dest``'s lock (``target.claimed``), so that two exports into one folder
never mix their files.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os

from tfrecorder import _storage as storage
from tfrecorder import access
from tfrecorder._errors import ConfigError
from tfrecorder._export import card, croissant, objects, parquet, target, webdataset
from tfrecorder._folder import view

log = logging.getLogger(__name__)

FORMATS = ("parquet", "webdataset")
#: Records read from a shard at once.
BATCH = 256
#: The export's own layout; a change that alters the files' content bumps it, so that
#: no file of an older export is reused.
EXPORT_FORMAT = 1


@dataclasses.dataclass(frozen=True)
class Exported:
    """What ``export`` did: where, which version, and which files it wrote anew and
    which it took unchanged from the previous export."""

    dest: str
    format: str
    version: int
    files: list[str]
    written: list[str]
    reused: list[str]
    bytes_written: int
    bytes_reused: int

    def __repr__(self) -> str:
        return (f"Exported({self.dest!r}, format={self.format!r}, version={self.version}: "
                f"{len(self.written)} files written, {len(self.reused)} reused)")


def export(tfrecord_dir: str, dest: str, format: str = "parquet", *,
           version: int | None = None, metadata: dict | None = None) -> Exported:
    """Version ``version`` (None: the latest) of the folder ``tfrecord_dir`` exported
    into the folder ``dest`` (local or ``gs://``) in ``format``:

    - ``"parquet"``: ``data/{split}-NNNNN-of-NNNNN.parquet``, one file per shard, that
      Hugging Face's ``datasets.load_dataset(dest)`` and the Hub read as they are, with
      a dataset card (``README.md``) and Croissant 1.1 metadata (``croissant.json``);
    - ``"webdataset"``: ``{split}-NNNNN.tar``, one tar file per shard in WebDataset's
      layout (the image under its format's extension, ``.cls``, ``.json``), and a
      ``wids`` index per split (``{split}.json``) to read it by position.

    ``metadata`` describes the dataset to those who find it: ``name``, ``description``,
    ``license``, ``creator``, ``url``, and any Croissant ``rai:`` key. ``dest`` holds
    one export: exporting again replaces it, taking the files of unchanged shards as
    they are, and an export that fails leaves it as it was (docs/sharing.md).
    An object-detection folder's boxes are exported as the Hub's detection sets hold
    them (``objects``, COCO's pixel boxes). ConfigError for an unknown format or a
    ``dest`` that holds other files; OutputBusyError while another export writes
    ``dest`` (its lock, ``dest/.tfrecorder.lock``).
    """
    return export_version(view.open_version(str(tfrecord_dir), version), dest, format,
                          metadata=metadata)


def export_version(opened: view.Version, dest: str, format: str = "parquet", *,
                   metadata: dict | None = None) -> Exported:
    """``export`` of the version ``opened`` (``Folder.export``)."""
    if format not in FORMATS:
        raise ConfigError(f"format={format!r}: not an export format; give one of "
                          f"{', '.join(map(repr, FORMATS))}")
    metadata = _checked(metadata)
    dest = _local_folder(str(dest).rstrip("/"))
    source = opened.output_dir
    manifest = opened.manifest
    _check(manifest, source, format)
    opened.need_offsets(f"an export of {source}")
    settings = {"export_format": EXPORT_FORMAT, "format": format,
                "features": (parquet.hf_features(manifest) if format == "parquet"
                             else webdataset.features(manifest))}
    target.previous(dest)  # a folder of the user's refused before a lock is put in it
    with target.claimed(dest) as held:
        return _export(opened, dest, format, metadata, settings, held)


def _local_folder(dest: str) -> str:
    """``dest`` as the export writes it: a local symbolic link as the folder it names
    (the export replaces that folder whole, with its lock, and the link stays); a file
    refused."""
    if storage.is_remote(dest):
        return dest
    if os.path.islink(dest):
        dest = os.path.realpath(dest)
    if os.path.exists(dest) and not os.path.isdir(dest):
        raise ConfigError(f"dest={dest!r} is a file; give a folder to export into (it is "
                          f"created where missing)")
    return dest


def _export(opened: view.Version, dest: str, format: str, metadata: dict, settings: dict,
            held) -> Exported:
    """``export_version`` with ``dest``'s lock ``held``."""
    source, manifest = opened.output_dir, opened.manifest
    old = target.previous(dest)  # read again, now that no other export changes it
    reuse = target.reusable(old, settings)
    planned = _plan(opened, format)
    writing = target.Writing(dest)
    files, written, reused = {}, [], []
    try:
        for split, items in planned.items():
            reader = None
            for p in items:
                hit = reuse.get(json.dumps(p.key, sort_keys=True))
                if hit is not None:
                    old_name, sha, size = hit
                    writing.take(p.name, old_name, size)
                    reused.append(p.name)
                else:
                    if reader is None:
                        reader = access.Reader.of(opened.view(split))
                    data = _write(format, reader, p, manifest, source)
                    sha, size = writing.put(p.name, data), len(data)
                    written.append(p.name)
                files[p.name] = {"key": p.key, "sha256": sha, "bytes": size,
                                 "records": _live(p.key)}
            if reader is not None:
                reader.close()
        files_meta = (_metadata_files(writing, opened, metadata, files)
                      if format == "parquet" else _indexes(writing, planned, files))
        opened.unchanged()  # what was read is the version opened
        target.confirm(held, dest)  # and dest is still this export's to replace
        writing.publish({"format": format, "version": opened.number,
                         "generation": opened.generation, "settings": settings,
                         "files": files, "metadata": files_meta}, old)
    except BaseException:
        writing.discard()
        raise
    log.info("exported version %d of %s to %s: %d files written, %d reused",
             opened.number, source, dest, len(written), len(reused))
    return Exported(dest, format, opened.number, sorted(files), written, reused,
                    writing.bytes_written, writing.bytes_reused)


def _checked(metadata) -> dict:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict) or not all(isinstance(k, str) for k in metadata):
        raise ConfigError(f"metadata={metadata!r}: give a dict of str keys, such as "
                          f"{{'license': 'cc-by-4.0', 'description': '...'}}")
    return dict(metadata)


def _check(manifest, where: str, format: str) -> None:
    """ConfigError where the folder holds what no export writes yet."""
    boxes = [k for k, f in manifest.features.items()
             if f.role == "bbox" or k.startswith("objects/")]
    if boxes and not objects.is_detection(manifest):
        raise ConfigError(
            f"{where} holds per-box features ({', '.join(sorted(boxes))}) without "
            f"{objects.BBOX!r}; format={format!r} exports boxes from it only. Read the "
            f"records with tfrecorder.read({where!r}) instead.")
    if boxes:
        objects.check(manifest, where)


def _plan(opened: view.Version, format: str) -> dict[str, list[target.Planned]]:
    """The files of the export: per split, one per shard of ours, named as ``datasets``
    infers splits from (``data/{split}-NNNNN-of-NNNNN.parquet``) or as WebDataset's
    shard lists are (``{split}-NNNNN.tar``)."""
    out = {}
    for split, info in opened.manifest.splits.items():
        n = len(info.shards)
        out[split] = [target.Planned(
            f"data/{split}-{i:05d}-of-{n:05d}.parquet" if format == "parquet"
            else webdataset.name(split, i),
            split, i, target.shard_key(opened.output_dir, shard))
            for i, shard in enumerate(info.shards)]
    return out


def _write(format: str, reader: access.Reader, p: target.Planned, manifest,
           source: str) -> bytes:
    """The file ``p`` of the export, from the live records of its shard."""
    where = f"{source}, {reader.files[p.shard]}"
    records = _records(reader, p.shard)
    def ids(place):  # of a detection record that stores no image_id
        return objects.image_id(p.key["shard"], p.shard, place)

    if format == "parquet":
        return parquet.write(records, manifest, where, ids)
    data, _ = webdataset.write(records, manifest,
                               webdataset.key_prefix(p.split, p.key["shard"]), where, ids)
    return data


def _live(key: dict) -> int:
    return key["records"] if key["live"] is None else key["live"]


def _records(reader: access.Reader, shard: int):
    """The live records of ``shard`` as plain values, in file order."""
    start, stop = reader.view.starts[shard], reader.view.starts[shard + 1]
    specs = reader.manifest  # either layout, in our keys (access.values)
    for first in range(start, stop, BATCH):
        for data in reader.records(range(first, min(first + BATCH, stop))):
            yield access.values(data, specs)


def _metadata_files(writing: target.Writing, opened: view.Version, metadata: dict,
                    files: dict) -> list[str]:
    """The dataset card and the Croissant description written beside the data files;
    their names."""
    found = _findings(opened)
    writing.put("README.md", card.text(opened.manifest, opened.number, metadata,
                                       found).encode())
    doc = croissant.document(opened.manifest, opened.number, metadata, files,
                             parquet.columns(opened.manifest), found)
    writing.put(croissant.NAME, croissant.text(doc))
    return ["README.md", croissant.NAME]


def _indexes(writing: target.Writing, planned: dict[str, list[target.Planned]],
             files: dict) -> list[str]:
    """The ``wids`` index of each split (``{split}.json``); their names."""
    names = []
    for split, items in planned.items():
        name = webdataset.index_name(split)
        writing.put(name, webdataset.index(
            split, [(p.name, files[p.name]["records"], files[p.name]["bytes"])
                    for p in items]))
        names.append(name)
    return names


def _findings(opened: view.Version) -> dict | None:
    """The data report's counts of duplicates, leaks and conflicts; None without one."""
    if not opened.manifest.quality:
        return None
    from tfrecorder._report import findings

    try:
        return findings.report_version(opened).found(("duplicates", "leaks", "conflicts"))
    except ConfigError:  # the version's report was replaced by a later one's
        return None
