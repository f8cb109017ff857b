"""``tfrecorder.report(out)``: the data report of a conversion (``quality.json``) as
pandas DataFrames, as text for a terminal, and as HTML with thumbnails in a notebook."""

from __future__ import annotations

import base64
import html
import io
import json
from typing import Any

from tfrecorder import _deprecation as deprecation
from tfrecorder import _storage as storage
from tfrecorder._folder import layout, records, stored_keys, view
from tfrecorder._report import boxes, measures, quality
from tfrecorder._errors import ConfigError, IncompleteOutputError

#: What ``--fail-on`` (``Report.found``) can name: the findings, every image problem
#: together (``issues``), or each by its name; a detection record's box problems
#: (``boxes``) together (``boxes``) or each by its name.
KINDS = ("leaks", "duplicates", "conflicts", "warnings", "issues", *measures.ISSUES,
         "boxes", *boxes.ISSUES)
#: Pairs and conflicts shown with thumbnails in a notebook; the rest are counted.
HTML_ROWS = 12
#: Records of one group shown, as a strip of thumbnails or on one line of text.
GROUP_STRIP = 8
_THUMB = 96

_SIDE = ("split", "row", "image_uri", "label", "position")
PAIR_COLUMNS = ["kind", "distance", *(f"{c}_a" for c in _SIDE), *(f"{c}_b" for c in _SIDE)]


def _pairs_frame(pairs: list[dict]):
    import pandas as pd

    rows = [[p["kind"], p["distance"], *(p["a"].get(c) for c in _SIDE),
             *(p["b"].get(c) for c in _SIDE)] for p in pairs]
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


