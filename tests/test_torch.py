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


# --- detection: torchvision's (image, target) --------------------------------------------

@pytest.fixture(scope="module")
def coco_out(tmp_path_factory):
    """A COCO conversion (tests/test_coco.py's file: 4 images, 4 boxes, one crowd), in
    file order by image name (one shard), and the file's content."""
    from tests.test_coco import ANNOTATIONS, _coco, _images, _write

    folder = tmp_path_factory.mktemp("coco")
    _images(folder)
    content = _coco(ANNOTATIONS)
    src = _write(folder / "instances_train.json", content)
    out = str(folder / "out")
    tfrecorder.convert({"train": src}, out)
    return out, content


def _coco_expected(content):
    """Per image file: (image id, [(category name, xyxy pixels, area, iscrowd)])."""
    names = {c["id"]: c["name"] for c in content["categories"]}
    out = {i["file_name"]: (i["id"], []) for i in content["images"]}
    by_id = {i["id"]: i["file_name"] for i in content["images"]}
    for a in sorted(content["annotations"], key=lambda a: a["id"]):
        x, y, w, h = a["bbox"]
        out[by_id[a["image_id"]]][1].append((names[a["category_id"]], [x, y, x + w, y + h],
                                             w * h, a["iscrowd"]))
    return out


@pytest.mark.slow  # a conversion end to end
def test_detection_items_are_torchvisions_image_and_target(coco_out):
    out, content = coco_out
    ds = tfrecorder.torch.Dataset(out, "train")
    names = ds.reader.manifest.vocabularies["objects/label"]
    expected = _coco_expected(content)
    assert len(ds) == len(expected)
    for i in range(len(ds)):
        image, target = ds[i]
        name = ds.reader.features(i)["image_name"].decode()
        image_id, boxes = expected[name]
        n = len(boxes)
        assert image.dtype == torch.uint8 and image.shape[0] == 3
        assert set(target) == {"boxes", "labels", "image_id", "area", "iscrowd"}
        assert target["boxes"].dtype == torch.float32 and target["boxes"].shape == (n, 4)
        np.testing.assert_allclose(target["boxes"].numpy(), np.array(
            [b[1] for b in boxes], dtype=np.float32).reshape(n, 4), atol=1e-4)
        assert target["labels"].dtype == torch.int64
        # from 1: 0 is the background class of torchvision's detectors
        assert [names[k - 1] for k in target["labels"].tolist()] == [b[0] for b in boxes]
        assert target["image_id"] == image_id and isinstance(target["image_id"], int)
        assert target["area"].dtype == torch.float32
        np.testing.assert_allclose(target["area"].numpy(), [b[2] for b in boxes], rtol=1e-4)
        assert target["iscrowd"].dtype == torch.int64
        assert target["iscrowd"].tolist() == [b[3] for b in boxes]
        # pixels of the decoded image: the boxes' canvas is the image's size
        assert tuple(image.shape[1:]) == (content["images"][int(name[0])]["height"],
                                          content["images"][int(name[0])]["width"])


@pytest.mark.slow  # a conversion end to end
def test_detection_batches_and_the_plain_dict_one_argument_away(coco_out):
    out, _ = coco_out
    ds = tfrecorder.torch.Dataset(out, "train")
    loader = DataLoader(ds, batch_size=3, collate_fn=lambda batch: tuple(zip(*batch)),
                        num_workers=1)
    got = [(image.shape, int(t["image_id"])) for images, targets in loader
           for image, t in zip(images, targets)]
    assert sorted(i for _, i in got) == [100, 101, 102, 103]
    plain = tfrecorder.torch.Dataset(out, "train", target_format="dict")[0]
    assert isinstance(plain, dict) and plain["objects/bbox"].shape[1] == 4
    assert plain["image"].dtype == torch.uint8
    with pytest.raises(tfrecorder.ConfigError, match="target_format='coco'"):
        tfrecorder.torch.Dataset(out, "train", target_format="coco")
    seen = []
    joint = tfrecorder.torch.Dataset(out, "train", transforms=lambda image, target: seen.append(
        (image.shape, sorted(target))) or "moved")
    assert joint[1] == "moved" and seen[0][1] == sorted(ds[1][1])


