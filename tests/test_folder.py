"""``tfrecorder.open(out)``: an output folder at one version, every reader and verb of it
seeing that version (docs/versions.md), on real conversions and updates."""

import pytest

import tfrecorder
from tests.test_update import _images, _table


@pytest.fixture
def two_versions(tmp_path):
    """A folder at version 2 (a row relabelled, one added) and the tables of both."""
    paths = _images(tmp_path / "img", 6)
    out = tmp_path / "out"
    first = _table(paths)
    tfrecorder.convert(first, str(out))
    second = _table(paths + _images(tmp_path / "img", 1, start=6))
    second.loc[1, "label"] = "owl"
    tfrecorder.convert(second, str(out), mode="update")
    return out, first, second


def _labels(frame):
    return sorted(zip(frame["image_uri"], frame["label"]))


@pytest.mark.slow
def test_a_folder_reads_the_version_it_was_opened_at_whatever_is_published_after(
        two_versions):
    out, first, second = two_versions
    folder = tfrecorder.open(str(out))
    old = tfrecorder.open(str(out), version=1)
    assert (folder.version, old.version) == (2, 1)
    assert folder.splits == ["train", "test"] and "version=2" in repr(folder)
    assert _labels(folder.read()) == _labels(second)
    assert _labels(old.read()) == _labels(first)
    # A third version published meanwhile: the open folder still reads its own.
    third = second.drop(index=[0])
    tfrecorder.convert(third, str(out), mode="update")
    assert _labels(folder.read()) == _labels(second)
    assert len(folder.reader("train")) == 5 and len(folder.reader("test")) == 2
    assert folder.verify().records == 7 and folder.verify().version == 2
    assert folder.report().data["version"] == 2
    assert tfrecorder.open(str(out)).report().data["version"] == 3
    assert list(folder.versions()["version"]) == [1, 2, 3]
    assert folder.manifest.vocabularies["label"] == ["cat", "dog", "owl"]
    # Version 1's report is the folder's quality.json, which later versions replace.
    with pytest.raises(tfrecorder.ConfigError, match="replaced by version 3"):
        old.report()
    with pytest.raises(tfrecorder.ConfigError, match="this Folder reads version 2"):
        folder.reader("train", version=1)


@pytest.mark.slow
def test_the_verbs_that_publish_act_on_the_latest_version_only(two_versions, tmp_path):
    out, _, second = two_versions
    old = tfrecorder.open(str(out), version=1)
    for verb in (lambda: old.update(second), old.compact, lambda: old.vacuum(keep=1)):
        with pytest.raises(tfrecorder.ConfigError, match=r"latest version \(2\)"):
            verb()
    folder = tfrecorder.open(str(out))
    with pytest.raises(tfrecorder.ConfigError, match="mode='overwrite'"):
        folder.update(second, mode="overwrite")
    assert folder.update(second).unchanged
    done = folder.compact()
    assert done.version == 3 and folder.version == 2  # the folder keeps its version
    assert tfrecorder.open(str(out)).vacuum(keep=1).versions == (1, 2)
    with pytest.raises(tfrecorder.ConfigError, match="has no version 2; it has version 3"):
        folder.read()  # its version was removed


def test_opening_a_folder_without_a_conversion_or_version_says_so(tmp_path):
    with pytest.raises(tfrecorder.IncompleteOutputError):
        tfrecorder.open(str(tmp_path))


@pytest.mark.slow
def test_a_report_shows_the_records_of_the_version_opened_whatever_is_published_after(
        tmp_path):
    import shutil

    paths = _images(tmp_path / "img", 6)
    copy = str(tmp_path / "img" / "copy.jpg")
    shutil.copy(paths[3], copy)  # the same bytes twice: a finding shown with thumbnails
    out = str(tmp_path / "out")
    tfrecorder.convert(_table(paths + [copy]), out)
    tfrecorder.convert(_table(paths[1:] + [copy]), out, mode="update")
    folder = tfrecorder.open(out)
    page = folder.report()._repr_html_()
    assert folder.version == 2 and page.count("data:image/jpeg;base64") >= 2
    # Version 3 retires both copies: its records at version 2's positions are others.
    tfrecorder.convert(_table(paths[1:3] + paths[4:]), out, mode="update")
    assert folder.report()._repr_html_() == page
    assert folder.report().data["version"] == 2


