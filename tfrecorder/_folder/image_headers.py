"""Image bytes read as the format knows them: what their header says, where the image
ends, and Pillow opened on them. No Beam, no TensorFlow.

The writer checks a file with these before it stores it (``_writer/image.py``), and the
report and the readers open stored bytes with the same ``pil`` and ``open_stored``, so
they sit on the format's floor, under all three. JPEG, PNG, GIF and BMP headers are
parsed by hand, a few bytes per file instead of Pillow's full parse; ``image_end``
finds the image's end, where truncation shows.

``height``, ``width`` and ``channels`` are those ``tf.io.decode_image`` returns for the
stored bytes (for a GIF, of each frame): a palette PNG with transparency decodes to 4
channels, a CMYK JPEG to 3, a 16-bit grey PNG to 1, a 32-bit BMP to 4.
"""

from __future__ import annotations

import dataclasses
import io
import sys
import threading
from typing import Iterator

_PNG_IEND = b"IEND\xaeB`\x82"
_ONE_CHANNEL = {"1", "L", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"}
_CHANNELS = {"LA": 2, "La": 2, "RGB": 3, "YCbCr": 3, "CMYK": 3, "RGBA": 4, "RGBa": 4}
#: Pillow's modes of 16-bit grey (and 32-bit integer) pixels: 65535 is white.
_WIDE_GREY = {"I", "I;16", "I;16B", "I;16L", "I;16N"}


class ImageProblem(Exception):
    """These bytes cannot be stored as an image; ``str(e)`` is the reason, for humans."""


@dataclasses.dataclass(frozen=True)
class ImageInfo:
    """What the stored bytes decode to."""

    format: str
    height: int
    width: int
    channels: int
    #: The file's own format (Pillow's name, lower case) where its bytes were decoded and
    #: re-encoded as ``format`` to be readable; None where they are stored as they are
    #: (or were pre-sized, as asked).
    source_format: str | None = dataclasses.field(default=None, compare=False, repr=False)


_PIL_LOCK = threading.Lock()
_PIL = None


def pil():
    """``PIL.Image``, imported once per process under one lock, with ``ImageOps`` and
    every format plugin registered.

    Imported on first use (``import tfrecorder`` must stay light), and a worker's first
    use happens in several threads at once. Python's import lock gives a thread a
    half-initialised module when two threads import modules that import each other
    (Pillow's plugins import ``PIL.Image`` and ``ImageFile``; ``Image.open`` imports the
    plugins lazily), so everything Pillow will import is imported here, by one thread."""
    global _PIL
    if _PIL is None:
        with _PIL_LOCK:
            if _PIL is None:
                from PIL import Image, ImageOps  # noqa: F401 (ImageOps: for downscale, thumbnails)

                Image.init()
                _PIL = Image
    return _PIL


def open_stored(data: bytes):
    """``PIL.Image.open`` of the image bytes ``data`` (not decoded yet). A JPEG or PNG,
    known by its first bytes, is opened as that format alone: Pillow otherwise starts
    each format whose first bytes it cannot rule out, a few per image, before JPEG."""
    Image = pil()
    fmt = "JPEG" if data[:3] == _JPEG_SIGNATURE else "PNG" if data[:8] == _PNG_SIGNATURE \
        else None
    if fmt is not None:
        try:
            return Image.open(io.BytesIO(data), formats=[fmt])
        except Image.UnidentifiedImageError:
            pass  # a damaged header: every format gets its try, as without the signature
    return Image.open(io.BytesIO(data))


def _channels(img, fmt: str) -> int:
    mode = img.mode
    if fmt == "GIF":
        return 3  # TensorFlow decodes every GIF frame to RGB
    if mode == "P":
        return 4 if "transparency" in img.info else 3
    if mode == "PA":
        return 4
    if mode in _ONE_CHANNEL:
        return 1
    return _CHANNELS.get(mode, 3)


def image_end(data: bytes, fmt: str) -> int:
    """Where the image in ``data`` (of ``fmt``: jpeg, png, gif, bmp, webp) ends: ``len(data)``,
    or less when bytes follow it.

    Phones append data after a complete image (Samsung trailers, Google Motion Photos'
    video after a JPEG's end-of-image marker), and decoders ignore it. A file that stops
    before its image's end is truncated: ImageProblem.
    """
    tail = len(data.rstrip(b"\x00"))
    if fmt == "jpeg":
        if data[:tail].endswith(b"\xff\xd9"):
            return tail
        end = _jpeg_end(data)
        if end is None:
            raise ImageProblem("truncated JPEG: the file ends before the image's end-of-image "
                               "marker (FFD9)")
        return end
    if fmt == "png":
        if data[:tail].endswith(_PNG_IEND):
            return tail
        end = _png_end(data)
        if end is None:
            raise ImageProblem("truncated PNG: the file ends before its IEND chunk")
        return end
    if fmt == "gif":
        if data[:tail].endswith(b";"):
            return tail
        end = _gif_end(data)
        if end is None:
            raise ImageProblem("truncated GIF: the file ends before its trailer byte (0x3B)")
        return end
    if fmt == "webp" and len(data) >= 8:
        # A RIFF file: its size, less the first 8 bytes, is in bytes 4 to 8.
        declared = int.from_bytes(data[4:8], "little") + 8
        if len(data) < declared:
            raise ImageProblem(f"truncated WebP: {len(data)} bytes, its RIFF header "
                               f"declares {declared}")
        return declared
    if fmt == "bmp" and len(data) >= 6:
        declared = int.from_bytes(data[2:6], "little")
        if declared and len(data) < declared:
            raise ImageProblem(
                f"truncated BMP: {len(data)} bytes, the header declares {declared}"
            )
    return len(data)


def _jpeg_markers(data: bytes) -> Iterator[tuple[int, int]]:
    """``(marker, offset)`` of each marker of a JPEG after its start-of-image, in order;
    entropy-coded data after a start-of-scan is skipped (an FF there is stuffing
    (FF00), a restart marker (FFD0-FFD7) or fill (FFFF)). Stops where the data does not
    continue as a JPEG."""
    pos, n = 2, len(data)
    while pos + 2 <= n:
        if data[pos] != 0xFF:
            return
        marker = data[pos + 1]
        if marker == 0xFF:          # fill byte
            pos += 1
            continue
        yield marker, pos
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
            continue
        if marker == 0xD9 or pos + 4 > n:
            return
        pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
        if marker != 0xDA:
            continue
        while True:
            pos = data.find(b"\xff", pos)
            if pos < 0 or pos + 1 >= n:
                return
            follower = data[pos + 1]
            if follower == 0xFF:
                pos += 1
            elif follower == 0x00 or 0xD0 <= follower <= 0xD7:
                pos += 2
            else:
                break


def _jpeg_end(data: bytes) -> int | None:
    """The offset just past the end-of-image marker."""
    return next((pos + 2 for marker, pos in _jpeg_markers(data) if marker == 0xD9), None)


def _png_end(data: bytes) -> int | None:
    """The offset just past the IEND chunk, walking the chunks."""
    pos, n = 8, len(data)
    while pos + 12 <= n:
        length = int.from_bytes(data[pos:pos + 4], "big")
        if data[pos + 4:pos + 8] == b"IEND":
            return pos + 12
        pos += 12 + length
    return None


def _gif_sub_blocks(data: bytes, pos: int) -> int | None:
    while pos < len(data):
        size = data[pos]
        pos += 1 + size
        if size == 0:
            return pos
    return None


def _gif_end(data: bytes) -> int | None:
    """The offset just past the trailer byte, walking the blocks."""
    n = len(data)
    if n < 13:
        return None
    flags = data[10]
    pos = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    while pos < n:
        block = data[pos]
        if block == 0x3B:
            return pos + 1
        if block == 0x21:          # extension: label, then sub-blocks
            pos = _gif_sub_blocks(data, pos + 2)
        elif block == 0x2C:        # image: descriptor, local colour table, LZW data
            if pos + 10 > n:
                return None
            flags = data[pos + 9]
            pos += 10 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
            pos = _gif_sub_blocks(data, pos + 1)
        else:
            return None
        if pos is None:
            return None
    return None


def _bmp_channels(data: bytes) -> int | None:
    """Channels TensorFlow gives a BMP, or None when it cannot decode that depth.

    Pillow reports a 32-bit BMP as RGB, but TensorFlow keeps the fourth channel, so
    the depth is read from the header (bits per pixel at byte 28).
    """
    if len(data) < 30:
        return None
    bits = int.from_bytes(data[28:30], "little")
    return {32: 4, 24: 3, 8: 1}.get(bits)


# --- header parsers: a few bytes per file instead of Pillow's full header parse -----------

_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_JPEG_SIGNATURE = b"\xff\xd8\xff"
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}  # colour type -> channels; 3 (palette) below


