import pytest

from tfrecorder._writer import plan

GiB = 1 << 30
MiB = 1 << 20


@pytest.mark.parametrize("total,rows,parallel,expected", [
    (137 * GiB, 1_281_167, 1, 1024),    # ImageNet train: 1024 shards of ~137 MiB
    (3000 * GiB, 10_000_000, 1, 3072),  # above 1024 shards: multiples of 1024, <= 1 GiB each
    (500 * MiB, 10_000, 1, 4),          # 4 x 125 MiB: largest power of two with >= 64 MiB
    (10 * MiB, 5_000, 1, 1),            # small: one shard
    (10 * MiB, 5_000, 8, 8),            # ...but never fewer shards than ``parallel``
    (10 * MiB, 100, 8, 1),              # ...unless the split is too small to be worth it
    (300 * GiB, 200, 1, 200),           # never more shards than rows
])
def test_shard_count(total, rows, parallel, expected):
    assert plan.shard_count(total, rows, parallel) == expected


def test_the_automatic_count_is_the_same_on_every_machine(monkeypatch):
    # The count is a function of the data alone: not of the cores of the machine.
    counts = {"train": 5_000, "test": 100}
    sizes = {"train": 10 * MiB, "test": MiB}
    found = []
    for cores in (1, 2, 64):
        monkeypatch.setattr("os.cpu_count", lambda: cores)
        found.append([lay.count for lay in plan.split_plans(counts, bytes_per_split=sizes)])
    assert found == [[plan.PARALLEL_SHARDS, 1]] * 3


def test_every_shard_stays_within_one_gib():
    for total in (1 * GiB, 5 * GiB, 900 * GiB, 2000 * GiB):
        n = plan.shard_count(total, 10**7)
        assert total / n <= GiB


def test_split_plans_place_every_row_exactly_once_with_exact_counts():
    plans = plan.split_plans({"train": 1000, "test": 7}, num_shards=3)
    assert [(lay.split, lay.count) for lay in plans] == [("train", 3), ("test", 3)]
    assert [lay.ends.tolist() for lay in plans] == [[333, 667, 1000], [2, 5, 7]]
    for lay, n in zip(plans, (1000, 7)):
        assert sorted(lay.inverse.tolist()) == list(range(n))  # one position per row


def test_shuffle_is_seeded_and_deterministic():
    def order(seed):
        return plan.split_plans({"train": 500}, num_shards=2, seed=seed)[0].inverse.tolist()

    a, b, c = order(0), order(0), order(1)
    assert a == b and a != c and a != sorted(a)


def test_per_split_shard_counts_and_gzip_names():
    plans = plan.split_plans({"train": 10, "validation": 10},
                           num_shards={"train": 2, "validation": 1})
    assert plan.shard_names(plans, "x", gzip=True) == [
        "x-train.tfrecord-00000-of-00002.gz", "x-train.tfrecord-00001-of-00002.gz",
        "x-validation.tfrecord-00000-of-00001.gz"]
