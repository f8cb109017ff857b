"""The index format: DALI's tfrecord2idx text, offsets of framed records."""

from __future__ import annotations

import io

import pytest

from tfrecorder._folder import index
from tfrecorder._folder import records
from tfrecorder._errors import CorruptRecordError


def test_format_and_parse_round_trip_in_dalis_text_format():
    entries = [(0, 21), (21, 16), (37, 316)]
    text = index.format(entries)
    assert text == b"0 21\n21 16\n37 316\n"
    assert index.parse(text) == entries


@pytest.mark.parametrize("text", [b"0 21\n22 16\n", b"0 x\n", b"0 3\n"])
def test_parse_refuses_an_index_whose_records_do_not_follow_each_other(text):
    with pytest.raises(CorruptRecordError, match="shard.idx"):
        index.parse(text, "shard.idx")


def test_parse_refuses_a_record_past_the_shard_end_before_anything_is_sized_from_it():
    text = b"0 21\n21 %d\n" % (2**62)
    with pytest.raises(CorruptRecordError, match=r"shard.idx, line 2: .* ends past the "
                                                 r"shard's 40 bytes"):
        index.parse(text, "shard.idx", size=40)
    assert index.parse(b"0 21\n21 19\n", size=40) == [(0, 21), (21, 19)]


@pytest.mark.parametrize("text", [b"", b"0 21\n"])
def test_parse_refuses_an_index_with_another_count_than_the_manifest(text):
    with pytest.raises(CorruptRecordError, match=r"shard.idx: lists \d records where the "
                                                 r"manifest says the shard holds 2"):
        index.parse(text, "shard.idx", count=2)


def test_name_puts_index_files_in_their_own_folder():
    assert index.name("data-train.tfrecord-00000-of-00002") == \
        "index/data-train.tfrecord-00000-of-00002.idx"


# --- index files of an output directory ------------------------------------------------

import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402

import pandas as pd  # noqa: E402

import tfrecorder  # noqa: E402
from tfrecorder import _storage as storage# noqa: E402
from tfrecorder._folder import layout, metadata
from tests.conftest import BUCKET, SAMPLES, encode  # noqa: E402

DATA = os.path.join(SAMPLES, "data.csv")


def _scan(path):
    with open(path, "rb") as f:
        return list(records.scan(f, path))


def _index_dir(out):
    return sorted(os.listdir(os.path.join(out, index.DIR)))


@pytest.fixture(scope="module")
def converted(samples_converted):
    # Read only: tests that change files change a copy.
    return samples_converted(num_shards={"train": 3, "validation": 1, "test": 1})[0]


def test_a_conversion_writes_an_index_per_shard_listed_in_its_manifest(tf, converted):
    m = metadata.read_manifest(converted)
    shards = [s for info in m.splits.values() for s in info.shards]
    assert len(shards) == 5 and _index_dir(converted) == sorted(
        f"{s.file}.idx" for s in shards)
    for s in shards:
        assert s.index == index.name(s.file) == f"index/{s.file}.idx"
        entries = index.read(converted, s.file)
        assert entries == _scan(os.path.join(converted, s.file))  # the shard's own framing
        assert len(entries) == s.num_examples
    # A glob over the shard names matches shards only.
    matched = tf.io.gfile.glob(os.path.join(converted, "data-train.tfrecord-*"))
    assert sorted(os.path.basename(p) for p in matched) == m.files("train")
    assert tfrecorder.verify(converted).records == 36


@pytest.mark.parametrize("damage", ["missing", "a wrong length", "one record short"])
def test_verify_names_a_missing_or_wrong_index(tmp_path, converted, damage):
    out = str(tmp_path / "copy")
    shutil.copytree(converted, out)
    shard = metadata.read_manifest(out).files("train")[1]
    path = index.path(out, shard)
    entries = index.read(out, shard)
    if damage == "missing":
        os.remove(path)
    elif damage == "a wrong length":
        entries[-1] = (entries[-1][0], entries[-1][1] + 1)
        open(path, "wb").write(index.format(entries))
    else:
        open(path, "wb").write(index.format(entries[:-1]))
    with pytest.raises(tfrecorder.CorruptRecordError, match=f"index/{shard}.idx"):
        tfrecorder.verify(out)


def _strip_index(out):
    """``out`` as a conversion written before index files existed left it."""
    shutil.rmtree(os.path.join(out, index.DIR))
    path = os.path.join(out, layout.MANIFEST)
    d = json.load(open(path))
    for split in d["splits"].values():
        for shard in split["shards"]:
            del shard["index"]
    open(path, "w").write(json.dumps(d))
    # nor versions files (format 1): readers read tfrecorder.json itself
    shutil.rmtree(os.path.join(out, "versions"))


