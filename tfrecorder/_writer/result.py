"""The result of a conversion: what was written where, and what was not."""

from __future__ import annotations

import dataclasses
import html
import json
from collections.abc import Mapping
from typing import Any

from tfrecorder import _deprecation as deprecation
from tfrecorder._folder import layout, metadata
from tfrecorder._writer import run_metadata
from tfrecorder._report import findings as _report
from tfrecorder import _storage as storage
from tfrecorder._folder.manifest import Manifest


#: TFRecorder's keys that name one of the result's attributes: read, they warn that the
#: attribute is the one name (``output_dir``), as every old spelling does.
_OLD_KEYS = {"tfrecord_dir": "output_dir"}


class _Keys(Mapping):
    """TFRecorder returned a dict; a result is also a read-only mapping with its keys:
    ``result["tfrecord_dir"]`` (the old spelling of ``result.output_dir``), ``"metrics"
    in result``, ``dict(result)``, ``.get()``."""

    def _mapping(self) -> dict[str, Any]:
        raise NotImplementedError

    def __getitem__(self, key: str):
        mapping = self._mapping()
        if key not in mapping:
            raise KeyError(f"{key!r}; the keys are {sorted(mapping)}")
        if key in _OLD_KEYS:
            deprecation.warn(f'result["{key}"] is TFRecorder 2.0\'s name of '
                             f"result.{_OLD_KEYS[key]}, the same value; write "
                             f"result.{_OLD_KEYS[key]}")
        return mapping[key]

    def __contains__(self, key) -> bool:  # a question about the keys reads no value
        return key in self._mapping()

    def __iter__(self):
        return iter(self._mapping())

    def __len__(self) -> int:
        return len(self._mapping())


def human_bytes(n: int) -> str:
    """``n`` bytes as people read them: ``812 B``, ``74.0 KiB``, ``120.9 MiB``."""
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"


