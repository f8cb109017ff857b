"""PyTorch datasets over a conversion, without TensorFlow: ``pip install tfrecorder[torch]``.

``Dataset(tfrecord_dir, split)`` is a map-style ``torch.utils.data.Dataset`` over the
random-access reader (``tfrecorder.access``); ``Sampler`` orders it for an epoch from
``(seed, epoch)`` alone and cuts it between distributed processes (docs/loading.md)::

    ds = tfrecorder.torch.Dataset("out/", "train")
    sampler = tfrecorder.torch.Sampler(ds, seed=0)          # rank, world size from torch.distributed
    loader = torch.utils.data.DataLoader(ds, batch_size=64, sampler=sampler, num_workers=4)
    for epoch in range(start_epoch, epochs):
        sampler.set_epoch(epoch)
        for images, labels in loader: ...
"""

from __future__ import annotations

import warnings
from typing import Callable

import numpy as np

from tfrecorder import _deprecation as deprecation
from tfrecorder import _extras, access
from tfrecorder._readers import ahead, targets as _targets
from tfrecorder._folder import image_headers as _headers
from tfrecorder._errors import ConfigError, CorruptRecordError

torch = _extras.require("torch", "tfrecorder.torch")
import torch.utils.data  # noqa: E402 (once a missing torch has been named with its extra)

__all__ = ["Dataset", "Sampler"]


