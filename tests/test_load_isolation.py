"""A tf.data epoch reads one conversion, even while another conversion (in another
process, or in the test process) replaces the directory under it; a cache belongs to one conversion, split and part; damaged index
files and shards cut short are errors that name the file."""

import os
import subprocess
import sys

import pytest

import tfrecorder
from tfrecorder._folder import index
from tests.test_containment import _table

RECORDS, SHARDS = 2000, 64


def _tiny_pngs(root, prefix: str, labels) -> str:
    """A CSV of RECORDS distinct 2x2 PNGs named PREFIX<i>.png (written without Pillow's
    encoder per image: one image's bytes with its pixel patched would break the CRC)."""
    import io

    import numpy as np
    from PIL import Image

    folder = root / prefix
    folder.mkdir()
    lines = []
    for i in range(RECORDS):
        path = folder / f"{prefix}{i}.png"
        out = io.BytesIO()
        Image.fromarray(np.array([[[i % 256, i // 256, 0]] * 2] * 2, np.uint8)).save(out, "PNG")
        path.write_bytes(out.getvalue())
        lines.append(f"TRAIN,{path},{labels[i % len(labels)]}")
    csv = root / f"{prefix}.csv"
    csv.write_text("\n".join(lines) + "\n")
    return str(csv)


def _replace_in_another_process(csv: str, out: str, shards: int = SHARDS) -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(tfrecorder.__file__)))
    subprocess.run([sys.executable, "-m", "tfrecorder", "convert", csv, out, "--overwrite",
                    "--num-shards", str(shards)], check=True, capture_output=True, cwd=root,
                   env={**os.environ, "PYTHONPATH": root})


def _replace_here(csv: str, out: str, shards: int = SHARDS) -> None:
    """The same replacement from this process, for local readers: they learn of it from
    the files alone (``os.stat``, the files they open), with no cache that a writer in the
    same process would refresh for them, so one test shows it across processes and the
    others save the new process's start. Readers of ``gs://``, whose file system caches
    listings per process, always meet a replacement from another process."""
    tfrecorder.convert(csv, out, mode="overwrite", num_shards=shards, progress=False)


@pytest.mark.slow
@pytest.mark.parametrize("how,replace", [
    ({}, _replace_in_another_process), ({"shuffle": "global", "seed": 7}, _replace_here),
    ({"shard": (1, 3)}, _replace_here), ({"shuffle": True, "seed": 3}, _replace_here)])
def test_an_epoch_under_way_never_yields_a_record_of_the_conversion_replacing_it(
        tmp_path, tf, two_tables, first_of_two, how, replace):
    import shutil

    second = two_tables[1]
    out = str(tmp_path / "out")
    shutil.copytree(first_of_two, out)  # the first table converted (conftest.py)
    ds = tfrecorder.load(out, split="train", decode_images=False, **how)
    names = []
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="replaced by another conversion.*Call load\\(\\) again"):
        for n, ex in enumerate(ds):
            names.append(ex["image_name"].numpy().decode())
            if n == 49:
                replace(second, out)
    assert len(names) >= 50
    assert all(name.startswith("a") for name in names), sorted(
        name for name in names if not name.startswith("a"))[:5]
    # The new conversion reads whole through a new dataset.
    again = [ex["image_name"].decode() for ex in tfrecorder.load(
        out, split="train", decode_images=False, **how).as_numpy_iterator()]
    assert again and all(name.startswith("b") for name in again)


@pytest.mark.slow
def test_a_cache_path_serves_each_split_part_and_conversion_its_own_records(tmp_path, tf):
    def table(prefix, rows):
        folder = tmp_path / prefix
        folder.mkdir()
        from tests.conftest import encode
        lines = []
        for i, split in enumerate(rows):
            path = folder / f"{prefix}{i}.jpg"
            path.write_bytes(encode(size=(8, 8), seed=i))
            lines.append(f"{split},{path},{prefix}{i % 2}")
        (tmp_path / f"{prefix}.csv").write_text("\n".join(lines) + "\n")
        return str(tmp_path / f"{prefix}.csv")

    out, cache = str(tmp_path / "out"), str(tmp_path / "cache" / "c")
    os.makedirs(os.path.dirname(cache))
    tfrecorder.convert(table("a", ["TRAIN"] * 6 + ["TEST"] * 3), out, num_shards=2)

    def names(**kw):
        ds = tfrecorder.load(out, decode_images=False, cache=cache, **kw)
        return {split: sorted(ex["image_name"].decode() for ex in d.as_numpy_iterator())
                for split, d in (ds.items() if isinstance(ds, dict) else [("one", ds)])}

    whole = names()
    assert whole == {"train": [f"a{i}.jpg" for i in range(6)],
                     "test": ["a6.jpg", "a7.jpg", "a8.jpg"]}
    assert names() == whole  # replayed from the cache files: the same, split by split
    parts = [names(split="train", shard=(i, 2))["one"] for i in range(2)]
    assert sorted(parts[0] + parts[1]) == whole["train"] and not set(parts[0]) & set(parts[1])
    tfrecorder.convert(table("b", ["TRAIN"] * 4), out, num_shards=2, mode="overwrite")
    assert names() == {"train": [f"b{i}.jpg" for i in range(4)]}


def _damage_index(out, line_text=None, empty=False):
    manifest = tfrecorder.info(out)
    shard = manifest.splits["train"].shards[1]
    idx = os.path.join(out, index.name(shard.file))
    if empty:
        open(idx, "wb").close()
    else:
        lines = open(idx).read().splitlines()
        offset = lines[2].split()[0]
        lines[2] = f"{offset} {line_text}"
        open(idx, "w").write("\n".join(lines) + "\n")
    return idx


@pytest.fixture
def small_out(tmp_path):
    from tests.conftest import encode
    lines = []
    for i in range(24):
        path = tmp_path / f"{i}.jpg"
        path.write_bytes(encode(size=(8, 8), seed=i))
        lines.append(f"TRAIN,{path},l{i % 3}")
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    out = str(tmp_path / "out")
    tfrecorder.convert(str(tmp_path / "t.csv"), out, num_shards=3)
    return out


@pytest.mark.parametrize("how", [{"shuffle": "global", "seed": 1}, {"shard": (0, 2)}])
def test_an_index_line_with_a_huge_length_is_an_error_naming_the_file_and_line(
        small_out, how):
    idx = _damage_index(small_out, str(2**62))
    with pytest.raises(tfrecorder.CorruptRecordError, match=rf"{idx}, line 3: .*ends past"):
        tfrecorder.load(small_out, split="train", decode_images=False, **how)


@pytest.mark.parametrize("damage", [str(2**62), "0", "-5", "12 x", ""])
def test_a_damaged_index_line_read_by_access_names_the_file_and_line(small_out, damage):
    from tfrecorder import access

    idx = _damage_index(small_out, damage)
    reader = access.Reader(small_out, "train")
    assert reader.record(0)  # shard 0's index is whole
    with pytest.raises(tfrecorder.CorruptRecordError, match=rf"{idx}, line 3: "):
        reader.record(10)  # shard 1, whose third line is damaged


@pytest.mark.parametrize("how", [{"shuffle": "global", "seed": 1}, {"shard": (1, 2)}])
def test_an_empty_index_file_is_an_error_naming_it(small_out, how):
    idx = _damage_index(small_out, empty=True)
    with pytest.raises(tfrecorder.CorruptRecordError,
                       match=rf"{idx}: lists 0 records where the manifest says the shard "
                             r"holds 8"):
        tfrecorder.load(small_out, split="train", decode_images=False, **how)


def test_a_shard_cut_at_a_record_boundary_is_named_by_a_global_shuffle(small_out, tf):
    manifest = tfrecorder.info(small_out)
    shard = manifest.splits["train"].shards[2]
    path = os.path.join(small_out, shard.file)
    last_offset = index.read(small_out, shard.file)[-1][0]
    os.truncate(path, last_offset)
    ds = tfrecorder.load(small_out, split="train", decode_images=False, shuffle="global",
                         seed=5)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"{shard.file}: no record at byte {last_offset}.*cut short"):
        list(ds.as_numpy_iterator())


# --- a dataset built before a replacement ----------------------------------------------

def _labels_read(ds):
    return [int(ex["label"]) for ex in ds.as_numpy_iterator()]


@pytest.mark.slow
def test_a_dataset_never_mixes_two_conversions(tmp_path, tf):
    """A training job built its dataset; another conversion of the same shape (same
    shard count and counts, other images and labels) then replaced the directory."""
    out = tmp_path / "out"
    tfrecorder.convert(_table(tmp_path, "a", labels=("cat", "dog")), str(out), num_shards=3)
    ds = tfrecorder.load(str(out), split="train", decode_images=False)
    first_epoch = _labels_read(ds)
    assert len(first_epoch) == 6
    tfrecorder.convert(_table(tmp_path, "b", labels=("ant", "bee", "cow", "doe", "eel", "fox")),
                       str(out), num_shards=3, mode="overwrite")
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="replaced by another conversion.*Call load\\(\\) again"):
        _labels_read(ds)
    assert sorted(_labels_read(tfrecorder.load(str(out), split="train",
                                               decode_images=False))) == list(range(6))


@pytest.mark.slow  # a conversion end to end
def test_the_same_input_gives_the_same_generation(tmp_path):
    csv = _table(tmp_path, "a")
    tfrecorder.convert(csv, str(tmp_path / "one"), num_shards=2)
    tfrecorder.convert(csv, str(tmp_path / "two"), num_shards=2)
    one, two = tfrecorder.info(str(tmp_path / "one")), tfrecorder.info(str(tmp_path / "two"))
    assert len(one.generation) == 32 and one.generation == two.generation
    tfrecorder.convert(_table(tmp_path, "b"), str(tmp_path / "three"), num_shards=2)
    assert tfrecorder.info(str(tmp_path / "three")).generation != one.generation