def _jpeg_header(data: bytes) -> tuple[int, int, int] | None:
    """(height, width, components) from the first start-of-frame segment."""
    for marker, pos in _jpeg_markers(data):
        if marker in (0xD9, 0xDA):  # end of image or scan before any frame header
            return None
        if marker in _JPEG_SOF:
            if pos + 10 > len(data):
                return None
            height = int.from_bytes(data[pos + 5:pos + 7], "big")
            width = int.from_bytes(data[pos + 7:pos + 9], "big")
            return height, width, data[pos + 9]
    return None


def _png_header(data: bytes) -> tuple[int, int, int] | None:
    """(height, width, channels) from IHDR; a palette with a tRNS chunk decodes to RGBA."""
    if len(data) < 33 or data[12:16] != b"IHDR":
        return None
    width = int.from_bytes(data[16:20], "big")
    height = int.from_bytes(data[20:24], "big")
    colour = data[25]
    if colour != 3:
        channels = _PNG_CHANNELS.get(colour)
        return None if channels is None else (height, width, channels)
    pos = 8
    while pos + 8 <= len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind = data[pos + 4:pos + 8]
        if kind == b"tRNS":
            return height, width, 4
        if kind in (b"IDAT", b"IEND"):
            break
        pos += 12 + length
    return height, width, 3


