"""The process's calls in flight: ``each`` runs a function over a list on one bounded
pool of threads that every caller in the process shares.

Its own module because the bound is the process's, not a call's: a pool per call would
multiply with its callers (a cache fetch that runs on the pool calls ``each`` for its
own ranges; several readers read at once), and each call would start threads of its
own. With one pool of ``ROUND_TRIPS - 1`` threads, plus the threads that call ``each``
(each works through its own list too), the calls in flight stay within the pool's
threads and its callers', however deep the calls nest.

A caller never waits for a slot on the pool: it takes items from its own list until
none is left, and waits only for the items a pool thread took and is running. So a call
made on a pool thread cannot wait for the threads that are all busy running its
callers, and a pool full of other work only slows a call to one thread, its own.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from typing import Any, Callable

#: Calls in flight at once where each is a round trip to an object store (``each``):
#: the pool's threads and the caller's own.
ROUND_TRIPS = 16

#: The process's pool, started by the first ``each`` that needs it; held under _LOCK.
_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_LOCK = threading.Lock()


def _forget_pool() -> None:
    # A forked child (a DataLoader's worker) has none of its parent's threads: a pool
    # inherited from it would queue work that no thread runs.
    global _POOL, _LOCK
    _POOL, _LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):  # no fork on Windows
    os.register_at_fork(after_in_child=_forget_pool)


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _POOL
    pool = _POOL
    if pool is None:
        with _LOCK:
            if _POOL is None:
                _POOL = concurrent.futures.ThreadPoolExecutor(
                    ROUND_TRIPS - 1, thread_name_prefix="tfrecorder-storage")
            pool = _POOL
    return pool


def submit_kept(pool: concurrent.futures.ThreadPoolExecutor, forget: Callable[[Any], None],
                fn: Callable, *args) -> concurrent.futures.Future:
    """``pool.submit(fn, *args)`` on a pool the process keeps and never shuts down
    (this module's, the writer's digest thread). At exit, concurrent.futures tells each
    thread a pool recorded to end, then Python joins every one. A submit can start a
    thread, and an interrupt (Ctrl-C's KeyboardInterrupt) that lands between its start
    and the pool's record of it leaves a thread no one tells: once idle it waits for work
    forever, and the exit waits with it. So a submit that fails shuts its pool down, which
    every thread of the pool sees once idle, and ``forget(pool)`` drops the pool: the
    process's next call starts another."""
    try:
        return pool.submit(fn, *args)
    except BaseException:
        pool.shutdown(wait=False)
        forget(pool)
        raise


def _forget(pool: concurrent.futures.ThreadPoolExecutor) -> None:
    global _POOL
    with _LOCK:
        if _POOL is pool:
            _POOL = None


def each(fn, items, at_once: bool) -> list:
    """``[fn(item) for item in items]``, in order; with ``at_once`` (each call a round
    trip to an object store, or a whole file read), up to ROUND_TRIPS calls in flight:
    this thread's and the shared pool's. The first error, in the order of ``items``, of
    the calls made is raised once every call started has ended; no call starts after
    one fails."""
    items = list(items)
    if not at_once or len(items) < 2:
        return [fn(item) for item in items]
    return _Call(fn, items).run()


class _Call:
    """One ``each`` at once: its items, taken one at a time by whichever thread is free
    (the caller or a pool thread), and their results."""

    def __init__(self, fn, items: list):
        self.fn, self.items = fn, items
        self.results: list = [None] * len(items)
        self.errors: dict[int, BaseException] = {}
        self.next = 0        # the first item no thread has taken
        self.running = 0     # items taken and not yet done
        self.done = threading.Condition()

    def run(self) -> list:
        helpers = min(len(self.items) - 1, ROUND_TRIPS - 1)
        try:
            pool = _pool()
            for _ in range(helpers):
                submit_kept(pool, _forget, self.work)
        except RuntimeError:  # the interpreter is shutting down, or an interrupted
            pass              # submit shut the pool down: this thread does it all
        self.work()
        with self.done:
            while self.running:
                self.done.wait()
        if self.errors:
            raise self.errors[min(self.errors)]
        return self.results

    def work(self) -> None:
        # A pool thread that starts after every item was taken returns at once.
        while True:
            with self.done:
                if self.next >= len(self.items) or self.errors:
                    return
                i = self.next
                self.next += 1
                self.running += 1
            try:
                self.results[i] = self.fn(self.items[i])
            except BaseException as e:  # noqa: BLE001 - raised in the caller's thread
                with self.done:
                    self.errors[i] = e
            finally:
                with self.done:
                    self.running -= 1
                    self.done.notify_all()
