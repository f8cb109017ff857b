import os

import pytest

from tfrecorder import _storage as storage


def test_read_file_reads_a_file_whole(tmp_path):
    path = tmp_path / "a.bin"
    path.write_bytes(bytes(range(256)) * 1000)
    assert storage.read_file(str(path), max_bytes=256_000) == bytes(range(256)) * 1000
    (tmp_path / "empty").write_bytes(b"")
    assert storage.read_file(str(tmp_path / "empty"), max_bytes=10) == b""


def test_read_file_refuses_a_file_over_the_cap(tmp_path):
    path = tmp_path / "a.bin"
    path.write_bytes(b"x" * 11)
    with pytest.raises(storage.FileTooLargeError, match="11 bytes, more than 10"):
        storage.read_file(str(path), max_bytes=10)


@pytest.mark.skipif(not os.path.isfile("/proc/self/status"), reason="needs Linux's /proc")
def test_read_file_reads_past_a_size_that_is_wrong():
    # /proc files are regular files whose size reads as 0: the size is only a first guess.
    data = storage.read_file("/proc/self/status", max_bytes=1 << 20)
    assert os.stat("/proc/self/status").st_size == 0
    assert data.startswith(b"Name:") and data.endswith(b"\n")
    with pytest.raises(storage.FileTooLargeError, match="more than 8 bytes"):
        storage.read_file("/proc/self/status", max_bytes=8)


@pytest.mark.parametrize("base", ["/data/set", None])
def test_a_column_of_absolute_paths_resolves_as_each_path_does(base, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    plain = ["/abs/l.jpg", "/a/s.", "/a/t..jpg", "/v/~w.jpg", "/x\\y.jpg", "/~n.jpg"]
    assert storage.resolve_all(plain, base) == [storage.resolve(p, base) for p in plain]
    assert storage.resolve_all(plain, base) == plain
    # a path that resolve changes, or a column mixing absolute and relative paths
    for path in ["/a//b.jpg", "/a/./b.jpg", "/a/../b.jpg", "/a/.", "/a/", "/", "/a b.jpg",
                 "/b.jpg ", "/é.jpg", "a.jpg", "~/m.jpg", "file:///o.jpg", "gs://b/p.jpg", ""]:
        assert storage.resolve_all(["/abs/l.jpg", path], base) is None, path
        assert storage.resolve_all([path, "/abs/l.jpg"], base) is None, path
