"""A stored record's features in our keys, whatever its folder's layout: the one parse
every reader without TensorFlow shares (``access.values`` and so ``access.Reader``,
PyTorch, Grain and the data report; ``read``; ``inspect``), and the table that
``load()``'s ``tf.data`` parse follows (``_readers.decoding``).

A folder of our layout stores our keys, and its parse is ``example.parse``. A
``model_garden`` folder (``garden``) stores Model Garden's: each of our features is
rebuilt from the stored features its group names, in one of three ways:

- ``RENAME``: one stored feature, values as they are (``image/encoded`` -> ``image``);
- ``INTERLEAVE``: one stored list per coordinate, ours one flat list of tuples
  (``image/object/bbox/{ymin,xmin,ymax,xmax}`` -> ``objects/bbox``);
- ``NUMBER``: a whole number written as text, back to the number (``image/source_id``
  -> ``image_id``, COCO's image id, which the layout carries as its source id; -1 where
  the text is no whole number, as ``image_id`` holds for such an id);
- ``NAMES``: class names, one per object, back to our label ids, the lines of the
  labels file (``image/object/class/text`` -> ``objects/label``). The names, not the
  class ids, because the names are in every record and the ids of a COCO source are
  its own.

What only the layout writes (``image/source_id``, the objects' class ids and areas) is
not one of our features, and no reader is given it. A per-object feature of ours gains
Model Garden's keys by one line of ``OBJECTS``.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from typing import Collection, Mapping

from tfrecorder._errors import CorruptRecordError
from tfrecorder._folder import garden
from tfrecorder._folder.layout import FeatureSpec, labels_file
from tfrecorder._folder.manifest import Manifest
from tfrecorder._folder import example

RENAME, INTERLEAVE, NAMES, NUMBER = "rename", "interleave", "names", "number"

#: Per-object features: our key -> (Model Garden's keys, how ours is rebuilt from them).
OBJECTS = {
    "objects/bbox": (garden.BOX_KEYS, INTERLEAVE),
    "objects/label": ((garden.OBJECT_TEXT,), NAMES),
    "objects/is_crowd": ((garden.OBJECT_CROWD,), RENAME),
    "objects/mask": ((garden.OBJECT_MASK,), RENAME),
}


@dataclasses.dataclass(frozen=True)
class Form:
    """How the records of one ``model_garden`` manifest become our features."""

    #: Our key -> (stored keys, how): every feature of the manifest.
    groups: dict[str, tuple[tuple[str, ...], str]]
    #: The stored keys the groups read, and their specs (``garden.stored_specs``).
    stored: dict[str, FeatureSpec]
    #: The stored keys no feature of ours is made of (``image/source_id``, ...).
    layout_only: frozenset
    #: A class name as stored (UTF-8) -> our label id, for ``NAMES``.
    ids: dict[bytes, int]
    #: The labels file the names are the lines of, for messages.
    labels_file: str

    @classmethod
    def of(cls, manifest: Manifest) -> "Form":
        specs = manifest.features
        groups = {ours: ((stored,), RENAME)
                  for ours, stored in garden._IMAGE_KEYS.items() if ours in specs}
        label = manifest.label_key
        if garden.is_detection(specs):
            groups.update((k, g) for k, g in OBJECTS.items() if k in specs)
            if garden.IMAGE_ID in specs:
                groups[garden.IMAGE_ID] = ((garden.SOURCE_ID,), NUMBER)
            label = next((k for k, (_, how) in OBJECTS.items() if how == NAMES), label)
        elif label is not None:
            groups[label] = ((garden.CLASS_LABEL,), RENAME)
        for key in specs:
            groups.setdefault(key, ((key,), RENAME))
        every = garden.stored_specs(specs)
        used = {k for keys, _ in groups.values() for k in keys}
        names = manifest.vocabularies.get(label, []) if label else []
        return cls(groups, {k: s for k, s in every.items() if k in used},
                   frozenset(set(every) - used),
                   {n.encode("utf-8"): i for i, n in enumerate(names)},
                   labels_file(label) if label else "")

    def parse(self, data: bytes, skip: Collection[str] = frozenset(),
              only: Collection[str] | None = None) -> dict[str, tuple[str, list]]:
        """``example.parse`` of a stored record, in our keys: ``skip`` and ``only`` name
        our features, and so does the result (keys sorted). Features the record holds
        that neither our manifest nor the layout declares keep their keys, as there."""
        wanted = self.groups if only is None else {
            k: self.groups.get(k, ((k,), RENAME)) for k in only}
        wanted = {k: g for k, g in wanted.items() if k not in skip}
        stored_only = None if only is None else {s for keys, _ in wanted.values() for s in keys}
        unwanted = {s for k, (keys, _) in self.groups.items() if k in skip for s in keys}
        parsed = example.parse(data, unwanted | self.layout_only, stored_only, self.stored)
        out = {}
        for key, (keys, how) in wanted.items():
            got = [parsed.pop(s, None) for s in keys]
            if any(g is None for g in got):
                continue  # not in this record: left out, as example.parse leaves it
            out[key] = _REBUILD[how](self, keys, got)
        out.update(parsed)  # those neither we nor the layout declare
        return dict(sorted(out.items()))


def _rename(form: Form, keys, got):
    return got[0]


def _interleave(form: Form, keys, got):
    lengths = {len(values) for _, values in got}
    if len(lengths) > 1:
        raise CorruptRecordError(
            f"features {list(keys)} hold {[len(v) for _, v in got]} values, where they "
            f"hold one per object each; the record was not written so by tfrecorder")
    return got[0][0], [v for values in zip(*(v for _, v in got)) for v in values]


def _names(form: Form, keys, got):
    ids = []
    for name in got[0][1]:
        i = form.ids.get(name)
        if i is None:
            raise CorruptRecordError(
                f"feature {keys[0]!r} holds the class {name!r}, which is no line of "
                f"{form.labels_file}; the record was not written so by tfrecorder")
        ids.append(i)
    return example.INT64, ids


def _number(form: Form, keys, got):
    return example.INT64, [int(v) if _WHOLE.fullmatch(v) else -1 for v in got[0][1]]


_WHOLE = re.compile(rb"-?[0-9]+")
_REBUILD = {RENAME: _rename, INTERLEAVE: _interleave, NAMES: _names, NUMBER: _number}

# One Form per manifest read (a reader parses many records of one manifest); manifests
# are kept with their Form, so that an id is never another manifest's.
_FORMS: dict[int, tuple[Manifest, Form]] = {}
_FORMS_LOCK = threading.Lock()
_KEPT = 16


def form(manifest: Manifest) -> Form | None:
    """The Form of ``manifest``'s records; None for our layout (stored in our keys)."""
    if manifest.layout == garden.DEFAULT:
        return None
    with _FORMS_LOCK:
        kept = _FORMS.get(id(manifest))
        if kept is not None and kept[0] is manifest:
            return kept[1]
    made = Form.of(manifest)
    with _FORMS_LOCK:
        if len(_FORMS) >= _KEPT:
            _FORMS.pop(next(iter(_FORMS)))
        _FORMS[id(manifest)] = (manifest, made)
    return made


def parse(data: bytes, source: Manifest | Mapping[str, FeatureSpec],
          skip: Collection[str] = frozenset(),
          only: Collection[str] | None = None) -> dict[str, tuple[str, list]]:
    """A stored record -> {our key: (dtype, values)}, keys sorted; ``source`` is its
    folder's Manifest (either layout) or, for a record in our keys, the manifest's
    feature specs. Errors as ``example.parse``'s, and a CorruptRecordError for a
    ``model_garden`` record whose objects' lists disagree or name a class the labels
    file does not."""
    if not isinstance(source, Manifest):
        return example.parse(data, skip, only, source)
    made = form(source)
    if made is None:
        return example.parse(data, skip, only, source.features)
    return made.parse(data, skip, only)
