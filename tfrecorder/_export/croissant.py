"""``croissant.json``: the Croissant 1.1 description of a Parquet export.

Croissant (MLCommons) is the metadata that dataset search, TFDS's ``CroissantBuilder``
and the datasets tracks of conferences read. An export's description lists every file
with its SHA-256, one file set per split (``data/{split}-*.parquet``) and one record set
per split whose fields are the Parquet columns (the image through the ``bytes`` of its
struct), a record set of the label names, and the responsible-AI fields: what the user
gave (any ``rai:`` key of ``metadata``) and what only the folder knows, from its data
report (duplicates and leaks between splits as ``rai:dataLimitations``) and its
manifest (records per split and label as ``rai:dataCollectionRawData``).

A detection export's record set has the ``objects`` column as a repeated field whose
sub-fields are read from the struct's lists (``jsonPath``), so a record reads as a list
of boxes, each with its pixels, category and what else is held of it.
"""

from __future__ import annotations

import json

from tfrecorder._export import objects
from tfrecorder._folder.manifest import Manifest
from tfrecorder._folder import example

NAME = "croissant.json"

# Croissant 1.1's context, as mlcroissant writes it for a 1.1 document.
_CONTEXT = {
    "@language": "en", "@vocab": "https://schema.org/",
    "arrayShape": "cr:arrayShape", "citeAs": "cr:citeAs", "column": "cr:column",
    "conformsTo": "dct:conformsTo", "containedIn": "cr:containedIn",
    "cr": "http://mlcommons.org/croissant/", "rai": "http://mlcommons.org/croissant/RAI/",
    "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "dct": "http://purl.org/dc/terms/",
    "examples": {"@id": "cr:examples", "@type": "@json"},
    "equivalentProperty": "cr:equivalentProperty",
    "extract": "cr:extract", "field": "cr:field", "fileProperty": "cr:fileProperty",
    "fileObject": "cr:fileObject", "fileSet": "cr:fileSet", "format": "cr:format",
    "includes": "cr:includes", "isArray": "cr:isArray", "isLiveDataset": "cr:isLiveDataset",
    "jsonPath": "cr:jsonPath", "key": "cr:key", "md5": "cr:md5",
    "parentField": "cr:parentField", "path": "cr:path", "recordSet": "cr:recordSet",
    "references": "cr:references", "regex": "cr:regex", "repeated": "cr:repeated",
    "replace": "cr:replace", "samplingRate": "cr:samplingRate", "sc": "https://schema.org/",
    "separator": "cr:separator", "source": "cr:source", "subField": "cr:subField",
    "transform": "cr:transform",
}
_TYPE = {example.INT64: "sc:Integer", example.FLOAT: "sc:Float", example.BYTES: "sc:Text"}
PARQUET = "application/x-parquet"


def document(manifest: Manifest, version: int, metadata: dict, files: dict,
             columns: list[str], findings: dict | None) -> dict:
    """The Croissant document of an export: ``files`` its data files (``{name:
    {"sha256"}}``), ``columns`` the exported features, ``findings`` the data report's
    counts (None without a report)."""
    name = str(metadata.get("name") or manifest.name)
    doc = {
        "@context": _CONTEXT, "@type": "sc:Dataset",
        "conformsTo": "http://mlcommons.org/croissant/1.1",
        "name": name,
        "description": str(metadata.get("description")
                           or f"Version {version} of {name}, exported by tfrecorder."),
        "version": f"{version}.0.0",
        "url": str(metadata.get("url") or "."),
        "license": str(metadata.get("license") or "unknown"),
        "creator": _creator(metadata.get("creator")),
        "datePublished": (manifest.published or "")[:10] or None,
        "citeAs": str(metadata.get("citeAs") or f"{name}, version {version}"),
    }
    doc["distribution"] = (
        [{"@type": "cr:FileObject", "@id": n, "name": n, "contentUrl": n,
          "encodingFormat": PARQUET, "sha256": f["sha256"]} for n, f in sorted(files.items())]
        + [{"@type": "cr:FileSet", "@id": f"parquet-{s}", "name": f"parquet-{s}",
            "encodingFormat": PARQUET, "includes": f"data/{s}-*.parquet"}
           for s in manifest.splits])
    doc["recordSet"] = [_split_set(manifest, s, columns) for s in manifest.splits]
    label = manifest.label_key
    if label and manifest.label_names:
        doc["recordSet"].append({
            "@type": "cr:RecordSet", "@id": "label_names", "name": "label_names",
            "description": f"The names of the ids of {label!r}.",
            "key": {"@id": "label_names/id"},
            "field": [{"@type": "cr:Field", "@id": "label_names/id", "name": "id",
                       "dataType": "sc:Integer"},
                      {"@type": "cr:Field", "@id": "label_names/name", "name": "name",
                       "dataType": "sc:Text"}],
            "data": [{"label_names/id": i, "label_names/name": n}
                     for i, n in enumerate(manifest.label_names)]})
    doc.update(_rai(manifest, findings))
    doc.update({k: v for k, v in metadata.items() if k.startswith("rai:")})
    return {k: v for k, v in doc.items() if v is not None}


