"""Rows files: ``rows/<shard>.rows.jsonl.gz``, one JSON object per record of a shard,
in file order, written by the step that writes the shard (docs/format.md, "Rows files").

They say what each record was made from (its row, key, split, label, the image file's
size and stamp, the digest of its bytes) so that an update can tell which rows of an
edited table are unchanged without opening a shard or an image again. No Beam here.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import gzip
import io
import itertools
import json
import os
import posixpath
from typing import Callable, Iterable

from tfrecorder import _storage as storage
from tfrecorder._folder import index
from tfrecorder._folder.layout import BBOX, DETECTION_COLUMNS as BOX_COLUMNS
from tfrecorder._errors import CorruptRecordError, shown_json

#: The default match key: the image column's value as the table gives it.
DEFAULT_KEY = "image_uri"


def entry(*, row, key, split: str, labels: list[str], size: int | None = None,
          stamp: int | None = None, sha256: str | None = None, phash: tuple | None = None,
          width: int | None = None, height: int | None = None, fmt: str | None = None,
          features: dict | None = None, image_uri: str | None = None,
          hashed: bool = False, px: tuple | None = None, measured: bool = False,
          rows: int = 1, issues: dict | None = None) -> dict:
    """One record's line; image fields only for rows with an image, ``features`` only
    where the table has other columns, ``image_uri`` only where the key is another
    column than the image's. Where near duplicates are searched (``hashed``), ``phash``
    and ``thumb``, the ``(dhash, thumbnail)`` of ``looker.Looker.measure``, as 16 hex
    digits and base64 (``phash`` null: the image did not decode small; ``thumb`` null:
    neither, or too little detail to match); where pixels are measured (``measured``),
    ``px``: the channel sums of ``measures.channel_sums`` as ``[pixels, R, G, B, R², G²,
    B²]`` (null: not decodable). An update carries them for the records it keeps.
    ``rows``: the input rows the record holds, written where more than one (the rows
    of one image in a multi-label or detection table). ``issues``: the image problems
    found in it (``looker.Looker.add``), written where there is one, so that an update
    reports them for the records it keeps."""
    out = {"row": row, "key": key, "split": split, "label": list(labels)}
    if rows != 1:
        out["rows"] = rows
    if image_uri is not None:
        out["image_uri"] = image_uri
    if sha256 is not None:
        out.update(size=size, stamp=stamp, sha256=sha256, w=width, h=height, format=fmt)
        if hashed or phash is not None:
            h, thumb = phash or (None, None)
            out["phash"] = None if h is None else f"{h:016x}"
            out["thumb"] = None if thumb is None else base64.b64encode(thumb).decode()
        if measured or px is not None:
            out["px"] = None if px is None else [px[0], *px[1], *px[2]]  # px_sums reads it
        if issues:
            out["issues"] = dict(issues)
    if features:
        out["features"] = features
    return out


def image_names(entry: dict) -> set[str]:
    """The names a stored record's image answers to (none for a record without an
    image): its value as the table wrote it and, normalized, where it is: a URI or an
    absolute path itself; for a relative path, what it names below the folder it started
    from (``images/cat.jpg`` of ``./images/cat.jpg`` or ``../data/images/cat.jpg``),
    which the path to the image ends with, whichever folder that was (``names``)."""
    if "sha256" not in entry:
        return set()
    value = entry.get("image_uri", entry.get("key"))
    if not isinstance(value, str):
        return set()
    if storage.is_remote(value) or os.path.isabs(value):
        return {value, storage.resolve(value)}
    components = os.path.normpath(value).split(os.sep)
    while components and components[0] == os.pardir:
        del components[0]
    return {value, os.sep.join(components)}


def names(value: str, location: str, ends: bool = False) -> list[str]:
    """The names a row's image is found by among stored records (``image_names``), most
    exact first: its value as the table writes it, where it is (``location``: a URI or
    an absolute path) and, with ``ends``, the ends of that path (``images/cat.jpg``,
    ``cat.jpg``), longest first: a relative path a folder stored names the image whose
    path ends with it, whichever folder it started from. So an image is found by where
    it is, however the table spells its path; an update compares the records found
    (size and time, labels, values) before it keeps one."""
    out = [value, location] if value != location else [location]
    if ends and not storage.is_remote(location):
        components = location.split(os.sep)
        out += [os.sep.join(components[i:]) for i in range(1, len(components)) if components[i]]
    return out


def px_sums(px: list) -> tuple:
    """A line's ``px``, ``[pixels, R, G, B, R², G², B²]``, as ``measures.channel_sums``
    gives them: ``(pixels, [sums], [sums of squares])``."""
    return px[0], px[1:4], px[4:7]


def features(row, columns: tuple, feature_columns: tuple, as_json) -> dict:
    """A record's ``features``: the other columns of its row, as strict JSON
    (``as_json``). A detection table's record is an image with its rows' boxes: its
    ``features`` hold every row's box in row order under ``"boxes"`` (label, corners,
    flags), so that moving, adding, removing or relabelling any of its boxes changes the
    record, as it changes what the record holds."""
    if BBOX in row.features:
        at = BOX_COLUMNS.index("label")  # the label, then the box's own columns
        return {"boxes": [[as_json(v) for v in values[at:]]
                          for values in (row.values, *(v for _, v in row.merged))]}
    return {columns[i]: as_json(row.values[i]) for i in feature_columns}


def ref_fields(entry: dict, ids: dict) -> tuple:
    """What the data report names a record by, from its line: ``(row, image_uri, label
    ids)``, the ids by ``ids`` (label name -> id; names not there are left out)."""
    labels = entry.get("label")
    return (entry.get("row"), entry.get("image_uri", entry.get("key")),
            tuple(ids[n] for n in labels if n in ids) if labels else ())


#: One encoder for every line: ``json.dumps`` with options makes an encoder per call.
_LINE = json.JSONEncoder(sort_keys=True, ensure_ascii=False, allow_nan=False,
                         separators=(",", ":"))

#: gzip level of rows files. Level 1 takes 20 ms for 10,000 lines where level 6 took
#: 50 ms, for files 13% larger (about 79 bytes a record instead of 70).
COMPRESS_LEVEL = 1


def encode(entries: Iterable[dict]) -> bytes:
    """The rows file of ``entries``: gzip (no name, no time in its header, so the same
    records give the same bytes) of one strict JSON object per line."""
    text = "".join(_LINE.encode(e) + "\n" for e in entries).encode()
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0,
                       compresslevel=COMPRESS_LEVEL) as f:
        f.write(text)
    return buf.getvalue()


def decode(data: bytes) -> list[dict]:
    """The entries of a rows file's bytes, in file order: one JSON object per line."""
    lines = [line for line in gzip.decompress(data).splitlines() if line.strip()]
    # One JSON array of all the lines: parsed in one call, twice as fast as line by
    # line. A line that is not one object (two on a line, a BOM, a cut) falls back to
    # line by line, which says where.
    try:
        entries = json.loads(b"[" + b",".join(lines) + b"]") if lines else []
    except ValueError:
        entries = None
    if (entries is None or len(entries) != len(lines)
            or not all(isinstance(e, dict) for e in entries)):
        entries = [json.loads(line) for line in lines]
        if not all(isinstance(e, dict) for e in entries):
            raise ValueError("a line that is not a JSON object")
    return entries


