"""An image directory read as Tables: ``DIR/<split>/<label>/<file>`` or
``DIR/<label>/<file>``, its files listed as a stream.

Its own module: the layout rules (split folders or label folders, never a mix; files
too deep are an error) and what counts as litter beside the images concern image
directories alone.
"""

from __future__ import annotations

import os
from typing import Iterator

from tfrecorder import _storage as storage
from tfrecorder._folder.split_names import ALIASES
from tfrecorder._errors import Problem, Problems, SchemaError
from tfrecorder._inputs.schema import IMAGE_CSV_SCHEMA
from tfrecorder._inputs.table import ColumnFrame, Table


#: File endings taken from an image directory (compared case-insensitively).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff")


def directory_chunks(root: str, size: int | None, problems: Problems) -> Iterator[Table]:
    """An image tree as Tables of at most ``size`` rows, ``split, image_uri, label`` (the
    split None in a tree without split folders); its files are listed as a stream."""
    import itertools

    root = storage.resolve(root)
    top = [d for d in storage.listdir(root)
           if not is_litter(d) and storage.isdir(storage.join(root, d))]
    split_layout = _has_split_folders(root, top)
    depth = 3 if split_layout else 2
    layout = "DIR/<split>/<label>/<file>" if split_layout else "DIR/<label>/<file>"

    def rows():
        for path, rel, components in _image_files(root):
            if len(components) > depth:
                # No split and label the layout gives: skipping it would lose it silently.
                problems.add(rel, None, None,
                             f"image file deeper than the layout {layout}; move it into its "
                             f"label's folder, or list the images in a CSV")
            elif len(components) == depth:
                yield rel, (components[0] if split_layout else None), path, components[-2]
            # else: not where the layout puts images

    found = rows()
    any_rows = False
    while True:
        batch = list(itertools.islice(found, size)) if size else list(found)
        if not batch:
            break
        any_rows = True
        ids, split_col, uris, label_col = map(list, zip(*batch))
        data = dict(zip(IMAGE_CSV_SCHEMA, (split_col, uris, label_col)))
        yield Table(ColumnFrame(data, len(ids), plain=True, given=list(IMAGE_CSV_SCHEMA)),
                    ids, root, "directory")
        if not size:
            break
    if not any_rows and not problems:
        raise SchemaError([Problem(None, None, root, f"no image files laid out as {layout}")])


#: Names that file managers, editors and archivers leave beside images; never data.
LITTER_NAMES = frozenset({"thumbs.db", "desktop.ini", "__macosx"})


def is_litter(name: str) -> bool:
    """True for what an OS or editor leaves in an image folder, never data: any dot-file
    or dot-folder (``.DS_Store``, macOS's ``._x.jpg``, ``.ipynb_checkpoints``, ``.git``),
    ``Thumbs.db``, ``desktop.ini`` and ``__MACOSX``."""
    return name.startswith(".") or name.lower() in LITTER_NAMES


def _image_files(root: str) -> Iterator[tuple[str, str, list[str]]]:
    """``(path, relative path, its components)`` of every image file below ``root``, litter
    (anywhere on the path) left out."""
    prefix = len(root.rstrip("/")) + 1
    for path in storage.walk_files(root):
        rel = path[prefix:] if storage.is_remote(root) else os.path.relpath(path, root)
        components = rel.replace("\\", "/").split("/")
        if any(is_litter(p) for p in components) or not components[-1].lower().endswith(IMAGE_EXTENSIONS):
            continue
        yield path, rel, components


def _has_split_folders(root: str, top: list[str]) -> bool:
    """True when the folders of ``root`` are splits (``DIR/<split>/<label>/<file>``),
    False when none is (``DIR/<label>/<file>``).

    Some of each is refused: either layout would silently drop the images of the other
    folders (a stray ``previews`` folder beside ``train`` and ``test`` made every split
    folder a label folder, and only the stray folder's images were converted).
    """
    visible = [d for d in top if not d.startswith(".")]
    split_names = sorted(d for d in visible if d.strip().lower() in ALIASES)
    others = sorted(d for d in visible if d not in split_names)
    if not split_names or not others:
        return bool(split_names)
    raise SchemaError([Problem(
        None, None, root,
        f"mixed layout: the folders {split_names} are split names but {others} "
        f"{'is' if len(others) == 1 else 'are'} not, so neither DIR/<split>/<label>/<file> "
        f"nor DIR/<label>/<file> takes every image; move {', '.join(others)} out of {root} "
        f"(or, if the split-named folders are labels, rename them)")])
