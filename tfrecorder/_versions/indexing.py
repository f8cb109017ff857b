"""Index files added to a finished output that has none (``build_index``).

For conversions written with ``write_index=False`` or before index files existed, and
for TFRecorder 2.0 directories: each shard's index written from its length fields, then
listed in the manifest, under the folder's lock. Its own module because it is a verb on
a finished output, apart from any run; the index file's format is ``index``'s.
"""

from __future__ import annotations

import functools

from tfrecorder import _deprecation as deprecation
from tfrecorder import _storage as storage
from tfrecorder._errors import CorruptRecordError
from tfrecorder._folder import index, layout, legacy, view
from tfrecorder._folder.ledger import new_run_id
from tfrecorder._folder.lock import acquire
from tfrecorder._folder.manifest import json_bytes, loads
from tfrecorder._folder.survey import _inside
from tfrecorder._folder import records


def _all_versions(output_dir: str, latest: "view.Version") -> list:
    """Every published version of ``output_dir``, the latest (already open) last."""
    if latest.manifest.format_version < 2:
        return [latest]
    return [view.open_version(output_dir, n) for n in view.versions(output_dir)
            if n != latest.number] + [latest]


def _order(latest, path: str):
    """Index files in the manifest's order of their shards (splits, then shards)."""
    names = [index.name(s.file) for info in latest.manifest.splits.values()
             for s in info.shards]
    name = path.rsplit("/", 2)
    name = f"{name[-2]}/{name[-1]}"
    return (names.index(name) if name in names else len(names), name)


@deprecation.renamed(output_dir="tfrecord_dir")
def build_index(tfrecord_dir: str) -> list[str]:
    """Writes the index file of every shard of ``tfrecord_dir`` from the shard's length
    fields (its data is skipped, not read) and lists them in the manifest; returns the
    index files' paths. For conversions written before index files existed, with
    ``write_index=False``, and for TFRecorder 2.0 directories.

    ConfigError for gzip shards (a gzip stream has no record offsets: convert again
    without compression); CorruptRecordError when a shard is damaged or holds another
    number of records than its manifest says. Takes the directory's lock, so it never
    runs beside a conversion of the same directory.
    """
    tfrecord_dir = str(tfrecord_dir)
    latest = view.open_version(tfrecord_dir)
    manifest = latest.manifest
    latest.need_offsets("an index file")
    with acquire(tfrecord_dir, new_run_id(), "DirectRunner"):
        # Every path written is checked before the first write: a link planted at the
        # index folder is refused (what it points to is outside); a link at an index
        # file's or the manifest's name is replaced by ``write_atomic``, never followed.
        here = functools.partial(_inside, tfrecord_dir)
        # Every shard some version reads: a reader of an older version needs its index too.
        shards = {s.file: s for v in _all_versions(tfrecord_dir, latest)
                  for info in v.manifest.splits.values() for s in info.shards}
        targets = {name: here(index.name(name)) for name in shards}
        if not storage.is_remote(tfrecord_dir):
            storage.makedirs(here(index.DIR))
        written = []
        for name, shard in sorted(shards.items()):
            shard_path = here(name)
            with storage.open_file(shard_path, "rb") as f:
                entries = list(records.scan(f, shard_path))
            if 0 <= shard.num_examples != len(entries):
                raise CorruptRecordError(
                    f"{shard_path}: {len(entries)} records, the manifest says "
                    f"{shard.num_examples}; the shard was truncated or replaced")
            storage.write_atomic(targets[name], index.format(entries))
            written.append(targets[name])
        if manifest.format_version != legacy.FORMAT_VERSION:  # TFRecorder's has no manifest
            # The manifest's own text with each shard's index entry added: what a later
            # format adds to it stays. A version's file (versions/KKKKK.json) is never
            # rewritten; readers find index files by their name.
            d = loads(storage.read_bytes(here(layout.MANIFEST)))
            for info in d["splits"].values():
                for shard in info["shards"]:
                    shard["index"] = index.name(shard["file"])
            storage.write_atomic(here(layout.MANIFEST), json_bytes(d))
        return sorted(written, key=lambda p: _order(latest, p))
