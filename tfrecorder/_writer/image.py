"""Image bytes -> the bytes to store and their ImageInfo. No Beam, no TensorFlow.

By default no pixel is decoded: the header gives format, size and channels (read
directly for JPEG, PNG, GIF and BMP, by Pillow for the rest; the parsers are the
format's, in ``_folder/image_headers.py``, which the report and the readers read stored
bytes with too) and a cheap integrity check looks at the file's end, where truncation
shows. JPEG, PNG, GIF, BMP and still WebP bytes are stored untouched (every reader of
ours decodes them: TensorFlow 2.21's ``tf.io.decode_image``, Pillow, DALI); any other
format Pillow can read, and an animated WebP (which TensorFlow 2.21 crashes on), is
decoded and re-encoded as PNG, and its ImageInfo says from what (``source_format``), so
that the result can say what that cost. With ``Sizing``, a larger image is downscaled
and re-encoded.

``height``, ``width`` and ``channels`` are those ``tf.io.decode_image`` returns for the
stored bytes (for a GIF, of each frame): a palette PNG with transparency decodes to 4
channels, a CMYK JPEG to 3, a 16-bit grey PNG to 1, a 32-bit BMP to 4.
"""

from __future__ import annotations

import dataclasses
import io
import warnings

from tfrecorder._folder.image_headers import (
    _ONE_CHANNEL, _WIDE_GREY, ImageInfo, ImageProblem, _bmp_channels, _channels,
    _check_size, _eight_bit, _fast_info, image_end, open_stored, pil)

#: Formats stored as they are, by Pillow's format name -> our ``image_format`` value.
#: Phones' multi-picture JPEGs (MPO) are JPEG files; decoders read their first image.
#: A WebP only when it is still (``_kept``).
PASS_THROUGH = {"JPEG": "jpeg", "MPO": "jpeg", "PNG": "png", "GIF": "gif", "BMP": "bmp",
                "WEBP": "webp"}

#: Integrity checks: "header" (default, no pixel decoding) or "decode" (decode fully).
CHECKS = ("header", "decode")
#: Options.check's accepted values: the image checks, and "content", the old spelling of
#: compare="content", which Options reads as check="header" with that comparison.
CHECK_OPTIONS = (*CHECKS, "content")


@dataclasses.dataclass(frozen=True)
class Sizing:
    """Pre-sizing at conversion (``Options.shorter_side``, ``Options.jpeg_quality``)."""

    shorter_side: int
    jpeg_quality: int = 90


def _reencode_png(img, source: str) -> tuple[bytes, ImageInfo]:
    mode = img.mode
    if mode in ("1", "L", "I;16"):
        target = mode
    elif mode in ("LA", "RGBA", "RGB"):
        target = mode
    elif mode in ("P", "PA"):
        target = "RGBA" if ("transparency" in img.info or mode == "PA") else "RGB"
    elif mode in _WIDE_GREY:  # 16-bit grey in any byte order, or 32-bit: kept 16-bit
        img, mode, target = img.convert("I"), "I", "I;16"  # (I -> I;16 clips at 65535)
    elif mode == "F":
        target = "L"
    else:  # CMYK, YCbCr, LAB, HSV, ...
        target = "RGBA" if "A" in mode else "RGB"
    if target != mode:
        img = img.convert(target)
    out = io.BytesIO()
    img.save(out, "PNG")
    data = out.getvalue()
    channels = {"1": 1, "L": 1, "I;16": 1, "LA": 2, "RGB": 3, "RGBA": 4}[target]
    return data, ImageInfo("png", img.height, img.width, channels, source.lower())


def _kept(img, fmt: str) -> bool:
    """Whether an image Pillow opened as ``fmt`` is stored as it is: a format of
    ``PASS_THROUGH``, but an animated WebP (TensorFlow 2.21's decoder crashes the
    process on one)."""
    return fmt in PASS_THROUGH and not (fmt == "WEBP" and getattr(img, "is_animated", False))


def prepare(data: bytes, check: str = "header", sizing: Sizing | None = None,
            seen=None) -> tuple[bytes, ImageInfo]:
    """The bytes to store for an image file's ``data`` and what they decode to.

    ``check="header"`` parses the header and the file's end only; ``check="decode"``
    also decodes every pixel. With ``sizing``, an image whose shorter side is longer than
    ``sizing.shorter_side`` is downscaled to it and re-encoded (see ``downscale``); others
    are stored as they are; ``seen``, if given, is called with the downscaled image
    (a PIL image) before it is encoded. Raises ImageProblem with the reason when the bytes are empty,
    not an image, truncated, too large to decode safely, or undecodable.
    """
    stored, info = _prepare(data, check)
    if sizing is not None and min(info.height, info.width) > sizing.shorter_side:
        return downscale(stored, sizing, seen)
    return stored, info


