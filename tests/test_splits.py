import collections

import pytest

from tfrecorder import _splits as splits


@pytest.mark.parametrize("value,expected", [
    ("TRAIN", "train"), ("training", "train"), (" Train ", "train"),
    ("VALIDATE", "validation"), ("Validation", "validation"), ("val", "validation"),
    ("TEST", "test"), ("UNASSIGNED", None), ("", None), (None, None), (float("nan"), None),
])
def test_canonical_spellings(value, expected):
    assert splits.canonical(value) == expected


@pytest.mark.parametrize("value", ["DISCARD", "holdout", "trian", 3])
def test_unknown_split_is_refused(value):
    with pytest.raises(splits.UnknownSplit, match="TRAIN, VALIDATION"):
        splits.canonical(value)


def test_assignment_is_deterministic_and_follows_the_fractions():
    fractions = splits.check_fractions(splits.DEFAULT_FRACTIONS)
    keys = [f"gs://bucket/img_{i}.jpg" for i in range(20000)]
    first = [splits.assign(k, fractions) for k in keys]
    assert first == [splits.assign(k, fractions) for k in keys]
    counts = collections.Counter(first)
    assert abs(counts["train"] / 20000 - 0.8) < 0.02
    assert abs(counts["validation"] / 20000 - 0.1) < 0.02
    assert abs(counts["test"] / 20000 - 0.1) < 0.02


def test_custom_fractions_drop_empty_splits():
    fractions = splits.check_fractions({"TRAIN": 0.5, "test": 0.5, "validation": 0})
    assert fractions == {"train": 0.5, "test": 0.5}
    assert {splits.assign(str(i), fractions) for i in range(200)} == {"train", "test"}


@pytest.mark.parametrize("fractions,match", [
    ({"train": 0.5, "test": 0.4}, "add up to 0.9"),
    ({"train": 1.2, "test": -0.2}, "number in"),
    ({"holdout": 1.0}, "unknown split"),
])
def test_bad_fractions_are_refused(fractions, match):
    with pytest.raises(ValueError, match=match):
        splits.check_fractions(fractions)
