"""EXIF orientation: a JPEG stored sideways, turned the way it is shown. No Beam, no
TensorFlow.

A phone stores a photo as its sensor read it and writes, in the EXIF Orientation tag
(0x0112), how to turn it for display: 1 is upright; 2 to 8 mirror and/or rotate it.
Labelling tools show the photo turned, so its boxes are drawn in the turned frame. The
decoders disagree on the tag: TensorFlow's ``decode_jpeg``/``decode_image`` (and so
Model Garden's decoders), Pillow's ``Image.open`` (unless ``ImageOps.exif_transpose``
is called) and torchvision's ``decode_jpeg``/``decode_image``
(``apply_exif_orientation=False`` by default) ignore it; DALI's ``decoders.image``
applies it (``adjust_orientation=True`` by default). Bytes stored with the tag decode
in the sensor's frame for some readers and the shown frame for others.

So, in a conversion whose records place geometry on the pixels (boxes, ...), a JPEG
whose orientation is not 1 is stored turned, without the tag: every decoder then sees
the frame the annotations were made in. The turn re-encodes the JPEG (Pillow has no
lossless transform, and the packages that have one need a system libjpeg-turbo or a
compiler at install, and are lossless only where the size is a multiple of the MCU);
the count and the bytes are in the conversion's result.
"""

from __future__ import annotations

import io
import warnings
from typing import Mapping

from tfrecorder._folder import image_headers as headers

#: JPEG quality of a JPEG turned upright when no ``jpeg_quality`` is given (pre-sizing
#: gives one): high, as the picture is otherwise stored as it came.
QUALITY = 95
#: Roles of the features that place something on the pixels (``layout.FeatureSpec``):
#: boxes (instance masks and keypoints are stored only beside them), and a segmentation
#: table's mask, drawn on the photo as shown.
GEOMETRY_ROLES = frozenset({"bbox", "mask"})

_TAG = 0x0112
_APP1 = 0xE1
_SOS, _EOI = 0xDA, 0xD9


def has_geometry(features: Mapping) -> bool:
    """Whether records of these feature specs place anything on their image's pixels."""
    return any(getattr(spec, "role", None) in GEOMETRY_ROLES for spec in features.values())


def of_jpeg(data: bytes) -> int:
    """The EXIF orientation (1 to 8) of the JPEG ``data``; 1 where it has none, or one
    that cannot be read (what every decoder that applies it does then)."""
    found = _tag(data)
    return 1 if found is None else found[0]


def without_tag(data: bytes) -> bytes:
    """The JPEG ``data`` with its EXIF orientation set to 1 (upright) in place: the
    same pixels, untouched, told to be shown as they are."""
    found = _tag(data)
    if found is None:
        return data
    _, at, order = found
    return data[:at] + (1).to_bytes(2, order) + data[at + 2:]


def in_sensor_frame(given, raw: headers.ImageInfo, turned: headers.ImageInfo) -> bool:
    """Whether a source that sizes a photo ``given`` (width, height), stored
    ``raw`` (its sensor's frame) and shown ``turned``, made its boxes in the sensor's
    frame: its size is the sensor frame's and not the shown one's. A square photo, or a
    half turn, has the same size both ways: the shown frame is taken, as tools show it."""
    if not given or len(given) != 2:
        return False
    try:
        w, h = (round(float(v)) for v in given)
    except (TypeError, ValueError):
        return False
    return (w, h) == (raw.width, raw.height) and (w, h) != (turned.width, turned.height)


def _tag(data: bytes) -> tuple[int, int, str] | None:
    """The orientation of the JPEG ``data``, where its value is in ``data`` and in which
    byte order; None where it has no readable one."""
    if data[:2] != b"\xff\xd8":
        return None
    pos, n = 2, len(data)
    # The tag is in an APP1 segment before the first scan: only the segments' headers
    # are walked, never the picture.
    while pos + 4 <= n and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        if marker in (_SOS, _EOI):
            return None
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        if marker == _APP1 and data[pos + 4:pos + 10] == b"Exif\x00\x00":
            found = _in_tiff(data[pos + 10:pos + 2 + length])
            if found is not None:
                return found[0], pos + 10 + found[1], found[2]
        pos += 2 + length
    return None


def _in_tiff(tiff: bytes) -> tuple[int, int, str] | None:
    """The orientation in IFD0 of an EXIF block (a TIFF header and its directories),
    the offset of its value in ``tiff`` and the byte order."""
    order = {b"II": "little", b"MM": "big"}.get(tiff[:2])
    if order is None or len(tiff) < 8:
        return None
    ifd = int.from_bytes(tiff[4:8], order)
    if ifd + 2 > len(tiff):
        return None
    count = int.from_bytes(tiff[ifd:ifd + 2], order)
    for k in range(count):
        at = ifd + 2 + 12 * k
        if at + 12 > len(tiff):
            return None
        if int.from_bytes(tiff[at:at + 2], order) == _TAG:
            value = int.from_bytes(tiff[at + 8:at + 10], order)  # a SHORT, first in its field
            return (value, at + 8, order) if 1 <= value <= 8 else None
    return None


def upright(data: bytes, quality: int = QUALITY) -> tuple[bytes, headers.ImageInfo]:
    """The JPEG ``data`` turned by its EXIF orientation and re-encoded at ``quality``,
    with its other EXIF fields and colour profile, and no orientation tag; and what it
    decodes to. Raises ImageProblem where Pillow cannot decode it."""
    Image = headers.pil()
    from PIL import ImageOps, JpegImagePlugin  # registered by headers.pil()

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = headers.open_stored(data)
            turn = img.getexif().get(_TAG, 1)
            sampling = JpegImagePlugin.get_sampling(img) if img.format == "JPEG" else -1
            icc = img.info.get("icc_profile")
            img = ImageOps.exif_transpose(img)
            # The turned image's own EXIF: Pillow's copy, the tag taken out (getexif()
            # is the image's cached object: changed before the turn, it stops the turn).
            exif = img.getexif()
            exif.pop(_TAG, None)
            if img.mode not in ("L", "RGB", "CMYK"):
                img = img.convert("RGB")
            extra = {}
            if sampling >= 0:
                # 4:2:2 halves the horizontal colour; turned a quarter, that would be the
                # vertical one, which Pillow cannot write: kept whole instead.
                extra["subsampling"] = 0 if sampling == 1 and turn >= 5 else sampling
            if icc:
                extra["icc_profile"] = icc
            out = io.BytesIO()
            img.save(out, "JPEG", quality=quality, exif=exif.tobytes() if exif else b"",
                     **extra)
    except headers.ImageProblem:
        raise
    except Exception as e:  # Pillow raises many types for a file it cannot decode
        raise headers.ImageProblem(f"JPEG fails to decode for turning upright by its EXIF "
                                   f"orientation ({type(e).__name__}: {e})") from None
    return out.getvalue(), headers.ImageInfo("jpeg", img.height, img.width,
                                             1 if img.mode == "L" else 3)
