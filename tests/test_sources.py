import os

import pandas as pd
import pytest

from tfrecorder._inputs import sources
from tfrecorder._errors import ConfigError, Problems, SchemaError
from tests.conftest import validate


def _rows(frame):
    """The rows of a Table's frame (a DataFrame or a ColumnFrame) as lists."""
    return [list(r) for r in zip(*(frame[c].tolist() for c in frame.columns))]


def _write(tmp_path, text, name="data.csv", encoding="utf-8"):
    path = tmp_path / name
    path.write_bytes(text.encode(encoding))
    return str(path)


def test_headerless_automl_csv_with_two_and_three_field_rows(tmp_path):
    path = _write(tmp_path, "TRAIN,gs://b/a.jpg,cat\ngs://b/b.jpg,dog\n\nTEST,gs://b/c.jpg,cat\n")
    t = sources.read(path)
    assert t.row_ids == [1, 2, 4]  # line numbers; the blank line is skipped
    assert _rows(t.frame) == [
        ["TRAIN", "gs://b/a.jpg", "cat"], [None, "gs://b/b.jpg", "dog"], ["TEST", "gs://b/c.jpg", "cat"]]
    assert t.base_dir == str(tmp_path)


def test_csv_with_header_in_any_order_and_case_and_a_bom(tmp_path):
    path = _write(tmp_path, "Label,IMAGE_URI,split\r\ncat,a.jpg,train\r\n", encoding="utf-8-sig")
    t = sources.read(path)
    assert list(t.frame.columns) == ["split", "image_uri", "label"]
    assert _rows(t.frame) == [["train", "a.jpg", "cat"]]
    assert t.row_ids == [2]


def test_quoted_fields_with_commas_and_newlines(tmp_path):
    path = _write(tmp_path, 'split,image_uri,label\nTRAIN,"a, b.jpg","multi\nline"\nTEST,c.jpg,x\n')
    t = sources.read(path)
    assert t.frame["image_uri"].tolist() == ["a, b.jpg", "c.jpg"]
    assert t.row_ids == [2, 4]


def test_wide_automl_rows_are_multi_label(tmp_path):
    path = _write(tmp_path, "TRAIN,a.jpg,cat,dog,\nTEST,b.jpg,cat\n")
    t = sources.read(path)
    assert t.frame["label"].tolist() == [["cat", "dog"], "cat"]


def test_detection_rows_in_both_automl_forms(tmp_path):
    path = _write(tmp_path, "TRAIN,a.jpg,car,0.1,0.2,,,0.5,0.6,,\n"
                            "TRAIN,a.jpg,cat,0.3,0.1,0.9,0.1,0.9,0.4,0.3,0.4\n"
                            "TEST,b.jpg,,,,,,,,,\n")
    t = sources.read(path)
    assert t.kind == "detection"
    assert _rows(t.frame) == [
        ["TRAIN", "a.jpg", "car", 0.1, 0.2, 0.5, 0.6],
        ["TRAIN", "a.jpg", "cat", 0.3, 0.1, 0.9, 0.4],
        ["TEST", "b.jpg", None, None, None, None, None]]


def test_dataframe_keeps_its_index_as_row_ids():
    df = pd.DataFrame({"split": ["TRAIN"], "image_uri": ["a.jpg"], "label": ["x"], "extra": [1]},
                      index=[42])
    t = sources.read(df)
    assert t.row_ids == [42] and list(t.frame.columns) == ["split", "image_uri", "label"]
    assert t.base_dir is None


def test_image_directory_with_split_folders(tmp_path):
    for rel in ["train/cat/1.jpg", "train/dog/2.PNG", "TEST/cat/3.jpg", "train/cat/notes.txt"]:
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
    t = sources.read(str(tmp_path))
    rows = sorted(_rows(t.frame))
    assert rows == [["TEST", str(tmp_path / "TEST/cat/3.jpg"), "cat"],
                    ["train", str(tmp_path / "train/cat/1.jpg"), "cat"],
                    ["train", str(tmp_path / "train/dog/2.PNG"), "dog"]]


