"""An update of a folder's latest version, decided from its rows files.

An update reads the latest version's rows files (never its shards), matches the rows of
the edited table to the stored records by key (``stored_records``), and decides per
row: unchanged (kept, its image not read), new or changed (written into new shards), or
gone (retired: left out of the live index of its shard). ``plan`` makes that decision
(``Plan``, with the ``Update`` to publish); the pipeline's last step publishes it
(``publishing.finish``); ``_writer.kept.kept_look`` gives the data report what it
needs of a kept shard from its rows file. No Beam here (docs/format.md, "Versions and
the data report"; docs/versions.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Iterator

from tfrecorder import _storage as storage
from tfrecorder._errors import ConfigError
from tfrecorder._folder import index, layout, rows
from tfrecorder._folder.manifest import Manifest, loads
from tfrecorder._versions.stored_records import (_comparable, _signature, _Stored, _take,
                                                 matching_key, stored)


@dataclasses.dataclass(frozen=True)
class Update:
    """What an update publishes besides the shards it writes: the parent's shards that
    keep live records (with ``live`` and ``live_index`` as this version sees them),
    the live index files it writes, and the counts of what changed."""

    version: int
    parent: Manifest
    kept: dict                      # split -> [ShardInfo] of the parent's, still live
    live_indexes: tuple             # live index files written by this update
    changes: dict                   # split -> {"added", "retired", "kept"}
    label_counts: dict              # split -> {label name: kept records}
    kept_rows: int                  # input rows the kept records hold
    rows_in: int                    # rows of the table
    channels: dict = dataclasses.field(default_factory=dict)  # of kept images, as known
    formats: tuple = ()             # image formats of kept records
    existing: tuple = ()            # append: keys already stored (the first ones)
    existing_count: int = 0         # append: rows whose key was already stored
    existing_differ: int = 0        # append: those whose row differs from the stored one
    differ_in: tuple = ()           # append: what differs (_differences), sorted
    tag: str = ""                   # the run's tag, in every name it writes (run_tag)


#: No row of the table names the stored record (``matched`` has no entry: a row id may
#: be None, a DataFrame's index label).
_NAMED_BY_NONE = object()


@dataclasses.dataclass
class Plan:
    """An update decided: the rows to write (per split, their indices in the spilled
    table's order) and the ``Update`` to publish (its ``live_indexes`` content too)."""

    picked: dict                    # split -> set of row numbers in the split to write
    update: Update
    live_index_data: dict           # live index name -> bytes
    added: int                      # rows to write
    #: The parent's rows files as read (rows file name -> entries), for ``kept.kept_look``
    #: in this process; emptied where the update runs elsewhere.
    rows_read: dict = dataclasses.field(default_factory=dict)
    #: For each rows file one of whose kept records has another row in the edited
    #: table than the file gives, every kept record's ``(position, row stored, row
    #: now)``: the report names this table's rows (``rows.write_renumbered``).
    renumbered: dict = dataclasses.field(default_factory=dict)

    @property
    def unchanged(self) -> bool:
        return not self.added and not any(c["retired"] for c in self.update.changes.values())


def _stamps(uris: list, content: bool, max_bytes: int) -> list:
    """Per uri ``(size, stamp)``, or with ``content`` the SHA-256 of its bytes; None
    where it cannot be looked at (the pipeline then quarantines it)."""
    from tfrecorder._report.measures import digest

    def one(uri):
        if uri is None:
            return None
        try:
            if content:
                return digest(storage.read_file(uri, max_bytes))
            return storage.stamp(uri)
        except OSError:
            return None

    remote = any(u is not None and storage.is_remote(u) for u in uris[:1])
    return storage.each(one, uris, remote or content)


def _key_spec(table, settings):
    """The FeatureSpec of the key column, where ``key=`` names one the records hold."""
    if settings.key_column is None:
        return None
    return (table.features or {}).get(settings.columns[settings.key_column])


def _table_rows(table, settings, ends: bool) -> Iterator[tuple]:
    """``(split, number in split, key, labels, features, row, names, image)`` of every
    spilled row: ``names``, those it is looked for by among the stored records (its key
    by its value, ``matching_key``, else its image's ``rows.names``, with the ends of
    its path where ``ends``); ``image``,
    where the key is another column, the names its image must share with the stored
    record's (None elsewhere)."""
    from tfrecorder._writer.run_metadata import strict_json

    names = settings.label_names
    key_spec = _key_spec(table, settings)
    for split in sorted(table.counts, key=layout.split_order):
        n = 0
        for block in table.blocks(split):
            for row in block.rows(split):
                values = row.values
                written = (None if row.image_uri is None else
                           values[settings.image_column].strip()
                           if settings.image_column is not None else row.image_uri)
                image = None
                if settings.key_column is not None:
                    key = rows.key_text(strict_json(values[settings.key_column]))
                    lookup = [matching_key(key, key_spec)]
                    if written is not None:
                        image = set(rows.names(written, row.image_uri, ends))
                else:
                    key = written
                    lookup = [None] if written is None else rows.names(
                        written, row.image_uri, ends)
                labels = sorted(names[i] if 0 <= i < len(names) else str(i)
                                for i in row.labels)
                features = rows.features(row, settings.columns, settings.feature_columns,
                                         strict_json)
                yield split, n, key, labels, features, row, lookup, image
                n += 1


def plan(output_dir: str, parent: Manifest, version: int, table, settings, opts,
         read: dict | None = None) -> Plan:
    """The update of ``parent`` (the latest version, number ``version - 1`` or less) by
    the spilled ``table``: which rows to write, which records to retire. ``read``: the
    entries of ``parent``'s rows files read already, by name."""
    from tfrecorder._writer.run_metadata import strict_json

    content = opts.compare == "content"
    append = opts.mode == "append"
    rows_read: dict = dict(read or {})
    by_name, every, ends = stored(output_dir, parent, content, rows_read, table.features,
                                  _key_spec(table, settings))
    if opts.near_duplicates:
        _check_hashed(output_dir, parent, every)
    picked: dict[str, set] = {}
    added: dict[str, int] = {}
    kept: dict[str, int] = {}
    # (shard file, position) of each kept record -> its row in this table
    matched: dict[tuple, Any] = {}
    existing: list = []
    existing_count = existing_differ = 0
    differ_in: set = set()
    first_of: dict = {}  # append: each stored key's first record, found once
    batch: list = []
    # The run's tag: what decides the bytes it writes (the parent, the options an
    # update may vary, every row as read and its image's stamp), so two runs of
    # different tables never share a file name and two of one table write one set.
    plan_digest = hashlib.blake2b(digest_size=16)
    plan_digest.update(repr((parent.generation, version, opts.mode, opts.compare,
                             opts.seed, opts.num_shards, opts.near_duplicates, opts.near_distance,
                             sorted((k, list(v)) for k, v in table.vocabularies.items())
                             )).encode())

    def decide(batch):
        nonlocal existing_count, existing_differ
        seen = _stamps([r[5].image_uri for r in batch], content, opts.max_image_bytes)
        for (split, n, key, labels, features, row, lookup, image), look in zip(batch, seen):
            plan_digest.update(repr((split, n, key, labels, features, strict_json(row.row),
                                     row.image_uri, look)).encode())
            features = _comparable(features, table.features)
            if append:
                there = _stored_as(lookup, by_name, first_of,
                                   _signature(split, labels, features, None))
                if there is not None:
                    existing_count += 1
                    differs = _differences(there.entry, split, labels, features, image, look,
                                           content, table.features)
                    existing_differ += bool(differs)
                    differ_in.update(differs)
                    if len(existing) < 5:
                        existing.append(key if key is not None else strict_json(row.row))
                    matched.setdefault((there.shard.file, there.position),
                                       strict_json(row.row))
                    continue
            hit = None
            if look is not None or row.image_uri is None:
                sig = _signature(split, labels, features,
                                 None if row.image_uri is None else
                                 ("sha256", look) if content else ("stat", *look))
                for name in lookup:  # one to one with equal records, by the most exact name
                    hit = _take(by_name.get(name, {}).get(sig), image)
                    if hit is not None:
                        break
            if hit is not None:
                matched[(hit.shard.file, hit.position)] = strict_json(row.row)
                kept[split] = kept.get(split, 0) + 1
            else:
                picked.setdefault(split, set()).add(n)
                added[split] = added.get(split, 0) + 1

    for item in _table_rows(table, settings, ends):
        batch.append(item)
        if len(batch) >= 4096:
            decide(batch)
            batch = []
    if batch:
        decide(batch)

    # What the update retires: every stored record no row kept (append retires none).
    retired: dict[str, set] = {}
    label_counts: dict[str, dict] = {}
    formats: set = set()
    kept_rows = kept_records = 0
    # rows file -> [(position, row stored, row now)] of each of its kept records
    rows_now: dict[str, list] = {}
    moved: set = set()  # the rows files one of whose kept records moved
    for c in every:
        split = c.entry.get("split")
        was = c.entry.get("row")
        now = matched.get((c.shard.file, c.position), _NAMED_BY_NONE)  # its row, if kept
        if now is _NAMED_BY_NONE:
            if not append:  # an append keeps the records its table does not name
                retired.setdefault(c.shard.file, set()).add(c.position)
                continue
            now = was
        rows_now.setdefault(c.shard.rows, []).append((c.position, was, now))
        if now != was:
            moved.add(c.shard.rows)
        kept_records += 1
        kept_rows += c.entry.get("rows", 1)  # a multi-label or detection record: several
        counts = label_counts.setdefault(split, {})
        for name in c.entry.get("label") or []:
            counts[name] = counts.get(name, 0) + 1
        if c.entry.get("format"):
            formats.add(c.entry["format"])
    if append:
        kept = {}
        for c in every:
            split = c.entry.get("split")
            kept[split] = kept.get(split, 0) + 1

    tag = layout.run_tag(plan_digest)
    shards: dict[str, list] = {}
    live_data: dict[str, bytes] = {}
    retired_per_split: dict[str, int] = {}
    for split, info in parent.splits.items():
        for shard in info.shards:
            gone = retired.get(shard.file)
            if not gone:
                shards.setdefault(split, []).append(shard)
                continue
            retired_per_split[split] = retired_per_split.get(split, 0) + len(gone)
            live, full = index.live_entries(output_dir, shard)
            live = [p for p in live if p not in gone]
            if not live:
                continue  # no live record: the version does not list it
            if full is None:
                full = index.parse(storage.read_bytes(storage.inside(output_dir, shard.index)),
                                   shard.index)
            name = layout.live_index(version, shard.file, tag)
            live_data[name] = index.format(full[p] for p in live)
            shards.setdefault(split, []).append(dataclasses.replace(
                shard, live=len(live), live_index=name))
    splits = set(added) | set(kept) | set(retired_per_split)
    changes = {s: {"added": added.get(s, 0), "retired": retired_per_split.get(s, 0),
                   "kept": kept.get(s, 0)}
               for s in sorted(splits, key=layout.split_order)}
    channels = _parent_channels(output_dir)
    update = Update(
        version=version, parent=parent, kept=shards, live_indexes=tuple(sorted(live_data)),
        changes=changes, label_counts=label_counts, kept_rows=kept_rows,
        rows_in=table.rows_in, channels={channels: kept_records} if channels else {},
        formats=tuple(sorted(formats)), existing=tuple(existing),
        existing_count=existing_count, existing_differ=existing_differ,
        differ_in=tuple(sorted(differ_in)), tag=tag)
    return Plan(picked, update, live_data, sum(added.values()), rows_read,
                {name: rows_now[name] for name in moved})


def _differences(entry: dict, split, labels, features, image, look, content: bool,
                 specs: dict | None) -> list:
    """What of a row differs from the stored record ``entry`` its key names, among what
    ``_signature`` and ``_take`` compare (what an update would write it for): ``split``,
    ``label``, the names of other columns (their values as records hold them, by
    ``specs``), ``image_uri`` (where the key is another column: none of the row's
    ``image`` names is the record's), ``image`` (its size and stamp, or its digest with
    ``content``; ``look`` is the row's)."""
    was = _comparable(entry.get("features") or {}, specs)
    out = [name for name, a, b in (("split", entry.get("split"), split),
                                   ("label", sorted(entry.get("label") or []), labels))
           if a != b]
    if image is not None and rows.image_names(entry).isdisjoint(image):
        out.append("image_uri")
    out += [name for name in sorted(set(was) | set(features))
            if was.get(name) != features.get(name)]
    if look is not None and "sha256" in entry:
        image = ("sha256", look) if content else ("stat", *look)
        if image != (("sha256", entry["sha256"]) if content
                     else ("stat", entry.get("size"), entry.get("stamp"))):
            out.append("image")
    return out


def _stored_as(lookup: list, by_name: dict, first_of: dict, values_signature: tuple):
    """The stored record an appended row names (by the first of its names ``lookup`` a
    record has), or None where it names none: the first record of that name; for a
    table matched by its values alone (no key), one stored record equal to the row,
    each taken once."""
    if lookup == [None]:
        return _take(by_name.get(None, {}).get(values_signature), None)
    for name in lookup:
        candidates = by_name.get(name)
        if candidates:
            if name not in first_of:
                first_of[name] = min((c for same in candidates.values() for c in same),
                                     key=lambda c: (c.shard.file, c.position))
            return first_of[name]
    return None


def _check_hashed(output_dir: str, parent: Manifest, every: list) -> None:
    """Refuses an update with near duplicates over records written without them: their
    rows files hold no perceptual hash, so no new row could be compared with them, and
    the report would say near duplicates were searched where they were not. A line
    written since the report kept colour sums (``px``) says ``"phash": null`` where its
    image did not decode small; in a rows file written before, a line of a run that
    searched them may lack the hash of such an image, so an older file passes when any
    of its lines has one."""
    files: dict[str, list] = {}  # rows file -> [any line hashed, every line, any newer]
    unhashed: dict[str, _Stored] = {}
    for c in every:
        e = c.entry
        if "sha256" not in e:
            continue
        name = c.shard.rows
        seen = files.setdefault(name, [False, True, False])
        # A thumbnail confirms each near pair: a line written before thumbnails were
        # kept ("phash" without "thumb") cannot be matched either.
        hashed = "thumb" in e
        seen[0] |= hashed
        seen[1] &= hashed
        seen[2] |= "px" in e
        if not hashed and (name not in unhashed or c.position < unhashed[name].position):
            unhashed[name] = c
    for name in sorted(files):
        any_line, every_line, newer = files[name]
        if not any_line or (newer and not every_line):
            e = unhashed[name].entry
            raise ConfigError(
                f"{output_dir}: near_duplicates=True, but records of {name} (version "
                f"{parent.version or 1} keeps them) were written without near duplicates: "
                f"its record of row {e.get('row')!r} ({e.get('image_uri', e.get('key'))}) "
                "has no perceptual hash and thumbnail, so new rows could not be compared with the records "
                "the update keeps. Convert the whole table again with near_duplicates=True "
                "and mode='overwrite' (CLI: --near-duplicates --overwrite), or update "
                "without near_duplicates")


def _parent_channels(output_dir: str) -> int | None:
    """The channel count the latest features.json gives the image, if any."""
    try:
        feats = loads(storage.read_bytes(storage.join(output_dir, layout.FEATURES)))
        for f in feats["featuresDict"]["features"].values():
            dims = f.get("image", {}).get("shape", {}).get("dimensions")
            if dims:
                return int(dims[-1])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return None