def _creator(creator):
    if creator is None:
        return None
    if isinstance(creator, dict):
        return {"@type": "sc:Person", **creator}
    return {"@type": "sc:Person", "name": str(creator)}


def _split_set(manifest: Manifest, split: str, columns: list[str]) -> dict:
    fields = []
    for key in columns:
        if key in ("image_id", "width", "height"):
            fields.append({"@type": "cr:Field", "@id": f"{split}/{key}", "name": key,
                           "dataType": "sc:Integer", "source": {
                               "fileSet": {"@id": f"parquet-{split}"},
                               "extract": {"column": key}}})
            continue
        if key == "objects":
            fields.append(_objects(manifest, split))
            continue
        spec = manifest.features[key]
        source = {"fileSet": {"@id": f"parquet-{split}"}, "extract": {"column": key}}
        field = {"@type": "cr:Field", "@id": f"{split}/{key}", "name": key}
        if spec.role in ("image", "mask"):  # a segmentation mask is an image too
            source["transform"] = {"jsonPath": "bytes"}
            field["dataType"] = "sc:ImageObject"
        else:
            field["dataType"] = _TYPE[spec.dtype]
            if spec.shape != []:
                field["isArray"] = True
                field["arrayShape"] = "-1"
        field["source"] = source
        fields.append(field)
    return {"@type": "cr:RecordSet", "@id": split, "name": split,
            "description": f"The {split} split: {manifest.splits[split].num_examples} records.",
            "field": fields}


#: ``objects``' fields (``objects.fields``) -> their Croissant type.
_OBJECT_TYPES = {"id": "sc:Integer", "area": "sc:Float", "bbox": "sc:Float",
                 "category": "sc:Integer", "mask": "sc:ImageObject",
                 "keypoints": "sc:Float", "num_keypoints": "sc:Integer"}


def _objects(manifest: Manifest, split: str) -> dict:
    """The ``objects`` column as a repeated field, one sub-field per list of the
    struct: a record's boxes read as a list of ``{sub-field: value}``."""
    subs = []
    for name, feature in objects.fields(manifest).items():
        at = f"{split}/objects/{name}"
        transforms = [{"jsonPath": name}] + ([{"jsonPath": "bytes"}] if name == "mask" else [])
        sub = {"@type": "cr:Field", "@id": at, "name": name,
               "dataType": _OBJECT_TYPES.get(name, "sc:Boolean"),
               "source": {"fileSet": {"@id": f"parquet-{split}"},
                          "extract": {"column": "objects"}, "transform": transforms}}
        if name in ("bbox", "keypoints"):  # a list of numbers per box
            sub.update(isArray=True, arrayShape="-1")
        if name == "mask":  # an image per box, each read on its own
            sub["repeated"] = True
        subs.append(sub)
    return {"@type": "cr:Field", "@id": f"{split}/objects", "name": "objects",
            "description": "The image's boxes: COCO's [x, y, width, height] in pixels, "
                           "the category's id (label_names), and what else is held.",
            "isArray": True, "arrayShape": "-1", "subField": subs}


def _rai(manifest: Manifest, findings: dict | None) -> dict:
    """The responsible-AI fields only the folder knows."""
    counts = {s: {"records": i.num_examples, "labels": i.label_counts}
              for s, i in manifest.splits.items()}
    out = {"rai:dataCollectionRawData": "Records per split and label: "
           + json.dumps(counts, sort_keys=True)}
    if findings is not None:
        out["rai:dataLimitations"] = (
            "tfrecorder's data report found "
            + (", ".join(f"{n} {kind}" for kind, n in findings.items()) if findings
               else "no duplicates, no leaks between splits and no conflicting labels")
            + " (duplicates: the same image twice in a split; leaks: in two splits).")
    return out


def text(doc: dict) -> bytes:
    return json.dumps(doc, indent=1, ensure_ascii=False).encode() + b"\n"
