"""tfrecorder.torch: map-style datasets and the (seed, epoch) sampler, through torch's
own DataLoader."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

import tfrecorder
import tfrecorder.torch
from tfrecorder import access
from tests.conftest import SAMPLES, convert_ids, docs_snippets

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N_TABLE = 23


@pytest.fixture(scope="module")
def images_out(samples_converted):
    return samples_converted(num_shards=3)[0]  # read only


@pytest.fixture(scope="module")
def table_out(tmp_path_factory):
    """A tabular conversion of N_TABLE records, each with a distinct ``id``, in 4 shards."""
    return convert_ids(tmp_path_factory.mktemp("torch") / "table", N_TABLE, 4)


def _original(name):
    table = pd.read_csv(os.path.join(SAMPLES, "data.csv"))
    (uri,) = [u for u in table.image_uri if os.path.basename(u) == name]
    return Image.open(os.path.join(SAMPLES, uri)).convert("RGB")


@pytest.mark.slow  # a conversion end to end
def test_items_are_chw_uint8_images_and_label_ids(images_out):
    ds = tfrecorder.torch.Dataset(images_out, "train")
    reader = access.Reader(images_out, "train")
    assert len(ds) == len(reader) == reader.manifest.splits["train"].num_examples
    assert ds.label_names == ["circle", "square", "triangle"]
    for i in range(len(ds)):
        image, label = ds[i]
        ex = reader.features(i)
        expected = np.asarray(_original(ex["image_name"].decode()))
        assert image.dtype == torch.uint8 and image.shape == (3, *expected.shape[:2])
        np.testing.assert_array_equal(image.permute(1, 2, 0).numpy(), expected)
        assert label == ex["label"]


def test_a_transform_gets_the_rgb_pil_image(images_out):
    seen = []

    def transform(image):
        seen.append(image.mode)
        return torch.from_numpy(np.array(image.resize((8, 6)), dtype=np.float32))

    ds = tfrecorder.torch.Dataset(images_out, "validation", transform=transform)
    image, _ = ds[0]
    assert image.shape == (6, 8, 3) and seen == ["RGB"]


def test_records_without_image_and_label_are_feature_dicts(table_out):
    ds = tfrecorder.torch.Dataset(table_out, "train")
    items = [ds[i] for i in range(len(ds))]
    assert sorted(item["id"] for item in items) == list(range(N_TABLE))
    assert all(item["x"] == item["id"] / 4 for item in items)


@pytest.mark.slow  # another Python process
@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # more workers than cores
@pytest.mark.parametrize("num_workers", [0, 1, 2, 3, 4])
def test_a_dataloader_gives_every_record_once_whatever_its_workers(table_out, num_workers):
    ds = tfrecorder.torch.Dataset(table_out, "train")
    loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=num_workers)
    for _ in range(2):  # two epochs: workers start again
        ids = torch.cat([batch["id"] for batch in loader]).tolist()
        assert sorted(ids) == list(range(N_TABLE))


@pytest.mark.slow  # another Python process
def test_decoded_images_through_two_workers_are_those_read_in_process(images_out):
    def small(image):
        return torch.from_numpy(np.array(image.resize((16, 16)))).permute(2, 0, 1)

    ds = tfrecorder.torch.Dataset(images_out, "train", transform=small)
    expected = sorted((ds[i][0].numpy().tobytes(), ds[i][1]) for i in range(len(ds)))
    loader = DataLoader(ds, batch_size=5, num_workers=2)
    got = [(image.numpy().tobytes(), int(label))
           for images, labels in loader for image, label in zip(images, labels)]
    assert sorted(got) == expected


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_distributed_ranks_read_every_record_once_per_epoch(table_out, world_size):
    ds = tfrecorder.torch.Dataset(table_out, "train")
    orders = {}
    for epoch in (0, 1):
        seen = []
        for rank in range(world_size):
            sampler = tfrecorder.torch.Sampler(ds, seed=5, rank=rank, world_size=world_size)
            sampler.set_epoch(epoch)
            loader = DataLoader(ds, batch_size=3, sampler=sampler, num_workers=2)
            ids = torch.cat([b["id"] for b in loader]).tolist()
            assert len(ids) == len(sampler) in (N_TABLE // world_size, N_TABLE // world_size + 1)
            seen += ids
        assert sorted(seen) == list(range(N_TABLE))
        orders[epoch] = seen
    assert orders[0] != orders[1]


def _ddp_rank(rank, world_size, init, out, result):
    torch.distributed.init_process_group("gloo", init_method=init, rank=rank,
                                         world_size=world_size)
    try:
        ds = tfrecorder.torch.Dataset(out, "train")
        sampler = tfrecorder.torch.Sampler(ds, seed=1)  # rank and size from the group
        sampler.set_epoch(2)
        loader = DataLoader(ds, batch_size=4, sampler=sampler, num_workers=1)
        ids = torch.cat([b["id"] for b in loader]).tolist()
        everyone = [None] * world_size
        torch.distributed.all_gather_object(everyone, ids)
        if rank == 0:
            result.put((sampler.rank, sampler.world_size, everyone))
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_a_gloo_process_group_gives_each_rank_its_part(table_out, tmp_path):
    ctx = torch.multiprocessing.get_context("spawn")
    result = ctx.Queue()
    init = f"file://{tmp_path / 'rendezvous'}"
    procs = [ctx.Process(target=_ddp_rank, args=(r, 3, init, table_out, result))
             for r in range(3)]
    for p in procs:
        p.start()
    rank, world_size, parts = result.get(timeout=300)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert (rank, world_size) == (0, 3)
    assert sorted(i for part in parts for i in part) == list(range(N_TABLE))
    assert [len(part) for part in parts] == [7, 8, 8]


def test_the_order_is_a_function_of_seed_and_epoch_so_training_resumes(table_out):
    ds = tfrecorder.torch.Dataset(table_out, "train")
    sampler = tfrecorder.torch.Sampler(ds, seed=3, rank=1, world_size=2)
    sampler.set_epoch(4)
    full = list(sampler)
    again = tfrecorder.torch.Sampler(ds, seed=3, rank=1, world_size=2)  # a restarted job
    again.set_epoch(4, start=5)
    assert list(again) == full[5:] and len(again) == len(full) - 5
    other = tfrecorder.torch.Sampler(ds, seed=4, rank=1, world_size=2)
    other.set_epoch(4)
    assert list(other) != full


def test_drop_last_gives_every_rank_as_many_records(table_out):
    ds = tfrecorder.torch.Dataset(table_out, "train")
    parts = []
    for rank in range(4):
        sampler = tfrecorder.torch.Sampler(ds, rank=rank, world_size=4, drop_last=True)
        parts.append(list(sampler))
        assert len(sampler) == len(parts[-1]) == N_TABLE // 4
    assert len({i for p in parts for i in p}) == N_TABLE // 4 * 4
    unshuffled = tfrecorder.torch.Sampler(ds, shuffle=False, rank=0, world_size=4)
    assert list(unshuffled) == list(range(len(unshuffled)))


def test_an_unknown_rank_is_refused(table_out):
    ds = tfrecorder.torch.Dataset(table_out, "train")
    with pytest.raises(tfrecorder.ConfigError, match="rank=2, world_size=2"):
        tfrecorder.torch.Sampler(ds, rank=2, world_size=2)


@pytest.mark.slow
def test_torch_datasets_import_pillow_once_and_never_tensorflow(images_out):
    # Workers forked from the process that made the dataset have Pillow and its format
    # plugins, and the record's protobuf messages, already: each would otherwise spend
    # tens of milliseconds importing and declaring them.
    code = ("import sys, torch.utils.data, tfrecorder.torch as t; "
            "before = 'PIL.Image' in sys.modules; "
            "ds = t.Dataset(sys.argv[1], 'train'); "
            "from tfrecorder._folder import example; "
            "print(before, 'PIL.JpegImagePlugin' in sys.modules, "
            "'PIL.WebPImagePlugin' in sys.modules, example._EXAMPLE is not None); "
            "[b for b in torch.utils.data.DataLoader(ds, batch_size=1, num_workers=1)]; "
            "print('tensorflow' in sys.modules, len(ds))")
    done = subprocess.run([sys.executable, "-c", code, images_out], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": ROOT}, check=True)
    assert done.stdout.split() == ["False", "True", "True", "True",
                                   "False", str(len(access.Reader(images_out, "train")))]


@pytest.mark.slow  # a conversion end to end
def test_the_png_and_grey_images_become_rgb(tmp_path, image_table):
    from tests.conftest import encode

    paths = [image_table("a.png", encode("L", fmt="PNG")), image_table("b.png", encode("RGBA", fmt="PNG"))]
    out = str(tmp_path / "out")
    tfrecorder.convert(pd.DataFrame({"split": "TRAIN", "image_uri": paths, "label": ["x", "y"]}), out)
    ds = tfrecorder.torch.Dataset(out, "train")
    for i in range(2):
        image, _ = ds[i]
        assert image.shape == (3, 16, 24)
        name = access.Reader(out, "train").features(i)["image_name"].decode()
        expected = np.asarray(Image.open(io.BytesIO(open(tmp_path / name, "rb").read())).convert("RGB"))
        np.testing.assert_array_equal(image.permute(1, 2, 0).numpy(), expected)


@pytest.fixture(scope="module")
def docs_folder(tmp_path_factory, images_out):
    """A folder whose ``out/`` is a conversion of the samples, as the docs' snippets expect."""
    import shutil

    folder = tmp_path_factory.mktemp("docs")
    shutil.copytree(images_out, folder / "out")
    return folder


