"""One shard's live records as a Parquet file that Hugging Face's ``datasets`` reads.

The columns are the ones ``datasets`` writes itself for the same features, so a folder
of these files loads with ``load_dataset(folder)`` and shows in the Hub's viewer with no
conversion: the image as ``Image``'s struct ``{bytes, path}`` holding the stored bytes
untouched, the label as ``ClassLabel`` (a list of them for multi-label), categorical
columns as ``ClassLabel`` of their vocabulary, and plain values for the rest. The
features are written into the schema's metadata under ``b"huggingface"``, where
``datasets`` looks for them before it infers anything.

A semantic segmentation record's ``segmentation_mask`` is an ``Image`` column too, as
the Hub's segmentation sets hold their ``annotation``/``label`` mask PNGs.

A detection record is laid out as the Hub's detection sets are (``objects``):
``image_id``, ``width`` and ``height`` as columns, and ``objects``, a struct of one list
per field holding each box's pixels, category and what else we hold of it.

``image_uri`` is left out: it is where the image was read from on the converting
machine (often an absolute local path), meaningless to whoever downloads the export.
"""

from __future__ import annotations

import json

from tfrecorder._errors import SchemaError
from tfrecorder._export import objects
from tfrecorder._folder import layout
from tfrecorder._folder.manifest import Manifest
from tfrecorder._folder import example

#: A row group holds at most this many bytes of records: the Hub's viewer reads a row
#: group at a time and refuses larger ones (about 100 MB).
ROW_GROUP_BYTES = 100 * 1024 * 1024
#: ... and at most this many rows, so that a reader asking for one row of a table of
#: small images decodes few others.
ROW_GROUP_ROWS = 1000

#: Features not exported (see the module's docstring).
LEFT_OUT = frozenset({layout.IMAGE_URI})

_VALUE = {example.INT64: "int64", example.FLOAT: "float32", example.BYTES: "string"}
#: The columns of a detection export made by ``objects.record``, not from one feature.
MADE = ("image_id", "width", "height", "objects")


def columns(manifest: Manifest) -> list[str]:
    """The exported columns, in order: the image, the label, then the other features
    in the manifest's order; for detection ``image_id``, the image, ``width``,
    ``height``, ``objects``, then the features ``objects`` does not hold."""
    if objects.is_detection(manifest):
        taken = set(objects.taken(manifest)) | {manifest.image_key} | LEFT_OUT
        return (["image_id", manifest.image_key, "width", "height", "objects"]
                + [k for k in manifest.features if k not in taken])
    first = [k for k in (manifest.image_key, manifest.label_key) if k]
    rest = [k for k in manifest.features if k not in first and k not in LEFT_OUT]
    return first + rest


def hf_features(manifest: Manifest) -> dict:
    """Hugging Face's ``Features.to_dict()`` of the exported columns."""
    made = {"image_id": {"dtype": "int64", "_type": "Value"},
            "width": {"dtype": "int32", "_type": "Value"},
            "height": {"dtype": "int32", "_type": "Value"}}
    out = {}
    for key in columns(manifest):
        if key in MADE:
            out[key] = objects.fields(manifest) if key == "objects" else made[key]
            continue
        spec = manifest.features[key]
        if spec.role in ("image", "mask"):  # a segmentation mask: the Hub's Image too
            out[key] = {"_type": "Image"}
            continue
        names = manifest.vocabularies.get(key)
        one = ({"names": list(names), "_type": "ClassLabel"} if names is not None
               else {"dtype": _VALUE[spec.dtype], "_type": "Value"})
        out[key] = one if spec.shape == [] else {"feature": one, "_type": "List"}
    return out


def schema(manifest: Manifest):
    """The Arrow schema of the exported files, Hugging Face's features in its metadata."""
    import pyarrow as pa

    features = hf_features(manifest)
    fields = [pa.field(key, _arrow(feature)) for key, feature in features.items()]
    info = {"info": {"features": features}}
    return pa.schema(fields, metadata={b"huggingface": json.dumps(info).encode()})