class Report:
    """The data report of the conversion in ``output_dir``: what ``quality.json`` holds.

    - ``leaks``: pairs of records in different splits whose images are the same bytes
      (``kind="exact"``) or near duplicates (``"near"``, ``distance`` in bits);
    - ``duplicates``: such pairs within one split;
    - ``groups``: the records that are copies of one image (the same bytes, or near
      duplicates), together: one row per record, ``group`` numbering the groups,
      ``kind`` ``"exact"`` (every member the same bytes) or ``"near"``,
      ``same_bytes`` numbering within a group each set of members that are the same
      file (empty for a member whose bytes no other record has); how a user acts on
      them (keep one, move the rest);
    - ``conflicts``: records whose images are the same bytes under different labels,
      one row per record, ``group`` numbering each set of records with the same bytes,
      ``labels`` each record's whole set of labels;
    - ``stats``: rows per split and label; ``splits``: per split its rows, records,
      formats, image sizes, bytes and, where the images were decoded, channel mean/std;
    - ``issues``: image problems, CleanVision's (``dark``, ``light``, ``blurry``,
      ``low_information``, ``grayscale``, ``odd_aspect_ratio``, ``odd_size``) and
      ``low_detail`` (too plain to match as a near duplicate), one row per record and
      problem with its ``score`` (0..1, lower is worse); those that need pixels only
      where the conversion decoded its images;
      and for detection records their box problems (``boxes.ISSUES``: ``no_boxes``,
      ``degenerate_box``, ``tiny_box``, ``box_outside``, ``duplicate_box``,
      ``mask_box_mismatch``), one row per record and problem;
    - ``warnings``: Vertex AI's dataset warnings (few images for a label, imbalance);
    - ``counts``: every finding counted, also beyond what the file lists (``truncated``).

    Rows are the table's own: CSV line numbers or DataFrame index labels, as in
    ``SchemaError`` and ``errors.jsonl``; ``position`` is the record's place in its
    split (``access.Reader(out, split)[position]``).
    """

    def __init__(self, output_dir: str, data: dict[str, Any], opened=None, reader=None):
        self.output_dir = str(output_dir)
        self.data = data
        #: The version whose records the thumbnails show (a ``view.Version``); None:
        #: the folder's latest when they are drawn.
        self._opened = opened
        #: What reads a split's records for them: a function of a ``view.View`` that
        #: returns an object with ``features(position)`` (a Folder's ``access.Reader``,
        #: through its shard cache); None: ``_RecordImages``, the format's own codecs.
        self._reader = reader
        pairs = data.get("pairs", [])
        frame = _pairs_frame(pairs)
        across = frame["split_a"] != frame["split_b"]
        self.leaks = frame[across].reset_index(drop=True)
        self.duplicates = frame[~across].reset_index(drop=True)
        self.conflicts = self._conflicts_frame(data.get("conflicts", []))
        self.groups = self._groups_frame(data.get("groups", []))
        self.issues = self._issues_frame(data.get("issues", []))
        self.counts: dict = data.get("counts", {})
        self.truncated: dict = data.get("truncated", {})
        self.warnings: list[dict] = list(data.get("warnings", []))
        self.near_duplicates: dict | None = data.get("near_duplicates")

    def _split_stats(self) -> list:
        """``(split, its statistics)`` in split order (train, validation, test, then
        any other by name), as the pairs are."""
        return sorted(self.data.get("stats", {}).items(),
                      key=lambda kv: layout.split_order(kv[0]))

    @staticmethod
    def _conflicts_frame(conflicts: list[dict]):
        import pandas as pd

        rows = [[g, c["sha256"], *(r.get(k) for k in ("split", "row", "image_uri", "label",
                                                       "position")), _labels(r)]
                for g, c in enumerate(conflicts) for r in c["rows"]]
        return pd.DataFrame(rows, columns=["group", "sha256", "split", "row", "image_uri",
                                           "label", "position", "labels"])

    @staticmethod
    def _issues_frame(issues: list[dict]):
        import pandas as pd

        rows = [[i["issue"], *(i.get(k) for k in ("split", "row", "image_uri", "label")),
                 i["score"], i.get("position")] for i in issues]
        return pd.DataFrame(rows, columns=["issue", "split", "row", "image_uri", "label",
                                           "score", "position"])

    @staticmethod
    def _groups_frame(groups: list[dict]):
        import pandas as pd

        rows = [[n, g["kind"], *(r.get(k) for k in _SIDE), r.get("same_bytes")]
                for n, g in enumerate(groups) for r in g["rows"]]
        frame = pd.DataFrame(rows, columns=["group", "kind", *_SIDE, "same_bytes"])
        # whole numbers or missing (older reports have none): not floats with NaN
        frame["same_bytes"] = frame["same_bytes"].astype("Int64")
        return frame

    @property
    def stats(self):
        """Rows per split and label: columns ``split``, ``label``, ``rows``, ``share``
        (of the split's rows)."""
        import pandas as pd

        rows = []
        for split, s in self._split_stats():
            total = sum(s.get("labels", {}).values()) or 1
            for label, n in s.get("labels", {}).items():
                rows.append([split, label, n, round(n / total, 4)])
        return pd.DataFrame(rows, columns=["split", "label", "rows", "share"])

    @property
    def splits(self):
        """One row per split: rows, records, formats, width and height (min, median,
        max), stored and source bytes, and ``mean``/``std`` per channel where known."""
        import pandas as pd

        rows = {}
        for split, s in self._split_stats():
            w, h = s.get("width") or [None] * 3, s.get("height") or [None] * 3
            rows[split] = {
                "rows": s.get("rows"), "records": s.get("records"),
                "formats": s.get("formats"),
                "width_min": w[0], "width_median": w[1], "width_max": w[2],
                "height_min": h[0], "height_median": h[1], "height_max": h[2],
                "stored_bytes": s.get("stored_bytes"), "source_bytes": s.get("source_bytes"),
                "mean": s.get("mean"), "std": s.get("std")}
        return pd.DataFrame.from_dict(rows, orient="index")

    def mean_std(self, split: str = "train") -> tuple[list[float], list[float]] | None:
        """Per-channel (R, G, B) mean and std, 0..1, of ``split``'s images, for
        normalising: ``(mean, std)``, or None where the conversion did not decode its
        images (neither ``shorter_side`` nor ``near_duplicates``)."""
        s = self.data.get("stats", {}).get(split, {})
        if "mean" not in s or "std" not in s:
            return None
        return list(s["mean"]), list(s["std"])

    def found(self, kinds=KINDS) -> dict[str, int]:
        """How many of each of ``kinds`` (``KINDS``) the report holds, those above 0."""
        c = self.counts
        n = {"leaks": sum(c.get("leaks", {}).values()),
             "duplicates": sum(c.get("duplicates", {}).values()),
             "conflicts": c.get("conflicts", 0), "warnings": len(self.warnings),
             "issues": sum(c.get("issues", {}).get(k, 0) for k in measures.ISSUES),
             "boxes": sum(c.get("issues", {}).get(k, 0) for k in boxes.ISSUES),
             **{k: c.get("issues", {}).get(k, 0) for k in measures.ISSUES + boxes.ISSUES}}
        unknown = [k for k in kinds if k not in n]
        if unknown:
            raise ConfigError(f"{', '.join(map(repr, unknown))}: not a finding of the data "
                              f"report; name any of {', '.join(KINDS)}")
        return {k: n[k] for k in kinds if n[k]}

    def summary(self) -> str:
        """One line of counts: ``leaks: 8 exact, 29 near; conflicts: 4``."""
        c = self.counts

        def pair(name):
            d = c.get(name, {})
            pieces = [f"{d[k]} {k}" for k in ("exact", "near") if d.get(k)]
            return f"{name}: {', '.join(pieces) if pieces else 0}"

        near = "" if self.near_duplicates else " (near duplicates not searched)"
        # a group counts records: rows, where each record is one row of the table
        whole = all(s.get("records") in (None, s.get("rows"))
                    for s in self.data.get("stats", {}).values())
        copies = _copies_text(self.data.get("groups", []), "rows" if whole else "records")
        problems = ", ".join(f"{n} {k}" for k, n in c.get("issues", {}).items())
        return (f"{pair('leaks')}; {pair('duplicates')}; "
                f"{'copies: ' + copies + '; ' if copies else ''}"
                f"conflicts: {c.get('conflicts', 0)}; "
                f"{'issues: ' + problems + '; ' if problems else ''}"
                f"warnings: {len(self.warnings)}{near}")

    # --- text -------------------------------------------------------------------------

    def __str__(self) -> str:
        lines = [f"data report of {self.output_dir}", f"  {self.summary()}"]
        for split, s in self._split_stats():
            size = ""
            if s.get("width"):
                size = (f", {s['width'][1]}x{s['height'][1]} px median "
                        f"({s['width'][0]}x{s['height'][0]} to {s['width'][2]}x{s['height'][2]})")
            # a record holds several rows in a multi-label or detection table: both named
            held = (f"{s.get('records')} records ({s.get('rows')} rows)"
                    if s.get("records") not in (None, s.get("rows")) else f"{s.get('rows')} rows")
            lines.append(f"  {split}: {held}{size}")
            labels = s.get("labels", {})
            for label, n in sorted(labels.items(), key=lambda kv: (-kv[1], kv[0])):
                lines.append(f"    {label:<20} {n:>8}")
            if "mean" in s:
                lines.append(f"    mean {s['mean']}  std {s.get('std')}")
        groups = self.data.get("groups")
        if groups is None:  # a report written before groups: its pairs
            for title, frame in (("leaks", self.leaks), ("duplicates", self.duplicates)):
                counted = sum(self.counts.get(title, {}).values())
                if len(frame) or counted:
                    lines.append(f"  {title}:")
                    lines += [f"    {_pair_text(r)}" for r in frame.head(20).itertuples()]
                    lines += _more(len(frame), 20, counted)
        elif groups:
            lines.append("  copies (each line one image; report.leaks and report.duplicates "
                         "pair them):")
            for g in groups[:20]:
                lines.append(f"    {_group_text(g)}")
            lines += _more(len(groups), 20, sum(self.counts.get("groups", {}).values()))
        if len(self.conflicts):
            lines.append("  conflicts (the same bytes under different labels):")
            groups = self.data.get("conflicts", [])
            for g in groups[:20]:
                lines.append("    " + "; ".join(
                    f"{r['split']} row {r['row']} {_labels_text(r)} {r['image_uri']}"
                    for r in g["rows"]))
            lines += _more(len(groups), 20, self.counts.get("conflicts", 0))
        if len(self.issues):
            lines.append("  image problems (score 0..1, lower is worse):")
            for issue, frame in self.issues.groupby("issue", sort=False):
                lines.append(f"    {issue} ({self.counts.get('issues', {}).get(issue, 0)}): "
                             + "; ".join(f"{r.split} row {r.row} {r.image_uri} {r.score}"
                                         for r in frame.head(5).itertuples())
                             + (" ..." if len(frame) > 5 else ""))
        for w in self.warnings:
            lines.append(f"  warning: {_warning_text(w)}")
        if self.truncated.get("members"):
            lines.append(f"  note: {self.truncated['members']} records of very large groups "
                         f"of matching images were not compared (docs/quality.md)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Report {self.output_dir}: {self.summary()}>"

    # --- HTML -------------------------------------------------------------------------

    def _repr_html_(self) -> str:
        esc = html.escape
        pieces = [f"<div><b>data report</b> of <code>{esc(self.output_dir)}</code>: "
                 f"{esc(self.summary())}</div>", self._bars_svg()]
        thumbs = _Thumbnails(self.output_dir, self._opened, self._reader)
        groups = self.data.get("groups")
        if groups:
            # a group is one strip of thumbnails: the image and where each copy is
            pieces.append("<h4>copies</h4><table>")
            for g in groups[:HTML_ROWS]:
                cells = "".join(thumbs.cell(r["split"], r.get("position"), r["row"],
                                            f"{r['label']}{_same_text(g, r)}")
                                for r in g["rows"][:GROUP_STRIP])
                more = g["size"] - min(len(g["rows"]), GROUP_STRIP)
                pieces.append(f"<tr><td>{esc(g['kind'])}, {esc(str(g['size']))} records"
                             f"{', ' + esc(' and '.join(_splits(g))) if len(_splits(g)) > 1 else ''}"
                             f"</td>{cells}"
                             f"{f'<td>... and {more} more</td>' if more > 0 else ''}</tr>")
            pieces.append("</table>")
            if len(groups) > HTML_ROWS:
                more = sum(self.counts.get("groups", {}).values()) - HTML_ROWS
                pieces.append(f"<div>... and {esc(str(more))} more</div>")
        for title, frame in (("leaks", self.leaks), ("duplicates", self.duplicates)):
            if groups is not None or (
                    not len(frame) and not sum(self.counts.get(title, {}).values())):
                continue
            pieces.append(f"<h4>{title}</h4><table>")
            for r in frame.head(HTML_ROWS).itertuples():
                pieces.append(
                    "<tr>" + thumbs.cell(r.split_a, r.position_a, r.row_a, r.label_a)
                    + thumbs.cell(r.split_b, r.position_b, r.row_b, r.label_b)
                    + f"<td>{esc(r.kind)}"
                    + (f", {esc(str(r.distance))} bits" if r.kind == "near" else "")
                    + "</td></tr>")
            pieces.append("</table>")
            more = sum(self.counts.get(title, {}).values()) - min(len(frame), HTML_ROWS)
            if more > 0:
                pieces.append(f"<div>... and {esc(str(more))} more</div>")
        groups = self.data.get("conflicts", [])
        if groups:
            pieces.append("<h4>conflicts</h4><table>")
            for g in groups[:HTML_ROWS]:
                pieces.append("<tr>" + "".join(
                    thumbs.cell(r["split"], r.get("position"), r["row"], _labels_text(r))
                    for r in g["rows"][:6]) + "</tr>")
            pieces.append("</table>")
            if len(groups) > HTML_ROWS:
                more = self.counts.get("conflicts", 0) - HTML_ROWS
                pieces.append(f"<div>... and {esc(str(more))} more</div>")
        if len(self.issues):
            pieces.append("<h4>image problems</h4><table>")
            for issue, frame in self.issues.groupby("issue", sort=False):
                n = self.counts.get("issues", {}).get(issue, 0)
                cells = "".join(thumbs.cell(r.split, r.position, r.row, r.label)
                                for r in frame.head(GROUP_STRIP).itertuples())
                pieces.append(f"<tr><td>{esc(str(issue))}: {esc(str(n))}</td>{cells}</tr>")
            pieces.append("</table>")
        for w in self.warnings:
            pieces.append(f"<div><i>warning</i>: {esc(_warning_text(w))}</div>")
        return "\n".join(pieces)

    def _bars_svg(self) -> str:
        """Rows per label per split as horizontal bars, one group per label."""
        stats = dict(self._split_stats())
        labels = sorted({k for s in stats.values() for k in s.get("labels", {})})
        if not labels:
            return ""
        splits = list(stats)
        colours = ["#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2"]
        top = max((n for s in stats.values() for n in s.get("labels", {}).values()), default=1)
        bar, gap, left, width = 10, 6, 140, 260
        rows = []
        y = 0
        for label in labels:
            rows.append(f"<text x='{left - 6}' y='{y + bar * len(splits) / 2 + 4:.0f}' "
                        f"text-anchor='end' font-size='11'>{html.escape(str(label))}</text>")
            for i, split in enumerate(splits):
                n = stats[split].get("labels", {}).get(label, 0)
                w = width * n / top if top else 0
                rows.append(f"<rect x='{left}' y='{y}' width='{w:.1f}' height='{bar - 1}' "
                            f"fill='{colours[i % len(colours)]}'><title>"
                            f"{html.escape(split)} {html.escape(str(label))}: "
                            f"{html.escape(str(n))}</title></rect>"
                            f"<text x='{left + w + 4:.1f}' y='{y + bar - 2}' font-size='9'>"
                            f"{html.escape(str(n))}</text>")
                y += bar
            y += gap
        legend = "".join(
            f"<tspan fill='{colours[i % len(colours)]}'>&#9632; {html.escape(s)}</tspan> "
            for i, s in enumerate(splits))
        rows.append(f"<text x='{left}' y='{y + 10}' font-size='11'>{legend}</text>")
        return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{left + width + 60}' "
                f"height='{y + 16}'>{''.join(rows)}</svg>")