def read(path: str, count: int | None = None) -> list[dict]:
    """The entries of the rows file at ``path``; CorruptRecordError naming it where it
    is missing, is not a rows file, or (with ``count``, its shard's records) does not
    hold one line per record."""
    try:
        entries = decode(storage.read_bytes(path))
    except FileNotFoundError:
        raise CorruptRecordError(f"{path}: the rows file is missing; {_FIX}") from None
    except (ValueError, OSError, EOFError) as e:
        raise CorruptRecordError(f"{path}: not a rows file ({e}); {_FIX}") from None
    except RecursionError:
        raise CorruptRecordError(f"{path}: not a rows file (a line nested too deep to "
                                 f"read); {_FIX}") from None
    if count is not None and len(entries) != count:
        raise CorruptRecordError(f"{path}: {len(entries)} lines where its shard holds "
                                 f"{count} records; {_FIX}")
    wrong = _wrong(entries)
    if wrong:
        raise CorruptRecordError(f"{path}: not a rows file ({wrong}); {_FIX}")
    return entries


class _Absent:
    """The type of a field a line does not have."""


_ABSENT = _Absent()
_NONE = type(None)
#: The types each field of a line may have, as ``entry`` writes it; row, key, split and
#: label are on every line. An update keys records by ``key`` and counts labels by
#: name, and compact copies lines as they are: a line of other types must stop both,
#: by its name, before either uses it.
_TYPES = {
    "row": (int, float, str, bool, _NONE, list), "key": (str, _NONE), "split": (str,),
    "label": (list,), "rows": (int, _Absent), "image_uri": (str, _Absent),
    "size": (int, _NONE, _Absent), "stamp": (int, _NONE, _Absent), "sha256": (str, _Absent),
    "w": (int, _NONE, _Absent), "h": (int, _NONE, _Absent), "format": (str, _NONE, _Absent),
    "phash": (str, _NONE, _Absent), "thumb": (str, _NONE, _Absent), "px": (list, _NONE, _Absent),
    "features": (dict, _Absent), "issues": (dict, _Absent)}
