"""A Grain data source over a conversion, without TensorFlow: ``pip install tfrecorder[grain]``.

``DataSource(tfrecord_dir, split)`` has what Grain's ``RandomAccessDataSource`` protocol
asks (``__len__``, ``__getitem__``, a ``__repr__`` for checkpoints, and pickling for
worker processes), so both of Grain's APIs take it::

    source = tfrecorder.grain.DataSource("out/", "train")
    ds = grain.MapDataset.source(source).shuffle(seed=0).map(decode).batch(64)
    loader = grain.DataLoader(data_source=source, sampler=grain.samplers.IndexSampler(
        len(source), shuffle=True, seed=0, num_epochs=1), worker_count=2)

The module does not import Grain: the protocol is structural.
"""

from __future__ import annotations

from tfrecorder import _deprecation as deprecation
from tfrecorder import access

__all__ = ["DataSource"]


class DataSource:
    """The records of ``split`` in the folder ``tfrecord_dir``; ``source[i]`` is record ``i``'s
    features as plain values (``access.values``): the image stays its stored bytes
    (decode it in a ``map``), a scalar label is an ``int``. Thread-safe. Reads only
    the conversion it was made on, in every worker process (``access.Reader``);
    ``version=k`` reads version ``k`` of an updated folder (the latest by default),
    its live records only. From ``gs://``, shards are read through the machine's shard
    cache (``cache_dir``, ``cache_limit``: see ``tfrecorder.torch.Dataset`` and
    docs/bucket.md), shared by every worker process."""

    @deprecation.renamed(output_dir="tfrecord_dir")
    def __init__(self, tfrecord_dir: str, split: str = "train", *, version: int | None = None,
                 max_open_files: int = 64, cache_dir: str | None = None,
                 cache_limit: int | str | None = None):
        self.reader = access.Reader(tfrecord_dir, split, version=version,
                                    max_open_files=max_open_files, cache_dir=cache_dir,
                                    cache_limit=cache_limit)
        self._version = version

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, index: int) -> dict:
        return self.reader.features(index)

    def __repr__(self) -> str:
        # Grain's checkpoints record this string to recognise the source again.
        pinned = "" if self._version is None else f", version={self._version}"
        return (f"tfrecorder.grain.DataSource({self.reader.output_dir!r}, "
                f"{self.reader.split!r}{pinned}, records={len(self)})")
