"""Schemas: column name -> column type, built in Python or read from JSON.

A table is checked against a schema by ``validation.validate``.
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping

from tfrecorder import _storage as storage, types
from tfrecorder._folder import layout
from tfrecorder._errors import ConfigError

#: Column names become feature keys and, escaped (``layout.escape``), file names: letters,
#: digits, ``_ - . /`` and spaces, not starting with a dot or a slash.
_COLUMN_NAME = re.compile(r"[^\W.][\w\-. /]*")


class Schema(Mapping[str, types.ColumnType]):
    """An ordered mapping of column name -> column type (see ``tfrecorder.types``).

    Types may be given as classes (``types.FloatInput``) or instances
    (``types.FloatInput(optional=True)``). At most one ImageUri, one SplitKey and one
    label column. The column order is the field order of a CSV without a header.
    """

    def __init__(self, columns: Mapping[str, Any]):
        cols: dict[str, types.ColumnType] = {}
        for name, kind in dict(columns).items():
            if isinstance(kind, type) and issubclass(kind, types.ColumnType):
                kind = kind()
            if not isinstance(kind, types.ColumnType) or type(kind) is types.ColumnType:
                raise ConfigError(
                    f"schema column {name!r}: {kind!r} is not a column type; "
                    f"use one of tfrecorder.types (e.g. types.StringInput)"
                )
            if not isinstance(name, str) or not _COLUMN_NAME.fullmatch(name):
                raise ConfigError(
                    f"schema column name {name!r}: column names become feature keys and file "
                    f"names; use letters, digits, '_', '-', '.', '/' or spaces, not starting "
                    f"with '.' or '/'")
            cols[name] = kind
        if not cols:
            raise ConfigError("the schema has no columns")
        for role in ("image", "split", "label", "mask"):
            named = [n for n, t in cols.items() if t.role == role]
            if len(named) > 1:
                raise ConfigError(
                    f"schema columns {named} all have the {role} role; keep one of them"
                )
        has_image = any(kind.role == "image" for kind in cols.values())
        mask = next((n for n, t in cols.items() if t.role == "mask"), None)
        if mask is not None and not has_image:
            raise ConfigError(f"schema column {mask!r} is a MaskUri, the mask of each row's "
                              f"image, but no column is an ImageUri; add the image column")
        for name, kind in cols.items():
            # The ImageUri column may be called ``image`` or ``image_uri``: its values
            # become those features. Any other column of an image feature's name would
            # be replaced by it; without an ImageUri column no image feature is written.
            if has_image and name in layout.IMAGE_FEATURES and not (
                    kind.role == "image" and name in (layout.IMAGE, layout.IMAGE_URI)):
                raise ConfigError(
                    f"schema column {name!r} would collide with the image feature of the same "
                    f"name; rename the column"
                )
        files: dict[str, str] = {}
        for name in cols:
            other = files.setdefault(layout.labels_file(name), name)
            if other != name:
                raise ConfigError(
                    f"schema columns {other!r} and {name!r} would share the file name "
                    f"{layout.labels_file(name)!r}; rename one of them")
        self._cols = cols

    # TFRecorder's attribute names, for code written against it.
    @property
    def split_key(self) -> str | None:
        return self.column("split")

    @property
    def image_uri_key(self) -> str | None:
        return self.column("image")

    @property
    def label_key(self) -> str | None:
        return self.column("label")

    @property
    def input_schema_map(self) -> dict[str, types.ColumnType]:
        """The columns and their types, as TFRecorder's ``Schema.input_schema_map``."""
        return dict(self._cols)

    def get_input_keys(self):
        """The column names in order, as TFRecorder's ``Schema.get_input_keys()``."""
        return self._cols.keys()

    def __getitem__(self, key: str) -> types.ColumnType:
        return self._cols[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._cols)

    def __len__(self) -> int:
        return len(self._cols)

    def __repr__(self) -> str:
        return f"Schema({self._cols!r})"

    def column(self, role: str) -> str | None:
        """The name of the column with ``role`` ("image", "split", "label", "mask"), if any."""
        return next((n for n, t in self._cols.items() if t.role == role), None)


def from_json(spec) -> Schema:
    """A Schema from JSON text, a path to a JSON file, or the parsed mapping.

    ``{"split": "SplitKey", "image_uri": "ImageUri", "Age": {"type": "FloatInput",
    "optional": true}}``: type names are those of ``tfrecorder.types``.
    """
    import json

    if isinstance(spec, str):
        try:
            text = spec if spec.lstrip().startswith("{") else storage.read_bytes(spec).decode("utf-8")
        except FileNotFoundError:
            raise ConfigError(f"schema file {spec!r} does not exist") from None
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"schema is not valid JSON: {e}") from None
        except RecursionError:
            raise ConfigError("schema is JSON nested too deep to read: a schema file holds "
                              "one object, {\"column\": \"TypeName\", ...}") from None
    if not isinstance(spec, Mapping):
        raise ConfigError("a schema file holds a JSON object: {\"column\": \"TypeName\", ...}")
    columns = {}
    for name, kind in spec.items():
        options = {}
        if isinstance(kind, Mapping):
            options = {k: v for k, v in kind.items() if k != "type"}
            kind = kind.get("type")
        cls = getattr(types, str(kind), None)
        if not (isinstance(cls, type) and issubclass(cls, types.ColumnType)):
            known = sorted(n for n in dir(types) if isinstance(getattr(types, n), type)
                           and issubclass(getattr(types, n), types.ColumnType)
                           and n != "ColumnType")
            raise ConfigError(f"schema column {name!r}: unknown type {kind!r}; use one of {known}")
        try:
            columns[name] = cls(**options)
        except TypeError:
            raise ConfigError(f"schema column {name!r}: options {sorted(options)}; "
                              f"use 'optional' and 'default'") from None
    return Schema(columns)


#: AutoML Vision's single-label image classification table.
IMAGE_CSV_SCHEMA = Schema(
    {"split": types.SplitKey, "image_uri": types.ImageUri, "label": types.Label}
)

#: A semantic segmentation table: each image's mask, a PNG of class ids
#: (``types.MaskUri``). Taken for a CSV or DataFrame with a ``mask_uri`` column and no
#: label (``sources.schema_of``).
SEGMENTATION_CSV_SCHEMA = Schema(
    {"split": types.SplitKey, "image_uri": types.ImageUri, "mask_uri": types.MaskUri}
)
