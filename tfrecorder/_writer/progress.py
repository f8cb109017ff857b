"""Progress of a local run: rows done of total, rate and time left, as one live bar.

Shard writers, in this process or in DirectRunner worker processes, report how many
rows they have done to one small file per shard in a local folder; the submitting
process polls the folder and draws the bar. The bar shows on a terminal and in a
notebook only, so logs and CI output never fill with progress lines.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Callable

#: How often the bar is redrawn, and how often (in rows) a shard reports.
POLL_SECONDS = 0.25
REPORT_EVERY = 256


def wanted(requested: bool | None) -> bool:
    """``requested``, or when None: on if stderr is a terminal or this runs in a notebook."""
    if requested is not None:
        return bool(requested)
    if _in_notebook():
        return True
    return hasattr(sys.stderr, "isatty") and sys.stderr.isatty()


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    ip = shell.get_ipython() if shell is not None and hasattr(shell, "get_ipython") else None
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


def reporter(folder: str | None, name: str) -> Callable[[int], None] | None:
    """A callback writing a shard's rows-done count to ``folder/name``, or None."""
    if folder is None:
        return None
    path = os.path.join(folder, name)

    def report(done: int) -> None:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(str(done))
        os.replace(tmp, path)

    return report


def done_in(folder: str) -> int:
    total = 0
    for name in os.listdir(folder):
        if name.endswith(".tmp"):
            continue
        try:
            with open(os.path.join(folder, name)) as f:
                total += int(f.read() or 0)
        except (OSError, ValueError):
            pass
    return total


def _bar(total: int):
    if _in_notebook():
        try:
            import ipywidgets  # noqa: F401
            from tqdm.notebook import tqdm

            return tqdm(total=total, unit="rows", desc="tfrecorder")
        except ImportError:
            pass
    from tqdm import tqdm

    return tqdm(total=total, unit="rows", desc="tfrecorder", file=sys.stderr,
                dynamic_ncols=True, smoothing=0.1)


def watch(work: Callable[[], object], total: int, folder: str):
    """Calls ``work()`` in a thread, drawing the rows done under ``folder`` until it ends."""
    outcome: dict = {}

    def target():
        try:
            outcome["value"] = work()
        except BaseException as e:  # re-raised in the caller's thread
            outcome["error"] = e

    thread = threading.Thread(target=target, name="tfrecorder-run", daemon=True)
    bar = _bar(total)
    try:
        thread.start()
        while thread.is_alive():
            thread.join(POLL_SECONDS)
            bar.n = min(total, done_in(folder))
            bar.refresh()
        if "error" not in outcome:
            bar.n = total
            bar.refresh()
    finally:
        bar.close()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")
