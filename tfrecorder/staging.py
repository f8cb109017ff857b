"""What reaches the workers: the shard tasks, and a wheel of the running tfrecorder.

Shard tasks are staged as one file each (``stage_tasks``) in a folder the workers can
read; the job graph holds only the folder, so it does not grow with the table. No Beam
here: the pipeline only calls ``list_tasks`` and ``read_task``.

The wheel is built from the installed package's own files (whatever way it was
installed: a wheel, a source tree, an editable install), so a Dataflow job always runs
the same code as the process that submitted it, and users never build one by hand.

Its metadata requires only what the workers use (Pillow, google-crc32c, gcsfs, NumPy):
a worker writes shards and never imports TensorFlow or pandas, so installing them there
would cost minutes per worker for nothing.
"""

from __future__ import annotations

import base64
import hashlib
import os
import pickle
import stat
import zipfile
from typing import Sequence

from tfrecorder import storage
from tfrecorder.errors import ConfigError
from tfrecorder.plan import Row, ShardTask

TASK_SUFFIX = ".task"


def stage_tasks(tasks: Sequence[ShardTask], folder: str) -> list[str]:
    """Writes each task to its own file under ``folder``; returns their paths in order."""
    storage.makedirs(folder, private=True)
    paths = []
    for task in tasks:
        path = task_path(folder, task.filename)
        # Plain tuples pickle several times faster than dataclass instances.
        rows = [(r.row, r.split, r.image_uri, r.features, r.values, r.labels, r.merged)
                for r in task.rows]
        data = (task.split, task.index, task.count, task.filename, rows)
        storage.write_bytes(path, pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL),
                            private=True)
        paths.append(path)
    return paths


def stage_refs(folder: str, split: str, index: int, count: int, filename: str,
               refs: list[tuple[str, int, int]]) -> str:
    """Writes a task whose rows lie in part files of ``folder``: ``refs`` are
    ``(part, offset, length)`` of pickled ``(positions, stream.Block columns)``
    (``stream.stage``)."""
    path = task_path(folder, filename)
    data = ("refs", split, index, count, filename, refs)
    storage.write_bytes(path, pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL),
                        private=True)
    return path


def task_path(folder: str, filename: str) -> str:
    """Where the task of shard ``filename`` is staged in ``folder``."""
    return storage.join(folder, f"{filename}{TASK_SUFFIX}")


def read_task(path: str) -> ShardTask:
    """The task staged at ``path`` by ``stage_tasks`` or ``stage_refs``.

    Task files are pickles, which run code when loaded, so a local one is loaded only
    when it is this user's own and nobody else can write it (as ``stage_tasks`` makes
    them): a file swapped in by another user of a shared folder is refused.
    """
    _check_private(path)
    data = pickle.loads(storage.read_bytes(path))
    if data[0] == "refs":
        _, split, index, count, filename, refs = data
        from tfrecorder.stream import Block

        folder = path[:-len(storage.basename(path))]
        placed = []
        for part, offset, length in refs:
            _check_private(folder + part)
            positions, columns = pickle.loads(storage.read_range(folder + part, offset, length))
            placed.extend(zip(positions, Block.from_tuple(columns).rows(split)))
        placed.sort(key=lambda pr: pr[0])  # positions in the shard's seeded order
        return ShardTask(split, index, count, filename, [row for _, row in placed])
    split, index, count, filename, rows = data
    return ShardTask(split, index, count, filename, [Row(*r) for r in rows])


def _check_private(path: str) -> None:
    if storage.is_remote(path):
        return  # a bucket's access is its IAM policy's (docs/reliability.md)
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise ConfigError(
            f"{path} is not a private file of this user (owner {st.st_uid}, mode "
            f"{stat.filemode(st.st_mode)}); a staged task must be written by the run that "
            f"reads it. Another user may have replaced it: run the conversion again")


def list_tasks(folder: str) -> list[str]:
    """The task files staged in ``folder``, in name order."""
    return [storage.join(folder, n) for n in storage.listdir(folder) if n.endswith(TASK_SUFFIX)]

#: Requirements of the code that runs on workers (shard, image, example, records, storage).
WORKER_REQUIREMENTS = ("pillow>=10.0", "google-crc32c>=1.5", "gcsfs>=2024.2", "numpy>=1.24")


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(dest_dir: str) -> str:
    """Writes ``tfrecorder-<version>-py3-none-any.whl`` into ``dest_dir``; returns its path."""
    import tfrecorder

    package_dir = os.path.dirname(os.path.abspath(tfrecorder.__file__))
    version = tfrecorder.__version__
    dist_info = f"tfrecorder-{version}.dist-info"
    files: list[tuple[str, bytes]] = []
    for root, dirs, names in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                arcname = os.path.relpath(path, os.path.dirname(package_dir)).replace(os.sep, "/")
                with open(path, "rb") as f:
                    files.append((arcname, f.read()))
    metadata = "\n".join([
        "Metadata-Version: 2.1", "Name: tfrecorder", f"Version: {version}",
        "Summary: tfrecorder, as staged to remote workers",
        *(f"Requires-Dist: {r}" for r in WORKER_REQUIREMENTS), "", ""]).encode()
    wheel = b"Wheel-Version: 1.0\nGenerator: tfrecorder\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files += [(f"{dist_info}/METADATA", metadata), (f"{dist_info}/WHEEL", wheel)]
    record = "\n".join([_record_line(n, d) for n, d in files] + [f"{dist_info}/RECORD,,", ""])
    os.makedirs(dest_dir, exist_ok=True)
    path = os.path.join(dest_dir, f"tfrecorder-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as z:
        for name, data in [*files, (f"{dist_info}/RECORD", record.encode())]:
            # A fixed date: the same sources give the same wheel. A ZipInfo is stored
            # uncompressed unless told otherwise, whatever the ZipFile's default.
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, data)
    return path