def downscale(data: bytes, sizing: Sizing, seen=None) -> tuple[bytes, ImageInfo]:
    """``data`` decoded, turned upright by its EXIF orientation, downscaled so that its
    shorter side is ``sizing.shorter_side`` (aspect kept), and re-encoded: JPEG at
    ``sizing.jpeg_quality``, or PNG when it has transparency.

    A JPEG is decoded at the smallest DCT scale still at least the target size (Pillow's
    draft), then resized with a Lanczos filter, so no detail above the target's
    resolution aliases. One image is in memory at a time.
    """
    Image = pil()
    from PIL import ImageOps  # imported by pil() already

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = open_stored(data)
            turned = img.getexif().get(0x0112, 1) in (5, 6, 7, 8)
            # Pillow opens a 16-bit grey + alpha PNG (IHDR colour type 4) as RGBA: it
            # stays grey + alpha.
            png_grey_alpha = img.format == "PNG" and data[25:26] == b"\x04"
            w, h = img.size
            upright_w, upright_h = (h, w) if turned else (w, h)
            scale = sizing.shorter_side / min(upright_w, upright_h)
            size = (max(1, round(upright_w * scale)), max(1, round(upright_h * scale)))
            if img.format in ("JPEG", "MPO"):
                img.draft(img.mode if img.mode in ("L", "RGB") else None,
                          (size[1], size[0]) if turned else size)
            img = ImageOps.exif_transpose(img)
            if img.mode in _WIDE_GREY:
                img = _eight_bit(img)
            alpha = img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (
                img.mode == "P" and "transparency" in img.info)
            grey_alpha = img.mode in ("LA", "La") or (img.mode == "RGBA" and png_grey_alpha)
            target = ("LA" if grey_alpha else "RGBA") if alpha else (
                "L" if img.mode in _ONE_CHANNEL else "RGB")
            img = img.convert(target).resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
    except ImageProblem:
        raise
    except Exception as e:  # Pillow raises many types for a file it cannot decode
        raise ImageProblem(f"image fails to decode for resizing ({type(e).__name__}: {e})") from None
    if seen is not None:
        seen(img)
    out = io.BytesIO()
    if alpha:
        img.save(out, "PNG")
        fmt = "png"
    else:
        img.save(out, "JPEG", quality=sizing.jpeg_quality)
        fmt = "jpeg"
    return out.getvalue(), ImageInfo(fmt, img.height, img.width, len(img.getbands()))


def _is_svg(data: bytes) -> bool:
    """Whether ``data`` is an SVG drawing (XML whose first element is ``<svg``)."""
    head = data[:1024].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return head.startswith(b"<svg") or (head.startswith((b"<?xml", b"<!doctype svg"))
                                        and b"<svg" in head)


def _prepare(data: bytes, check: str) -> tuple[bytes, ImageInfo]:
    if not data:
        raise ImageProblem("empty file (0 bytes)")
    if check == "header":
        info = _fast_info(data)
        if info is not None:
            _check_size(info.format.upper(), info.width, info.height)
            return data[:image_end(data, info.format)], info
    Image = pil()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = open_stored(data)
    except Image.DecompressionBombError as e:
        raise ImageProblem(f"decompression bomb: {e}") from None
    except Exception as e:  # Pillow raises many types for "not an image"
        if _is_svg(data):
            raise ImageProblem("SVG is not supported (a vector drawing, which neither "
                               "Pillow nor TensorFlow decodes: convert it to PNG)") from None
        raise ImageProblem(f"not a readable image ({type(e).__name__}: {e})") from None
    fmt = img.format or "unknown"
    width, height = img.size
    _check_size(fmt, width, height)
    kept = _kept(img, fmt)
    if kept:
        data = data[:image_end(data, PASS_THROUGH[fmt])]
    if check == "decode" or not kept:
        try:
            img.load()
        except Exception as e:
            raise ImageProblem(f"{fmt} image fails to decode ({type(e).__name__}: {e})") from None
    if fmt == "BMP":
        channels = _bmp_channels(data)
        if channels is None:
            return _reencode_png(img, fmt)
        return data, ImageInfo("bmp", height, width, channels)
    if not kept:
        return _reencode_png(img, fmt)
    return data, ImageInfo(PASS_THROUGH[fmt], height, width, _channels(img, fmt))