def _pair_text(r) -> str:
    how = "same bytes" if r.kind == "exact" else f"near, {r.distance} bits"
    return (f"{r.split_a} row {r.row_a} ({r.label_a!r}) {r.image_uri_a}  ~  "
            f"{r.split_b} row {r.row_b} ({r.label_b!r}) {r.image_uri_b}  [{how}]")


def _labels(side: dict) -> list:
    """A record's whole set of labels: ``labels`` where the report keeps it (conflicts),
    else its ``label``."""
    if "labels" in side:
        return list(side["labels"])
    label = side.get("label")
    return list(label) if isinstance(label, list) else [] if label is None else [label]


def _labels_text(side: dict) -> str:
    labels = _labels(side)
    return "[" + ", ".join(labels) + "]" if "labels" in side else repr(side.get("label"))


def _splits(group: dict) -> list[str]:
    return sorted({r["split"] for r in group["rows"]}, key=layout.split_order)


def _same_text(g: dict, r: dict) -> str:
    """`` [same bytes 1]`` after a member of a near group that is the same file as
    another member; nothing in an exact group, whose kind says it of all."""
    n = r.get("same_bytes")
    return f" [same bytes {n}]" if n is not None and g["kind"] == "near" else ""


def _group_text(g: dict) -> str:
    where = "; ".join(f"{r['split']} row {r['row']} ({r['label']!r}) {r['image_uri']}"
                      f"{_same_text(g, r)}" for r in g["rows"][:GROUP_STRIP])
    more = g["size"] - min(len(g["rows"]), GROUP_STRIP)
    return (f"{g['kind']}, {g['size']} records in {' and '.join(_splits(g))}: {where}"
            f"{f'; ... and {more} more' if more > 0 else ''}")


