import numpy as np
import pytest

from tfrecorder._inputs import labels
from tfrecorder._folder import layout


@pytest.mark.parametrize("value,expected", [
    (3, 3), ("3", 3), (" 12 ", 12), (3.0, 3), (np.int64(5), 5), ("+4", 4), ("1.0", 1), ("2.00", 2),
    (-1, None), ("3.5", None), (2.5, None), ("cat", None), (True, None), ("1e3", None),
])
def test_whole_numbers(value, expected):
    assert labels.as_whole_number(value) == expected


def test_vocabulary_is_sorted_distinct_and_ignores_nulls():
    assert labels.vocabulary_of(["dog", "cat", None, " cat", "", "ant"]) == ["ant", "cat", "dog"]


def test_integer_names_cover_every_id():
    assert labels.integer_names([2, 0, 2]) == ["0", "1", "2"]


def test_labels_file_round_trip():
    names = ["ant", "cat", "dög"]
    assert labels.parse_labels_file(labels.format_labels_file(names)) == names
    assert labels.format_labels_file(names) == "ant\ncat\ndög\n"
    assert layout.labels_file("label") == "label.labels.txt"
    assert layout.labels_file("objects/label") == "objects-label.labels.txt"


def test_a_label_with_a_line_break_cannot_be_written():
    with pytest.raises(ValueError, match="line break"):
        labels.format_labels_file(["a\nb"])
