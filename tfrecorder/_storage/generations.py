"""Object-store writes fenced by an object's generation: reads that say which generation
they read, and writes, copies and removals that happen only while the object is still
that generation (Cloud Storage's ``ifGenerationMatch`` precondition; 0 means "no
object"). A read followed by a write of the same object is otherwise a race: between
the two, another process may have replaced the object, and the write would undo that.
Its own module because the folder's lock and the publishing of a version rest on these
few calls, and gcsfs offers none of them but the create-if-absent upload.

The failed precondition (HTTP 412) is a FileExistsError, as gcsfs raises it; a missing
object is a FileNotFoundError.
"""

from __future__ import annotations

from urllib.parse import quote

from tfrecorder._storage.remote import _fs

#: Tries of a fenced read whose object was replaced between its two requests.
_READ_TRIES = 3


def read_with_generation(path: str) -> tuple[bytes, int]:
    """The bytes of object ``path`` and the generation they are: its metadata first,
    then the bytes of exactly that generation (a replaced object answers 404 for its
    old generation, and the read starts over)."""
    fs = _fs(path)
    bucket, key, _ = fs.split_path(path)
    for attempt in range(_READ_TRIES):
        meta = fs.call("GET", "b/{}/o/{}", bucket, key, json_out=True)
        generation = int(meta["generation"])
        try:
            _, data = fs.call("GET", "b/{}/o/{}", bucket, key, alt="media",
                              generation=str(generation))
        except FileNotFoundError:
            if attempt == _READ_TRIES - 1:
                raise
            continue
        return data, generation
    raise FileNotFoundError(path)  # not reached


def write_if_generation(path: str, data: bytes, generation: int) -> int:
    """Writes object ``path`` only while it is ``generation`` (0: only where there is
    none); FileExistsError otherwise, and nothing written. Returns the new generation."""
    fs = _fs(path)
    bucket, key, _ = fs.split_path(path)
    try:
        out = fs.call("POST", f"{fs._location}/upload/storage/v1/b/{quote(bucket, safe='')}/o",
                      uploadType="media", name=key, ifGenerationMatch=str(generation),
                      data=data, headers={"Content-Type": "application/octet-stream"},
                      json_out=True)
    finally:
        fs.invalidate_cache(path)
    return int(out["generation"])


def remove_if_generation(path: str, generation: int) -> None:
    """Removes object ``path`` only while it is ``generation``; FileExistsError when it
    is another, FileNotFoundError when there is none."""
    fs = _fs(path)
    bucket, key, _ = fs.split_path(path)
    try:
        fs.call("DELETE", "b/{}/o/{}", bucket, key, ifGenerationMatch=str(generation))
    finally:
        fs.invalidate_cache(path)


def copy_new(src: str, dst: str) -> None:
    """Copies object ``src`` to ``dst`` on the server only where ``dst`` does not exist
    (``ifGenerationMatch=0`` on the rewrite): of two copies to one name, one lands and
    the other is a FileExistsError, whatever their timing."""
    fs = _fs(dst)
    b1, k1, _ = fs.split_path(src)
    b2, k2, _ = fs.split_path(dst)
    token = None
    try:
        while True:
            out = fs.call("POST", "b/{}/o/{}/rewriteTo/b/{}/o/{}", b1, k1, b2, k2,
                          ifGenerationMatch="0", rewriteToken=token,
                          headers={"Content-Type": "application/json"}, json_out=True)
            if out.get("done") is True:
                return
            token = out["rewriteToken"]
    finally:
        fs.invalidate_cache(dst)


def create_new(path: str, data: bytes) -> int:
    """Creates object ``path`` only where none is (``ifGenerationMatch=0``);
    FileExistsError otherwise. Returns its generation. The object is looked for first
    too: a store that ignores preconditions (a GCS emulator) still refuses."""
    fs = _fs(path)
    fs.invalidate_cache(path)
    if fs.exists(path):
        raise FileExistsError(path)
    return write_if_generation(path, data, 0)
