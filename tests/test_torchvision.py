"""torchvision's own code on ``tfrecorder.torch``'s detection items: its
``transforms.v2`` and one training step of its Mask R-CNN, as docs/detection.md runs
them.

PyPI's torchvision needs a torch build of its own, which does not import beside the CPU
build this environment tests with. So torchvision gets a virtual environment of its own,
made once for this module: torch and torchvision installed there, everything else
(NumPy, Pillow, protobuf, Beam, TensorFlow, pycocotools) taken from this environment
through a ``.pth`` file (``conftest.new_venv``), and tfrecorder from this checkout.
"""

import json
import math
import os
import platform
import shutil

import pytest

from tests import test_docs
from tests.conftest import new_venv, pip

pytestmark = pytest.mark.slow  # the environment takes a minute and 5 GB; the step seconds

#: The torch and torchvision pair to install, by machine: releases built for each other
#: (x86_64: a CUDA build, run on the CPU here).
RELEASES = {"x86_64": ("2.14.1", "0.29.1"), "aarch64": ("2.9.1", "0.24.1")}
DOC = os.path.join("docs", "detection.md")


@pytest.fixture(scope="module")
def torchvision_python(tmp_path_factory):
    """The interpreter of an environment with torchvision; removed afterwards."""
    torch, torchvision = RELEASES[platform.machine()]
    venv = tmp_path_factory.mktemp("torchvision") / "venv"
    python = new_venv(venv, inherit=True)
    # --no-compile: the test imports a small part of torch's many modules.
    pip(python, "install", "--quiet", "--no-compile", f"torch=={torch}",
        f"torchvision=={torchvision}")
    yield python
    shutil.rmtree(venv, ignore_errors=True)  # gigabytes: pytest keeps three runs' folders


@pytest.fixture(scope="module")
def page(torchvision_python, tmp_path_factory):
    """docs/detection.md's blocks run in order in a fresh folder, its Python blocks in
    the torchvision environment: ``(results by block id, folder, the Python process)``."""
    folder = str(tmp_path_factory.mktemp("detection-doc"))
    env = test_docs._prepare(folder)
    python = test_docs._Python(folder, env, torchvision_python)
    results = {}
    try:
        for block in test_docs.blocks(DOC):
            if (block["marker"] or "").startswith("skip"):
                continue
            result, printed = test_docs._run_block(
                folder, block, env, python if block["kind"] == "python" else None)
            assert result["status"] == "ok", f"{block['id']}:\n{result['error']}\n{printed}"
            results[block["id"]] = result
        yield results, folder, python
    finally:
        code, at_exit = python.close()
    assert code == 0, at_exit[-3000:]


def test_the_environment_has_torchvision_and_this_environments_numpy(page):
    import numpy

    _, folder, python = page
    path = os.path.join(folder, "environment.py")
    with open(path, "w") as f:
        f.write("import numpy, PIL, torch, torchvision, tfrecorder\n"
                "print(numpy.__file__, torch.__version__, torchvision.__version__, "
                "tfrecorder.__file__)\n")
    code, out, err = python.run(path)
    assert code == 0, err[-3000:]
    numpy_file, torch, torchvision, ours = out.split()
    assert numpy_file == numpy.__file__  # one NumPy for both: no second ABI
    assert (torch.split("+")[0], torchvision.split("+")[0]) == RELEASES[platform.machine()]
    assert ours.startswith(os.path.join(test_docs.ROOT, "tfrecorder"))


def test_one_mask_rcnn_training_step_as_the_doc_gives_it(page):
    results, _, _ = page
    (block,) = [b for b in test_docs.blocks(DOC) if "maskrcnn_resnet50_fpn(" in b["source"]]
    assert block["marker"] == "needs: torchvision"  # which test_docs.py skips here
    printed = dict(line.split(": ") for line in results[block["id"]]["stdout"].splitlines())
    assert set(printed) == {"loss_classifier", "loss_box_reg", "loss_mask",
                            "loss_objectness", "loss_rpn_box_reg"}
    assert all(math.isfinite(float(v)) for v in printed.values()), printed


#: Run after the page's blocks, in their folder and process: each record of the page's
#: conversion as given, and flipped by transforms.v2.
_FLIPPED = '''
import json
import torch
import tfrecorder.torch
from torchvision.transforms import v2

plain = tfrecorder.torch.Dataset("out/masks", "train")
flipped = tfrecorder.torch.Dataset("out/masks", "train",
                                   transforms=v2.RandomHorizontalFlip(p=1.0))
for i in range(len(plain)):
    (image, target), (turned, moved) = plain[i], flipped[i]
    print(json.dumps({
        "name": plain.reader.features(i)["image_name"].decode(),
        "size": list(image.shape[1:]),
        "kinds": {k: type(v).__name__ for k, v in target.items()},
        "canvas": list(target["boxes"].canvas_size),
        "boxes": target["boxes"].tolist(), "flipped_boxes": moved["boxes"].tolist(),
        "flipped_canvas": list(moved["boxes"].canvas_size),
        "labels": target["labels"].tolist(),
        "image_flipped": torch.equal(turned, image.flip(-1)),
        "masks_flipped": torch.equal(moved["masks"], target["masks"].flip(-1)),
        "masks_moved": not torch.equal(moved["masks"], target["masks"]),
    }))
'''


def test_transforms_v2_flip_the_boxes_and_masks_with_the_image(page):
    results, folder, python = page
    path = os.path.join(folder, "flipped.py")
    with open(path, "w") as f:
        f.write(_FLIPPED)
    code, out, err = python.run(path)
    assert code == 0, err[-3000:]
    items = [json.loads(line) for line in out.splitlines()]
    with open(os.path.join(folder, "instances_masks.json")) as f:
        coco = json.load(f)
    names = {c["id"]: c["name"] for c in coco["categories"]}
    by_file = {i["file_name"]: i for i in coco["images"]}
    label_names = open(os.path.join(folder, "out", "masks",
                                    "objects-label.labels.txt")).read().split()
    assert sorted(i["name"] for i in items) == sorted(by_file)
    for item in items:
        image = by_file[item["name"]]
        (annotation,) = [a for a in coco["annotations"] if a["image_id"] == image["id"]]
        height, width = item["size"]
        assert (height, width) == (image["height"], image["width"])
        assert item["kinds"]["boxes"] == "BoundingBoxes" and item["kinds"]["masks"] == "Mask"
        assert item["canvas"] == item["flipped_canvas"] == [height, width]
        x, y, w, h = annotation["bbox"]
        assert item["boxes"] == [[x, y, x + w, y + h]]  # whole pixels: exact
        assert item["flipped_boxes"] == [[width - x - w, y, width - x, y + h]]
        assert item["image_flipped"] and item["masks_flipped"] and item["masks_moved"]
        # Labels count from 1 (0 is the background); label k is line k of the labels file.
        assert [label_names[k - 1] for k in item["labels"]] == [
            names[annotation["category_id"]]]
