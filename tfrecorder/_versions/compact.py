"""``compact``: a split an update appended to or retired from, rewritten as whole shards
of a new version (docs/versions.md, "Compacting for TFDS").

After an update, a split's live records lie in shards of several versions, some read
through live indexes: every tfrecorder reader reads that, but TFDS reads a split by one
file-name template and leaves such a split out. ``compact`` copies each such split's
live records, in the order readers see them, into ``NAME-<split>-vKKKKK`` shards with
their index and rows files, and publishes them as the next version. Records are copied
as they are stored (checked, not decoded): no image is read again, and the data report
of the new version is its parent's, since its records and their order are the same.
Earlier versions keep their files; ``vacuum`` removes them once no retained version lists
them. No Beam here: a compaction copies bytes in this process.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib

from tfrecorder import _deprecation as deprecation
from tfrecorder import _storage as storage
from tfrecorder._folder import (index, layout, ledger, lock, removal, rows, survey)
from tfrecorder._writer import publishing
from tfrecorder._writer import plan, run_metadata
from tfrecorder._folder import records
from tfrecorder._errors import ConfigError, IncompleteOutputError
from tfrecorder._writer.shard import open_for_write
from tfrecorder._folder.split_names import ALIASES
from tfrecorder._folder.manifest import Manifest, ShardInfo, SplitInfo, json_bytes
from tfrecorder._report.findings import read as read_report


@dataclasses.dataclass(frozen=True)
class Compacted:
    """What ``compact`` did: the version it published (None: nothing to compact), and
    per split rewritten, its live records; the shard files written and their bytes;
    ``held``, the bytes of the earlier shards those records were read from, which the
    earlier versions still list: the folder holds both copies until ``vacuum``."""

    output_dir: str
    version: int | None
    splits: dict
    files: tuple
    bytes: int
    held: int = 0

    def __str__(self) -> str:
        from tfrecorder._writer.result import human_bytes

        if self.version is None:
            return (f"{self.output_dir}: nothing to compact: every split is whole shards "
                    f"of one version (TFDS reads them all)")
        compacted = ", ".join(f"{s} ({n} records)" for s, n in self.splits.items())
        return (f"{self.output_dir}: compacted {compacted} into version {self.version}: "
                f"{len(self.files)} shard(s), {human_bytes(self.bytes)}. The folder holds "
                f"both copies: the earlier versions' {human_bytes(self.held)} of shards "
                f"stay until `tfrecorder vacuum {self.output_dir} --keep 1` "
                f"(tfrecorder.vacuum(..., keep=1)) removes those versions")


@deprecation.renamed(output_dir="tfrecord_dir")
def compact(tfrecord_dir: str, splits=None) -> Compacted:
    """Rewrites the live records of every split of ``tfrecord_dir``'s latest version that
    TFDS cannot read (an update appended to it or retired from it) as whole shards of a
    new version; ``splits`` names the splits to rewrite instead (any split of the latest
    version). Runs under the folder's lock; publishes nothing when there is nothing to
    rewrite. See docs/versions.md."""
    tfrecord_dir = str(tfrecord_dir)
    if isinstance(splits, str):
        splits = [splits]
    if splits is not None and (not isinstance(splits, (list, tuple, set, frozenset))
                               or not all(isinstance(x, str) for x in splits)):
        raise ConfigError(f"splits={splits!r}: give a split's name or a list of names "
                          f"(or None for every split TFDS cannot read)")
    s = survey.survey(tfrecord_dir)
    if s.manifest is None:
        raise IncompleteOutputError(
            f"{tfrecord_dir} holds no whole conversion ({s.damaged or 'no tfrecorder.json'}); "
            f"nothing to compact")
    run_id = ledger.new_run_id()
    run = ledger.RunFolder(tfrecord_dir, run_id)
    with lock.acquire(tfrecord_dir, run_id, "compact"):
        try:
            # With the lock held nothing changes under us: look again.
            before = survey.survey(tfrecord_dir)
            survey.check_target(before, True, [], run_id)
            # What a killed run left goes first, even when there is nothing to rewrite.
            removal.clear_leftovers(before, run_id)
            if publishing.complete_latest(before):
                before = survey.survey(tfrecord_dir)
            parent = before.latest
            wanted = _wanted(parent, splits)
            if not wanted:
                return Compacted(tfrecord_dir, None, {}, (), 0)
            version = max([k for k, _ in before.versions] + [parent.version or 1]) + 1
            # A compaction's bytes follow from its parent and the splits it rewrites.
            tag = layout.run_tag(hashlib.blake2b(repr(
                (parent.generation, version, wanted)).encode(), digest_size=16))
            planned = {name: _plan(tfrecord_dir, parent, parent.splits[name], version, tag)
                       for name in wanted}
            shards = [n for names in planned.values() for n in names]
            written = [*shards, *(index.name(n) for n in shards if not n.endswith(".gz")),
                       *map(layout.rows_file, shards)]
            files = [*written, layout.version_manifest(version),
                     layout.version_quality(version, tag),
                     layout.version_copy(version, layout.DATASET_INFO, tag),
                     layout.QUALITY, layout.MANIFEST, layout.DATASET_INFO]
            survey.check_target(before, True, files, run_id)
            ledger.write_ledger(run.folder, files)
            new_splits, digests = {}, []
            for name in parent.splits:
                info = parent.splits[name]
                if name in planned:
                    info = _rewrite(tfrecord_dir, run, info, planned[name], digests)
                new_splits[name] = info
            manifest = _manifest(parent, new_splits, version, digests, tag)
            files_out = {layout.DATASET_INFO: json_bytes(run_metadata.tfds_dataset_info(manifest))}
            report = _report(tfrecord_dir, parent, version,
                             {n: new_splits[n].num_bytes for n in planned})
            if report is not None:
                files_out[layout.version_quality(version, tag)] = report
                files_out[layout.QUALITY] = report
            publishing.publish(run, written, files_out, manifest, version)
        except BaseException:
            publishing.close(run)  # its folder removed
            raise
    return Compacted(tfrecord_dir, version,
                     {n: new_splits[n].num_examples for n in wanted}, tuple(shards),
                     sum(new_splits[n].num_bytes for n in planned),
                     sum(x.num_bytes for n in planned for x in parent.splits[n].shards))


def _wanted(parent: Manifest, splits) -> list[str]:
    """The splits to rewrite: those given (each a split of ``parent``), else every split
    TFDS cannot read by one template."""
    if splits is None:
        return [n for n, info in parent.splits.items()
                if run_metadata.tfds_template(info) is None]
    names = [ALIASES.get(n.strip().lower(), n) for n in splits]  # "TRAIN", "validate"
    unknown = [given for given, n in zip(splits, names) if n not in parent.splits]
    if unknown:
        raise ConfigError(f"split(s) {', '.join(map(repr, unknown))} not in version "
                          f"{parent.version or 1}, which has "
                          f"{', '.join(parent.splits)}: name one of these")
    return [n for n in parent.splits if n in names]


def _plan(output_dir: str, parent: Manifest, info: SplitInfo, version: int,
          tag: str) -> list[str]:
    """The shard names the split's live records go to (with the run's ``tag``): as many
    shards as a conversion of their bytes would give."""
    missing = [x.file for x in info.shards if x.rows is None]
    if missing:
        raise ConfigError(f"{output_dir}: shard {missing[0]} has no rows file (a folder "
                          f"written before format 2); convert it again with "
                          f"mode='overwrite' instead")
    live_bytes = sum(x.num_bytes * x.live_examples // max(1, x.num_examples)
                     for x in info.shards)
    count = plan.shard_count(live_bytes, info.num_examples)
    gzipped = parent.compression == "gzip"
    return [str(layout.ShardName(parent.name, info.name, i, count, gzipped, version, tag))
            for i in range(count)]


def _live(output_dir: str, shard: ShardInfo, gzipped: bool):
    """``(record data, rows entry)`` of each live record of ``shard``, in file order,
    both checksums of every record checked."""
    live = set(index.live_positions(output_dir, shard))
    entries = rows.read(storage.inside(output_dir, shard.rows), shard.num_examples)
    path = storage.inside(output_dir, shard.file)
    with storage.open_file(path, "rb") as raw:
        f = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
        for position, data in enumerate(records.read_records(f, path)):
            if position in live:
                yield data, entries[position]


def _rewrite(output_dir: str, run: ledger.RunFolder, info: SplitInfo, names: list[str],
             digests: list) -> SplitInfo:
    """The live records of split ``info`` written into shards ``names`` in the run's
    folder, cut as a conversion cuts a split (``plan.boundaries``); the split as the new
    version lists it. ``digests`` gets ``(file, digest)`` of each shard written."""
    gzipped = names[0].endswith(".gz")
    ends = plan.boundaries(info.num_examples, len(names))
    source = (item for x in info.shards for item in _live(output_dir, x, gzipped))
    shards, done = [], 0
    for name, end in zip(names, ends):
        final = storage.join(run.folder, name)
        # An object store creates an object only once its upload completes.
        temp = (final if storage.is_remote(final)
                else storage.join(run.folder, layout.shard_temp_name(name)))
        digest = hashlib.blake2b(digest_size=16)
        framed, lines = [], []
        out, raw = open_for_write(temp, gzipped)
        try:
            while done < end:
                data, entry = next(source)
                framed.append(records.write_record_segments(out, [data], digest))
                lines.append(entry)
                done += 1
        finally:
            out.close()
            if raw is not out:
                raw.close()
        size = storage.size(temp)
        if temp != final:
            storage.rename(temp, final)
        index_file = None
        if not gzipped:
            index_file = index.name(name)
            storage.write_into(storage.join(run.folder, index_file),
                               index.format(index.offsets(framed)))
        storage.write_into(storage.join(run.folder, layout.rows_file(name)), rows.encode(lines))
        digests.append((name, digest.hexdigest()))
        shards.append(ShardInfo(name, len(framed), size, index_file,
                                rows=layout.rows_file(name)))
    if next(source, None) is not None:
        raise ConfigError(f"split {info.name} holds more live records than its manifest's "
                          f"{info.num_examples}; run tfrecorder verify")
    return SplitInfo(info.name, info.num_examples, sum(x.num_bytes for x in shards), shards,
                     dict(info.label_counts))


def _manifest(parent: Manifest, splits: dict, version: int, digests: list,
              tag: str) -> Manifest:
    """The new version's manifest: its parent's, with the rewritten splits, and nothing
    added or retired (every record is kept, in new files)."""
    manifest = dataclasses.replace(
        parent, splits=splits, version=version, parent=parent.version or 1,
        published=None, mode="compact",
        changes={n: {"added": 0, "retired": 0, "kept": info.num_examples}
                 for n, info in splits.items()},
        quality=layout.version_quality(version, tag) if parent.quality else None, tag=tag)
    return run_metadata.with_generation(manifest, parent.generation, digests)


def _report(output_dir: str, parent: Manifest, version: int,
            stored: dict) -> bytes | None:
    """The parent's data report as the new version's: the same records in the same
    order, so the same pairs at the same positions. Only ``stored`` (a rewritten
    split's bytes in its new files) changes: gzip shards compress the same records
    into other bytes."""
    if not parent.quality:
        return None
    report = read_report(output_dir, parent.quality)
    report["version"] = version
    for split, size in stored.items():
        if split in report.get("stats", {}):
            report["stats"][split]["stored_bytes"] = size
    return json_bytes(report)
