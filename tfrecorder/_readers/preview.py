"""Images for a notebook: small thumbnails of stored image files (``inspect``), and
``show()``, a grid of one batch's images as a model receives them, with their labels.

A notebook keeps every cell's output in the ``.ipynb`` file, so an image embedded in HTML
costs its bytes there for good: eight phone photos embedded as stored made a 7 MB cell.
Thumbnails are re-encoded small (JPEG; PNG only for an image with transparency).
Pillow encodes them; no plotting library is needed.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
import numbers
import warnings
from typing import Any, Sequence

import numpy as np

from tfrecorder._errors import ConfigError

#: Longest side, in pixels, of an ``inspect`` thumbnail.
THUMBNAIL_SIDE = 128
#: Longest side, in pixels, of an image ``show`` embeds: a model's input up to this
#: size is shown pixel for pixel, a larger one scaled down.
SHOW_SIDE = 256
#: JPEG quality of thumbnails: artefacts stay invisible at these sizes.
JPEG_QUALITY = 85
#: JPEG quality of ``show``'s images, with full-resolution colour (no 4:2:0 chroma
#: subsampling): what the model receives, to within a few levels per pixel.
SHOW_QUALITY = 92
#: Images ``show`` shows by default: a 4 x 4 grid.
SHOW_COUNT = 16


def data_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _has_alpha(img) -> bool:
    return img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (
        img.mode == "P" and "transparency" in img.info)


def _encode(img, faithful: bool = False) -> tuple[bytes, str]:
    """``img`` (Pillow) as JPEG, or as PNG when it has transparency; ``faithful``: at
    SHOW_QUALITY with full-resolution colour."""
    out = io.BytesIO()
    if _has_alpha(img):
        img.convert("LA" if img.mode in ("LA", "La") else "RGBA").save(out, "PNG",
                                                                       optimize=True)
        return out.getvalue(), "image/png"
    jpeg = {"quality": SHOW_QUALITY, "subsampling": 0} if faithful else {
        "quality": JPEG_QUALITY}
    img.convert("L" if img.mode in ("1", "L", "I", "I;16", "F") else "RGB").save(
        out, "JPEG", **jpeg)
    return out.getvalue(), "image/jpeg"


def thumbnail(data: bytes, side: int = THUMBNAIL_SIDE) -> tuple[bytes, str] | None:
    """``(bytes, MIME type)`` of a thumbnail of the image file ``data``: upright by its
    EXIF orientation (as a browser shows the file), its longest side at most ``side``
    pixels, JPEG, or PNG where the image has transparency; the first frame of an
    animation. None when Pillow cannot decode it."""
    from tfrecorder._folder.image_headers import open_stored, pil

    Image = pil()
    from PIL import ImageOps  # imported by pil() already

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = open_stored(data)
            if img.format in ("JPEG", "MPO"):  # decode at the smallest DCT scale that covers
                img.draft(img.mode if img.mode in ("L", "RGB") else None, (side, side))
            img = ImageOps.exif_transpose(img)
            if img.mode in ("I;16", "I;16B", "I;16L", "I"):  # 16-bit grey: 65535 is white
                img = img.point(lambda v: v / 257).convert("L")
            img.thumbnail((side, side), Image.Resampling.LANCZOS, reducing_gap=3.0)
            return _encode(img)
    except Exception:  # Pillow raises many types for a file it cannot decode
        return None


# --- show(): a batch as the model sees it ---------------------------------------------


@dataclasses.dataclass
class Preview:
    """What ``show()`` returns: a grid of images with their labels in a notebook
    (``_repr_html_``), a short summary as text (``str``/``repr``).

    ``images`` are the embedded encodings (``(bytes, MIME type)``), ``captions`` their
    labels, ``shape`` and ``dtype`` those of one image as the model receives it, and
    ``scaling`` how its values were mapped to 0..255 for display.
    """

    images: list[tuple[bytes, str]]
    captions: list[str]
    shape: tuple
    dtype: str
    scaling: str
    total: int | None = None   # images in the batch(es) looked at

    def __str__(self) -> str:
        shape = "x".join(str(d) for d in self.shape) if self.shape else "?"
        of = f" of {self.total}" if self.total and self.total != len(self.images) else ""
        text = f"{len(self.images)}{of} images, {shape} {self.dtype} ({self.scaling})"
        if self.captions:
            counts: dict[str, int] = {}
            for c in self.captions:
                counts[c] = counts.get(c, 0) + 1
            shown = ", ".join(f"{c} x{k}" if k > 1 else c for c, k in list(counts.items())[:8])
            more = f", ... ({len(counts)} labels)" if len(counts) > 8 else ""
            text += f"; labels: {shown}{more}"
        return text

    __repr__ = __str__

    def _repr_html_(self) -> str:
        esc = html.escape
        cells = []
        for i, (data, mime) in enumerate(self.images):
            caption = self.captions[i] if i < len(self.captions) else ""
            cells.append(
                "<figure style='display:inline-block;margin:4px;text-align:center;"
                "vertical-align:top'>"
                f"<img src='{data_uri(data, mime)}'/>"
                f"<figcaption style='max-width:{SHOW_SIDE}px;overflow-wrap:anywhere'>"
                f"{esc(caption)}</figcaption></figure>")
        return (f"<div class='tfrecorder-show'><div>{esc(str(self))}</div>"
                f"<div>{''.join(cells)}</div></div>")


def show(batch_or_dataset, n: int = SHOW_COUNT, label_names=None) -> Preview:
    """A grid of the first ``n`` images of what ``load()`` yields, as the model sees them
    (resized, cropped, scaled), with their label names; it renders in a notebook.

    ``batch_or_dataset``: a ``tf.data`` dataset from ``load()`` (of ``(images, labels)``
    or of feature dicts, batched or not; only the batches needed are read), one element
    of it, the ``Datasets`` of every split (its ``train`` split is shown), ``load(...,
    with_info=True)``'s pair, or arrays (NumPy, TensorFlow, PyTorch's channels-first).
    ``label_names``: a list of names (id i is ``label_names[i]``), or what has a
    ``label_names`` (``tfrecorder.info(dir)``, ``load()``'s ``Datasets``); without one,
    ids are shown as numbers. Values are mapped to 0..255 for display only: uint8 as is,
    floats in 0..1 times 255, in -1..1 from -1..1, in 0..255 as is, any other range
    (mean/std normalised) stretched from the shown images' minimum to maximum.
    """
    if not (isinstance(n, numbers.Integral) and not isinstance(n, bool) and n > 0):
        raise ConfigError(f"n={n!r}; give how many images to show, 1 or more")
    source, names = _unwrap(batch_or_dataset, label_names)
    images, labels, total = _collect(source, int(n))
    if not images:
        raise ConfigError("nothing to show: the dataset or batch holds no image")
    encoded, shape, dtype, scaling = _encode_all(images)
    captions = [_caption(label, names) for label in labels] if labels else []
    return Preview(encoded, captions, shape, dtype, scaling, total)


def _unwrap(value, label_names) -> tuple[Any, list[str] | None]:
    """The dataset or batch to show, and the label names to show with it."""
    from tfrecorder._folder.manifest import Manifest

    names = None
    if isinstance(value, dict) and hasattr(value, "label_names") and hasattr(value, "info"):
        names = value.label_names  # load()'s Datasets: every split; show the train split
        splits = list(dict.keys(value))
        value = dict.__getitem__(value, "train" if "train" in splits else splits[0])
    elif isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], Manifest):
        names = value[1].label_names  # load(..., with_info=True)
        value = value[0]
    names = getattr(value, "label_names", None) or names
    if label_names is not None:
        names = getattr(label_names, "label_names", label_names)
    return value, (list(names) if names else None)


def _is_dataset(value) -> bool:
    return hasattr(value, "element_spec") and hasattr(value, "take")


def _numpy(value):
    """A tensor (TensorFlow, PyTorch), ragged tensor or array as NumPy or nested lists."""
    if hasattr(value, "to_list"):  # tf.RaggedTensor: one list of ids per record
        return value.to_list()
    if hasattr(value, "detach"):  # torch.Tensor
        value = value.detach().cpu()
    if hasattr(value, "numpy"):
        return value.numpy()
    return value


def _split(element) -> tuple[Any, Any]:
    """``(images, labels)`` of one element: a pair, a dict of features, or images."""
    if isinstance(element, dict):
        key = "image" if "image" in element else next(
            (k for k, v in element.items() if getattr(_numpy(v), "ndim", 0) >= 3), None)
        if key is None:
            raise _unshowable(element)
        label = "label" if "label" in element else next(
            (k for k in element if str(k).endswith("label")), None)
        return element[key], (element[label] if label is not None else None)
    if isinstance(element, (tuple, list)) and len(element) == 2:
        return element[0], element[1]
    return element, None


def _unshowable(element):
    return ConfigError(f"no image in the element's features {sorted(element)}; show() takes "
                       f"what load() yields: (images, labels) pairs or dicts with an "
                       f"'image' feature")


def _records(element) -> tuple[list, list | None]:
    """The images of one element, one array (or encoded file) each, and their labels."""
    images, labels = _split(element)
    images, labels = _numpy(images), (_numpy(labels) if labels is not None else None)
    if isinstance(images, (bytes, str)):  # decode_images=False, one record
        return [images], (None if labels is None else [labels])
    images = np.asarray(images)
    if images.dtype.kind in "OSU":  # decode_images=False, a batch
        return list(np.ravel(images)), (None if labels is None else list(labels))
    channels = (1, 2, 3, 4)
    if images.ndim == 4:
        if images.shape[-1] not in channels and images.shape[1] in channels:
            images = np.moveaxis(images, 1, -1)  # PyTorch's channels-first
        batched = True
    elif images.ndim == 3 and images.shape[-1] not in channels:
        # a batch of grey images without a channel axis (one label each), or one
        # channels-first image
        one_each = (isinstance(labels, (list, tuple, np.ndarray)) and np.ndim(labels[:0]) >= 1
                    and len(labels) == len(images))
        if images.shape[0] in channels and not one_each:
            images, batched = np.moveaxis(images, 0, -1), False
        else:
            batched = True
    else:
        batched = False
    if not batched:
        return [images], (None if labels is None else [labels])
    return list(images), (None if labels is None else list(labels))


def _collect(source, n: int) -> tuple[list, list, int | None]:
    """The first ``n`` images and labels of a dataset (reading only the elements needed)
    or of one batch, and how many the batches read held."""
    images: list = []
    labels: list = []
    if _is_dataset(source):
        seen = 0
        for element in source:
            imgs, labs = _records(element)
            seen += len(imgs)
            images.extend(imgs)
            if labs is not None:
                labels.extend(labs)
            if len(images) >= n:
                break
        total = seen
    else:
        images, labs = _records(source)
        labels = labs or []
        total = len(images)
    return images[:n], labels[:n], total


def _encode_all(images: list) -> tuple[list[tuple[bytes, str]], tuple, str, str]:
    """Each image encoded for display, the shape and dtype of the first, and how values
    were mapped to 0..255."""
    if isinstance(images[0], (bytes, str, np.bytes_, np.str_)):
        encoded = []
        for data in images:
            raw = data.encode("latin-1") if isinstance(data, str) else bytes(data)
            encoded.append(thumbnail(raw, SHOW_SIDE) or _blank())
        return encoded, (), "encoded files", "decoded for display"
    arrays = [np.asarray(a) for a in images]
    first = arrays[0]
    scale, scaling = _scaling(arrays)
    return ([_encode_array(scale(a)) for a in arrays], tuple(first.shape), str(first.dtype),
            scaling)


def _scaling(arrays: list[np.ndarray]):
    """A function mapping an image's values to uint8 for display, and its description."""
    kind = arrays[0].dtype
    if kind == np.uint8:
        return (lambda a: a), "uint8, shown as is"
    if kind == np.bool_:
        return (lambda a: a.astype(np.uint8) * 255), "bool, shown black and white"
    lo = float(min(np.nanmin(a) for a in arrays if a.size))
    hi = float(max(np.nanmax(a) for a in arrays if a.size))
    rng = f"values {lo:.3g}..{hi:.3g}"
    if lo >= 0 and hi <= 1:
        return (lambda a: _clip(a * 255.0)), f"{rng}, shown times 255"
    if lo >= -1 and hi <= 1:
        return (lambda a: _clip((a + 1.0) * 127.5)), f"{rng}, shown from -1..1"
    if lo >= 0 and hi <= 255:
        return (lambda a: _clip(a)), f"{rng}, shown as 0..255"
    span = hi - lo or 1.0
    return ((lambda a: _clip((a - lo) * (255.0 / span))),
            f"{rng} (normalised), stretched to 0..255 for display")


def _clip(a) -> np.ndarray:
    return np.clip(np.rint(np.nan_to_num(np.asarray(a, np.float64))), 0, 255).astype(np.uint8)


def _encode_array(a: np.ndarray) -> tuple[bytes, str]:
    from tfrecorder._folder.image_headers import pil

    Image = pil()
    if a.ndim == 3 and a.shape[-1] == 1:
        a = a[..., 0]
    elif a.ndim == 3 and a.shape[-1] > 4:
        a = a[..., :3]  # more bands than a screen has: the first three
    if a.ndim not in (2, 3):
        return _blank()
    img = Image.fromarray(np.ascontiguousarray(a))  # L, LA, RGB or RGBA from the shape
    if max(img.size) > SHOW_SIDE:
        img.thumbnail((SHOW_SIDE, SHOW_SIDE), Image.Resampling.LANCZOS)
    return _encode(img, faithful=True)


def _blank() -> tuple[bytes, str]:
    """A 1x1 grey pixel where an image cannot be shown."""
    from tfrecorder._folder.image_headers import pil

    return _encode(pil().new("L", (1, 1), 128))


def _caption(label, names: Sequence[str] | None) -> str:
    """A label as text: its name, or names (multi-label), or its value."""
    if label is None:
        return ""
    value = _numpy(label)
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        flat = list(np.ravel(np.array(value, dtype=object))) if value else []
        if (names and len(flat) == len(names) and len(flat) > 1
                and all(v in (0, 1) for v in flat)
                and any(isinstance(v, float) for v in flat)):  # multi-hot
            return " ".join(names[i] for i, v in enumerate(flat) if v)
        return " ".join(_caption(v, names) for v in flat)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        i = int(value)
        return names[i] if names and 0 <= i < len(names) else str(i)
    if isinstance(value, numbers.Real):
        return f"{float(value):g}"
    return str(value)
