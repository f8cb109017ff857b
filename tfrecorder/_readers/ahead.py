"""Fetching shards into a reader's cache ahead of the reading: in the order a sampler
will read (``fetch_ahead``), and in file order after the furthest shard read
(``fetch_waiting``, the thread of ``access.Reader.read_ahead``). Apart from
``access`` because neither is the reading itself: both only warm the cache, and an
error they meet is the reader's to raise, with its context, when it reads that shard.
"""

from __future__ import annotations

import threading

import numpy as np

from tfrecorder import _storage as storage


def fetch_ahead(reader, positions, ahead: int):
    """``positions`` (record indices, in the order they will be read), yielded one by
    one while a background thread fetches their shards into ``reader``'s cache in
    that order: those reached, and up to ``ahead`` shards beyond, the latter only where
    they fit in the limit beside the shards being read. Without a cache, just
    ``positions``."""
    positions = [int(p) for p in positions]
    if reader.cache is None or not positions:
        yield from positions
        return
    shard_of = np.searchsorted(reader.view.starts, positions, side="right") - 1
    shards, first = np.unique(shard_of, return_index=True)
    by_first = np.argsort(first)
    shards, first = shards[by_first].tolist(), first[by_first].tolist()
    last = dict(zip(*np.unique(shard_of[::-1], return_index=True)))
    last = [len(positions) - 1 - int(last[s]) for s in shards]
    state = {"reached": 0, "at": 0, "done": False}
    changed = threading.Condition()

    def fetch():
        j = 0
        while j < len(shards):
            with changed:
                while not state["done"] and j >= state["reached"] + ahead:
                    changed.wait()
                if state["done"]:
                    return
                reached = state["reached"]
            # No shard whose last position is still to come (reached, or ahead and
            # left in the cache by an earlier epoch) is evicted for one fetched ahead.
            keep = [s for s, end in zip(shards, last) if end >= state["at"]]
            try:
                fetched = reader.prefetch(shards[j], room_only=j >= reached, keep=keep)
            except Exception:
                # Reading ahead only: the reader meets the same error, with its
                # context, when it reads that shard.
                return
            if fetched:
                j += 1
                continue
            with changed:  # no room yet: again once reading moved on
                while not state["done"] and state["reached"] == reached:
                    changed.wait()

    thread = threading.Thread(target=fetch, name="tfrecorder-fetch-ahead", daemon=True)
    thread.start()
    try:
        reached = 0
        for k, p in enumerate(positions):
            state["at"] = k
            if reached < len(first) and first[reached] <= k:
                while reached < len(first) and first[reached] <= k:
                    reached += 1
                with changed:
                    state["reached"] = reached
                    changed.notify_all()
            yield p
    finally:
        with changed:
            state["done"] = True
            changed.notify_all()


def fetch_waiting(ref) -> None:
    """A reader's read-ahead thread: its waiting shards fetched into the cache, several
    at a time, where they fit beside the shards being read; gone once none wait (or the
    reader is: the thread holds it only while it fetches)."""
    while True:
        reader = ref()
        if reader is None:
            return
        with reader._lock:
            shards, reader._waiting = reader._waiting, []
            if not shards:
                reader._fetcher = None
                return
        try:
            # A shard another worker is fetching is left to it: the next one is not.
            if len(shards) == 1:
                reader.prefetch(shards[0], room_only=True, wait=False)
            else:
                storage.each(lambda s: reader.prefetch(s, room_only=True, wait=False),
                             shards, at_once=True)
        except Exception:  # noqa: BLE001 - reading ahead only: the reader meets the same
            pass           # error, with its context, when it reads that shard
        del reader