@pytest.mark.slow  # a conversion end to end
def test_boxes_are_torchvisions_bounding_boxes_where_it_imports(coco_out, monkeypatch):
    # torchvision cannot be installed beside this torch: a stand-in of its tv_tensors
    # module, whose BoundingBoxes records how it was called.
    import types

    made = []
    tv_tensors = types.ModuleType("torchvision.tv_tensors")
    tv_tensors.BoundingBoxes = lambda boxes, **kw: made.append((boxes, kw)) or ("wrapped", kw)
    torchvision = types.ModuleType("torchvision")
    torchvision.tv_tensors = tv_tensors
    monkeypatch.setitem(sys.modules, "torchvision", torchvision)
    monkeypatch.setitem(sys.modules, "torchvision.tv_tensors", tv_tensors)
    out, _ = coco_out
    image, target = tfrecorder.torch.Dataset(out, "train")[0]
    assert target["boxes"] == ("wrapped", {"format": "XYXY",
                                           "canvas_size": tuple(image.shape[1:])})
    assert made[0][0].dtype == torch.float32


def _png(pixels) -> bytes:
    data = io.BytesIO()
    Image.fromarray(np.asarray(pixels, dtype=np.uint8)).save(data, "PNG")
    return data.getvalue()


def test_masks_and_keypoints_become_torchvisions_arrays():
    # A record built through the codec, with the mask and keypoint features a
    # segmentation or keypoint source writes: one PNG per box, K x (x, y, visibility)
    # relative per box.
    from tfrecorder._folder.layout import FeatureSpec
    from tfrecorder._readers import targets
    from tfrecorder._folder import example

    height, width = 4, 6
    first = np.zeros((height, width), np.uint8)
    first[1:3, 0:2] = 1
    second = np.zeros((height, width), np.uint8)
    second[0, :] = 255  # any non-zero pixel is the object
    features = {
        "objects/bbox": example.float_feature([0.25, 0.0, 0.75, 1 / 3, 0.0, 0.0, 0.25, 1.0]),
        "objects/label": example.int64_feature([2, 0]),
        "objects/mask": example.bytes_feature([_png(first), _png(second)]),
        "objects/keypoints": example.float_feature([0.5, 0.5, 2, 0, 0, 0,
                                                    1.0, 0.25, 1, 0.5, 0.0, 2]),
    }
    specs = {"objects/bbox": FeatureSpec(example.FLOAT, [-1, 4], "bbox"),
             "objects/label": FeatureSpec(example.INT64, None, "label"),
             "objects/mask": FeatureSpec(example.BYTES, None, "feature"),
             "objects/keypoints": FeatureSpec(example.FLOAT, None, "feature")}
    values = access.values(example.serialize(features), specs)
    target = targets.target(values, height, width, image_id=7)
    assert target["image_id"] == 7
    np.testing.assert_allclose(target["boxes"], [[0, 1, 2, 3], [0, 0, 6, 1]])
    assert target["masks"].dtype == np.uint8 and target["masks"].shape == (2, height, width)
    np.testing.assert_array_equal(target["masks"][0], first)
    np.testing.assert_array_equal(target["masks"][1], second != 0)
    assert target["area"].tolist() == [4.0, 6.0]  # the masks' pixels
    assert target["keypoints"].dtype == np.float32 and target["keypoints"].shape == (2, 2, 3)
    np.testing.assert_allclose(target["keypoints"][:, :, :2],
                               [[[3, 2], [0, 0]], [[6, 1], [3, 0]]])
    assert target["iscrowd"].tolist() == [0, 0]
    assert target["labels"].tolist() == [3, 1]  # ids 2 and 0, from 1
    one_mask = {**values, "objects/mask": values["objects/mask"][:1]}
    with pytest.raises(tfrecorder.CorruptRecordError, match="1 masks for 2 boxes"):
        targets.target(one_mask, height, width, image_id=7)