def _arrow(feature: dict):
    """The Arrow type ``datasets`` stores a feature (``to_dict()`` form) as."""
    import pyarrow as pa

    kind = feature.get("_type")
    if kind is None:  # a dict of features: a struct
        return pa.struct([(k, _arrow(v)) for k, v in feature.items()])
    if kind == "Image":
        return pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    if kind == "ClassLabel":
        return pa.int64()
    if kind == "List":
        item = _arrow(feature["feature"])
        return pa.list_(item, feature["length"]) if "length" in feature else pa.list_(item)
    return {"int64": pa.int64(), "int32": pa.int32(), "float32": pa.float32(),
            "string": pa.string(), "bool": pa.bool_()}[feature["dtype"]]


def write(records, manifest: Manifest, where: str, ids=None) -> bytes:
    """The Parquet file of ``records`` (their features as ``access.values`` gives them,
    in order), as bytes. ``where`` names the shard in errors; ``ids(place)`` is the
    ``image_id`` of the ``place``-th record of a detection folder that stores none."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrow = schema(manifest)
    keys = columns(manifest)
    image = manifest.image_key
    # The image bytes are already compressed (JPEG, PNG, ...): compressing them again,
    # keeping a dictionary of them or their min/max statistics would cost time for
    # nothing.
    plain = [k for k in keys if k != image and k != layout.SEGMENTATION_MASK]
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(
            sink, arrow, compression="snappy",
            use_dictionary=plain, write_statistics=plain) as writer:
        batch, size, first = [], 0, 0
        for values in records:
            batch.append(values)
            size += len(values[image]) if image else 0
            if len(batch) >= ROW_GROUP_ROWS or size >= ROW_GROUP_BYTES:
                writer.write_table(_table(batch, keys, manifest, arrow, where, ids, first),
                                   row_group_size=len(batch))
                first += len(batch)
                batch, size = [], 0
        if batch:
            writer.write_table(_table(batch, keys, manifest, arrow, where, ids, first),
                               row_group_size=len(batch))
    return sink.getvalue().to_pybytes()


def _table(batch: list[dict], keys: list[str], manifest: Manifest, arrow, where: str,
           ids, first: int):
    import pyarrow as pa

    made = None
    if objects.is_detection(manifest):
        made = [objects.record(v, manifest, ids(first + i) if ids else first + i, where)
                for i, v in enumerate(batch)]
        for m in made:  # masks as Image's struct; they have no file name
            if "mask" in m["objects"]:
                m["objects"]["mask"] = [{"bytes": b, "path": None}
                                        for b in m["objects"]["mask"]]
    arrays = []
    for key in keys:
        if key in MADE:
            arrays.append(pa.array([m[key] for m in made], arrow.field(key).type))
            continue
        spec = manifest.features[key]
        got = [values.get(key) for values in batch]
        if spec.role == "image":
            names = [_text(v.get(layout.IMAGE_NAME), key, where) if layout.IMAGE_NAME in v
                     else None for v in batch]
            arrays.append(pa.StructArray.from_arrays(
                [pa.array(got, pa.binary()), pa.array(names, pa.string())],
                fields=list(arrow.field(key).type)))
            continue
        if spec.role == "mask":  # the PNG's bytes, as Image's struct; no file name
            arrays.append(pa.StructArray.from_arrays(
                [pa.array(got, pa.binary()), pa.array([None] * len(got), pa.string())],
                fields=list(arrow.field(key).type)))
            continue
        if spec.dtype == example.BYTES:
            got = ([_text(v, key, where) for v in got] if spec.shape == []
                   else [[_text(x, key, where) for x in v] for v in got])
        elif spec.shape != []:
            got = [list(v) for v in got]
        arrays.append(pa.array(got, arrow.field(key).type))
    return pa.Table.from_arrays(arrays, schema=arrow)


def _text(value, key: str, where: str) -> str | None:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise SchemaError(
            f"{where}: feature {key!r} holds bytes that are not UTF-8 text "
            f"({value[:20]!r}...), which a Parquet export holds as a string column; "
            f"convert the table with that column as text") from None
