"""A run's own folder in an output directory, and the ledger in it.

Every file a run will put into the directory is listed in its ledger
(``.tfrecorder-tmp/<run>/ledger.json``) before the first one is written, so a run that
dies leaves nothing that a later run cannot recognise as its own (``survey`` reads the
ledgers back). Its own module because the writer's workers, the publishing step and the
survey all name a run's folder, and it needs nothing of theirs.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Iterable

from tfrecorder import _storage as storage
from tfrecorder._folder import layout


LEDGER = layout.LEDGER


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


@dataclasses.dataclass(frozen=True)
class RunFolder:
    """One run in an output directory: its id, its own folder (shard tasks, shards being
    written, its ledger and errors file), where its shards are written, and what else
    its last step removes."""

    output_dir: str
    run_id: str
    # Shards are written into the run's folder and moved into place by the last step;
    # False: straight to their names (an object store with no previous output to keep).
    moved: bool = True
    cleanup: tuple[str, ...] = ()   # other folders removed once the directory is complete

    @property
    def folder(self) -> str:
        return storage.join(self.output_dir, layout.TMP_DIR, self.run_id)

    @property
    def shard_folder(self) -> str:
        """Where the shards are written."""
        return self.folder if self.moved else self.output_dir


def write_ledger(folder: str, names: Iterable[str]) -> None:
    """Creates the run's own folder (its owner's alone) and lists in it every file the
    run will put into the output folder, before the first one is written."""
    storage.makedirs(folder, private=True)
    storage.write_bytes(storage.join(folder, LEDGER),
                        json.dumps({"files": sorted(set(names))}).encode(), private=True)
