"""The folder's lock on an object store: every write or removal of it after its creation
is fenced by the generation read, so two runs never both hold it."""

import json
import os
import time

import pytest

import tfrecorder
from tfrecorder._folder import layout, lock as _lock
from tests.conftest import BUCKET


def _stale_lock(gcs, folder: str) -> str:
    """A lock of a run that stopped renewing it ten minutes ago."""
    path = f"{BUCKET}/{folder}/{layout.LOCK}"
    gone = time.time() - 600
    gcs.pipe(path, json.dumps({"run_id": "dead", "runner": "DirectRunner", "host": "x",
                               "pid": 1, "started": gone, "expires": gone}).encode())
    return path


def _holder(gcs, path: str) -> str:
    gcs.invalidate_cache(path)
    return json.loads(gcs.cat(path))["run_id"]


def _meanwhile(monkeypatch, step):
    """Runs ``step`` once, just before the first fenced write of the lock: the worst
    point for the run that makes it (it has read the lock, and judged it)."""
    put = _lock._put
    pending = [step]

    def put_later(*args):
        if pending:
            pending.pop()()
        return put(*args)

    monkeypatch.setattr(_lock, "_put", put_later)


def test_of_two_runs_that_take_over_one_stale_lock_exactly_one_holds_it(
        gcs, fenced_gcs, monkeypatch):
    out = f"gs://{BUCKET}/two-takers"
    path = _stale_lock(gcs, "two-takers")
    won = []
    # Run "b" reads the stale lock and takes it over while run "a", which read it too,
    # is about to replace it.
    _meanwhile(monkeypatch, lambda: won.append(_lock.acquire(out, "b", "DirectRunner")))
    with pytest.raises(tfrecorder.OutputBusyError, match=r"run b \(DirectRunner"):
        _lock.acquire(out, "a", "DirectRunner")
    assert [w.holder["run_id"] for w in won] == ["b"] and _holder(gcs, path) == "b"
    assert any(method == "POST" for method, _, _ in fenced_gcs.refused)  # a's write refused
    won[0].release()
    assert not gcs.exists(path)


def test_a_renewal_after_a_take_over_fails_and_the_run_stops_renewing(
        gcs, fenced_gcs, monkeypatch):
    out = f"gs://{BUCKET}/renewal"
    path = f"{BUCKET}/renewal/{layout.LOCK}"
    a = _lock.acquire(out, "a", "DirectRunner", ttl=-1)  # expired at once: a stalled run
    # Run "b" takes the expired lock over just before run "a" renews it.
    taken = []
    _meanwhile(monkeypatch, lambda: taken.append(_lock.acquire(out, "b", "DirectRunner")))
    with pytest.raises(tfrecorder.OutputBusyError, match="another run took it over"):
        a.renew()
    assert _holder(gcs, path) == "b"
    with pytest.raises(tfrecorder.OutputBusyError):
        a.check()
    a.release()  # a lost lock is not a's to remove
    assert _holder(gcs, path) == "b"
    taken[0].release()
    assert not gcs.exists(path)


def test_a_release_leaves_a_lock_another_run_took_meanwhile(gcs, fenced_gcs, monkeypatch):
    out = f"gs://{BUCKET}/release"
    path = f"{BUCKET}/release/{layout.LOCK}"
    a = _lock.acquire(out, "a", "DirectRunner", ttl=-1)
    read = _lock._read_lock
    taken = []

    def read_then_lose(p):  # a reads its own lock; b takes it over before a removes it
        seen = read(p)
        if not taken:
            taken.append(None)
            taken[0] = _lock.acquire(out, "b", "DirectRunner")
        return seen

    monkeypatch.setattr(_lock, "_read_lock", read_then_lose)
    _lock.release(a.path, "a")
    assert _holder(gcs, path) == "b"
    monkeypatch.undo()
    taken[0].release()
    assert not gcs.exists(path)