def _copies_text(groups: list[dict], unit: str = "rows") -> str:
    """The groups counted as a user reads them: ``13 images appear 12 times each: 156
    rows; 1 group spans train and test``."""
    if not groups:
        return ""
    sizes: dict[int, int] = {}
    for g in groups:
        sizes[g["size"]] = sizes.get(g["size"], 0) + 1
    pieces = []
    for size, n in sorted(sizes.items(), key=lambda kv: -kv[0]):
        times = "twice" if size == 2 else f"{size} times"
        pieces.append(f"{n} image{'s' if n > 1 else ''} appear{'' if n > 1 else 's'} {times}"
                     f"{' each' if n > 1 else ''}: {n * size} {unit}")
    spans: dict[tuple, int] = {}
    for g in groups:
        splits = tuple(_splits(g))
        if len(splits) > 1:
            spans[splits] = spans.get(splits, 0) + 1
    for splits, n in sorted(spans.items(), key=lambda kv: [layout.split_order(s) for s in kv[0]]):
        pieces.append(f"{n} group{'s span' if n > 1 else ' spans'} {' and '.join(splits)}")
    return "; ".join(pieces)


def _more(shown: int, limit: int, total: int) -> list[str]:
    rest = max(total, shown) - min(shown, limit)
    return [f"    ... and {rest} more"] if rest > 0 else []


