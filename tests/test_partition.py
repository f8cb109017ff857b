"""Which records each reader reads: pure arithmetic, every case of a few counts."""

import pytest

from tfrecorder._readers import partition
from tfrecorder._errors import ConfigError


@pytest.mark.parametrize("counts", [[9, 9, 9], [1, 0, 20], [5], [2, 3, 1, 7]])
@pytest.mark.parametrize("n", range(1, 10))
def test_readers_get_disjoint_runs_that_cover_every_record_once(counts, n):
    seen, sizes = [], []
    for i in range(n):
        start, end = partition.span(sum(counts), i, n)
        extent_list = partition.extents(counts, start, end)
        records = [(f, first + k) for f, first, m in extent_list for k in range(m)]
        cut = partition.pieces(extent_list, most=16, least=1)
        assert [(f, first + k) for f, first, m in cut for k in range(m)] == records
        seen += records
        sizes.append(len(records))
    assert sorted(seen) == [(f, r) for f, c in enumerate(counts) for r in range(c)]
    assert len(seen) == len(set(seen))
    assert max(sizes) - min(sizes) <= 1


def test_a_reader_reads_one_run_per_file_it_touches():
    assert partition.extents([9, 9, 9], 7, 20) == [(0, 7, 2), (1, 0, 9), (2, 0, 2)]
    assert partition.pieces([(0, 0, 1000)], most=4, least=250) == [
        (0, 0, 250), (0, 250, 250), (0, 500, 250), (0, 750, 250)]
    assert partition.pieces([(0, 0, 1000)], most=16, least=256) == [
        (0, 0, 333), (0, 333, 333), (0, 666, 334)]  # no run under 256 records
    assert partition.pieces([(0, 0, 300)], most=16, least=256) == [(0, 0, 300)]


@pytest.mark.parametrize("shard", [(3, 3), (-1, 2), (0, 0), "0/2", (0.5, 2), (True, 2), (1,)])
def test_a_reader_outside_its_count_is_refused(shard):
    with pytest.raises(ConfigError, match="0 <= index < count"):
        partition.check_shard(shard)