class Dataset(torch.utils.data.Dataset):
    """The records of ``split`` in the folder ``tfrecord_dir``, by position (file order).

    For an image conversion with one label per record, ``ds[i]`` is ``(image, label)``:
    the stored image decoded by Pillow and converted to RGB, as a ``uint8`` tensor of
    shape ``(3, height, width)``, and the label id (an ``int``; ``ds.label_names`` names
    it). With ``transform``, the image is ``transform(pil_image)`` instead: the RGB
    ``PIL.Image``, as torchvision's ``ImageFolder`` passes it, so torchvision transforms
    (``Resize``, ``ToTensor``...) work unchanged.

    For object detection (and instance segmentation), ``ds[i]`` is ``(image, target)``
    in torchvision's detection convention, which its detection models (Mask R-CNN...)
    and ``transforms.v2`` take as they are: the image as above, and ``target`` a dict of
    ``boxes`` (float32 ``[N, 4]``, ``x1, y1, x2, y2`` in pixels of the decoded image;
    ``tv_tensors.BoundingBoxes`` where torchvision is installed), ``labels`` (int64,
    from 1: ``label_names[label - 1]``, as 0 is the detectors' background),
    ``image_id`` (COCO's id where the records keep it, else the position ``i``),
    ``area`` (float32), ``iscrowd`` (int64), and ``masks`` (uint8 ``[N, H, W]``;
    ``tv_tensors.Mask`` where torchvision is installed) and ``keypoints`` (float32
    ``[N, K, 3]``) where the records hold them (``_readers.targets``). ``transforms``,
    if given, is called as ``transforms(image, target)`` and its result returned (a
    ``transforms.v2`` pipeline moves the boxes and masks with the image, not the
    keypoints); ``transform`` still sees the image alone.
    For semantic segmentation, ``ds[i]`` is ``(image, mask)``: the image as above and
    the mask's class ids as an int64 ``[H, W]`` tensor (``tv_tensors.Mask`` where
    torchvision is installed, so that ``transforms(image, mask)``, a ``transforms.v2``
    pipeline, crops and flips it with the image), torchvision's segmentation convention.
    ``target_format="dict"`` gives the record's features as a dict of plain values
    instead, as any other conversion (tabular, multi-label) does: ``access.values``,
    its image, if any, decoded as above.

    A 16-bit image keeps its top 8 bits (``value >> 8``), as ``tfrecorder.load()``
    gives it.

    ``version=k`` reads version ``k`` of a folder updated since (the latest by
    default): its live records, its label names.

    The dataset holds no open file until it is read; each DataLoader worker opens the
    shards it reads, at most ``max_open_files`` at a time (``access.Reader``), and reads
    only the conversion the dataset was made on: OutputChangedError when the directory
    was converted again and a shard must be opened anew (docs/reliability.md).

    From ``gs://``, whole shards are fetched into a local cache that every worker and
    process of the machine shares, one fetch per shard, within ``cache_limit`` bytes
    (``"10GB"`` works too; 0: no cache) in ``cache_dir`` (default
    ``$TFRECORDER_CACHE`` or ``~/.cache/tfrecorder``); a local folder is read in place
    (docs/bucket.md).
    """

    @deprecation.renamed(output_dir="tfrecord_dir")
    def __init__(self, tfrecord_dir: str, split: str = "train",
                 transform: Callable | None = None, *, version: int | None = None,
                 max_open_files: int = 64, cache_dir: str | None = None,
                 cache_limit: int | str | None = None, target_format: str = "torchvision",
                 transforms: Callable | None = None):
        self.reader = access.Reader(tfrecord_dir, split, version=version,
                                    max_open_files=max_open_files, cache_dir=cache_dir,
                                    cache_limit=cache_limit)
        self.transform = transform
        manifest = self.reader.manifest
        self.image_key = manifest.image_key
        self.label_key = manifest.label_key
        self.label_names = manifest.label_names
        self.supervised = bool(self.image_key and self.label_key
                               and manifest.features[self.label_key].shape == [])
        self.target_format = _targets.check_format(target_format)
        self.transforms = transforms
        # Detection records give torchvision's (image, target), boxes and masks wrapped
        # as its tv_tensors where torchvision imports (looked for once, here).
        # (access.values gives a model_garden folder's records in our keys too.)
        self.detection = bool(self.image_key and target_format == "torchvision"
                              and _targets.is_detection(manifest.features))
        self._wrap = _tv_tensors() if self.detection else None
        self.segmentation = bool(self.image_key and target_format == "torchvision"
                                 and _targets.is_segmentation(manifest.features))
        self._mask = _mask() if self.segmentation else None
        if self.image_key:
            # Pillow and its format plugins imported here, once: DataLoader workers
            # forked from this process have them instead of each importing them.
            _headers.pil()

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, i: int):
        return self._item(self.reader.records([i])[0], i)

    def __getitems__(self, indices: list) -> list:
        # DataLoader's batched fetch: on gs:// one look at the manifest for the batch.
        return [self._item(data, i) for i, data in zip(indices, self.reader.records(indices))]

    def _item(self, data: bytes, i: int):
        # An image and a label are all a supervised item needs: the rest stays unparsed,
        # and unchecked; the kinds of those two are checked against the manifest.
        keys = (self.image_key, self.label_key) if self.supervised else None
        try:
            features = access.values(data, self.reader.manifest, keys)
        except CorruptRecordError as e:
            raise CorruptRecordError(f"{self.reader.view.where(i)}: {e}") from None
        if self.detection:
            return self._detection(features, i)
        if self.segmentation:
            return self._segmentation(features, i)
        if self.image_key in features:
            features[self.image_key] = self._image(features[self.image_key])
        if self.supervised:
            return features[self.image_key], features[self.label_key]
        return features

    def _detection(self, features: dict, i: int):
        decoded = self._decoded(features[self.image_key])
        width, height = decoded.size
        try:
            found = _targets.target(features, height, width, int(i))
        except CorruptRecordError as e:
            raise CorruptRecordError(f"{self.reader.view.where(i)}: {e}") from None
        target = {k: v if isinstance(v, int) else torch.from_numpy(v)
                  for k, v in found.items()}
        target = self._wrap(target, height, width)
        image = self._tensor(decoded)  # or transform(decoded), the image alone
        if self.transforms is not None:
            return self.transforms(image, target)
        return image, target

    def _segmentation(self, features: dict, i: int):
        decoded = self._decoded(features[self.image_key])
        width, height = decoded.size
        try:
            ids = _targets.class_ids(features[_targets.SEGMENTATION_MASK], height, width)
        except CorruptRecordError as e:
            raise CorruptRecordError(f"{self.reader.view.where(i)}: {e}") from None
        mask = self._mask(torch.from_numpy(ids))
        image = self._tensor(decoded)
        if self.transforms is not None:
            return self.transforms(image, mask)
        return image, mask

    def _image(self, data: bytes):
        return self._tensor(self._decoded(data))

    def _decoded(self, data: bytes):
        """The stored image decoded as an RGB ``PIL.Image``."""
        image = _headers.open_stored(data)
        image.load()  # decodes; the in-memory file needs no closing
        if image.mode == "I" or image.mode.startswith("I;16"):  # 16-bit grey: top 8 bits
            wide = np.asarray(image).astype(np.int64) >> 8
            image = _headers.pil().fromarray(np.clip(wide, 0, 255).astype(np.uint8), "L")
        if image.mode != "RGB":  # convert() would copy even an RGB image
            image = image.convert("RGB")
        return image

    def _tensor(self, image):
        """``transform(image)``, or the uint8 ``(3, height, width)`` tensor of it."""
        if self.transform is not None:
            return self.transform(image)
        return torch.from_numpy(np.array(image)).permute(2, 0, 1).contiguous()


