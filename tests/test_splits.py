import collections

import pytest

from tfrecorder._inputs import splits
from tfrecorder._folder import split_names


@pytest.mark.parametrize("value,expected", [
    ("TRAIN", "train"), ("training", "train"), (" Train ", "train"),
    ("VALIDATE", "validation"), ("Validation", "validation"), ("val", "validation"),
    ("TEST", "test"), ("UNASSIGNED", None), ("", None), (None, None), (float("nan"), None),
])
def test_canonical_spellings(value, expected):
    assert splits.canonical(value) == expected


@pytest.mark.parametrize("value", ["DISCARD", "holdout", "trian", 3])
def test_unknown_split_is_refused(value):
    with pytest.raises(split_names.UnknownSplit, match="TRAIN, VALIDATION"):
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


def test_the_split_hash_of_an_image_is_where_it_is_not_how_it_is_spelled(tmp_path):
    from tfrecorder import _storage as storage

    data = tmp_path / "data"
    spelled = [storage.resolve("images/cat_1.jpg", str(data)),  # a CSV in data/
               storage.resolve("./data/images/../images/cat_1.jpg", str(tmp_path)),  # cwd
               str(data / "images" / "cat_1.jpg")]  # absolute
    assert {splits.hashed_name(p) for p in spelled} == {"images/cat_1.jpg"}
    # The same tree elsewhere (another machine, another checkout) hashes the same.
    assert splits.hashed_name("/elsewhere/else/images/cat_1.jpg") == "images/cat_1.jpg"
    assert splits.hashed_name("gs://b/x/images/cat_1.jpg") == "gs://b/x/images/cat_1.jpg"


def test_an_image_grouped_from_rows_keeps_the_split_stored_for_it():
    from tfrecorder._errors import Problems

    fractions = splits.check_fractions(splits.DEFAULT_FRACTIONS)
    keys = [f"img/{i}.jpg" for i in range(40)]
    stored = {f"/data/img/{i}.jpg": "test" for i in range(20)}
    groups = splits.group_by_image(
        keys, [None] * 40, list(range(40)), "image_uri", fractions, Problems(),
        lambda key: "/data/" + key, lambda key, location: stored.get(location))
    assert [s for _, _, s in groups[:20]] == ["test"] * 20
    assert [s for _, _, s in groups[20:]] == [
        splits.assign(splits.hashed_name("/data/" + k), fractions) for k in keys[20:]]