def test_image_directory_with_label_folders_only(tmp_path):
    for rel in ["cat/1.jpg", "dog/2.jpg"]:
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
    t = sources.read(str(tmp_path))
    assert sorted(_rows(t.frame)) == [
        [None, str(tmp_path / "cat/1.jpg"), "cat"], [None, str(tmp_path / "dog/2.jpg"), "dog"]]


def test_missing_source_and_wrong_type(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        sources.read(os.path.join(str(tmp_path), "nope.csv"))
    with pytest.raises(ConfigError, match="DataFrame"):
        sources.read(42)


def test_a_relative_image_directory_gives_absolute_paths(tmp_path, monkeypatch):
    p = tmp_path / "tree" / "train" / "cat" / "1.jpg"
    p.parent.mkdir(parents=True)
    p.write_bytes(b"x")
    monkeypatch.chdir(tmp_path)
    t = sources.read("tree")
    assert t.frame["image_uri"].tolist() == [str(p)]
    from tfrecorder._inputs import schema as schemas
    checked = validate(t.frame, t.row_ids, schemas.IMAGE_CSV_SCHEMA, base_dir=t.base_dir)
    assert checked.rows[0].image_uri == str(p)



_PATHS = ["a.jpg", "photos/cat/1.jpg", "x y/2.png", " lead.jpg", "trail.jpg ", "./c.jpg",
          "../d.jpg", "e/../f.jpg", "g/./h.jpg", "i//j.jpg", "k/", "/abs/l.jpg", "~/m.jpg",
          "~n.jpg", "file:///o.jpg", "gs://b/p.jpg", "é/q.jpg", "r\tt.jpg", "s.", "t..jpg",
          ".hidden/u.jpg", "v/~w.jpg", "x\\y.jpg", ""]


@pytest.mark.parametrize("base", ["/data/set", "/", "//", "/data/set/", None])
def test_a_column_of_paths_resolves_as_each_path_does(base, monkeypatch, tmp_path):
    # resolve_all, when it answers, gives what resolve gives path by path; it declines
    # (None) for every column holding a path that resolve treats specially, and for a
    # base that resolve would normalize.
    from tfrecorder import _storage as storage

    monkeypatch.chdir(tmp_path)
    answers = base is None or os.path.normpath(base) == base
    plain = ["a.jpg", "photos/cat/1.jpg", "s.", "t..jpg", "v/~w.jpg", "x\\y.jpg"]
    for path in _PATHS:
        column = ["a.jpg", path, "b.jpg"]
        got = storage.resolve_all(column, base)
        if path in plain and answers:
            assert got == [storage.resolve(p, base) for p in column]
        else:
            assert got is None, path
    assert answers == (storage.resolve_all(plain, base) is not None)


def _tree(root, rels):
    for rel in rels:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")


#: What Finder, Explorer, Jupyter, git and zip tools leave in an image folder.
LITTER = [".DS_Store", ".ipynb_checkpoints/1-checkpoint.jpg", "__MACOSX/train/cat/._1.jpg",
          "train/.DS_Store", "train/cat/._1.jpg", "train/cat/Thumbs.db", "train/cat/desktop.ini",
          "train/cat/.ipynb_checkpoints/1-checkpoint.jpg", "train/.git/objects/ab/cd.png",
          "train/cat/.hidden.png"]


def test_os_and_editor_litter_in_an_image_folder_is_skipped(tmp_path):
    # Taken as a folder, .ipynb_checkpoints at the top would make the tree read as
    # DIR/<label>/<file> (a label ".ipynb_checkpoints", every split folder's image lost),
    # and "._1.jpg" would be a row whose image cannot be read, against the error budget.
    _tree(tmp_path, ["train/cat/1.jpg", "test/dog/2.png", *LITTER])
    t = sources.read(str(tmp_path))
    assert sorted(_rows(t.frame)) == [["test", str(tmp_path / "test/dog/2.png"), "dog"],
                                      ["train", str(tmp_path / "train/cat/1.jpg"), "cat"]]
    flat = tmp_path / "flat"
    _tree(flat, ["cat/1.jpg", ".ipynb_checkpoints/x.jpg", "cat/._1.jpg", "._top.jpg"])
    assert _rows(sources.read(str(flat)).frame) == [[None, str(flat / "cat/1.jpg"), "cat"]]


@pytest.mark.parametrize("rels,layout", [
    (["train/cat/1.jpg", "train/cat/2019/2.jpg", "test/dog/a/b/3.png"],
     "DIR/<split>/<label>/<file>"),
    (["cat/1.jpg", "cat/kitten/2.jpg", "dog/a/b/3.png"], "DIR/<label>/<file>"),
], ids=["split layout", "label layout"])
def test_image_files_deeper_than_the_layout_are_an_error_naming_them(tmp_path, rels, layout):
    # Skipped, their images would be missing from the dataset without a word.
    _tree(tmp_path, rels)
    with pytest.raises(SchemaError) as e:
        sources.read(str(tmp_path))
    deep = sorted(p.row for p in e.value.problems)
    assert deep == sorted(rels[1:])
    assert f"deeper than the layout {layout}" in str(e.value)
    assert "move it into its label's folder" in str(e.value)


def test_a_csv_with_only_its_header_has_no_rows(tmp_path):
    for text in ("split,image_uri,label\n", "split,image_uri,label\n\n\n"):
        path = _write(tmp_path, text)
        with pytest.raises(SchemaError, match=r"has no rows, only a header line"):
            sources.read(path)
    path = _write(tmp_path, "# a comment\nsplit,image_uri,label\n")
    with pytest.raises(SchemaError, match=r"has no rows, only a header line"):
        sources.read(path, header=1)

def test_an_image_directory_with_split_and_other_folders_is_refused(tmp_path):
    # 40 images laid out DIR/<split>/<label>/<file>, and one stray folder at the top:
    # taken as DIR/<label>/<file>, only the stray image would be converted.
    for i in range(40):
        p = tmp_path / ("train" if i % 4 else "test") / ("cat" if i % 2 else "dog") / f"{i}.jpg"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
    (tmp_path / "previews").mkdir()
    (tmp_path / "previews" / "p.jpg").write_bytes(b"x")
    with pytest.raises(SchemaError, match=r"mixed layout: the folders \['test', 'train'\] are "
                                          r"split names but \['previews'\] is not") as e:
        sources.read(str(tmp_path))
    assert "move previews out of" in str(e.value)
    (tmp_path / "previews" / "p.jpg").unlink()
    (tmp_path / "previews").rmdir()
    (tmp_path / ".cache").mkdir()  # a hidden folder is not a label
    assert len(sources.read(str(tmp_path)).frame) == 40


def test_images_dir_is_where_relative_paths_of_a_csv_or_a_dataframe_start(tmp_path):
    images = tmp_path / "pictures"
    images.mkdir()
    path = _write(tmp_path, "TRAIN,a.jpg,cat\n")
    assert sources.read(path).base_dir == str(tmp_path)
    (table,) = sources.chunks(path, images_dir=str(images))(Problems())
    assert table.base_dir == str(images) and _rows(table.frame) == [["TRAIN", "a.jpg", "cat"]]
    frame = pd.DataFrame({"split": ["TRAIN"], "image_uri": ["a.jpg"], "label": ["cat"]})
    (table,) = sources.chunks(frame, images_dir=str(images))(Problems())
    assert table.base_dir == str(images)
    with pytest.raises(ConfigError, match="is not a folder"):
        sources.chunks(path, images_dir=str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match="a folder per split is for COCO"):
        sources.chunks(path, images_dir={"train": str(images)})
    (images / "cat").mkdir()
    with pytest.raises(ConfigError, match="the images of an image directory are its files"):
        sources.chunks(str(images), images_dir=str(images))