def _warning_text(w: dict) -> str:
    if w.get("kind") == "few_images":
        return (f"label {w.get('label')!r} has {w.get('rows')} images; Vertex AI asks for "
                f"at least 10 per label")
    if w.get("kind") == "imbalance":
        return (f"label {w.get('largest')!r} has {w.get('ratio')}x the images of "
                f"{w.get('smallest')!r}; Vertex AI warns above 100x")
    return json.dumps(w)


class _Thumbnails:
    """Small images of records, read from the conversion itself (the table's files may
    have moved since), as HTML cells."""

    def __init__(self, output_dir: str, opened=None, reader=None):
        self._dir = output_dir
        self._opened = opened
        self._reader = reader or _RecordImages  # see Report._reader
        self._readers: dict = {}

    def _image(self, split: str, position) -> bytes | None:
        if position is None:
            return None
        try:
            if split not in self._readers:
                if self._opened is None:
                    self._opened = view.open_version(self._dir)
                self._readers[split] = self._reader(self._opened.view(split))
            reader = self._readers[split]
            feats = reader.features(int(position))
            data = feats.get(layout.IMAGE)
            return data if isinstance(data, bytes) else None
        except Exception:  # a thumbnail is a nicety: a gzip or changed output shows none
            return None

    def cell(self, split, position, row, label) -> str:
        data = self._image(split, position)
        img = ""
        if data is not None:
            try:
                from tfrecorder._folder.image_headers import open_stored

                im = open_stored(data)
                im.thumbnail((_THUMB, _THUMB))
                buf = io.BytesIO()
                im.convert("RGB").save(buf, "JPEG", quality=80)
                img = (f"<img src='data:image/jpeg;base64,"
                       f"{base64.b64encode(buf.getvalue()).decode()}'><br>")
            except Exception:
                img = ""
        return (f"<td style='text-align:center'>{img}{html.escape(str(split))} row "
                f"{html.escape(str(row))}<br>{html.escape(str(label))}</td>")