class Sampler(torch.utils.data.Sampler):
    """The positions one process reads in an epoch: a permutation of the whole dataset
    that depends only on ``(seed, epoch)`` (``access.permutation``), or file order with
    ``shuffle=False``, cut into ``world_size`` consecutive parts (``access.part``) of
    which this process takes part ``rank``.

    Unlike ``torch.utils.data.DistributedSampler``, which repeats records so that every
    part has the same size, each record is read exactly once per epoch and the parts
    differ by at most one record; ``drop_last=True`` drops those few extra records
    instead (other ones each epoch when shuffled), for distributed training that needs
    the same number of batches on every process. ``rank`` and ``world_size`` default to
    ``torch.distributed``'s when it is initialized, else 0 and 1.

    ``order="shards"`` reads in an order that streams (``access.shard_order``): shards
    shuffled, records shuffled within windows of ``window`` shards, so that a reader
    needs a few shards at a time, not the whole split; from ``gs://``, the next shards
    are fetched into the cache ahead of the order, in a thread of this process
    (docs/bucket.md). Without ``window``, it is 4, or fewer where the dataset's
    ``cache_limit`` holds fewer than two windows (``access.window_for``; the sampler's
    ``window`` says which); a ``window`` two of which do not fit is a warning, as its
    shards are then evicted and fetched again within an epoch. The default,
    ``"global"``, shuffles the whole split.

    Call ``set_epoch(epoch)`` before each epoch. To resume within an epoch, give
    ``set_epoch(epoch, start=k)``: the order is that epoch's, from its ``k``-th position
    (``k`` = batches already done times the batch size).
    """

    def __init__(self, data_source, *, seed: int = 0, shuffle: bool = True,
                 rank: int | None = None, world_size: int | None = None,
                 drop_last: bool = False, order: str = "global",
                 window: int | None = None):
        self.size = len(data_source)
        if order not in ("global", "shards"):
            raise ConfigError(f"order={order!r}; give 'global' (a permutation of the whole "
                              f"split) or 'shards' (shards shuffled, records shuffled within "
                              f"windows of a few shards)")
        reader = getattr(data_source, "reader", None)
        if order == "shards" and not isinstance(reader, access.Reader):
            raise ConfigError(f"order='shards' needs a tfrecorder.torch.Dataset (it orders "
                              f"by the dataset's shards), not a {type(data_source).__name__}")
        if window is None:
            window = access.window_for(reader) if order == "shards" else access.WINDOW
        else:
            access.shard_order([], 0, 0, window)  # checks it
            if order == "shards":
                _warn_past_the_limit(reader, window)
        self.order, self.window = order, window
        self._reader = reader if order == "shards" else None
        if self._reader is not None:
            reader.read_ahead = 0  # it fetches ahead of this order instead (fetch_ahead)
        if rank is None or world_size is None:
            dist = torch.distributed
            ready = dist.is_available() and dist.is_initialized()
            world_size = world_size if world_size is not None else (
                dist.get_world_size() if ready else 1)
            rank = rank if rank is not None else (dist.get_rank() if ready else 0)
        access.part(0, rank, world_size)  # checks them
        self.seed, self.shuffle, self.drop_last = seed, shuffle, drop_last
        self.rank, self.world_size = rank, world_size
        self.epoch = self.start = 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """ConfigError unless ``epoch`` is in [0, 2**32) and ``start`` is >= 0 (a start
        past this process's part leaves nothing to read this epoch)."""
        for name, v in (("epoch", epoch), ("start", start)):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) \
                    or v < 0 or (name == "epoch" and v >= 1 << 32):
                raise ConfigError(f"set_epoch({name}={v!r}); give an int >= 0"
                                  + (" and < 2**32" if name == "epoch" else ""))
        self.epoch, self.start = int(epoch), int(start)

    def _positions(self) -> np.ndarray:
        if not self.shuffle:
            order = np.arange(self.size)
        elif self._reader is not None:
            order = access.shard_order(self._reader.view.counts, self.seed, self.epoch,
                                       self.window)
        else:
            order = access.permutation(self.size, self.seed, self.epoch)
        if self.drop_last:
            order = order[:self.size - self.size % self.world_size]
        return access.part(order, self.rank, self.world_size)[self.start:]

    def __iter__(self):
        if self._reader is not None:  # shards fetched into the cache ahead of the order
            return ahead.fetch_ahead(self._reader, self._positions(), self.window)
        return iter(self._positions().tolist())

    def __len__(self) -> int:
        n = self.size - self.size % self.world_size if self.drop_last else self.size
        mine = n * (self.rank + 1) // self.world_size - n * self.rank // self.world_size
        return max(0, mine - self.start)