def test_build_index_writes_what_the_conversion_writes(tmp_path, converted):
    out = str(tmp_path / "old")
    shutil.copytree(converted, out)
    _strip_index(out)
    m = metadata.read_manifest(out)  # a manifest without index entries still loads
    assert m.index_files() == [] and tfrecorder.verify(out).records == 36
    assert tfrecorder.load(out, split="train", decode_images=False).cardinality() == 27
    written = tfrecorder.build_index(out)
    assert len(written) == 5 and layout.LOCK not in os.listdir(out)
    for name in _index_dir(converted):
        assert open(os.path.join(out, index.DIR, name), "rb").read() == \
            open(os.path.join(converted, index.DIR, name), "rb").read()
    assert open(os.path.join(out, layout.MANIFEST), "rb").read() == \
        open(os.path.join(converted, layout.MANIFEST), "rb").read()
    assert tfrecorder.verify(out).records == 36


def test_write_index_false_writes_none_and_the_index_command_adds_them(tmp_path):
    from tfrecorder import _cli as cli

    out = str(tmp_path / "out")
    tfrecorder.convert(DATA, out, num_shards=2, write_index=False)
    assert index.DIR not in os.listdir(out) and metadata.read_manifest(out).index_files() == []
    assert cli.main(["index", out]) == 0
    assert len(_index_dir(out)) == 6 and len(metadata.read_manifest(out).index_files()) == 6
    assert tfrecorder.verify(out).records == 36


def test_gzip_shards_have_no_index_and_indexing_them_is_refused(tmp_path, capsys):
    from tfrecorder import _cli as cli

    out = str(tmp_path / "gz")
    tfrecorder.convert(DATA, out, compression="gzip")
    assert index.DIR not in os.listdir(out) and metadata.read_manifest(out).index_files() == []
    with pytest.raises(tfrecorder.ConfigError, match="gzip stream cannot be entered"):
        tfrecorder.build_index(out)
    assert cli.main(["index", out]) == 2 and "Convert again without compression" in \
        capsys.readouterr().err
    with pytest.raises(tfrecorder.ConfigError, match="no index file.*gzip"):
        tfrecorder.load(out, split="train", shuffle="global", seed=1)


def test_build_index_refuses_a_shard_that_lost_records(tmp_path, converted):
    out = str(tmp_path / "cut")
    shutil.copytree(converted, out)
    _strip_index(out)
    shard = os.path.join(out, metadata.read_manifest(out).files("train")[0])
    entries = _scan(shard)
    open(shard, "r+b").truncate(entries[-1][0])  # cut at a record boundary
    with pytest.raises(tfrecorder.CorruptRecordError, match="8 records, the manifest says 9"):
        tfrecorder.build_index(out)


@pytest.mark.slow  # a conversion end to end
def test_overwrite_replaces_the_index_files_and_removes_their_folder(tmp_path):
    out = str(tmp_path / "out")
    tfrecorder.convert(DATA, out, num_shards=3)
    assert len(_index_dir(out)) == 9
    tfrecorder.convert(DATA, out, num_shards=1, mode="overwrite")
    assert _index_dir(out) == sorted(
        os.path.basename(f) for f in metadata.read_manifest(out).index_files())
    assert len(_index_dir(out)) == 3
    tfrecorder.convert(DATA, out, compression="gzip", mode="overwrite")
    assert index.DIR not in os.listdir(out)  # no index files: the folder went with them
    assert tfrecorder.verify(out).records == 36


def test_a_failed_run_leaves_no_index_file(tmp_path):
    good = [str(tmp_path / f"{i}.jpg") for i in range(2)]
    for i, p in enumerate(good):
        open(p, "wb").write(encode(seed=i))
    df = pd.DataFrame({"split": "TRAIN", "image_uri": good + [str(tmp_path / "gone.jpg")],
                       "label": "x"})
    out = tmp_path / "out"
    with pytest.raises(tfrecorder.ConversionError):
        tfrecorder.convert(df, str(out))
    assert index.DIR not in os.listdir(out)
    assert not [p for p in out.rglob("*.idx")]  # nor in the failed run's own folder


