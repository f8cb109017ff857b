"""Optional dependencies: each imported where it is first needed, with a message that
names the extra which installs it.

TensorFlow is an extra, as in TFDS and Keras 3: converting, the readers for PyTorch,
Grain, DALI and pandas, the report and the shard cache never import it, so an install
for those stacks goes without it (docs/getting-started.md). Only ``load()``, tf.data's
pipelines, and TFRecorder's ``feature_spec`` need it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: The distribution's name on the package index (setup.py); the extras are its.
DISTRIBUTION = "tfrecorder-tables"

#: Extras by the module they install: module -> (extra, the package users know).
_EXTRAS = {
    "tensorflow": ("tensorflow", "TensorFlow"),
    "torch": ("torch", "PyTorch"),
    "pycocotools": ("masks", "pycocotools"),
}


def require(module: str, needed_by: str) -> ModuleType:
    """``module`` imported, or ModuleNotFoundError saying that ``needed_by`` needs it and
    which ``pip install`` brings it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        top = module.split(".")[0]
        if e.name is None or e.name.split(".")[0] != top:
            raise  # the module is there, and one of its own imports failed: say that
        extra, known_as = _EXTRAS[top]
        raise ModuleNotFoundError(
            f"{needed_by} needs {known_as}, which is not installed; install it with "
            f"pip install '{DISTRIBUTION}[{extra}]' (or pip install -e \".[{extra}]\" in a "
            f"clone)", name=top) from e
