import os

import pytest

from tfrecorder import _storage as storage
from tfrecorder._storage import remote
from tests.conftest import exits_after_interrupt


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


@pytest.mark.slow
def test_threads_that_resolve_file_systems_at_once_from_a_fresh_process():
    # Reader threads (torch, grain) make a process's first gs:// reads at once, and the
    # first of them imports fsspec and gcsfs: every thread must get the one gs:// file
    # system of the process, of the class gcsfs exports (gcsfs falls back to another
    # class, silently, when its import of the first fails), never an ImportError from
    # a half-imported module or a file system (credentials, connection pool) of its own.
    import subprocess
    import sys

    code = """
import sys, threading
from tfrecorder._storage import remote
assert "fsspec" not in sys.modules and "gcsfs" not in sys.modules
n = 48
start, errors, seen = threading.Barrier(n), [], []
def first(i):
    start.wait()
    try:
        seen.append(remote._fs(f"gs://bucket{i % 3}/x"))
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=first, args=(i,)) for i in range(n)]
for t in threads:
    t.start()
for t in threads:
    t.join()
exported = sys.modules["gcsfs"].GCSFileSystem
print(len(errors), errors[:2], len({id(fs) for fs in seen}),
      all(type(fs) is exported for fs in seen))
"""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(storage.__file__))))
    # No credentials are looked up: gcsfs talks to an emulator's address (never reached).
    env = {**os.environ, "STORAGE_EMULATOR_HOST": "http://127.0.0.1:9"}
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             cwd=root, env=env, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "0 [] 1 True"


@pytest.mark.slow  # another Python process
def test_a_process_forked_while_a_thread_resolves_a_file_system_resolves_its_own():
    # A DataLoader's worker processes are forked while reader threads of the parent may
    # be making their first reads: the child must not inherit the resolution lock held
    # by a thread it does not have (it would wait for it forever).
    import subprocess
    import sys

    code = """
import os, signal, threading
import fsspec
from tfrecorder._storage import remote
held, done = threading.Event(), threading.Event()
def resolving():
    with remote._FS_LOCK:  # a thread in the middle of a first resolution
        held.set()
        done.wait()
threading.Thread(target=resolving, daemon=True).start()
held.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(10)  # a child that waits for the lock ends here instead
    remote._fs("memory://bucket/x")
    os._exit(0)
done.set()
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(storage.__file__))))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=root, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0"  # not -14: killed by its alarm, still waiting


def test_within_sees_a_relative_path_from_its_files_folder():
    assert storage.within("data", "img/a.jpg") == os.path.join("data", "img", "a.jpg")
    assert storage.within("", "a.jpg") == "a.jpg"
    assert storage.within("data/sub", "../a.jpg") == os.path.join("data", "a.jpg")
    assert storage.within("data", "/abs/a.jpg") == "/abs/a.jpg"
    assert storage.within("data", "gs://b/a.jpg") == "gs://b/a.jpg"
    assert storage.within("gs://b/export", "../img/a.jpg") == "gs://b/img/a.jpg"


def test_glob_lists_the_files_a_pattern_matches_sorted(tmp_path):
    for name in ("training-00001.jsonl", "training-00000.jsonl", "test-00000.jsonl"):
        (tmp_path / name).write_text("{}\n")
    (tmp_path / "training-dir").mkdir()
    assert storage.glob(str(tmp_path / "training-*")) == [
        str(tmp_path / "training-00000.jsonl"), str(tmp_path / "training-00001.jsonl")]
    assert storage.glob(str(tmp_path / "validation-*")) == []
    assert storage.is_pattern("gs://b/training-*") and not storage.is_pattern("a.jsonl")


# --- gs:// without credentials: one line, at once ---------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _without_credentials(tmp_path) -> dict:
    """A user's environment with no way to Google Cloud: an empty HOME, no key file, no
    emulator, and none of the test suite's google.auth settings."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"PATH": os.environ["PATH"], "HOME": str(home), "PYTHONPATH": ROOT,
            "TF_CPP_MIN_LOG_LEVEL": "3"}


def _cli(tmp_path, *args):
    import subprocess
    import sys
    import time

    began = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "tfrecorder", *args], cwd=tmp_path,
                       env=_without_credentials(tmp_path), capture_output=True, text=True,
                       timeout=300)
    return p, time.monotonic() - began


@pytest.fixture
def off_google_cloud(monkeypatch):
    monkeypatch.delenv("NO_GCE_CHECK", raising=False)
    for name in remote._SERVERLESS:
        monkeypatch.delenv(name, raising=False)
    if storage.on_google_cloud():  # there, the metadata server has credentials
        pytest.skip("this machine is Google's: its metadata server gives credentials")


