"""The wheel a Dataflow job ships to its workers: this very tfrecorder, packed from the installed
package's own files, and the distribution's name it carries. Its own module because it is
plain packaging (no Beam), which tests also use to make a worker's environment.
"""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile

# Built from the installed package's own files (whatever way it was installed: a wheel,
# a source tree, an editable install), so a Dataflow job always runs the same code as
# the process that submitted it, and users never build one by hand. Its metadata
# requires only what the workers use (Pillow, google-crc32c, gcsfs, NumPy): a worker
# writes shards and never imports TensorFlow or pandas, so installing them there would
# cost minutes per worker for nothing.

#: Requirements of the code that runs on workers (shard, image, example, records, storage).
WORKER_REQUIREMENTS = ("pillow>=10.0", "google-crc32c>=1.5", "gcsfs>=2024.2", "numpy>=1.24")


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


#: The distribution's name (setup.py): PyPI's "tfrecorder" is another project.
DISTRIBUTION = "tfrecorder-tables"


def build_wheel(dest_dir: str) -> str:
    """Writes ``tfrecorder_tables-<package version>-py3-none-any.whl`` into ``dest_dir``;
    returns its path."""
    from tfrecorder import _version
    from tfrecorder._version import __version__ as package_version

    # The package's folder: _version.py, a leaf, is at its top.
    package_dir = os.path.dirname(os.path.abspath(_version.__file__))
    stem = f"{DISTRIBUTION.replace('-', '_')}-{package_version}"
    dist_info = f"{stem}.dist-info"
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
        "Metadata-Version: 2.1", f"Name: {DISTRIBUTION}", f"Version: {package_version}",
        "Summary: tfrecorder, as staged to remote workers",
        *(f"Requires-Dist: {r}" for r in WORKER_REQUIREMENTS), "", ""]).encode()
    wheel = b"Wheel-Version: 1.0\nGenerator: tfrecorder\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files += [(f"{dist_info}/METADATA", metadata), (f"{dist_info}/WHEEL", wheel)]
    record = "\n".join([_record_line(n, d) for n, d in files] + [f"{dist_info}/RECORD,,", ""])
    os.makedirs(dest_dir, exist_ok=True)
    path = os.path.join(dest_dir, f"{stem}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as z:
        for name, data in [*files, (f"{dist_info}/RECORD", record.encode())]:
            # A fixed date: the same sources give the same wheel. A ZipInfo is stored
            # uncompressed unless told otherwise, whatever the ZipFile's default.
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, data)
    return path