def test_a_users_index_folder_is_not_ours(tmp_path):
    out = tmp_path / "out"
    (out / index.DIR).mkdir(parents=True)
    (out / index.DIR / "mine.txt").write_text("mine")
    with pytest.raises(tfrecorder.OutputExistsError, match="index"):
        tfrecorder.convert(DATA, str(out), mode="overwrite")
    assert os.listdir(out) == [index.DIR]


def _legacy_uncompressed(root):
    from tests.test_migration import _legacy_dir

    _legacy_dir(root)
    import gzip

    for gz in root.glob("*.tfrecord.gz"):
        (root / gz.name[:-3]).write_bytes(gzip.decompress(gz.read_bytes()))
        gz.unlink()


@pytest.mark.slow  # a conversion end to end
def test_build_index_on_a_tfrecorder_2_folder_gives_its_counts(tmp_path):
    legacy_dir = tmp_path / "tfrecorder-20200101-000000-x"
    legacy_dir.mkdir()
    _legacy_uncompressed(legacy_dir)
    before = tfrecorder.info(str(legacy_dir))
    assert before.splits["train"].shards[0].num_examples == -1
    with pytest.raises(tfrecorder.ConfigError, match="no record counts.*shard=") as e:
        tfrecorder.load(str(legacy_dir), split="train", shard=(0, 2))
    assert str(e.value).endswith(f"`tfrecorder index {legacy_dir}`, which counts them.")
    tfrecorder.build_index(str(legacy_dir))
    after = tfrecorder.info(str(legacy_dir))
    assert {s: i.num_examples for s, i in after.splits.items()} == {
        "train": 2, "validation": 1, "test": 1}
    assert tfrecorder.verify(str(legacy_dir)).records == 4
    parts = [list(tfrecorder.load(str(legacy_dir), split="train", shard=(i, 2),
                                  decode_images=False)) for i in range(2)]
    assert [len(p) for p in parts] == [1, 1]
    assert {p[0]["image_name"].numpy() for p in parts} == {b"rgb.png", b"grey.png"}


@pytest.mark.slow
def test_index_files_and_reader_parts_on_cloud_storage(gcs, tmp_path):
    from tfrecorder._readers import partition
    from tfrecorder._folder import records

    out = f"gs://{BUCKET}/indexed"
    tfrecorder.convert(DATA, out, num_shards={"train": 3, "validation": 1, "test": 1})
    m = metadata.read_manifest(out)
    assert sorted(gcs.ls(f"{BUCKET}/indexed/index")) == sorted(
        f"{BUCKET}/indexed/{f}" for f in m.index_files())
    assert tfrecorder.verify(out).records == 36
    shards = m.splits["train"].shards
    counts = [s.num_examples for s in shards]
    entries = [index.read(out, s.file) for s in shards]
    everything = []
    for n in (1, 2, 8):
        parts = []
        for i in range(n):
            part = []
            for f, first, k in partition.extents(counts, *partition.span(sum(counts), i, n)):
                # One ranged read per run: from the first record's offset to the last's end.
                start = entries[f][first][0]
                end = entries[f][first + k - 1][0] + entries[f][first + k - 1][1]
                data = storage.read_range(storage.join(out, shards[f].file), start, end - start)
                part += list(records.read_records(io.BytesIO(data), shards[f].file))
            parts.append(part)
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
        everything.append(sorted(r for p in parts for r in p))
    assert everything[0] == everything[1] == everything[2] and len(everything[0]) == 27
    storage.remove(index.path(out, shards[1].file))
    with pytest.raises(tfrecorder.CorruptRecordError, match=f"index/{shards[1].file}.idx"):
        tfrecorder.verify(out)
    assert len(tfrecorder.build_index(out)) == 5 and tfrecorder.verify(out).records == 36


def test_index_files_a_dead_run_left_under_their_final_names_are_cleared(tmp_path):
    from tfrecorder._folder import ledger, removal, survey

    # What a run killed on an object store leaves: files under their final names,
    # listed in its ledger, and no manifest.
    out = tmp_path / "out"
    shard = "data-train.tfrecord-00000-of-00001"
    (out / index.DIR).mkdir(parents=True)
    (out / shard).write_bytes(b"partial")
    (out / index.DIR / f"{shard}.idx").write_bytes(b"0 23\n")
    ledger.write_ledger(ledger.RunFolder(str(out), "dead").folder, [shard, index.name(shard)])
    surveyed = survey.survey(str(out), layout.Declared("data", frozenset({"train"})))
    assert surveyed.foreign() == []  # the index folder is the dead run's, so ours
    removal.clear_leftovers(surveyed, keep_run="new")
    assert sorted(os.listdir(out)) == []  # the folder of runs too, once empty