def _says_how_to_give_credentials(p, target):
    assert p.returncode == 2, (p.returncode, p.stderr[-3000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr[-3000:]  # no traceback, no retry warnings
    (line,) = lines
    assert line.startswith(f"Error: {target}: no Google Cloud credentials found"), line
    assert "GOOGLE_APPLICATION_CREDENTIALS" in line
    assert "`gcloud auth application-default login`" in line
    assert "application_default_credentials.json does not exist" in line


@pytest.mark.slow
def test_a_gs_output_without_credentials_is_one_line_before_anything_runs(tmp_path,
                                                                           off_google_cloud):
    import shutil

    shutil.copytree(os.path.join(ROOT, "samples"), tmp_path / "samples",
                    ignore=shutil.ignore_patterns("*.ipynb", "out"))
    p, seconds = _cli(tmp_path, "convert", "samples/data.csv", "gs://tfr-nowhere/out")
    _says_how_to_give_credentials(p, "gs://tfr-nowhere/out")
    # It was 30 s and more of retries (gcsfs going on anonymously), then 108 lines.
    assert seconds < 20, seconds
    assert p.stdout == ""
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_gs_inputs_without_credentials_are_one_line_too(tmp_path, off_google_cloud):
    p, seconds = _cli(tmp_path, "convert", "gs://tfr-nowhere/data.csv", "out")
    _says_how_to_give_credentials(p, "gs://tfr-nowhere/data.csv")
    assert seconds < 20, seconds
    # A local table of gs:// images: refused when the first image is looked at.
    (tmp_path / "t.csv").write_text("split,image_uri,label\nTRAIN,gs://tfr-nowhere/a.jpg,cat\n"
                                    "TEST,gs://tfr-nowhere/b.jpg,dog\n")
    p, seconds = _cli(tmp_path, "convert", "t.csv", "out")
    _says_how_to_give_credentials(p, "gs://tfr-nowhere/a.jpg")
    assert seconds < 20, seconds
    assert not (tmp_path / "out").exists()  # refused before the output folder was made
    p, _ = _cli(tmp_path, "inspect", "gs://tfr-nowhere/out")
    _says_how_to_give_credentials(p, "gs://tfr-nowhere/out/tfrecorder.json")


def test_credentials_are_found_where_google_auth_looks(tmp_path, monkeypatch, off_google_cloud):
    import fsspec.config

    for name in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG",
                 "GCE_METADATA_HOST", "GCE_METADATA_ROOT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    missing = storage.credentials_problem("gs://b/x")
    adc = tmp_path / ".config" / "gcloud" / storage.ADC_FILE
    assert missing is not None and f"{adc} does not exist" in missing

    # gcloud's application-default file, in its usual folder or in CLOUDSDK_CONFIG's
    adc.parent.mkdir(parents=True)
    adc.write_text("{}")
    assert storage.credentials_problem("gs://b/x") is None
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "elsewhere"))
    assert storage.credentials_problem("gs://b/x") is not None
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / storage.ADC_FILE).write_text("{}")
    assert storage.credentials_problem("gs://b/x") is None
    monkeypatch.delenv("CLOUDSDK_CONFIG")
    adc.unlink()

    # a key file named by GOOGLE_APPLICATION_CREDENTIALS, which must exist
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "key.json"))
    problem = storage.credentials_problem("gs://b/x")
    assert problem == (f"gs://b/x: GOOGLE_APPLICATION_CREDENTIALS={tmp_path / 'key.json'} is "
                       f"not a file; set it to a service account key file (JSON), or unset it "
                       f"and run `gcloud auth application-default login`")
    (tmp_path / "key.json").write_text("{}")
    assert storage.credentials_problem("gs://b/x") is None
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")

    # no credentials needed: an emulator, or fsspec told to go anonymously
    assert storage.credentials_problem("gs://b/x") is not None
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    assert storage.credentials_problem("gs://b/x") is None
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    monkeypatch.setitem(fsspec.config.conf, "gs", {"token": "anon"})  # FSSPEC_GS_TOKEN=anon
    assert storage.credentials_problem("gs://b/x") is None
    monkeypatch.delitem(fsspec.config.conf, "gs")

    # a Google Cloud runtime, where the metadata server has them
    monkeypatch.setenv("K_SERVICE", "my-service")
    assert storage.credentials_problem("gs://b/x") is None
    monkeypatch.setenv("NO_GCE_CHECK", "true")  # google.auth then ignores the metadata server
    assert storage.credentials_problem("gs://b/x") is not None


def _crowd_counter(bound: int):
    """A function for ``each`` that counts the calls in flight at once and holds each
    call until more than ``bound`` are (or briefly, so that calls overlap)."""
    import threading

    state = {"now": 0, "most": 0}
    lock, crowded = threading.Lock(), threading.Event()

    def call(item):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
            if state["now"] > bound:
                crowded.set()
        crowded.wait(0.01)
        with lock:
            state["now"] -= 1
        return item * 2

    return call, state