@pytest.mark.slow
def test_a_damaged_version_manifest_is_one_error_whoever_reads_it(two_versions):
    out, _, _ = two_versions
    (out / "versions" / "00001.json").write_text("{not json")
    messages = []
    for read in (lambda: tfrecorder.open(str(out), version=1),
                 lambda: tfrecorder.versions(str(out))):
        with pytest.raises(tfrecorder.IncompleteOutputError) as e:
            read()
        messages.append(str(e.value))
    assert messages[0] == messages[1]
    assert "00001.json is not a manifest tfrecorder wrote" in messages[0]
    assert "Put back the file tfrecorder wrote" in messages[0]
    assert tfrecorder.open(str(out)).version == 2  # the latest reads as it did


@pytest.mark.slow
def test_a_folder_overwritten_since_it_was_opened_refuses_every_verb(tmp_path):
    paths = _images(tmp_path / "img", 6)
    out = str(tmp_path / "out")
    first = _table(paths)
    tfrecorder.convert(first, out)
    folder = tfrecorder.open(out)
    # Another conversion starts the folder again at version 1: other records, labels.
    again = _table(paths[:5], labels=["owl", "bee", "owl", "bee", "owl"])
    tfrecorder.convert(again, out, mode="overwrite")
    verbs = {"info": folder.info, "read": folder.read, "reader": folder.reader,
             "load": folder.load, "report": folder.report, "verify": folder.verify,
             "inspect": lambda: folder.inspect(output_dir=str(tmp_path / "shown")),
             "versions": folder.versions, "update": lambda: folder.update(first),
             "compact": folder.compact, "vacuum": lambda: folder.vacuum(keep=1)}
    for name, verb in verbs.items():
        with pytest.raises(tfrecorder.OutputChangedError,
                           match=r"written again since it was opened at version 1.*"
                                 r"tfrecorder\.open") as e:
            verb()
        assert out in str(e.value), name
    assert not (tmp_path / "shown").exists()
    now = tfrecorder.open(out)  # what is there now reads as it is, nothing updated
    assert now.version == 1 and _labels(now.read()) == _labels(again)
    assert now.verify().records == 5


@pytest.mark.slow
def test_an_update_decides_the_version_it_updates_once_with_the_folder_locked(
        two_versions, monkeypatch):
    # Another process publishes version 3 after the Folder (at version 2) was checked and
    # before its update takes the lock: the update decides its parent under the lock,
    # sees version 3 there, and refuses as a Folder opened at an earlier version does,
    # rather than update a version the Folder never read.
    from tfrecorder._inputs import arguments

    out, first, second = two_versions
    folder = tfrecorder.open(str(out))
    makedirs, meanwhile = arguments.makedirs, {}

    def published_meanwhile(output_dir):  # the last step before the lock is taken
        if not meanwhile:  # the Folder's update's: once, not the nested update's
            meanwhile["started"] = True
            meanwhile["result"] = tfrecorder.convert(second.drop(index=[0]), str(out),
                                                     mode="update")
        makedirs(output_dir)

    monkeypatch.setattr(arguments, "makedirs", published_meanwhile)
    with pytest.raises(tfrecorder.ConfigError, match=r"latest version \(3\).*version 2"):
        folder.update(first)
    monkeypatch.undo()
    assert meanwhile["result"].version == 3
    now = tfrecorder.open(str(out))
    assert now.version == 3 and now.manifest.parent == 2  # nothing published after it
    assert _labels(now.read()) == _labels(second.drop(index=[0]))