@pytest.mark.slow
def test_the_pytorch_snippet_in_the_docs_runs(doc_runs):
    # Its run among the page's blocks (tests/test_docs.py), in a process of its own.
    (snippet, _) = docs_snippets("loading.md", "PyTorch")
    result, folder = doc_runs.block("docs/loading.md", snippet)
    assert result["status"] == "ok", result["error"]
    n = len(tfrecorder.torch.Dataset(os.path.join(folder, "out")))
    assert result["stdout"] == f"{n} records; label 0 is circle\n"


@pytest.mark.slow
def test_the_ddp_script_in_the_docs_runs_under_torchrun(docs_folder):
    (_, script) = docs_snippets("loading.md", "PyTorch")
    assert script.startswith("# train_ddp.py\n")
    (docs_folder / "train_ddp.py").write_text(script)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "--log-dir", "logs", "--redirects", "1", "train_ddp.py"],
        cwd=docs_folder, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    per_rank = len(tfrecorder.torch.Dataset(str(docs_folder / "out"))) // 2
    # Each rank's output in a file of its own: two processes printing into one pipe can
    # interleave their lines.
    logs = sorted((docs_folder / "logs").rglob("stdout.log"))
    assert sorted(log.read_text().strip() for log in logs) == [
        f"rank {r} read {per_rank} records per epoch" for r in (0, 1)]


