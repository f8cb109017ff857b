import pytest

from tfrecorder import plan
from tfrecorder.plan import Row

GiB = 1 << 30
MiB = 1 << 20


@pytest.mark.parametrize("total,rows,workers,expected", [
    (137 * GiB, 1_281_167, 1, 1024),    # ImageNet train: 1024 shards of ~137 MiB
    (3000 * GiB, 10_000_000, 1, 3072),  # above 1024 shards: multiples of 1024, <= 1 GiB each
    (500 * MiB, 10_000, 1, 4),          # 4 x 125 MiB: largest power of two with >= 64 MiB
    (10 * MiB, 5_000, 1, 1),            # small: one shard
    (10 * MiB, 5_000, 8, 8),            # ...but never fewer shards than workers
    (10 * MiB, 100, 8, 1),              # ...unless the split is too small to be worth it
    (300 * GiB, 200, 1, 200),           # never more shards than rows
])
def test_shard_count(total, rows, workers, expected):
    assert plan.shard_count(total, rows, workers) == expected


def test_every_shard_stays_within_one_gib():
    for total in (1 * GiB, 5 * GiB, 900 * GiB, 2000 * GiB):
        n = plan.shard_count(total, 10**7)
        assert total / n <= GiB


def _rows(n, split="train"):
    return [Row(i, split, f"/img/{i}.jpg", {}, ()) for i in range(n)]


def test_plan_places_every_row_exactly_once_with_exact_counts():
    rows = _rows(1000) + _rows(7, "test")
    tasks = plan.plan(rows, name="data", num_shards=3)
    assert [(t.split, t.index, t.count, len(t.rows)) for t in tasks] == [
        ("train", 0, 3, 333), ("train", 1, 3, 334), ("train", 2, 3, 333),
        ("test", 0, 3, 2), ("test", 1, 3, 3), ("test", 2, 3, 2)]
    placed = [(r.split, r.row) for t in tasks for r in t.rows]
    assert sorted(placed) == sorted((r.split, r.row) for r in rows)
    assert tasks[0].filename == "data-train.tfrecord-00000-of-00003"


def test_shuffle_is_seeded_and_deterministic():
    rows = _rows(500)
    a = [r.row for r in plan.plan(rows, name="d", num_shards=2)[0].rows]
    b = [r.row for r in plan.plan(rows, name="d", num_shards=2)[0].rows]
    c = [r.row for r in plan.plan(rows, name="d", num_shards=2, seed=1)[0].rows]
    assert a == b and a != c and a != sorted(a)


def test_per_split_shard_counts_and_gzip_names():
    tasks = plan.plan(_rows(10) + _rows(10, "validation"), name="x", gzip=True,
                      num_shards={"train": 2, "validation": 1})
    assert [t.filename for t in tasks] == [
        "x-train.tfrecord-00000-of-00002.gz", "x-train.tfrecord-00001-of-00002.gz",
        "x-validation.tfrecord-00000-of-00001.gz"]