def _fast_info(data: bytes) -> ImageInfo | None:
    """ImageInfo from the header alone for the common formats, else None."""
    if data[:3] == _JPEG_SIGNATURE:
        h = _jpeg_header(data)
        if h is None or h[2] not in (1, 3, 4):
            return None
        return ImageInfo("jpeg", h[0], h[1], 1 if h[2] == 1 else 3)  # CMYK decodes to 3
    if data[:8] == _PNG_SIGNATURE:
        h = _png_header(data)
        return None if h is None else ImageInfo("png", *h)
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return ImageInfo("gif", int.from_bytes(data[8:10], "little"),
                         int.from_bytes(data[6:8], "little"), 3)
    if data[:2] == b"BM" and len(data) >= 34:
        dib = int.from_bytes(data[14:18], "little")
        compression = int.from_bytes(data[30:34], "little")
        channels = _bmp_channels(data)
        if dib < 40 or compression not in (0, 3) or channels is None:
            return None
        width = int.from_bytes(data[18:22], "little", signed=True)
        height = abs(int.from_bytes(data[22:26], "little", signed=True))
        return ImageInfo("bmp", height, width, channels)
    return None


#: Pillow's default PIL.Image.MAX_IMAGE_PIXELS (the same since Pillow 3.0).
PILLOW_MAX_IMAGE_PIXELS = 89_478_485


_UNSET = object()


def _check_size(fmt: str, width: int, height: int) -> None:
    if width <= 0 or height <= 0:
        raise ImageProblem(f"{fmt} image with an empty size {width}x{height}")
    # Pillow warns above MAX_IMAGE_PIXELS and refuses above twice that; a 108-megapixel
    # phone photo is between the two, and is an image, not a bomb. The limit is read
    # from Pillow where this process has imported it (it may have been changed there);
    # otherwise it is Pillow's default, and headers read without Pillow do not import it
    # for an image within twice that: the import costs more than 10,000 header checks.
    # While another thread imports PIL.Image, sys.modules holds it half-initialised,
    # without the attribute yet: that is "not imported" here, never an AttributeError.
    limit = getattr(sys.modules.get("PIL.Image"), "MAX_IMAGE_PIXELS", _UNSET)
    if limit is _UNSET:
        if width * height <= 2 * PILLOW_MAX_IMAGE_PIXELS:
            return
        limit = pil().MAX_IMAGE_PIXELS
    if limit and width * height > 2 * limit:
        raise ImageProblem(
            f"decompression bomb: {width}x{height} = {width * height} pixels is more than "
            f"twice Pillow's PIL.Image.MAX_IMAGE_PIXELS ({limit}); raise that limit if the "
            f"image is genuine"
        )


def _eight_bit(img):
    """A 16-bit grey image as 8-bit ("L"), 65535 to 255 as TensorFlow decodes it; Pillow's
    own conversion clips at 255, which turns a 16-bit image almost all white."""
    return img.convert("I").point(lambda v: v / 257 + 0.5).convert("L")