@pytest.mark.slow
def test_two_workers_read_a_gs_directory(gcs, table_out):
    from tests.conftest import BUCKET

    root = f"gs://{BUCKET}/torch-table"
    gcs.put(table_out, root, recursive=True)
    ds = tfrecorder.torch.Dataset(root, "train")
    loader = DataLoader(ds, batch_size=4, num_workers=2,
                        sampler=tfrecorder.torch.Sampler(ds, seed=2))
    assert sorted(torch.cat([b["id"] for b in loader]).tolist()) == list(range(N_TABLE))


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_torchs_distributed_sampler_works_too_but_repeats_records(table_out, world_size):
    """What docs/loading.md says of torch's own sampler over our dataset."""
    from torch.utils.data import DistributedSampler

    ds = tfrecorder.torch.Dataset(table_out, "train")
    ids = []
    for rank in range(world_size):
        sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank, seed=5)
        sampler.set_epoch(1)
        ids += torch.cat([b["id"] for b in DataLoader(ds, batch_size=4, sampler=sampler)]).tolist()
    assert set(ids) == set(range(N_TABLE))
    assert len(ids) == -(-N_TABLE // world_size) * world_size  # padded with repeats


def test_positions_are_anything_with_index_through_torchs_own_samplers(table_out):
    from torch.utils.data import Subset, SubsetRandomSampler

    ds = tfrecorder.torch.Dataset(table_out, "train")
    ids = [int(ds[i]["id"]) for i in range(len(ds))]
    assert int(ds[torch.tensor(3)]["id"]) == ids[3]
    assert int(ds[np.int64(4)]["id"]) == ids[4]
    with pytest.raises(TypeError):
        ds[True]  # a bool is not a position
    picked = torch.randperm(len(ds))[:9]
    subset = [int(b["id"]) for b in DataLoader(Subset(ds, picked), batch_size=None)]
    assert subset == [ids[int(i)] for i in picked]
    loader = DataLoader(ds, batch_size=4, sampler=SubsetRandomSampler(torch.arange(7)))
    assert sorted(int(v) for batch in loader for v in batch["id"].reshape(-1)) == sorted(ids[:7])


def test_batched_reads_are_the_single_reads(table_out):
    ds = tfrecorder.torch.Dataset(table_out, "train")
    order = [5, 0, 22, 5, 13]
    batch = ds.__getitems__(order)
    assert [int(b["id"]) for b in batch] == [int(ds[i]["id"]) for i in order]


@pytest.mark.parametrize("epoch, start", [(-1, 0), (2**32, 0), (1, -2), (1.5, 0), (1, 1.0)])
def test_a_negative_or_fractional_epoch_or_start_is_refused(table_out, epoch, start):
    sampler = tfrecorder.torch.Sampler(tfrecorder.torch.Dataset(table_out, "train"), world_size=2, rank=0)
    with pytest.raises(tfrecorder.ConfigError, match="set_epoch"):
        sampler.set_epoch(epoch, start=start)
    sampler.set_epoch(1, start=len(sampler) + 5)  # past the end: an empty remainder
    assert list(sampler) == [] and len(sampler) == 0


@pytest.mark.slow  # a conversion end to end
def test_a_16_bit_grey_png_keeps_its_top_8_bits_as_load_does(tmp_path, image_table):
    import tensorflow as tf

    ramp = np.linspace(0, 65535, 32 * 64).astype(np.uint16).reshape(32, 64)
    data = io.BytesIO()
    Image.fromarray(ramp).save(data, "PNG")  # uint16: mode I;16
    assert Image.open(io.BytesIO(data.getvalue())).mode.startswith("I")
    out = str(tmp_path / "out")
    path = image_table("ramp.png", data.getvalue())
    tfrecorder.convert(pd.DataFrame({"split": ["TRAIN"], "image_uri": [path], "label": ["x"]}), out)
    image, _ = tfrecorder.torch.Dataset(out, "train")[0]
    assert image.shape == (3, 32, 64)
    for channel in image:
        np.testing.assert_array_equal(channel.numpy(), (ramp >> 8).astype(np.uint8))
    (example,) = tfrecorder.load(out, split="train").take(1)
    np.testing.assert_array_equal(example["image"].numpy(), image.permute(1, 2, 0).numpy())
    assert 120 < image.float().mean() < 135


@pytest.mark.parametrize("reader", ["access", "torch", "grain"])
def test_a_file_given_as_the_folder_is_a_config_error(tmp_path, reader):
    csv = tmp_path / "data.csv"
    csv.write_text("split,image_uri,label\n")
    if reader == "access":
        make = lambda: access.Reader(str(csv), "train")
    elif reader == "torch":
        make = lambda: tfrecorder.torch.Dataset(str(csv), "train")
    else:
        pytest.importorskip("grain")
        from tfrecorder import grain as tfr_grain

        make = lambda: tfr_grain.DataSource(str(csv), "train")
    with pytest.raises(tfrecorder.ConfigError, match="is a file.*data.csv|data.csv.*is a file"):
        make()