def test_calls_that_nest_share_one_bounded_pool():
    # A cache fetch that runs on the pool calls each for its ranges: 16 fetches of 16
    # ranges each once made 16 x 16 requests in flight.
    inner, state = _crowd_counter(storage.ROUND_TRIPS)

    def outer(k):
        return storage.each(inner, list(range(k, k + 16)), at_once=True)

    got = storage.each(outer, list(range(16)), at_once=True)
    assert got == [[2 * i for i in range(k, k + 16)] for k in range(16)]
    assert 1 < state["most"] <= storage.ROUND_TRIPS


def test_calls_from_many_threads_share_the_pool_and_an_error_reaches_its_caller():
    import concurrent.futures

    counted, state = _crowd_counter(storage.ROUND_TRIPS + 4)

    def failing(item):
        if item == 3:
            raise KeyError(item)
        return counted(item)

    callers = 4  # each caller's own thread works through its list too
    with concurrent.futures.ThreadPoolExecutor(callers) as threads:
        runs = [threads.submit(storage.each, counted, list(range(40)), True)
                for _ in range(callers - 1)]
        with pytest.raises(KeyError):
            storage.each(failing, list(range(40)), at_once=True)
        assert [r.result() for r in runs] == [[2 * i for i in range(40)]] * (callers - 1)
    assert state["most"] <= storage.ROUND_TRIPS - 1 + callers


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_a_pool_of_its_own():
    # A DataLoader's worker is forked from a process whose pool threads it does not have.
    assert storage.each(abs, [-1, -2, -3], at_once=True) == [1, 2, 3]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its calls must run, not queue on the parent's threads
        try:
            ok = storage.each(abs, list(range(-40, 0)), at_once=True) == list(range(40, 0, -1))
            os.write(write, b"ok" if ok else b"wrong")
        finally:
            os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 16) == b"ok"
    finally:
        os.close(read)
        os.waitpid(pid, 0)


def _latency_proxy():
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "bench", "latency_proxy.py")
    spec = importlib.util.spec_from_file_location("latency_proxy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_folders_of_missing_files_on_a_bucket_are_listed_at_once(gcs):
    # A table with an image per folder: one listing per folder, several in flight (one
    # at a time, 200 rows behind 30 ms were 16 s of waiting before a run started).
    import gcsfs
    from tests.conftest import BUCKET, _free_port

    root = f"{BUCKET}/missing-at-once"
    paths = []
    for k in range(24):
        gcs.pipe(f"{root}/f{k}/a.jpg", b"x")
        paths.append(f"gs://{root}/f{k}/a.jpg")
    paths += [f"gs://{root}/f5/gone.jpg", None, f"gs://{root}/none/a.jpg",
              f"gs://{root}/f7/a.jpg"]
    log: list = []
    in_flight: dict = {}
    upstream = os.environ["STORAGE_EMULATOR_HOST"]
    proxy = _latency_proxy().serve(upstream.split("//", 1)[1], port := _free_port(), 20,
                                   log, in_flight)
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
    gcsfs.GCSFileSystem.clear_instance_cache()  # a new one, through the proxy
    try:
        listed: dict = {}
        assert storage.missing(paths, listed) == [24, 26]
        assert storage.missing(paths[:3], listed) == []  # listed already: no request
    finally:
        proxy.shutdown()
        os.environ["STORAGE_EMULATOR_HOST"] = upstream
        gcsfs.GCSFileSystem.clear_instance_cache()
    listings = [path for _, path, _ in log if "prefix=" in path]
    assert len(listings) == 25  # one per folder; gcsfs also looks for an object "none"
    assert all("none" in path for _, path, _ in log if "prefix=" not in path), log
    assert in_flight["most"] > 1


def test_a_move_to_a_name_another_client_takes_meanwhile_on_gs_replaces_nothing(
        gcs, fenced_gcs):
    # The worst point: the destination is looked for and is absent, then another client
    # creates it before the copy lands. The copy is conditional on no object being there.
    from tests.conftest import BUCKET

    src, dst = f"gs://{BUCKET}/moving/mine", f"gs://{BUCKET}/moving/theirs"
    gcs.pipe(src[5:], b"mine")

    def theirs_first(method, path):
        if method == "POST" and "/rewriteTo/" in path:
            fenced_gcs.before = None
            gcs.pipe(dst[5:], b"theirs")

    fenced_gcs.before = theirs_first
    with pytest.raises(FileExistsError):
        storage.move_new(src, dst)
    gcs.invalidate_cache()
    assert gcs.cat(dst[5:]) == b"theirs" and gcs.cat(src[5:]) == b"mine"


@pytest.mark.slow  # another Python process
def test_a_call_interrupted_as_the_pool_starts_a_thread_lets_python_exit():
    rc, out, err = exits_after_interrupt("tfrecorder-storage", """
from tfrecorder import _storage as storage
storage.each(abs, [-1, -2], at_once=True)
""", """
print(storage.each(abs, [-3, -4], at_once=True))  # one helper: a pool's first thread
""")
    assert (rc, out.split()) == (0, ["interrupted", "[3,", "4]"]), err
