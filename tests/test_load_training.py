"""load() for training stacks: exact lengths, any number of readers, a global shuffle,
and an order that resumes from a checkpoint in a new process."""

import json
import os
import subprocess
import sys

import pytest

import tfrecorder
from tests.conftest import SAMPLES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def three_shards(samples_converted):
    """The samples, train in 3 shards of 9 records (read only)."""
    return samples_converted(num_shards={"train": 3, "validation": 1, "test": 1})[0]


def _names(ds):
    return [ex["image_name"].numpy() for ex in ds]


def _all(out):
    return _names(tfrecorder.load(out, split="train", decode_images=False))


@pytest.mark.slow
def test_every_dataset_knows_its_length(three_shards):
    datasets = tfrecorder.load(three_shards, decode_images=False)
    assert int(datasets["train"].cardinality()) == 27
    for s, d in datasets.items():
        assert int(d.cardinality()) == datasets.info.splits[s].num_examples == len(_names(d))
    for drop, batches in ((False, 6), (True, 5)):
        ds = tfrecorder.load(three_shards, split="train", batch_size=5, image_size=(8, 8),
                             drop_remainder=drop)
        assert int(ds.cardinality()) == batches == sum(1 for _ in ds)


@pytest.mark.slow
@pytest.mark.parametrize("shuffle", [False, True, "global"])
def test_any_number_of_readers_share_the_records_exactly_once(three_shards, shuffle):
    everything = sorted(_all(three_shards))
    for n in range(1, 10):
        parts = [tfrecorder.load(three_shards, split="train", decode_images=False,
                                 shard=(i, n), shuffle=shuffle, seed=5) for i in range(n)]
        names = [_names(p) for p in parts]
        assert [int(p.cardinality()) for p in parts] == [len(x) for x in names]
        assert sorted(x for part in names for x in part) == everything, n
        sizes = [len(x) for x in names]
        assert max(sizes) - min(sizes) <= 1, (n, sizes)


@pytest.mark.slow
def test_an_input_context_is_a_reader(tf, three_shards):
    parts = [_names(tfrecorder.load(
        three_shards, split="train", decode_images=False,
        input_context=tf.distribute.InputContext(num_input_pipelines=4, input_pipeline_id=i)))
        for i in range(4)]
    assert parts == [_names(tfrecorder.load(three_shards, split="train", decode_images=False,
                                            shard=(i, 4))) for i in range(4)]
    with pytest.raises(tfrecorder.ConfigError, match="not both"):
        tfrecorder.load(three_shards, shard=(0, 2),
                        input_context=tf.distribute.InputContext(2, 0, 1))
    with pytest.raises(tfrecorder.ConfigError, match="needs seed="):
        tfrecorder.load(three_shards, split="train", shard=(0, 2), shuffle="global")
    with pytest.raises(tfrecorder.ConfigError, match="shuffle='sometimes'"):
        tfrecorder.load(three_shards, shuffle="sometimes")


@pytest.mark.slow
def test_a_global_shuffle_is_a_seeded_permutation_of_the_split_each_epoch(three_shards):
    in_order = _all(three_shards)
    ds = tfrecorder.load(three_shards, split="train", decode_images=False, shuffle="global",
                         seed=11)
    epochs = [_names(ds) for _ in range(3)]
    for e in epochs:
        assert sorted(e) == sorted(in_order) and e != in_order
    assert epochs[0] != epochs[1] != epochs[2]
    again = tfrecorder.load(three_shards, split="train", decode_images=False, shuffle="global",
                            seed=11)
    assert [_names(again) for _ in range(3)] == epochs  # the same seed, the same epochs
    other = tfrecorder.load(three_shards, split="train", decode_images=False, shuffle="global",
                            seed=12)
    assert _names(other) != epochs[0]
    # Not a window: the first records of an epoch come from every shard, not the first.
    first_shard = set(in_order[:9])
    assert any(len(set(e[:9]) - first_shard) >= 4 for e in epochs)
    # Two readers of the same seed cut the same permutation.
    halves = [tfrecorder.load(three_shards, split="train", decode_images=False,
                              shuffle="global", seed=11, shard=(i, 2)) for i in range(2)]
    assert _names(halves[0]) + _names(halves[1]) == epochs[0]