@dataclasses.dataclass(frozen=True, eq=False)
class ConversionResult(_Keys):
    """What a conversion wrote.

    It is also a mapping with TFRecorder's keys: ``tfrecord_dir`` (``output_dir``'s old
    name, with a DeprecationWarning), ``job_id`` and ``metrics`` (``rows``,
    ``good_images``, ``bad_images`` beside ours).
    """

    output_dir: str
    rows_in: int
    rows_written: int
    rows_per_split: dict[str, int]
    rows_quarantined: int
    bytes_written: int
    shards_per_split: dict[str, int]
    labels: list[str]
    first_errors: list[dict]
    runner: str
    job_id: str | None
    label_counts: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    #: One record per image holding every label of its rows: records are fewer than rows.
    multi_label: bool = False
    #: Object detection: one record per image, holding the boxes of its rows (a row per
    #: box, and one per image without any): the splits count images, the table boxes.
    detection: bool = False
    #: What reading the source did not convert, or decided, that the output does not
    #: show, one line each: the keys of a Vertex AI JSON Lines or COCO file that no
    #: record holds; lines whose ml_use differs from their file's split.
    notes: list[str] = dataclasses.field(default_factory=list)
    #: What became of the annotations of a COCO, YOLO or Pascal VOC source: ``read``,
    #: ``written``, ``reported`` per reason (left out of the records), ``first`` of those
    #: named with where they are (None for other sources).
    annotations: Any = None
    #: The data report (``tfrecorder.report``): duplicates, leaks, conflicts, statistics.
    report: Any = None
    #: The version published (the latest one, when ``unchanged``), and what it changed
    #: per split: ``{split: {"added": n, "retired": n, "kept": n}}``.
    version: int | None = None
    #: How the version was made, in the words ``mode=`` takes: "create", "overwrite",
    #: "update" or "append"; "compact" for a compaction (None: written before versions)
    mode: str | None = None
    changes: dict = dataclasses.field(default_factory=dict)
    #: An update that found nothing to change, and so wrote nothing.
    unchanged: bool = False
    #: Splits that ``dataset_info.json`` leaves out because an update appended to or
    #: retired from them: TFDS reads a split by one file-name template (docs/versions.md).
    tfds_left_out: list = dataclasses.field(default_factory=list)
    #: ``mode="append"``: rows whose key the folder already held (not written), and the
    #: first of those keys.
    existing_count: int = 0
    existing_keys: list = dataclasses.field(default_factory=list)
    #: Of those, the rows that differ from the record stored under their key, and in
    #: what (``split``, ``label``, a column's name, ``image_uri``, ``image``): an update
    #: (``mode="update"``) would write them.
    existing_differ: int = 0
    existing_differ_in: list = dataclasses.field(default_factory=list)
    #: Quarantined rows per kind of reason (``image file not found``, ``truncated
    #: JPEG``), the most common first.
    quarantine_reasons: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def labels_without_records(self) -> list[str]:
        """Labels of the vocabulary that no written record has (every row with them was
        quarantined, or a ``label_vocabulary`` name the table never uses). Their ids stay
        reserved; docs/format.md says what to do."""
        if not self.label_counts:
            return []
        seen = {label for counts in self.label_counts.values()
                for label, n in counts.items() if n}
        return [label for label in self.labels if label not in seen]

    @property
    def reencoded(self) -> dict[str, dict[str, int]]:
        """Images stored as PNG because not every reader of ours decodes their format
        (TIFF, an animated WebP, ...), by that format: ``images``, their files' bytes
        (``source_bytes``) and the bytes stored (``stored_bytes``), over every split of
        the data report (an update's: of the records it wrote)."""
        out: dict[str, dict[str, int]] = {}
        stats = self.report.data.get("stats", {}) if self.report is not None else {}
        for split in stats.values():
            for fmt, cost in split.get("reencoded", {}).items():
                total = out.setdefault(fmt, dict.fromkeys(cost, 0))
                for k, n in cost.items():
                    total[k] += n
        return dict(sorted(out.items()))

    def _reencoded_line(self, width: int = 0) -> str | None:
        """What re-encoding cost, in a line (its count ``width`` wide), or None."""
        costs = self.reencoded
        if not costs:
            return None
        images = sum(c["images"] for c in costs.values())
        source = sum(c["source_bytes"] for c in costs.values())
        stored = sum(c["stored_bytes"] for c in costs.values())
        kinds = ", ".join(f"{fmt} {c['images']}" for fmt, c in costs.items())
        ratio = f", {stored / source:.1f}x" if source else ""
        return (f"{images:>{width}} image(s) stored as PNG ({kinds}): {human_bytes(source)} "
                f"of files became {human_bytes(stored)}{ratio}")

    @property
    def turned(self) -> dict[str, int]:
        """JPEGs stored turned upright by their EXIF orientation, in a conversion whose
        records hold geometry (docs/detection.md): ``images``, the bytes they would have
        been stored as (``source_bytes``) and the bytes stored (``stored_bytes``), over
        every split of the data report; ``sensor_frame``: the photos stored in their
        sensor's frame instead, their orientation set to 1, because their source (a COCO
        file) gives that frame's size, so its boxes are in it. All 0 where none was."""
        out = dict.fromkeys(("images", "source_bytes", "stored_bytes", "sensor_frame"), 0)
        stats = self.report.data.get("stats", {}) if self.report is not None else {}
        for split in stats.values():
            for k, n in split.get("turned", {}).items():
                if k in out:
                    out[k] += n
        return out

    def _turned_line(self, width: int = 0) -> str | None:
        """What turning JPEGs upright cost, in a line (its count ``width`` wide), or None."""
        t = self.turned
        if not t["images"] and not t["sensor_frame"]:
            return None
        source, stored = t["source_bytes"], t["stored_bytes"]
        ratio = f", {stored / source:.1f}x" if source else ""
        kept = (f"; {t['sensor_frame']} kept in the sensor's frame, orientation set to 1, "
                f"as their source's width and height are that frame's"
                if t["sensor_frame"] else "")
        return (f"{t['images']:>{width}} JPEG(s) turned upright by their EXIF orientation "
                f"and re-encoded, so that every decoder sees the frame their boxes are in: "
                f"{human_bytes(source)} became {human_bytes(stored)}{ratio}{kept}")

    @property
    def errors_file(self) -> str:
        return storage.join(self.output_dir, layout.ERRORS)

    @property
    def metrics(self) -> dict[str, Any]:
        return {
            "rows_in": self.rows_in,
            "rows_written": self.rows_written,
            "rows_quarantined": self.rows_quarantined,
            "rows_per_split": dict(self.rows_per_split),
            "bytes_written": self.bytes_written,
            # TFRecorder's names: rows read, and rows whose image was stored or not.
            "rows": self.rows_in,
            "good_images": self.rows_written,
            "bad_images": self.rows_quarantined,
        }

    def _mapping(self) -> dict[str, Any]:
        return {"tfrecord_dir": self.output_dir, "job_id": self.job_id, "metrics": self.metrics}

    @classmethod
    def from_output(cls, output_dir: str, runner: str, job_id: str | None,
                    manifest: Manifest | None = None) -> "ConversionResult":
        m = manifest or metadata.read_manifest(output_dir)
        first, reasons = [], []
        if m.rows_quarantined:
            # Every line, for the reasons counted; the first five shown as they are.
            with storage.open_file(storage.join(output_dir, layout.ERRORS), "rb") as f:
                for line in f:
                    try:  # a damaged errors file leaves out what it cannot show
                        q = json.loads(line)
                    except (ValueError, RecursionError):
                        continue
                    if not isinstance(q, dict):
                        continue
                    reasons.append(str(q.get("reason")))
                    if len(first) < 5:
                        first.append({"row": q.get("row"), "image_uri": q.get("image_uri"),
                                      "reason": reasons[-1]})
        label = m.label_key
        return cls(
            output_dir=output_dir,
            rows_in=m.rows_in,
            rows_written=m.rows_written,
            rows_per_split={s: i.num_examples for s, i in m.splits.items()},
            rows_quarantined=m.rows_quarantined,
            bytes_written=sum(i.num_bytes for i in m.splits.values()),
            shards_per_split={s: len(i.shards) for s, i in m.splits.items()},
            labels=list(m.vocabularies.get(label, [])) if label else [],
            first_errors=first,
            quarantine_reasons=run_metadata.reason_counts(reasons),
            runner=runner,
            job_id=job_id,
            label_counts={sp: dict(i.label_counts) for sp, i in m.splits.items()},
            multi_label=m.multi_label,
            detection=any(k.startswith("objects/") for k in m.features),
            report=_report.report(output_dir) if m.quality else None,
            version=m.version,
            mode=m.mode,
            changes={s: {k: int(c.get(k, 0)) for k in ("added", "retired", "kept")}
                     for s, c in sorted((m.changes or {}).items(),
                                        key=lambda kv: layout.split_order(kv[0]))},
            tfds_left_out=sorted((s for s, i in m.splits.items()
                                  if run_metadata.tfds_template(i) is None),
                                 key=layout.split_order),
        )

    def label_distribution(self):
        """Records per label (rows) and split (columns), as a pandas DataFrame."""
        import pandas as pd

        frame = pd.DataFrame(self.label_counts).reindex(self.labels).fillna(0).astype(int)
        return frame.reindex(columns=list(self.rows_per_split), fill_value=0)

    def plot_label_distribution(self, ax=None):
        """A bar chart of ``label_distribution()`` (needs matplotlib)."""
        return self.label_distribution().plot.bar(ax=ax, title="records per label and split")

    def _bars_html(self) -> str:
        if not self.label_counts or not self.labels:
            return ""
        top = max((n for c in self.label_counts.values() for n in c.values()), default=0) or 1
        colours = ["#4c78a8", "#f58518", "#54a24b", "#b279a2"]
        lines = []
        for label in self.labels[:30]:
            bars = "".join(
                f"<div title='{html.escape(split)}: {self.label_counts.get(split, {}).get(label, 0)}' "
                f"style='height:7px;margin:1px 0;background:{colours[i % 4]};width:"
                f"{240 * self.label_counts.get(split, {}).get(label, 0) / top:.0f}px'></div>"
                for i, split in enumerate(self.rows_per_split))
            lines.append(f"<tr><td>{html.escape(label)}</td><td>{bars}</td></tr>")
        legend = " ".join(f"<span style='color:{colours[i % 4]}'>&#9632; {html.escape(sp)}</span>"
                          for i, sp in enumerate(self.rows_per_split))
        return f"<div>Records per label {legend}</div><table>{''.join(lines)}</table>"

    def _change_lines(self) -> list[str]:
        """The summary's lines of what an update changed, per split."""
        if self.unchanged:
            head = (f"  UNCHANGED   nothing to write: version {self.version} holds every row "
                    f"of the table as it is")
        elif self.version and self.version > 1:
            head = "  records added, retired and kept per split:"
        else:
            return []
        lines = [head]
        for split, c in self.changes.items():
            lines.append(f"  {split:<11} +{c.get('added', 0)} added, -{c.get('retired', 0)} "
                         f"retired, {c.get('kept', 0)} kept")
        if self.tfds_left_out:
            lines.append(f"  TFDS        split(s) {', '.join(self.tfds_left_out)} left out of "
                         f"dataset_info.json: they hold records of two versions, which "
                         f"tfds.builder_from_directory cannot read by one file-name template "
                         f"(every tfrecorder reader can; `tfrecorder compact {self.output_dir}` "
                         f"rewrites them for TFDS)")
        if self.existing_count:
            shown = ", ".join(map(str, self.existing_keys))
            lines.append(f"  EXISTING    {self.existing_count:>9} row(s) not appended: their "
                         f"key is already stored ({shown}{' ...' if self.existing_count > len(self.existing_keys) else ''})"
                         f"{self._differ_text()}")
        return lines

    def _differ_text(self) -> str:
        """``; 1 of them differs (label): --update writes it``, or "" where none does."""
        if not self.existing_differ:
            return ""
        one = self.existing_differ == 1
        return (f"; {self.existing_differ} of them differ{'s' if one else ''} "
                f"({', '.join(self.existing_differ_in)}): --update writes "
                f"{'it' if one else 'them'}")

    def _version_rows(self) -> str:
        """What an update's version holds against the table it was given."""
        if self.mode != "append":
            return f"{self.rows_written} of {self.rows_in} rows of the table are in it"
        # the version holds the rows stored before, which the table need not list
        added = sum(c.get("added", 0) for c in self.changes.values())
        return (f"{added} record(s) appended from the table's {self.rows_in} rows; "
                f"{self.rows_written} rows are in it")

    def __str__(self) -> str:
        if self.unchanged:
            return "\n".join([f"tfrecorder: {self.output_dir} is up to date "
                              f"(version {self.version})", *self._change_lines()])
        lines = [f"tfrecorder wrote {self.rows_written} of {self.rows_in} rows to {self.output_dir}"]
        if self.version and self.version > 1:
            lines = [f"tfrecorder updated {self.output_dir} to version {self.version}: "
                     f"{self._version_rows()}"]
        lines += self._change_lines()
        unit = "rows"
        if self.multi_label:
            unit = "records"
            lines[0] += (f" as {sum(self.rows_per_split.values())} records (multi-label: one "
                         f"record per image, with the labels of all its rows)")
        elif self.detection:
            unit = "images"
            lines[0] += (f" as {sum(self.rows_per_split.values())} records (object detection: "
                         f"one record per image, with the boxes of all its rows)")
        for split, n in self.rows_per_split.items():
            lines.append(f"  {split:<11} {n:>9} {unit} in {self.shards_per_split[split]} shard(s)")
        lines.append(f"  {'bytes':<11} {human_bytes(self.bytes_written):>9}")
        if self.labels:
            shown = ", ".join(self.labels[:10]) + (" ..." if len(self.labels) > 10 else "")
            lines.append(f"  {'labels':<11} {len(self.labels):>9}: {shown}")
            empty = self.labels_without_records
            if empty:
                names = ", ".join(empty[:10]) + (" ..." if len(empty) > 10 else "")
                lines.append(f"  NO RECORDS  {len(empty):>9} label(s) have no records "
                             f"(ids kept; see labels_without_records): {names}")
        if self.rows_quarantined:
            kinds = (f" ({run_metadata.counted(self.quarantine_reasons)})"
                     if self.quarantine_reasons else "")
            lines.append(f"  QUARANTINED {self.rows_quarantined:>9} rows{kinds}, listed in "
                         f"{self.errors_file}")
            for e in self.first_errors:
                lines.append(f"    row {e['row']}: {e['reason']}")
        if self.annotations is not None:
            lines.append(f"  {self.annotations}")
            lines += [f"    {where}" for where in self.annotations.first]
        reencoded = self._reencoded_line(9)
        if reencoded is not None:
            lines.append(f"  RE-ENCODED  {reencoded}")
        turned = self._turned_line(9)
        if turned is not None:
            lines.append(f"  UPRIGHT     {turned}")
        lines += [f"  note: {note}" for note in self.notes]
        if self.report is not None:
            lines.append(f"  {self.report.summary()} — tfrecorder report {self.output_dir}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        esc = html.escape
        per_split = "".join(
            f"<tr><td>{esc(s)}</td><td style='text-align:right'>{n}</td>"
            f"<td style='text-align:right'>{self.shards_per_split[s]}</td></tr>"
            for s, n in self.rows_per_split.items()
        )
        pieces = [
            "<div class='tfrecorder-result'>",
            (f"<b>tfrecorder</b>: {self.rows_written} of {self.rows_in} rows written to "
             if not self.version or self.version == 1 else
             f"<b>tfrecorder</b>: version {self.version}, {esc(self._version_rows())}, in ")
            + f"<code>{esc(self.output_dir)}</code> ({human_bytes(self.bytes_written)})"
            + (f" as {sum(self.rows_per_split.values())} records (<b>multi-label</b>: one "
               f"record per image)" if self.multi_label else "")
            + (f" as {sum(self.rows_per_split.values())} records (<b>object detection</b>: "
               f"one record per image, with its boxes)" if self.detection else ""),
            f"<table><tr><th>split</th><th>"
            f"{'records' if self.multi_label else 'images' if self.detection else 'rows'}</th>"
            f"<th>shards</th></tr>", per_split, "</table>",
        ]
        if self.unchanged or (self.version or 0) > 1:
            changed = "".join(
                f"<tr><td>{esc(split)}</td><td style='text-align:right'>{c['added']}</td>"
                f"<td style='text-align:right'>{c['retired']}</td>"
                f"<td style='text-align:right'>{c['kept']}</td></tr>"
                for split, c in self.changes.items())
            said = ("unchanged: nothing written" if self.unchanged
                    else f"published version {self.version}")
            pieces.append(f"<div><b>{said}</b></div><table><tr><th>split</th><th>added</th>"
                         f"<th>retired</th><th>kept</th></tr>{changed}</table>")
            if self.existing_count:
                pieces.append(f"<div>{self.existing_count} row(s) not appended: their key is "
                             f"already stored{esc(self._differ_text())}</div>")
        if self.labels:
            pieces.append(f"<div>{len(self.labels)} labels: {esc(', '.join(self.labels[:20]))}"
                         f"{' ...' if len(self.labels) > 20 else ''}</div>")
            empty = self.labels_without_records
            if empty:
                pieces.append(
                    f"<div style='color:#b00'><b>{len(empty)} label(s) have no records</b> "
                    f"(their ids are kept): {esc(', '.join(empty[:20]))}"
                    f"{' ...' if len(empty) > 20 else ''}</div>")
            pieces.append(self._bars_html())
        if self.rows_quarantined:
            items = "".join(f"<li>row {esc(str(e['row']))}: {esc(e['reason'])}</li>"
                            for e in self.first_errors)
            pieces.append(
                f"<div style='color:#b00'><b>{self.rows_quarantined} rows quarantined</b>, "
                f"listed in <code>{esc(self.errors_file)}</code><ul>{items}</ul></div>")
        if self.annotations is not None:
            items = "".join(f"<li>{esc(w)}</li>" for w in self.annotations.first)
            pieces.append(f"<div>{esc(str(self.annotations))}"
                          f"{f'<ul>{items}</ul>' if items else ''}</div>")
        reencoded = self._reencoded_line()
        if reencoded is not None:
            pieces.append(f"<div><b>re-encoded</b>: {esc(reencoded)}</div>")
        turned = self._turned_line()
        if turned is not None:
            pieces.append(f"<div><b>upright</b>: {esc(turned)}</div>")
        pieces += [f"<div><i>note</i>: {esc(note)}</div>" for note in self.notes]
        if self.report is not None:
            pieces.append(f"<div><i>data report</i>: {esc(self.report.summary())} "
                         f"(<code>result.report</code>)</div>")
        pieces.append("</div>")
        return "".join(pieces)


@dataclasses.dataclass(eq=False)
class DataflowJob(_Keys):
    """A conversion submitted to Google Cloud Dataflow.

    The job's own last step completes the output directory, so nothing more is needed
    from this process; ``wait()`` blocks until the job ends and returns the
    ConversionResult. It is also a mapping with TFRecorder's keys: ``job_id``,
    ``dataflow_url``, ``tfrecord_dir`` and ``metrics`` (empty until the job ends). For a
    dry run (``--dry_run``) ``job_id`` is None and ``job`` holds the job that would have
    been submitted.
    """

    output_dir: str
    job_id: str | None
    console_url: str | None
    runner: str = "DataflowRunner"
    pipeline_result: Any = dataclasses.field(default=None, repr=False)
    #: As ConversionResult.notes, passed on by ``wait()``.
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def job(self):
        """Beam's description of the job (its pipeline proto and options)."""
        return getattr(self.pipeline_result, "job", None)

    @property
    def state(self) -> str:
        return str(getattr(self.pipeline_result, "state", "UNKNOWN"))

    def wait(self) -> ConversionResult:
        """Blocks until the job ends; its result, read from the output directory."""
        from tfrecorder._errors import ConversionError

        state = self.pipeline_result.wait_until_finish()
        if "DONE" not in str(state):
            raise ConversionError(f"Dataflow job {self.job_id} ended {state}; see {self.console_url}")
        result = ConversionResult.from_output(self.output_dir, self.runner, self.job_id)
        return dataclasses.replace(result, notes=list(self.notes))

    def _mapping(self) -> dict[str, Any]:
        return {"tfrecord_dir": self.output_dir, "job_id": self.job_id,
                "dataflow_url": self.console_url, "metrics": {}}

    def __str__(self) -> str:
        notes = "".join(f"\n  note: {note}" for note in self.notes)
        if self.job_id is None:
            return (f"Dataflow dry run: nothing submitted; output would go to "
                    f"{self.output_dir}{notes}")
        return (f"Dataflow job {self.job_id} submitted; it writes to {self.output_dir}\n"
                f"  watch it at {self.console_url}{notes}")

    def _repr_html_(self) -> str:
        if self.job_id is None:
            return "<div><b>tfrecorder</b>: Dataflow dry run, nothing submitted</div>"
        return (f"<div><b>tfrecorder</b>: Dataflow job <code>{html.escape(self.job_id)}</code> "
                f"writes to <code>{html.escape(self.output_dir)}</code>. "
                f"<a href='{html.escape(self.console_url or '')}'>Open in the console</a></div>")