class _RecordImages:
    """The image of a split's record by its position, read as ``access.Reader`` reads it
    without a cache, with the format's own codecs: the record's place from the view
    (its live index, index file or a scan), one ranged read, both checksums
    (``records.unframe``), the version checked as still the one opened, and the Example
    parsed for the image alone. The report stands
    below the readers, so it reads the few records its thumbnails show itself."""

    def __init__(self, split: view.View):
        what = "reading single records"
        split.version.need_offsets(what)
        split.need_counts(what)
        self._view = split

    def features(self, position: int) -> dict:
        split = self._view
        if not 0 <= position < len(split):
            raise IndexError(f"record {position} of split {split.split!r}, which has "
                             f"{len(split)} records")
        shard, k = split.position(position)
        offset, length = split.entries(shard)[k]
        path = split.path(shard)
        data = records.unframe(storage.read_range(path, offset, length), length,
                               f"{path}, record at byte {offset}")
        # What was read is the report's version's: an overwrite since would put another
        # conversion's image beside this report's rows (OutputChangedError: none drawn).
        split.version.unchanged()
        parsed = stored_keys.parse(data, split.manifest, only=[layout.IMAGE])
        return {key: values[0] for key, (_, values) in parsed.items() if len(values) == 1}


@deprecation.renamed(output_dir="tfrecord_dir")
def report(tfrecord_dir: str, version: int | None = None) -> Report:
    """The data report of the conversion in ``tfrecord_dir`` (its ``quality.json``), or of
    its version ``version``.

    IncompleteOutputError when there is no finished conversion there; ConfigError when
    the conversion was written without a report (before tfrecorder wrote one), or when
    the report of ``version`` is no longer there (docs/versions.md).
    """
    return report_version(view.open_version(str(tfrecord_dir), version))


