"""A semantic segmentation mask: the PNG of class ids beside each image of a
segmentation table, read as its image is written, checked against that image from
both files' headers (no pixels decoded), and stored as the file's bytes.

A mask is one 8-bit grey channel, a class id per pixel, at its image's size: what
Model Garden's segmentation decoder (``tf.io.decode_image(..., channels=1)``) and
torchvision's ``decode_png`` read as ids. A palette PNG (Pascal VOC's masks) holds its
ids as palette indices, which a decoder asked for one channel turns into grey levels of
the palette's colours; an RGB mask holds colours, not ids. Both are refused, with how to
save the ids as they are.
"""

from __future__ import annotations

import struct

from tfrecorder import _storage as storage
from tfrecorder._folder import example, layout

#: What the records' ``segmentation_mask_format`` holds.
FORMAT = "png"
_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: PNG colour types (the IHDR's byte 25), named in the reasons.
_COLOURS = {0: "grey", 2: "RGB", 3: "palette", 4: "grey with alpha", 6: "RGBA"}
#: Reasons a mask is quarantined, worded once so that they count together.
OTHER_SIZE = "mask of another size"
NOT_IDS = "mask not of class ids"
NO_MASK = "mask file not found"


def problem(data: bytes, width: int, height: int) -> str | None:
    """Why ``data`` is no class-id mask of an image of ``width`` x ``height`` pixels;
    None where it is one. Only the PNG's header is read."""
    if not data.startswith(_SIGNATURE) or len(data) < 29 or data[12:16] != b"IHDR":
        return (f"{NOT_IDS}: the file is not a PNG; save each mask's class ids as a "
                f"one-channel 8-bit PNG")
    w, h = struct.unpack(">II", data[16:24])
    depth, colour = data[24], data[25]
    if colour != 0 or depth != 8:
        fix = ("Image.fromarray(numpy.asarray(Image.open(path))).save(path) keeps the "
               "palette indices as the ids" if colour == 3 else
               "Image.fromarray(ids.astype('uint8')).save(path) saves an array of ids")
        return (f"{NOT_IDS}: a {depth}-bit {_COLOURS.get(colour, f'type {colour}')} PNG; "
                f"a mask holds one class id per pixel in one 8-bit channel: {fix}")
    if (w, h) != (width, height):
        return (f"{OTHER_SIZE}: {w} x {h} pixels (width x height) on an image of "
                f"{width} x {height}; give each image the mask drawn on it")
    return None


def read(path: str, width: int, height: int, max_bytes: int) -> tuple[dict | None, str, str]:
    """``(features, "", "")`` of the mask at ``path`` for an image of ``width`` x
    ``height``, or ``(None, stage, reason)`` where it cannot be one: a file that cannot
    be read (stage "read"), or one that is not such a mask (stage "image")."""
    try:
        data = storage.read_file_stamped(path, max_bytes, stamped=False)[0]
    except FileNotFoundError:
        return None, "read", f"{NO_MASK}: {path}"
    except OSError as e:
        return None, "read", f"cannot read the mask file {path} ({type(e).__name__}: {e})"
    reason = problem(data, width, height)
    if reason is not None:
        return None, "image", f"{reason} ({path})"
    return {layout.SEGMENTATION_MASK: example.LargeBytesFeature(data),
            layout.SEGMENTATION_MASK_FORMAT: example.bytes_feature([FORMAT])}, "", ""