#: What a field is, in the message that names a line where it is not.
_WHAT = {"row": "a row number or index label", "key": "text or null", "split": "text",
         "label": "a list of label names", "rows": "a whole number", "image_uri": "text",
         "size": "a whole number or null", "stamp": "a whole number or null",
         "sha256": "text", "w": "a whole number or null", "h": "a whole number or null",
         "format": "text or null", "phash": "16 hex digits or null",
         "thumb": "64 bytes in base64 or null",
         "issues": "an object of image problems and their scores",
         "px": "7 numbers or null", "features": "an object"}
_SCALARS = (int, float, str, bool, _NONE)
_HEX = frozenset("0123456789abcdef")


def _thumb(v: str) -> bool:
    try:
        return len(base64.b64decode(v, validate=True)) == 64
    except (binascii.Error, ValueError):
        return False


def _problems(v: dict) -> bool:
    return all(type(k) is str and type(x) in (int, float) for k, x in v.items())


def thumb(e: dict) -> bytes | None:
    """A line's ``thumb`` as bytes (``measures.fingerprint``), None where it has none."""
    t = e.get("thumb")
    return None if t is None else base64.b64decode(t)


def _wrong(entries: list[dict]) -> str | None:
    """The first line (1-based) of ``entries`` with a field of another type than
    ``entry`` writes, as ``line 3: label is "cat", not a list of label names``; None
    where there is none. Checked a field at a time over every line (the set of its
    values' types, then of the items of its lists), in comprehensions rather than a
    call per line: a line is only looked for once a field is known to be wrong."""
    for field, allowed in _TYPES.items():
        if not {type(e.get(field, _ABSENT)) for e in entries} <= set(allowed):
            return _line_of(entries, field, lambda v: type(v) in allowed)
    chain = itertools.chain.from_iterable
    listed_rows = [e["row"] for e in entries if type(e["row"]) is list]
    hashes = [p for p in (e.get("phash") for e in entries) if p is not None]
    sums = [x for x in (e.get("px") for e in entries) if x is not None]
    thumbs = [t for t in (e.get("thumb") for e in entries) if t is not None]
    problems = [p for p in (e.get("issues") for e in entries) if p is not None]
    checks = [
        ("row", set(map(type, chain(listed_rows))) <= set(_SCALARS),
         lambda v: type(v) is not list or all(type(x) in _SCALARS for x in v)),
        ("label", set(map(type, chain(e["label"] for e in entries))) <= {str},
         lambda v: all(type(x) is str for x in v)),
        ("phash", set(map(len, hashes)) <= {16} and _HEX.issuperset("".join(hashes)),
         lambda v: v is None or (len(v) == 16 and _HEX.issuperset(v))),
        ("thumb", all(map(_thumb, thumbs)), lambda v: v is None or _thumb(v)),
        ("issues", all(map(_problems, problems)), lambda v: v is None or _problems(v)),
        ("px", set(map(len, sums)) <= {7} and set(map(type, chain(sums))) <= {int, float},
         lambda v: v is None or (len(v) == 7 and all(type(x) in (int, float) for x in v)))]
    for field, whole, ok in checks:
        if not whole:
            return _line_of(entries, field, ok)
    return None


def _line_of(entries: list[dict], field: str, ok) -> str | None:
    for number, e in enumerate(entries, 1):
        if field in e and not ok(e[field]):
            return f"line {number}: {field} is {shown_json(e[field])}, not {_WHAT[field]}"
        if field not in e and _Absent not in _TYPES[field]:
            return f"line {number}: no {field}"
    return None



_FIX = ("the folder is damaged: `tfrecorder verify` checks its records; convert again "
        "with mode='overwrite' to write the rows files anew")


def key_text(value) -> str:
    """A match key as text: a string as it is (blanks around it removed), anything else
    as its strict JSON (``12``, ``"2024-05-01"``)."""
    if isinstance(value, str):
        return value.strip()
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


#: In an update's run folder, one file per kept rows file some of whose records moved:
#: the rows of the edited table its records have, for the data report.
RENUMBERED_DIR = "renumbered"


def _renumbered_path(folder: str, rows_name: str) -> str:
    return storage.join(folder, RENUMBERED_DIR, posixpath.basename(rows_name) + ".json")


