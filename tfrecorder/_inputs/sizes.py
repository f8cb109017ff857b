"""An image's size as its records give it, read from the file's header.

A source that gives geometry relative to the image (YOLO's polygons, a semantic mask
checked against its image) needs the image's size in pixels before any record is built;
the writer's own header parsers stand a floor above the inputs, and the inputs need only
the size, so Pillow reads it here: its ``Image.open`` parses the header and no pixel.

The size is that of the image upright: a JPEG whose EXIF orientation turns it by a
quarter (5 to 8) has its width and height swapped, as the writer stores such a photo
upright where records hold geometry (``_writer/orientation.py``) and as Ultralytics
measures it (``exif_size``).
"""

from __future__ import annotations

import io

from tfrecorder import _storage as storage

#: Bytes read first: headers, EXIF included, fit in them for nearly every file; the rest
#: is read only where Pillow needs more.
HEAD = 1 << 16
#: EXIF's Orientation tag, and its values that turn the image by a quarter.
_ORIENTATION = 0x0112
_QUARTER_TURNS = (5, 6, 7, 8)


def of_bytes(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` upright of an image's bytes (its header may be enough); None
    where Pillow cannot read a header in them."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            width, height = img.size
            turned = img.getexif().get(_ORIENTATION) in _QUARTER_TURNS
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        return None
    return (height, width) if turned else (width, height)


def of_file(path: str) -> tuple[int, int] | None:
    """``(width, height)`` upright of the image at ``path``; None where it cannot be read
    or is no image (the writer quarantines it then, with its reason)."""
    try:
        head = storage.read_range(path, 0, HEAD)
        found = of_bytes(head)
        if found is None and len(head) == HEAD:
            found = of_bytes(storage.read_bytes(path))
    except OSError:
        return None
    return found