@pytest.mark.slow
def test_keras_knows_the_steps_of_the_first_epoch(tf, three_shards, caplog):
    import keras

    seen = []

    class Steps(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            seen.append(self.params.get("steps"))

    train = tfrecorder.load(three_shards, split="train", batch_size=5, image_size=(8, 8),
                            as_supervised=True, shuffle="global", seed=1)
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(3)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with caplog.at_level("WARNING"):
        history = model.fit(train, epochs=2, verbose=0, callbacks=[Steps()])
    assert seen == [6, 6] and history.params["steps"] == 6
    assert "ran out of data" not in caplog.text


def _batches(out, kwargs, path=None, k=0, restore=False):
    """The batches (image names) of ``load(out, split="train", batch_size=4, **kwargs)``
    from a new iterator to the end of the epoch; with ``path``, the iterator is saved there
    after ``k`` batches (and reading stops), or, ``restore``, restored from there first."""
    import tensorflow as tf

    kwargs = {**kwargs, **({"shard": tuple(kwargs["shard"])} if "shard" in kwargs else {})}
    it = iter(tfrecorder.load(out, split="train", batch_size=4, decode_images=False,
                              **kwargs))
    ckpt = tf.train.Checkpoint(data=it)
    if restore:
        ckpt.restore(tf.train.latest_checkpoint(path)).assert_consumed()
    batches = []
    for i, batch in enumerate(it):
        batches.append([n.decode() for n in batch["image_name"].numpy()])
        if path and not restore and i + 1 == k:
            ckpt.save(path + "/data")
            break
    return batches


#: A new process restoring each checkpoint it is given (JSON: [[out, kwargs, path], ...])
#: and reading on to the end of the epoch; prints the batches of each, as JSON.
_RESTORE = """
import json, sys
from tests.test_load_training import _batches
print(json.dumps([_batches(out, kwargs, path, restore=True)
                  for out, kwargs, path in json.loads(sys.argv[1])]))
"""

RESUMED = {"in order": {}, "global": {"shuffle": "global", "seed": 3},
           "window": {"shuffle": True, "seed": 3, "shuffle_buffer": 8},
           "reader 1 of 3, global": {"shard": [1, 3], "shuffle": "global", "seed": 3}}


@pytest.fixture(scope="module")
def resumed(three_shards, tmp_path_factory):
    """For each case of RESUMED: ``(whole, first, rest)``, the batches of a whole epoch,
    those read before the iterator was saved after k of them (from a dataset of its own),
    and those a new process read after restoring it (one process restores every case)."""
    cases, todo = {}, []
    for name, kwargs in RESUMED.items():
        path = str(tmp_path_factory.mktemp("ckpt"))
        whole = _batches(three_shards, kwargs)
        first = _batches(three_shards, kwargs, path, k=3 if len(whole) > 3 else 1)
        cases[name] = whole, first
        todo.append([three_shards, kwargs, path])
    p = subprocess.run([sys.executable, "-c", _RESTORE, json.dumps(todo)], capture_output=True,
                       text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert p.returncode == 0, p.stderr[-3000:]
    rests = json.loads(p.stdout.strip().splitlines()[-1])
    return {name: (*cases[name], rest) for name, rest in zip(RESUMED, rests)}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(RESUMED))
def test_an_iterator_resumes_in_a_new_process_where_it_stopped(resumed, case):
    whole, first, rest = resumed[case]
    k = 3 if len(whole) > 3 else 1
    assert first == whole[:k] and rest == whole[k:] and rest


@pytest.mark.slow
def test_sharding_gzip_shards_counts_records_instead(tmp_path):
    out = str(tmp_path / "gz")
    tfrecorder.convert(os.path.join(SAMPLES, "data.csv"), out, compression="gzip",
                       num_shards={"train": 2, "validation": 1, "test": 1})
    parts = [_names(tfrecorder.load(out, split="train", decode_images=False, shard=(i, 4)))
             for i in range(4)]
    assert [len(p) for p in parts] == [6, 7, 7, 7]
    assert sorted(x for p in parts for x in p) == sorted(_all(out))


def _doc_block(heading):
    import re

    text = open(os.path.join(ROOT, "docs", "loading.md")).read()
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return block


@pytest.mark.slow
@pytest.mark.parametrize("heading", ["Many readers and a global shuffle (tf.data)",
                                     "Keras multi-worker training"])
def test_the_loading_doc_snippets_run_as_written(doc_runs, heading):
    # Their runs among the page's blocks (tests/test_docs.py), in a fresh folder holding
    # samples/; the multi-worker one in a process of its own.
    result, _ = doc_runs.block("docs/loading.md", _doc_block(heading))
    assert result["status"] == "ok", result["error"]


@pytest.mark.slow
def test_readers_that_seed_tensorflow_per_rank_still_cut_one_permutation(three_shards, tf):
    # A common habit: tf.random.set_seed(base + rank) for each worker's augmentations.
    # The permutation must depend on seed= and the epoch alone, or records are read
    # twice and others never.
    parts = []
    for rank in range(2):
        tf.random.set_seed(100 + rank)
        ds = tfrecorder.load(three_shards, split="train", decode_images=False,
                             shuffle="global", seed=7, shard=(rank, 2))
        parts.append([_names(ds), _names(ds)])  # two epochs
    tf.random.set_seed(None)
    everything = sorted(_names(tfrecorder.load(three_shards, split="train",
                                               decode_images=False)))
    for epoch in range(2):
        assert sorted(parts[0][epoch] + parts[1][epoch]) == everything
    assert parts[0][0] != parts[0][1]  # still a new order each epoch
