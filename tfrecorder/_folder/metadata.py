"""A directory's manifest read back, for every reader and verb: ours (``tfrecorder.json``)
or, through ``legacy``, TFRecorder 2.0's; a folder without one refused with what it is
instead (a file, a Windows path, a folder no conversion wrote, an unfinished one).

The manifest's types and their JSON are ``manifest.py``'s; what a run writes beside its
shards is built by the writer (``_writer/run_metadata.py``).
"""

from __future__ import annotations

import re

from tfrecorder import _storage as storage
from tfrecorder._errors import IncompleteOutputError
from tfrecorder._folder import layout, legacy
from tfrecorder._folder.layout import MANIFEST
from tfrecorder._folder.manifest import Manifest, damaged

#: ``C:\\...`` or ``C:/...``: a path written for Windows.
_WINDOWS_PATH = re.compile(r"^[A-Za-z]:[\\/]")


def _traces_of_a_conversion(output_dir: str) -> bool:
    """Whether ``output_dir`` holds anything a conversion writes (a run's folder or
    lock, a shard, an index folder, errors.jsonl)."""
    try:
        names = [name.rstrip("/").rsplit("/", 1)[-1] for name in storage.listdir(output_dir)]
    except OSError:
        return True  # unreadable: say what is more likely, an unfinished conversion
    ours = {layout.TMP_DIR, layout.LOCK, layout.ERRORS, layout.INDEX_DIR}
    return any(name in ours or layout.ShardName.parse(name) is not None for name in names)


def read_manifest(output_dir: str) -> Manifest:
    """The manifest of ``output_dir``; IncompleteOutputError when it has none."""
    path = storage.join(output_dir, MANIFEST)
    try:
        data = storage.read_bytes(path)
    except (FileNotFoundError, NotADirectoryError):
        if legacy.is_legacy(output_dir):  # written by TFRecorder 2.0
            return legacy.manifest(output_dir)
        if not storage.isdir(output_dir):
            where = storage.resolve(output_dir)
            shown = output_dir if where == output_dir else f"{output_dir} ({where})"
            kind = "is a file, not a folder" if storage.exists(output_dir) else "does not exist"
            hint = ""
            if _WINDOWS_PATH.match(str(output_dir)) or "\\" in str(output_dir):
                hint = (" It looks like a Windows path: on this machine give an absolute "
                        "path with / separators (e.g. /data/out), or a gs:// URI.")
            raise IncompleteOutputError(
                f"{shown} {kind}; give the folder a conversion wrote (the output_dir "
                f"given to tfrecorder.convert).{hint}") from None
        if not _traces_of_a_conversion(output_dir):
            raise IncompleteOutputError(
                f"{output_dir} is not a tfrecorder conversion: it has no {MANIFEST} and no "
                f"file a conversion writes. Give the folder that tfrecorder.convert wrote "
                f"(its output_dir), or convert into this one first.") from None
        raise IncompleteOutputError(
            f"{output_dir} has no {MANIFEST}: no conversion finished there (it may have been "
            f"interrupted, or still be running). Convert again with mode='overwrite'."
        ) from None
    try:
        return Manifest.from_bytes(data)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise damaged(path, e) from None
