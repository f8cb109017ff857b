import re

from setuptools import find_packages, setup

# One version, tfrecorder/_version.py's, read as text: setup.py must not import the
# package (its dependencies may not be installed yet).
with open("tfrecorder/_version.py", encoding="utf-8") as f:
    VERSION = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M).group(1)

setup(
    # The import name is tfrecorder; the package index's "tfrecorder" is another project
    # (Google's TFRecorder, archived), so the distribution has a name of its own.
    name="tfrecorder-tables",
    version=VERSION,
    description="Convert image and tabular datasets (CSV or pandas) to sharded TFRecord files, and load them back.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["tfrecorder", "tfrecorder.*"]),
    # The console script's first module: outside the package, so that Ctrl-C is answered
    # before the package's imports run (_tfrecorder_command.py).
    py_modules=["_tfrecorder_command"],
    # Tested on 3.11, 3.12 and 3.13 (scripts/test-pythons.sh; README).
    python_requires=">=3.11",
    install_requires=[
        "apache-beam[gcp]>=2.60",
        "gcsfs>=2024.2",
        "google-crc32c>=1.5",
        "numpy>=1.24",
        # pandas 3 works: see docs/design.md on Beam's IPython label hook.
        "pandas>=2.0",
        "pillow>=10.0",
        # Records are parsed with protobuf's compiled parser (upb), without TensorFlow.
        "protobuf>=5.26",
        # Ultralytics YOLO's data.yaml (Beam requires it too).
        "pyyaml>=6.0",
        "tqdm>=4.60",
    ],
    extras_require={
        # tf.data pipelines (load(), Folder.load) and TFRecorder's feature_spec. Converting,
        # the other readers, the report and the shard cache never import TensorFlow.
        # 2.21: tf.io.decode_image reads WebP, which is then stored as it is.
        "tensorflow": ["tensorflow>=2.21"],
        # The progress bar as a Jupyter widget (plain text without it).
        "notebook": ["ipywidgets>=8.0"],
        # Beam's Dask runner: runner="DaskRunner" (docs/runners.md).
        "dask": ["dask[distributed]>=2024.1"],
        # Readers for other frameworks (tfrecorder.torch, tfrecorder.grain); none imports
        # TensorFlow. torch is pinned to the tested version (a CPU build on the test
        # machines); left unpinned, pip may pick a CUDA build of several gigabytes.
        "torch": ["torch==2.13.0"],
        "grain": ["grain>=0.2.18"],
        # COCO instance masks (segmentation) rasterised as COCO's own tools do.
        "masks": ["pycocotools>=2.0"],
        # NVIDIA DALI (nvidia-dali-cuda120, over 400 MB) reads our shards and index files
        # itself; it is not an extra (docs/loading.md).
        "test": [
            "dask[distributed]>=2024.1",
            # Exports are judged by their readers' own code (docs/sharing.md).
            "datasets>=4.0",
            # Model Garden's decoders read our model_garden records (docs/detection.md):
            # what they import, beside tf-models-official itself, which pins an older
            # TensorFlow and is installed without its dependencies (tests/model-garden.txt).
            "gin-config>=0.5",
            "opencv-python-headless>=4.8",
            "pycocotools>=2.0.7",
            "tf-keras>=2.21",
            "gcp-storage-emulator>=2024.8",
            "grain>=0.2.18",
            "hypothesis>=6.0",
            "importlib_resources>=6.0",
            "ipykernel>=6.0",
            "ipywidgets>=8.0",
            "mlcroissant>=1.1",
            "nbclient>=0.9",
            "nbformat>=5.9",
            "psutil>=5.9",
            # judges the COCO instance masks (tests/test_masks.py)
            "pycocotools>=2.0",
            "pytest>=8.0",
            # ends a hung test with every thread's stack (pytest.ini)
            "pytest-timeout>=2.3",
            "pytest-xdist>=3.5",
            # writes the YOLO and Pascal VOC fixtures with its own writers
            "supervision>=0.20",
            "tensorflow>=2.21",
            "tensorflow-datasets>=4.9",
            "torch==2.13.0",
            "webdataset>=1.0",
            "wids>=0.1.11",
        ],
    },
    entry_points={"console_scripts": ["tfrecorder=_tfrecorder_command:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
        "License :: OSI Approved :: Apache Software License",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
