"""Column types for a schema: what each column of the input table is and becomes.

| type               | role    | feature written                                         |
|--------------------|---------|---------------------------------------------------------|
| ``SplitKey``       | split   | none: picks the split (train / validation / test)       |
| ``ImageUri``       | image   | ``image`` bytes and ``image_*`` facts of the file       |
| ``MaskUri``        | mask    | ``segmentation_mask``: the PNG of class ids, its bytes  |
| ``Label``          | label   | int64 id; whole numbers pass through, else a vocabulary |
| ``StringLabel``    | label   | int64 id in the sorted vocabulary of the values         |
| ``IntegerLabel``   | label   | int64, the value itself                                 |
| ``IntegerInput``   | feature | int64                                                   |
| ``FloatInput``     | feature | float                                                   |
| ``StringInput``    | feature | bytes (UTF-8)                                           |
| ``CategoricalInput``| feature| int64 id in the sorted vocabulary, written beside data  |

A schema maps column names to these classes, or to instances when an option is needed:
``types.FloatInput(optional=True, default=0.0)``.

TFRecorder's names work too: every type has ``feature_spec`` (the ``tf.io`` parsing spec
of what is written; TensorFlow is imported only when it is read) and ``allowed_values``,
``SupportedType`` is the base class, and ``ImageSupportString`` / ``ImageDim`` name the
types of the image features a conversion adds.
"""

from __future__ import annotations

from typing import Any


class _FeatureSpec:
    """``Type.feature_spec``: TFRecorder's ``tf.io.FixedLenFeature`` of a type, made
    when first read, so that importing tfrecorder never imports TensorFlow."""

    def __get__(self, obj, cls):
        from tfrecorder import _extras

        tf = _extras.require("tensorflow", "feature_spec")

        dtype = {"int64": tf.int64, "float": tf.float32}.get(cls.dtype or "bytes", tf.string)
        return tf.io.FixedLenFeature([], dtype)


class ColumnType:
    """Base of every column type; ``role`` says what the column does, ``dtype`` what it writes."""

    role = "feature"
    dtype: str | None = None
    #: TFRecorder's list of the values a column may hold; [] for any.
    allowed_values: list = []
    feature_spec = _FeatureSpec()

    def __init__(self, optional: bool = False, default: Any = None):
        self.optional = optional
        self.default = default

    def __repr__(self) -> str:
        args = []
        if self.optional:
            args.append("optional=True")
        if self.default is not None:
            args.append(f"default={self.default!r}")
        return f"{type(self).__name__}({', '.join(args)})"

    def __eq__(self, other: object) -> bool:
        return (type(self) is type(other) and self.optional == other.optional
                and self.default == other.default)

    def __hash__(self) -> int:
        return hash((type(self), self.optional, self.default))


class SplitKey(ColumnType):
    """The split of each row: TRAIN, VALIDATION, TEST (any case, AutoML aliases), or UNASSIGNED."""

    role = "split"
    dtype = "bytes"
    # TFRecorder's list ended with DISCARD, its own marker for rows it dropped; here a row
    # is never dropped (a bad one goes to errors.jsonl), and UNASSIGNED lets us choose.
    allowed_values = ["TRAIN", "VALIDATION", "TEST", "UNASSIGNED"]


class ImageUri(ColumnType):
    """A path or ``gs://`` URI of an image file; relative paths resolve against the CSV's folder."""

    role = "image"
    dtype = "bytes"


class MaskUri(ColumnType):
    """A path or ``gs://`` URI of a segmentation mask: a one-channel 8-bit PNG of class
    ids, one per pixel, of its row's image's size; relative paths resolve as images do."""

    role = "mask"
    dtype = "bytes"


class Label(ColumnType):
    """A class label: whole numbers are kept as ids, anything else gets a sorted vocabulary."""

    role = "label"
    dtype = "int64"


class StringLabel(Label):
    """A class label always mapped through the sorted vocabulary of its values."""


class IntegerLabel(Label):
    """A class label that already is a non-negative integer id."""


class IntegerInput(ColumnType):
    dtype = "int64"


class FloatInput(ColumnType):
    dtype = "float"


class StringInput(ColumnType):
    dtype = "bytes"


class CategoricalInput(ColumnType):
    """A string category mapped to an int64 id in the sorted vocabulary of its values."""

    dtype = "int64"


#: TFRecorder's name of the base class.
SupportedType = ColumnType


class ImageSupportString(StringInput):
    """TFRecorder's type of the bytes image features a conversion adds (``image``,
    ``image_name``, ``image_uri``); not a column type to declare."""


class ImageDim(IntegerInput):
    """TFRecorder's type of the int64 image features a conversion adds (``image_height``,
    ``image_width``, ``image_channels``); not a column type to declare."""