def _line(value) -> bool:
    return type(value) is int  # noqa: E721 (a bool is no line number)


def write_renumbered(folder: str, renumbered: dict) -> None:
    """Writes, in the run's ``folder``, the rows of the edited table of the kept records
    of each rows file one of whose records moved: ``renumbered`` is ``{rows file:
    [(position, row stored, row now), ...]}``, every kept record of it. In stored-row
    order, line numbers move by one count between two edits (lines removed or added
    above them): they are listed as ranges ``[first row stored, last row stored, shift]``,
    as many as the edits, whatever the table's size; any other moved row is listed
    ``[row stored, row now]``. Where one stored row is there twice (a compacted shard
    holds records two tables numbered; a DataFrame's index may repeat a label), the
    moved records of that file are listed by position instead: ``[position, row now]``."""
    pending = [(_renumbered_path(folder, name), _renumbered(triples))
              for name, triples in renumbered.items()]
    storage.each(lambda job: storage.write_into(*job), pending, storage.is_remote(folder))


def _renumbered(triples: list) -> bytes:
    """One rows file's renumbering (``write_renumbered``)."""
    stored = [json.dumps(old, sort_keys=True) for _, old, _ in triples]
    if len(set(stored)) < len(stored):
        data = {"positions": [[p, new] for p, old, new in triples if new != old]}
    else:
        shifts: list = []
        for old, new in sorted((old, new) for _, old, new in triples
                               if _line(old) and _line(new)):
            if shifts and shifts[-1][2] == new - old:
                shifts[-1][1] = old
            else:
                shifts.append([old, old, new - old])
        data = {"shift": [r for r in shifts if r[2]],
                "rows": [[old, new] for _, old, new in triples
                         if not (_line(old) and _line(new)) and new != old]}
    return json.dumps(data, ensure_ascii=False).encode("utf-8")


def renumbering(folder: str | None, rows_name: str | None) -> Callable | None:
    """``now(position, row stored)``: the row in the edited table of the record at
    ``position`` of the rows file ``rows_name``, as ``write_renumbered`` wrote it in the
    run's ``folder`` (the stored row where nothing moved it); None where no record of it
    moved."""
    if folder is None or rows_name is None:
        return None
    try:
        data = json.loads(storage.read_bytes(_renumbered_path(folder, rows_name)))
    except FileNotFoundError:
        return None
    if "positions" in data:
        by_position = {p: new for p, new in data["positions"]}
        return lambda position, row: by_position.get(position, row)
    listed = {json.dumps(old, sort_keys=True): new for old, new in data["rows"]}
    shifts = data["shift"]
    firsts = [first for first, _, _ in shifts]

    def now(position: int, row):
        if listed:
            key = json.dumps(row, sort_keys=True)
            if key in listed:
                return listed[key]
        if _line(row):
            i = bisect.bisect_right(firsts, row) - 1
            if i >= 0 and row <= shifts[i][1]:
                return row + shifts[i][2]
        return row

    return now


def rows_of(output_dir: str, shard_folder: str, pending: str, stats, update,
            label_names) -> Callable:
    """For ``matching.full_refs``: ``rows_of(split, shard)`` gives ``(row, image_uri,
    label ids)`` of each record of a shard of this run, by position, from its rows file
    (written into ``shard_folder``), or of a shard an update keeps, by live rank (its
    rows file in the folder, its live index in the run's folder ``pending``, where the
    update wrote it); None for a shard without a rows file."""
    written = {(s.split, s.number): s for s in stats
               if not getattr(s, "kept", False) and s.rows_file}
    kept = {(split, j - len(infos)): info
            for split, infos in (update.kept.items() if update is not None else ())
            for j, info in enumerate(infos)}
    ids = {name: i for i, name in enumerate(label_names)}

    def of(split: str, shard: int):
        if (split, shard) in written:
            s = written[(split, shard)]
            entries = read(storage.join(shard_folder, s.rows_file), s.num_examples)
            positions = range(len(entries))
            now = None  # written from this table: its own rows
        elif (split, shard) in kept and kept[(split, shard)].rows:
            info = kept[(split, shard)]
            entries = read(storage.inside(output_dir, info.rows), info.num_examples)
            positions = index.live_positions(output_dir, info, pending)
            now = renumbering(pending, info.rows)
        else:
            return None
        out = [ref_fields(entries[p], ids) for p in positions]
        if now is not None:
            out = [(now(p, row), uri, labels)
                   for p, (row, uri, labels) in zip(positions, out)]
        return out

    return of