def report_version(opened: view.Version, reader=None) -> Report:
    """``report`` of the version ``opened`` (``Folder.report``): its own report file, and
    thumbnails read from its own records, whatever was published since (by ``reader``
    of each split's view where given: ``Report``'s, a Folder's ``access.Reader``)."""
    output_dir, manifest, version = opened.output_dir, opened.manifest, opened.number
    if not manifest.quality:
        raise ConfigError(f"{output_dir} was converted without a data report (quality.json); "
                          f"convert it again with mode='overwrite' to get one")
    data = read(output_dir, manifest.quality)
    if data.get("version", 1) != (manifest.version or 1):
        # Version 1 names the folder's quality.json, which every later version replaces.
        raise ConfigError(
            f"the data report of version {version} of {output_dir} was replaced by version "
            f"{data.get('version')}'s ({manifest.quality}): only the versions after the "
            f"first keep their own (versions/KKKKK/quality.json)")
    return Report(output_dir, data, opened, reader)


def read(output_dir: str, name: str) -> dict:
    """The parsed data report ``name`` of the folder ``output_dir``, every field of the
    type ``quality.build`` writes; IncompleteOutputError naming the file, its first
    wrong field and the fix where it is missing, not JSON or not such a report."""
    path = storage.inside(output_dir, name)
    fix = (f"the folder is not whole: `tfrecorder verify {output_dir}` checks the rest; "
           "convert the table again with mode='overwrite' to write the report anew")
    try:
        data = json.loads(storage.read_bytes(path))
    except FileNotFoundError:
        raise IncompleteOutputError(f"{path}: the data report its manifest lists is "
                                    f"missing; {fix}") from None
    except ValueError as e:
        raise IncompleteOutputError(f"{path}: not a data report ({e}); {fix}") from None
    except RecursionError:
        raise IncompleteOutputError(f"{path}: not a data report (nested too deep to "
                                    f"read); {fix}") from None
    wrong = quality.wrong(data)
    if wrong:
        raise IncompleteOutputError(f"{path}: not a data report ({wrong}); {fix}")
    return data


