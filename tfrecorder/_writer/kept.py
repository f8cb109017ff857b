"""A shard an update keeps, as the data report sees it: its records' digests and hashes
from its rows file and live index, with no record or image read. A step of the writer
(the pipeline's and ``convert``'s), run beside the shards the update writes.
"""

from __future__ import annotations

from tfrecorder import _storage as storage
from tfrecorder._folder import index, rows
from tfrecorder._folder.manifest import ShardInfo


def kept_look(output_dir: str, split: str, number: int, shard: ShardInfo,
              label_names: tuple, near: bool, pending: str | None = None,
              entries: list | None = None, distance: int = 6):
    """What the data report needs of a shard an update keeps, from its rows file and
    its live index (no record or image is read): ``(ShardStats, [])`` with
    ``kept=True`` and a Looker holding each live record's digest and hash. ``number``
    places it before the update's own shards in its split (negative); ``pending``: the
    run's folder, which holds the live indexes the update has not published yet;
    ``entries``: its rows file's, where they were read already; ``distance``: the bits
    its hashes are compared within (``measures.MAX_DISTANCE`` by default)."""
    from tfrecorder._report.looker import Looker
    from tfrecorder._writer.shard import ShardStats

    if entries is None:
        entries = rows.read(storage.inside(output_dir, shard.rows), shard.num_examples)
    # The live records' bytes from the index; the whole file's where every one is live.
    live, full = index.live_entries(output_dir, shard, pending)
    ids = {name: i for i, name in enumerate(label_names)}
    look = Looker(near=near, distance=distance)
    stats = ShardStats(split, number, 0, shard.file, 0, 0, look=look, kept=True)
    # Counted in local dicts (Counter-like, one lookup each), then stored.
    label_counts, formats = {}, {}
    seen = look.seen
    source_bytes = 0
    input_rows = 0
    unmeasured = 0
    now = rows.renumbering(pending, shard.rows)  # this table's rows, where they moved
    for rank, position in enumerate(live):
        e = entries[position]
        row, uri, labels = rows.ref_fields(e, ids)
        if now is not None:
            row = now(position, row)
        input_rows += e.get("rows", 1)  # a multi-label or detection record holds several
        for i in labels:
            label_counts[i] = label_counts.get(i, 0) + 1
        if "sha256" not in e:
            continue
        sha = e["sha256"]
        source_bytes += e.get("size") or 0
        fmt = e.get("format")
        if fmt:
            formats[fmt] = formats.get(fmt, 0) + 1
        ref = (split, number, rank, row, uri, labels)
        # its size, and the image problems found when it was written
        look.add_size(ref, e["w"], e["h"], e.get("issues") or {})
        phash = e.get("phash") if near else None
        seen.append((sha, (int(phash, 16), rows.thumb(e)) if phash else None, ref))
        # "px": null was measured and did not decode; no "px", never measured
        px = e.get("px")
        if px:
            look.add_sums(rows.px_sums(px), True)
        elif "px" not in e:
            unmeasured += 1
    look.unmeasured = unmeasured
    stats.num_examples = len(live)
    stats.rows = input_rows
    stats.num_bytes = sum(full[p][1] for p in live) if full else shard.num_bytes
    stats.source_bytes = source_bytes
    stats.labels, stats.formats = label_counts, formats
    return stats, []