def _tv_tensors() -> Callable:
    """What gives a target torchvision's types, ``(target, height, width) -> target``:
    its boxes as ``tv_tensors.BoundingBoxes`` (XYXY, the image's size as canvas) and its
    masks as ``tv_tensors.Mask`` where torchvision imports, so that ``transforms.v2``
    moves both with the image (it leaves a plain tensor as it is); else the target as it
    is. Keypoints stay plain: torchvision's ``KeyPoints`` hold no visibility."""
    try:
        from torchvision import tv_tensors
    except ImportError:
        return lambda target, height, width: target

    def wrap(target: dict, height: int, width: int) -> dict:
        target["boxes"] = tv_tensors.BoundingBoxes(
            target["boxes"], format="XYXY", canvas_size=(int(height), int(width)))
        if "masks" in target:
            target["masks"] = tv_tensors.Mask(target["masks"])
        return target

    return wrap


def _mask() -> Callable:
    """What wraps a segmentation mask: torchvision's ``tv_tensors.Mask`` where
    torchvision imports, else the plain tensor."""
    try:
        from torchvision import tv_tensors
    except ImportError:
        return lambda ids: ids
    return tv_tensors.Mask


def _warn_past_the_limit(reader: access.Reader, window: int) -> None:
    """A warning when two windows of ``window`` shards do not fit in the reader's given
    ``cache_limit``: the batches in flight read them, and shards evicted before their
    last records are read are fetched again."""
    cache = reader.cache
    if cache is None or not cache.given or window <= access.window_for(reader):
        return
    largest = max(s.num_bytes for s in reader.shards)
    warnings.warn(
        f"Sampler(order='shards', window={window}) with cache_limit={cache.limit:,} "
        f"bytes: the batches in flight read two windows, up to {2 * window} shards of up "
        f"to {largest:,} bytes, more than the cache holds: shards are fetched again "
        f"within the epoch; leave window out (it is then {access.window_for(reader)}) "
        f"or raise cache_limit to {2 * window * largest:,}", UserWarning, stacklevel=3)
