"""Whether a table can update a folder's latest version, and the labels it reads with.

An update (docs/versions.md) keeps the stored records of the latest version, its
parent: every version holds one dataset with the same features, image settings,
compression and label ids. ``check_updatable`` refuses, before anything is written, a
table or options that would break that; ``label_vocabulary`` gives the label names an
update reads its table with (the stored ones first). Its own module because these
checks need only the parent's manifest, never its rows files.
"""

from __future__ import annotations

import dataclasses

from tfrecorder._errors import ConfigError
from tfrecorder._folder import layout
from tfrecorder._folder.manifest import Manifest
from tfrecorder._inputs.labels import label_feature  # the label names an update reads by


def check_updatable(output_dir: str, parent: Manifest, opts, features: dict,
                    vocabularies: dict, label_column: str | None) -> None:
    """ConfigError, before anything is written, when ``output_dir``'s latest version
    cannot be updated with this table and these options."""
    fix = ("convert once with mode='overwrite' (--overwrite) to start over "
           "at version 1, or write to another folder")
    missing = [s.file for info in parent.splits.values() for s in info.shards if not s.rows]
    if missing:
        raise ConfigError(
            f"{output_dir} was converted before rows files existed ({missing[0]} has none), "
            f"so an update cannot tell which rows changed; {fix}")
    if opts.mode == "update" and parent.compression == "gzip":
        raise ConfigError(
            f"{output_dir} holds gzip shards: an update retires records through index "
            f"files, which gzip shards cannot have; use mode='append' (which only adds), "
            f"or convert once without compression with mode='overwrite' (--overwrite)")
    if opts.mode == "update" and any(not s.index for info in parent.splits.values()
                                     for s in info.shards):
        raise ConfigError(
            f"{output_dir} has shards without index files: an update retires records "
            f"through them; run `tfrecorder index {output_dir}` first")
    if opts.name != parent.name:
        raise ConfigError(f"name={opts.name!r}, but {output_dir} holds the dataset "
                          f"{parent.name!r}: give name={parent.name!r}, or {fix}")
    if opts.compression != parent.compression:
        raise ConfigError(f"compression={opts.compression!r}, but {output_dir} was written "
                          f"with compression={parent.compression!r}: give the same, or {fix}")
    wanted = ({"shorter_side": opts.shorter_side, "jpeg_quality": opts.jpeg_quality}
              if opts.shorter_side is not None else {})
    if wanted != dict(parent.image_options):
        raise ConfigError(
            f"image settings {wanted or 'none (images stored as they are)'} differ from "
            f"those {output_dir} was written with "
            f"({dict(parent.image_options) or 'none (images stored as they are)'}): give "
            f"the same shorter_side and jpeg_quality, or {fix}")
    theirs = {k: dataclasses.asdict(v) for k, v in parent.features.items()}
    ours = {k: dataclasses.asdict(v) for k, v in features.items()}
    if theirs != ours:
        gone = sorted(set(theirs) - set(ours))
        new = sorted(set(ours) - set(theirs))
        other = sorted(k for k in set(ours) & set(theirs) if ours[k] != theirs[k])
        said = "; ".join(x for x in (
            f"features no longer there: {gone}" if gone else "",
            f"new features: {new}" if new else "",
            f"features of another type or shape: {other}" if other else "") if x)
        raise ConfigError(f"the table's columns differ from those {output_dir} was written "
                          f"from ({said}); every version holds the same features: {fix}")
    label_key = label_feature(features, label_column)
    for column, names in vocabularies.items():
        old = parent.vocabularies.get(column, [])
        if column == label_key:
            if list(names[:len(old)]) != list(old):
                raise ConfigError(
                    f"the label ids of {column!r} would change ({old[:5]} stored, "
                    f"{list(names[:5])} now); label ids never change between versions: "
                    f"give label_vocabulary with the stored names first "
                    f"({layout.labels_file(column)}), or {fix}")
        elif list(names) != list(old):
            raise ConfigError(
                f"the categories of column {column!r} changed ({old[:5]} stored, "
                f"{list(names[:5])} now), which would change their ids; {fix}")


def label_vocabulary(parent: Manifest, label_column: str | None, given):
    """The label vocabulary an update reads its table with: ``given`` when given (the
    stored names must come first, checked later), else the stored names, to which the
    table's new names are appended (``None``: integer labels, ids as they are)."""
    if given is not None or label_column is None:
        return given
    return list(parent.vocabularies.get(label_feature(parent.features, label_column), []))
