"""The list of a folder's published versions, as a table (``tfrecorder.versions``).

One row per version: when and from what it was published, and per split what it added,
retired and kept (docs/versions.md). An update itself is ``updating``'s; the versions'
manifests are read by ``view`` and ``survey``.
"""

from __future__ import annotations

from typing import Any

from tfrecorder import _deprecation as deprecation
from tfrecorder._errors import IncompleteOutputError
from tfrecorder._folder import layout


@deprecation.renamed(output_dir="tfrecord_dir")
def versions(tfrecord_dir) -> "Any":
    """Every version published in ``tfrecord_dir``, oldest first, as a pandas DataFrame:
    ``version``, ``published`` (UTC), ``source``, ``mode``, then per split
    ``<split>_added``, ``<split>_retired``, ``<split>_kept`` and ``<split>_records``
    (live records of that version). A folder written before versions existed is
    listed as its one version."""
    from tfrecorder._folder import view

    return table(str(tfrecord_dir), view.open_version(str(tfrecord_dir)))


def table(output_dir: str, opened) -> "Any":
    """``versions``' table of the folder opened as ``opened`` (a ``view.Version``):
    the versions ``versions/`` lists, with ``opened``'s own manifest for its row (the
    one row of a folder written before versions existed)."""
    import pandas as pd

    from tfrecorder._folder import survey

    found = tuple(sorted({**dict(survey.read_versions(output_dir)),
                          opened.number: opened.manifest}.items()))
    problem = survey.unlike(output_dir, None, found)
    if problem:
        raise IncompleteOutputError(problem)
    rows_, splits = [], []
    for k, m in found:
        row = {"version": k, "published": pd.Timestamp(m.published) if m.published else pd.NaT,
               "source": m.source, "mode": m.made_by}
        changes = m.changes or {s: {"added": i.num_examples, "retired": 0, "kept": 0}
                                for s, i in m.splits.items()}
        for split in set(changes) | set(m.splits):
            if split not in splits:
                splits.append(split)
            c = changes.get(split, {})
            for what in ("added", "retired", "kept"):
                row[f"{split}_{what}"] = int(c.get(what, 0))
            info = m.splits.get(split)
            row[f"{split}_records"] = info.num_examples if info else 0
        rows_.append(row)
    columns = ["version", "published", "source", "mode"] + [
        f"{s}_{w}" for s in sorted(splits, key=layout.split_order)
        for w in ("added", "retired", "kept", "records")]
    frame = pd.DataFrame(rows_).reindex(columns=columns)
    for c in columns[4:]:
        frame[c] = frame[c].fillna(0).astype(int)
    return frame
