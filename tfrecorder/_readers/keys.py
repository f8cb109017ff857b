"""Which cache entry holds each shard a reader reads (``cache.key``; docs/bucket.md).

An update writes new shards (``-vKKKKK`` in their names) and keeps the others as they
were, so the bytes of a shard are those of the version that wrote it. Its entry is
keyed by that version's ``generation``, read from its manifest (``versions/KKKKK.json``,
never rewritten), so that every version keeping the shard, read by any reader, shares
one entry. Where that manifest is gone (``vacuum``), the entry is keyed by the version
read instead: fetched once more, never another version's bytes.
"""

from __future__ import annotations

from tfrecorder import _storage as storage
from tfrecorder._folder import layout, manifest, view as _view
from tfrecorder._readers import cache as _cache


class Keys:
    """The entry keys of the shards of ``view`` (a split of a version); picklable, so
    that a DataLoader worker or a Grain copy reads no manifest again."""

    def __init__(self, view: "_view.View"):
        self.source = view.output_dir
        self.version = view.version.number
        self.generation = view.version.generation
        wanted = sorted({written_by(s.file) for s in view.shards} - {self.version, None})
        got = storage.each(self._generation_of, wanted, at_once=True)
        #: ``{version: generation}`` of the earlier versions whose shards it keeps.
        self.writers = {v: g for v, g in zip(wanted, got) if isinstance(g, str) and g}

    def __call__(self, shard: "manifest.ShardInfo") -> str:
        written = written_by(shard.file)
        generation = self.generation if written == self.version else self.writers.get(written)
        return _cache.key(self.source, generation or self.generation, shard.file,
                          shard.num_bytes)

    def _generation_of(self, version: int) -> str | None:
        path = storage.join(self.source, layout.version_manifest(version))
        try:
            return _view.generation_of(storage.read_bytes(path))
        except (FileNotFoundError, NotADirectoryError):
            return None


def written_by(file: str) -> int | None:
    """The version that wrote shard ``file`` (``-vKKKKK`` in its name; 1 without), or
    None for a name tfrecorder does not write."""
    name = layout.ShardName.parse(file)
    return None if name is None else name.version
