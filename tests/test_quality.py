"""The data report: exact and near duplicates, leaks, conflicts, statistics and warnings,
from real conversions, and the pure functions that find them."""

from __future__ import annotations

import io
import json
import random

import pandas as pd
import pytest

import tfrecorder
from tfrecorder._report import looker, matching, measures, quality


def _photo(seed: int, size=(160, 120)) -> "Image":
    """A smooth picture (a gradient and a few ellipses), unlike any other seed's."""
    from PIL import Image, ImageDraw

    rng = random.Random(seed)
    w, h = size
    img = Image.linear_gradient("L").resize(size).convert("RGB")
    if rng.random() < 0.5:
        img = img.transpose(Image.Transpose.ROTATE_180)
    draw = ImageDraw.Draw(img)
    for _ in range(4):
        x, y = rng.randrange(w), rng.randrange(h)
        r = rng.randrange(10, 50)
        draw.ellipse((x - r, y - r, x + r, y + r),
                     fill=tuple(rng.randrange(256) for _ in range(3)))
    return img


def _jpeg(img, quality_=90) -> bytes:
    out = io.BytesIO()
    img.save(out, "JPEG", quality=quality_)
    return out.getvalue()


@pytest.fixture()
def table(tmp_path):
    """A CSV whose rows hold, by line: distinct photos, an exact copy in test (a leak), a
    copy under another label in train (a conflict and a duplicate), and a half-size
    re-encoded copy in validation (a near leak)."""
    folder = tmp_path / "img"
    folder.mkdir()
    rows = []
    labels = ["cat", "dog"]
    for i in range(12):
        (folder / f"{i}.jpg").write_bytes(_jpeg(_photo(i)))
        rows.append(("TRAIN", f"img/{i}.jpg", labels[i % 2]))
    (folder / "copy_of_3.jpg").write_bytes((folder / "3.jpg").read_bytes())
    rows.append(("TEST", "img/copy_of_3.jpg", "dog"))             # line 13: leak of line 4
    (folder / "again_4.jpg").write_bytes((folder / "4.jpg").read_bytes())
    rows.append(("TRAIN", "img/again_4.jpg", "dog"))              # line 14: conflict, line 5
    small = _photo(7).resize((80, 60))
    (folder / "small_7.jpg").write_bytes(_jpeg(small, 75))
    rows.append(("VALIDATION", "img/small_7.jpg", "dog"))         # line 15: near leak, line 8
    for i in range(20, 23):
        (folder / f"{i}.jpg").write_bytes(_jpeg(_photo(i)))
        rows.append(("TEST", f"img/{i}.jpg", "cat"))
    csv = tmp_path / "data.csv"
    csv.write_text("".join(f"{s},{u},{lab}\n" for s, u, lab in rows))
    return csv


@pytest.mark.slow  # a conversion end to end
def test_exact_leaks_conflicts_and_duplicates_name_the_tables_rows(table, tmp_path):
    result = tfrecorder.convert(str(table), str(tmp_path / "out"))
    r = tfrecorder.report(str(tmp_path / "out"))
    leaks = r.leaks[["kind", "split_a", "row_a", "image_uri_a", "split_b", "row_b",
                     "image_uri_b"]].values.tolist()
    assert leaks == [["exact", "train", 4, "img/3.jpg", "test", 13, "img/copy_of_3.jpg"]]
    dups = r.duplicates[["kind", "row_a", "label_a", "row_b", "label_b"]].values.tolist()
    assert dups == [["exact", 5, "cat", 14, "dog"]]
    assert r.conflicts[["row", "label"]].values.tolist() == [[5, "cat"], [14, "dog"]]
    assert r.conflicts["sha256"].nunique() == 1
    # no hash without near_duplicates: the resized copy is not found
    assert r.near_duplicates is None and "near" not in set(r.leaks["kind"])
    assert r.found(["leaks", "conflicts"]) == {"leaks": 1, "conflicts": 1}
    # the position reads the very record back
    from tfrecorder.access import Reader

    feats = Reader(str(tmp_path / "out"), "test").features(int(r.leaks["position_b"][0]))
    assert feats["image_uri"] == b"img/copy_of_3.jpg" or feats["image_uri"] == "img/copy_of_3.jpg"
    # the result carries the same report, and its summary says it in one line
    assert result.report.counts == r.counts
    assert ("leaks: 1 exact; duplicates: 1 exact; copies: 2 images appear twice each: 4 "
            "rows; 1 group spans train and test; conflicts: 1") in str(result)
    # the same records as groups, one row per record: what a user acts on
    assert r.groups[["group", "kind", "split", "row", "label"]].values.tolist() == [
        [0, "exact", "train", 4, "dog"], [0, "exact", "test", 13, "dog"],
        [1, "exact", "train", 5, "cat"], [1, "exact", "train", 14, "dog"]]


@pytest.mark.slow
def test_worker_processes_write_the_report_one_worker_writes(table, tmp_path, monkeypatch):
    """Worker processes hand the shards to the grouping in no fixed order: the report is
    the same as one worker's, byte for byte, conflicts in the order of their first row."""
    from tfrecorder._writer import runners

    folder = tmp_path / "img"
    with table.open("a") as f:
        for i in (0, 9, 10):  # three more conflicts, in both shards of train
            (folder / f"again_{i}.jpg").write_bytes((folder / f"{i}.jpg").read_bytes())
            f.write(f"TRAIN,img/again_{i}.jpg,{['dog', 'cat'][i % 2]}\n")
    one, two = tmp_path / "one", tmp_path / "two"
    tfrecorder.convert(str(table), str(one), near_duplicates=True, num_shards=2)
    monkeypatch.setattr(runners, "IN_PROCESS_MAX_ROWS", 0)  # worker processes
    result = tfrecorder.convert(str(table), str(two), near_duplicates=True, num_shards=2,
                                num_workers=2)
    assert result.report.found(["leaks", "conflicts"]) == {"leaks": 2, "conflicts": 4}
    firsts = [c["rows"][0] for c in json.loads((two / "quality.json").read_text())["conflicts"]]
    assert [r["split"] for r in firsts] == ["train"] * 4
    positions = [r["position"] for r in firsts]  # the order the split's records are read in
    assert positions == sorted(positions) and len(set(positions)) == 4
    assert (two / "quality.json").read_bytes() == (one / "quality.json").read_bytes()


def test_conflicts_come_in_the_order_of_their_first_record_whatever_the_shards_order():
    from tfrecorder._writer import shard as _shard, steps as _steps

    def written(number, shas):  # train shard ``number``: label ``number`` for every record
        stats = _shard.ShardStats("train", number, len(shas), f"s{number}", 0, 0)
        stats.look = looker.Looker()
        for pos, sha in enumerate(shas):
            stats.look.add(("train", number, pos, 10 * number + pos, f"{number}-{pos}",
                            (number,)), 1, 1, (sha, None, None, {}))
        stats.num_examples = len(shas)
        return stats, []

    def conflicts(order):
        shards = [written(0, ["b" * 64, "a" * 64]), written(1, ["a" * 64, "b" * 64])]
        found = _steps.matched(kv for i in order for kv in _steps.match_keys(shards[i]))
        _, exact = matching.full_refs([], lambda split, i: [  # labels from "rows files"
            (10 * i + pos, f"{i}-{pos}", (i,)) for pos in range(2)],
            [e[1:] for e in found if e[0] == "exact"])
        report = quality.build([s for s, _ in shards], exact, [], label_names=["x", "y"],
                               multi_label=False, near_duplicates=False, row_json=str)
        return [c["sha256"][0] for c in report["conflicts"]]

    assert conflicts([0, 1]) == conflicts([1, 0]) == ["b", "a"]


@pytest.mark.slow  # a conversion end to end
def test_near_duplicates_find_the_resized_copy_across_splits(table, tmp_path):
    tfrecorder.convert(str(table), str(tmp_path / "out"), near_duplicates=True)
    r = tfrecorder.report(str(tmp_path / "out"))
    near = r.leaks[r.leaks["kind"] == "near"]
    assert near[["split_a", "row_a", "split_b", "row_b"]].values.tolist() == [
        ["train", 8, "validation", 15]]
    # The near pair's sides are completed from the rows files: image and label too.
    (pair,) = [p for p in json.loads((tmp_path / "out" / "quality.json").read_text())["pairs"]
               if p["kind"] == "near"]
    assert [pair["a"]["image_uri"], pair["b"]["image_uri"]] == near[
        ["image_uri_a", "image_uri_b"]].values.tolist()[0]
    assert pair["b"]["image_uri"].endswith(".jpg") and pair["a"]["label"] in ("cat", "dog")
    assert 0 <= near["distance"].iloc[0] <= measures.MAX_DISTANCE
    # the exact pairs are not listed again as near ones
    assert len(r.leaks) == 2 and len(r.duplicates) == 1
    assert r.near_duplicates == {"hash": measures.HASH, "max_distance": measures.MAX_DISTANCE,
                                 "confirmed_by": "8x8 thumbnail correlation >= 0.93, "
                                                 ">= 0.9 without its plane"}
    mean, std = r.mean_std("train")
    assert len(mean) == 3 and all(0 < m < 1 for m in mean) and all(0 < s < 0.5 for s in std)


@pytest.mark.slow  # a conversion end to end
def test_statistics_per_split_and_label(table, tmp_path):
    tfrecorder.convert(str(table), str(tmp_path / "out"))
    r = tfrecorder.report(str(tmp_path / "out"))
    stats = r.stats.set_index(["split", "label"])["rows"].to_dict()
    assert stats == {("train", "cat"): 6, ("train", "dog"): 7, ("validation", "dog"): 1,
                     ("test", "cat"): 3, ("test", "dog"): 1}
    splits = r.splits
    assert splits.loc["validation", "width_min"] == 80
    assert splits.loc["train", ["width_min", "width_median", "width_max"]].tolist() == [160] * 3
    assert splits.loc["train", "formats"] == {"jpeg": 13}
    assert r.mean_std("train") is None  # nothing decoded: no colour statistics
    # Vertex AI's warning: fewer than 10 images for a label (cat 9, dog 9)
    assert {(w["kind"], w["label"]) for w in r.warnings} == {("few_images", "cat"),
                                                             ("few_images", "dog")}


@pytest.mark.slow  # a conversion end to end
def test_a_dataframe_reports_its_index_labels(tmp_path):
    paths = []
    for i in range(4):
        p = tmp_path / f"{i}.jpg"
        p.write_bytes(_jpeg(_photo(100 + i)))
        paths.append(str(p))
    dup = tmp_path / "dup.jpg"
    dup.write_bytes((tmp_path / "0.jpg").read_bytes())
    df = pd.DataFrame({"split": ["TRAIN"] * 4 + ["TEST"],
                       "image_uri": paths + [str(dup)], "label": list("abab") + ["a"]},
                      index=["r0", "r1", "r2", "r3", "r4"])
    df.tensorflow.to_tfrecord(str(tmp_path / "out"))
    r = tfrecorder.report(str(tmp_path / "out"))
    assert r.leaks[["row_a", "row_b"]].values.tolist() == [["r0", "r4"]]


@pytest.mark.slow  # a conversion end to end
def test_imbalance_warning(tmp_path):
    rows = []
    for i in range(110):
        p = tmp_path / f"{i}.png"
        from PIL import Image

        Image.new("RGB", (4, 4), (i, 2 * i % 256, 3)).save(p)
        rows.append(("TRAIN", str(p), "rare" if i == 0 else "common"))
    df = pd.DataFrame(rows, columns=["split", "image_uri", "label"])
    df.tensorflow.to_tfrecord(str(tmp_path / "out"))
    r = tfrecorder.report(str(tmp_path / "out"))
    assert {"kind": "imbalance", "largest": "common", "smallest": "rare",
            "ratio": 109.0} in r.warnings


@pytest.mark.slow
def test_report_command_prints_and_fails_on_request(table, tmp_path, run_cli):
    out = str(tmp_path / "out")
    tfrecorder.convert(str(table), out)
    run = ["report", out]
    plain = run_cli(*run)
    assert plain.returncode == 0, plain.stderr
    assert "leaks: 1 exact" in plain.stdout and "img/copy_of_3.jpg" in plain.stdout
    failing = run_cli(*run, "--fail-on", "leaks,conflicts")
    assert failing.returncode == 3 and "1 leaks, 1 conflicts" in failing.stderr
    # a kind of finding the report does not know: a usage error
    assert run_cli(*run, "--fail-on", "near").returncode == 2
    clean = tmp_path / "clean.csv"
    clean.write_text("".join(line + "\n" for line in table.read_text().splitlines()[:12]))
    tfrecorder.convert(str(clean), str(tmp_path / "clean"), )
    ok = run_cli("report", str(tmp_path / "clean"), "--fail-on", "leaks,conflicts,duplicates")
    assert ok.returncode == 0, ok.stdout + ok.stderr


@pytest.mark.slow  # a conversion end to end
def test_report_in_a_notebook_shows_bars_and_thumbnails(table, tmp_path):
    tfrecorder.convert(str(table), str(tmp_path / "out"), near_duplicates=True)
    page = tfrecorder.report(str(tmp_path / "out"))._repr_html_()
    assert page.count("<svg") == 1 and "train cat: 6" in page
    # three groups of two (two leaks, one duplicate), each one strip; the conflict's
    # two; the half-size copy as an image of odd size
    assert page.count("data:image/jpeg;base64,") == 2 * 3 + 2 + 1
    assert page.count("<h4>copies</h4>") == 1 and "odd_size: 1" in page
    # a Folder's report reads its thumbnails through its own readers: the same page
    cache = tmp_path / "cache"
    folder = tfrecorder.open(str(tmp_path / "out"), cache_dir=str(cache))
    assert folder.report()._repr_html_() == page
    # The folder overwritten by another table: a report drawn after shows none of the
    # new conversion's images beside the old rows (records read are checked as theirs).
    kept = tfrecorder.report(str(tmp_path / "out"))
    lines = table.read_text().splitlines()
    (tmp_path / "other.csv").write_text("\n".join(lines[:1] + lines[:0:-1]) + "\n")
    tfrecorder.convert(str(tmp_path / "other.csv"), str(tmp_path / "out"), mode="overwrite",
                       near_duplicates=True)
    assert kept._repr_html_().count("data:image/jpeg;base64,") == 0


@pytest.mark.slow  # a conversion end to end
def test_quality_json_is_listed_and_replaced_by_overwrite(table, tmp_path):
    out = tmp_path / "out"
    tfrecorder.convert(str(table), str(out))
    manifest = json.loads((out / "tfrecorder.json").read_text())
    assert manifest["quality"] == "quality.json"
    tfrecorder.convert(str(table), str(out), mode="overwrite", near_duplicates=True)
    assert json.loads((out / "quality.json").read_text())["near_duplicates"] is not None
    tfrecorder.verify(str(out))


# --- the pure functions -----------------------------------------------------------------

def test_bands_share_one_band_within_the_distance():
    rng = random.Random(1)
    for _ in range(2000):
        a = rng.getrandbits(64)
        flips = rng.sample(range(64), rng.randrange(measures.MAX_DISTANCE + 1))
        b = a
        for bit in flips:
            b ^= 1 << bit
        assert any(x == y for x, y in zip(matching.bands(a), matching.bands(b)))
    # the bands cover all 64 bits
    assert sum(64 // (measures.MAX_DISTANCE + 1) + (b < 64 % (measures.MAX_DISTANCE + 1))
               for b in range(measures.MAX_DISTANCE + 1)) == 64


def test_a_pair_agreeing_on_several_bands_is_found_once():
    a, b = 0x0123456789ABCDEF, 0x0123456789ABCDEF ^ 0b1  # one bit apart: all bands but one
    refs = [("train", 0, 0, 2, "a.jpg", (0,)), ("test", 0, 0, 3, "b.jpg", (0,))]
    found = []
    # the two thumbnails agree (and have detail beside their gradient): confirmed
    thumb = bytes((37 * i) % 64 for i in range(64))
    for key, value in [*matching.keyed([("a1", (a, thumb), refs[0])], True),
                       *matching.keyed([("b2", (b, thumb), refs[1])], True)]:
        found.append((key, value))
    groups: dict = {}
    for key, value in found:
        groups.setdefault(key, []).append(value)
    pairs = [p for key, members in groups.items() for kind, *rest in matching.found(key, members)
             if kind == "near" for p in rest[0]]
    # A band key carries the record's place only; the last step completes it from the
    # rows files (full_refs).
    assert pairs == [(1, "near", refs[0][:3], refs[1][:3])]
    assert all(len(v) == 4 and v[2] in (refs[0][:3], refs[1][:3])
               for k, v in found if k[0] == "n")
    rows_of = {("train", 0): [(2, "a.jpg", (0,))], ("test", 0): [(3, "b.jpg", (0,))]}.get
    counts = {"leaks": {"exact": 0, "near": 1}}
    assert matching.full_refs([(pairs, counts)], lambda split, shard: rows_of((split, shard))) == (
        [([(1, "near", refs[0], refs[1])], counts)], [])
    # A shard without rows files keeps its places, which the report still places.
    assert matching.full_refs([(pairs, counts)], lambda split, shard: None) == (
        [(pairs, counts)], [])


def _exact_group(shards, sha="f00d" * 16):
    """``found``'s groups of records with the same bytes, from shards' ``(split, shard,
    position, row, image_uri, label ids)`` refs keyed as ``keyed`` keys them, with each
    record completed from the refs as the last step completes it from the rows files."""
    members = [value for refs in shards
               for key, value in matching.keyed([(sha, None, r) for r in refs], False)]
    by_place = {r[:3]: r[3:] for refs in shards for r in refs}
    rows_of = {}
    for place, rest in by_place.items():
        rows_of.setdefault(place[:2], {})[place[2]] = rest
    groups = list(matching.found(("x", 0), members))
    _, exact = matching.full_refs([], lambda split, shard: rows_of.get((split, shard)),
                                 [g[1:] for g in groups])
    return [("exact", *g) for g in exact]


def test_a_large_group_is_counted_in_full_and_listed_within_bounds(monkeypatch):
    """300 records with the same bytes, 200 in train and 100 in test: every pair is
    counted, the first GROUP_LIMIT records are listed, and at most MAX_PAIRS pairs."""
    from tfrecorder._writer.shard import ShardStats

    monkeypatch.setattr(quality, "MAX_PAIRS", 50)
    refs = [("train" if i < 200 else "test", 0, i % 200, i + 1, f"{i}.jpg", (0,))
            for i in range(300)]
    # one group of digests, as two shards brought it: test's records, then train's
    (group,) = _exact_group([refs[200:], refs[:200]])
    _, sha, listed_refs, counts = group
    assert counts == {"leaks": {"exact": 200 * 100, "near": 0},
                      "duplicates": {"exact": 200 * 199 // 2 + 100 * 99 // 2, "near": 0},
                      "members": 300 - matching.GROUP_LIMIT}
    assert listed_refs == refs[:matching.GROUP_LIMIT]  # train first, in file order
    shards = [ShardStats("train", 0, 1, "d-train", 200, 1, rows=200, labels={0: 200}),
              ShardStats("test", 0, 1, "d-test", 100, 1, rows=100, labels={0: 100})]
    q = quality.build(shards, [group[1:]], [], label_names=["cat"], multi_label=False,
                      near_duplicates=False, row_json=lambda r: r)
    assert q["counts"]["leaks"]["exact"] == 20000 and q["conflicts"] == []
    assert len(q["pairs"]) == 50 and all(p["a"]["split"] != p["b"]["split"] for p in q["pairs"])
    total = 20000 + 200 * 199 // 2 + 100 * 99 // 2
    assert q["truncated"] == {"pairs": total - 50, "members": 300 - matching.GROUP_LIMIT}
    assert q["pairs"][0]["a"] == {"split": "train", "row": 1, "image_uri": "0.jpg",
                                  "label": "cat", "position": 0}


def test_dhash_survives_a_resize_and_tells_photos_apart():
    img = _photo(3)
    a = measures.dhash(img)
    b = measures.dhash(measures.small(_jpeg(img.resize((64, 48)), 70)))
    other = measures.dhash(_photo(4))
    assert (a ^ b).bit_count() <= measures.MAX_DISTANCE
    assert (a ^ other).bit_count() > measures.MAX_DISTANCE


def test_median_of_a_histogram():
    assert quality._median({3: 1, 5: 1, 9: 1}) == [3, 5, 9]
    assert quality._median({1: 3, 100: 1}) == [1, 1, 100]
    assert quality._median({}) == []


def test_palette_bilevel_and_16_bit_grey_copies_hash_near_their_photo():
    """Copies in modes Pillow cannot reduce directly, or that clip white when converted
    (16-bit grey), are hashed like the photo they copy."""
    from PIL import Image

    photo = _photo(5, size=(256, 192))
    grey = photo.convert("L")
    wide = Image.fromarray(__import__("numpy").asarray(grey).astype("uint16") * 257)
    copies = {"P": photo.convert("P"), "1": photo.convert("1"), "I;16": wide}
    ref = measures.dhash(measures.small(_png(grey)))
    other = measures.dhash(measures.small(_png(_photo(6, size=(256, 192)))))
    for mode, img in copies.items():
        got = measures.small(_png(img))
        assert got is not None, mode  # reduce() refuses P and 1: converted first
        d = (measures.dhash(got) ^ ref).bit_count()
        assert d < (other ^ ref).bit_count(), mode  # nearer its photo than another photo
    wide_hash = measures.dhash(measures.small(_png(wide)))
    assert wide_hash == ref  # 16-bit grey is scaled to 8 bits, not clipped white


def _png(img) -> bytes:
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA", "P", "1"])
def test_channel_sums_are_pillows_imagestat_figures(mode):
    from PIL import ImageStat

    img = _photo(7, size=(37, 23)).convert(mode)
    stat = ImageStat.Stat(img.convert("RGB"))
    assert measures.channel_sums(img) == (stat.count[0], stat.sum, stat.sum2)


@pytest.mark.slow  # a conversion end to end
def test_a_group_cut_to_its_first_members_keeps_the_first_of_every_split():
    """301 records with the same bytes, 300 in train and the last in test: the group is
    cut to GROUP_LIMIT records, the test one among them, so its 300 leaks are listed and
    not only counted."""
    from tfrecorder._writer.shard import ShardStats

    refs = [("train", 0, i, i + 1, f"{i}.jpg", (0,)) for i in range(300)]
    refs.append(("test", 0, 0, 302, "t.jpg", (0,)))
    (group,) = _exact_group([refs[:300], refs[300:]], sha="beef" * 16)
    listed = group[2]
    assert len(listed) == matching.GROUP_LIMIT
    assert listed == refs[:matching.GROUP_LIMIT - 1] + [refs[-1]]
    shards = [ShardStats("train", 0, 1, "d-train", 300, 1, rows=300, labels={0: 300}),
              ShardStats("test", 0, 1, "d-test", 1, 1, rows=1, labels={0: 1})]
    q = quality.build(shards, [group[1:]], [], label_names=["cat"], multi_label=False,
                      near_duplicates=False, row_json=lambda r: r)
    assert q["counts"]["leaks"]["exact"] == 300
    leaks = [p for p in q["pairs"] if p["a"]["split"] != p["b"]["split"]]
    assert len(leaks) == matching.GROUP_LIMIT - 1 and q["pairs"][0] == leaks[0]
    assert leaks[0]["b"] == {"split": "test", "row": 302, "image_uri": "t.jpg",
                             "label": "cat", "position": 0}
    # the near search cuts a band's members the same way (at BAND_LIMIT)
    thumb = bytes((37 * i) % 64 for i in range(64))
    members = [(7, f"s{i}", ("train", 0, i), thumb) for i in range(300)] + [
        (6, "t", ("test", 0, 0), thumb)]
    (near,) = matching.found(("n", measures.MAX_DISTANCE, 1, 0), members)  # bit 0 apart: band 1 is the first alike
    assert any(a[0] != b[0] for _, _, a, b in near[1])


def test_few_images_warns_of_labels_with_rows_only():
    """Integer labels 0 and 1000 make a vocabulary of the 1,001 ids between them, and a
    fixed vocabulary may name a label no row has: neither is a label with few images."""
    from tfrecorder._writer.shard import ShardStats

    names = ["big", "small", "ghost"]
    by_split = {"train": [ShardStats("train", 0, 1, "d", 20, 1, rows=20,
                                     labels={0: 15, 1: 5})]}
    assert quality._warnings(by_split, names) == [
        {"kind": "few_images", "label": "small", "rows": 5}]


@pytest.mark.slow
def test_a_damaged_report_is_named_with_its_fix(table, tmp_path, run_cli):
    out = tmp_path / "out"
    tfrecorder.convert(str(table), str(out))
    text = str(tfrecorder.report(str(out)))
    # splits in their order, as the pairs are: train, validation, test
    assert text.index("  train:") < text.index("  validation:") < text.index("  test:")
    assert run_cli("report", out, "--fail-on", "").returncode == 2
    good = (out / "quality.json").read_bytes()
    for damaged in (good[: len(good) // 2], b"[]", b"{}"):
        (out / "quality.json").write_bytes(damaged)
        with pytest.raises(tfrecorder.IncompleteOutputError, match="not a data report") as e:
            tfrecorder.report(str(out))
        assert str(out / "quality.json") in str(e.value) and "mode='overwrite'" in str(e.value)
        done = run_cli("report", out, "--fail-on", "leaks")
        assert done.returncode == 2 and done.stderr.startswith("Error: ")
        assert "Traceback" not in done.stderr
    # parsed, but a field of another type: its first wrong field named, no traceback
    report = json.loads(good)
    for field, value, told in [
            ("pairs", None, "pairs: null is not a list"),
            ("counts", [], "counts: [] is not an object"),
            ("pairs", [{"kind": "near", "distance": "<script>alert(1)</script>",
                        "a": {"split": "train", "row": 2, "label": "cat"},
                        "b": {"split": "test", "row": 3, "label": "cat"}}],
             'pairs[0].distance: "<script>alert(1)</script>" is not a whole number >= 0'),
            ("pairs", [{"kind": "exact", "distance": 0, "a": {"split": "train", "row": [[]],
                                                               "label": "cat"}}], "pairs[0]: no b"),
            ("stats", {"train": {"labels": {"cat": "6"}}},
             'stats.train.labels.cat: "6" is not a whole number >= 0'),
            ("warnings", [{"kind": "few_images", "label": ["cat"]}],
             'warnings[0].label: ["cat"] is not text'),
            ("truncated", {"pairs": -1}, "truncated.pairs: -1 is not a whole number >= 0"),
            ("stats", {"train": {"reencoded": {"webp": {"images": "3", "source_bytes": 1,
                                                        "stored_bytes": 2}}}},
             'stats.train.reencoded.webp.images: "3" is not a whole number >= 0')]:
        (out / "quality.json").write_text(json.dumps({**report, field: value}))
        with pytest.raises(tfrecorder.IncompleteOutputError) as e:
            tfrecorder.report(str(out))
        assert str(e.value) == (
            f"{out / 'quality.json'}: not a data report ({told}); the folder is not whole: "
            f"`tfrecorder verify {out}` checks the rest; convert the table again with "
            f"mode='overwrite' to write the report anew")
        done = run_cli("report", out)
        assert done.returncode == 2 and done.stderr == f"Error: {e.value}\n"
    (out / "quality.json").write_text('{"pairs": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(tfrecorder.IncompleteOutputError, match="nested too deep"):
        tfrecorder.report(str(out))
    (out / "quality.json").unlink()
    with pytest.raises(tfrecorder.IncompleteOutputError, match="is missing"):
        tfrecorder.report(str(out))
    assert run_cli("report", out).returncode == 2


def test_the_html_report_shows_every_value_of_the_file_as_text(tmp_path):
    """Labels, splits, rows and URIs come from the table: in the notebook they are text,
    never markup (a pair's distance is a number, or the file is not read)."""
    from tfrecorder._report.findings import Report

    tag = "<script>alert(1)</script>"
    side = {"split": tag, "row": tag, "image_uri": tag, "label": tag, "position": None}
    data = {"counts": {"leaks": {"exact": 0, "near": 30}, "duplicates": {"exact": 0, "near": 0},
                       "conflicts": 20},
            "pairs": [{"kind": "near", "distance": 5, "a": side, "b": {**side, "split": "x"}}],
            "conflicts": [{"sha256": tag, "rows": [side, side]}] * 13,
            "stats": {tag: {"rows": 3, "labels": {tag: 3}}},
            "warnings": [{"kind": "few_images", "label": tag, "rows": 3},
                         {"kind": tag, "other": tag}],
            "truncated": {"pairs": 0, "members": 0}}
    assert quality.wrong(data) is None
    page = Report(str(tmp_path / tag), data)._repr_html_()
    assert "<script" not in page and "&lt;script&gt;" in page
    assert ", 5 bits" in page and "... and 29 more" in page and "... and 8 more" in page


def test_exact_matches_are_grouped_by_digest_in_buckets_of_a_few_thousand_records():
    """Records are grouped by a bucket of their digest, one element per shard and
    bucket: the same matches whatever the number of buckets, records of one digest
    always in one bucket."""
    import hashlib

    shas = [hashlib.sha256(bytes([i % 7])).hexdigest() for i in range(40)]
    shards = [[(shas[s * 10 + j], None, ("train" if s % 2 else "test", s, j, s * 10 + j + 2,
                                         f"{s * 10 + j}.jpg", (0,)))
               for j in range(10)] for s in range(4)]
    assert matching.exact_buckets(10_000) == 2 and matching.exact_buckets(100) == 1
    found = {}
    for buckets in (1, 3, 64):
        groups: dict = {}
        for seen in shards:
            keyed = list(matching.keyed(seen, False, buckets))
            assert len(keyed) <= min(buckets, 10)  # one element per bucket, not per record
            for key, value in keyed:
                groups.setdefault(key, []).append(value)
        found[buckets] = sorted((sha, sorted(r[:3] for r in refs), counts["leaks"]["exact"])
                                for key, members in groups.items()
                                for _, sha, refs, counts in matching.found(key, members))
    assert found[1] == found[3] == found[64] and len(found[1]) == 7
    assert sum(len(refs) for _, refs, _ in found[1]) == 40


# --- near pairs a user can trust: low detail kept apart, every pair confirmed -----------

def _png(img) -> bytes:
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


def _from_grid(grid: list[list[int]], scale: int = 32):
    """A grey image drawn from a small grid of levels, each cell ``scale`` pixels."""
    from PIL import Image

    img = Image.new("L", (len(grid[0]), len(grid)))
    img.putdata([v for row in grid for v in row])
    return img.resize((img.width * scale, img.height * scale), Image.Resampling.NEAREST)


def _near_pairs(images: dict, distance: int = measures.MAX_DISTANCE) -> list:
    """The near pairs the report's matching finds among ``{(split, row): PNG bytes}``."""
    look = looker.Looker(near=True, distance=distance)
    for i, ((split, row), data) in enumerate(images.items()):
        look.add((split, 0, i, row, f"{row}.png", (0,)), 1, 1, look.measure(data))
    _, near = matching.matches([type("S", (), {"look": look})()], True)
    rows = [row for _, row in images]  # a pair's records by their place (position)
    return sorted((rows[a[2]], rows[b[2]], d) for pairs, _ in near for d, _, a, b in pairs)


def test_images_with_too_little_detail_are_never_matched():
    """A blue gradient, fine brown stripes and a plain dark image hash alike (0: no
    edges at 9x8), but none shows what another does."""
    from PIL import Image, ImageDraw

    gradient = Image.merge("RGB", [Image.new("L", (256, 256), 30), Image.new("L", (256, 256), 90),
                                   Image.linear_gradient("L").resize((256, 256))])
    stripes = Image.new("RGB", (256, 256), (120, 80, 40))
    draw = ImageDraw.Draw(stripes)
    for x in range(0, 256, 2):
        draw.line([(x, 0), (x, 255)], fill=(70, 40, 20))
    dark = Image.new("RGB", (256, 256), (12, 14, 20))
    images = {("train", 2): _png(gradient), ("test", 3): _png(stripes), ("test", 4): _png(dark)}
    hashes = [measures.dhash(measures.small(d)) for d in images.values()]
    assert max((a ^ b).bit_count() for a in hashes for b in hashes) <= measures.MAX_DISTANCE
    assert [measures.fingerprint(measures.small(d)) for d in images.values()] == [None] * 3
    assert _near_pairs(images) == []


def test_a_pair_whose_hashes_agree_by_chance_is_refused_by_its_thumbnails():
    """Two pictures with the same difference hash (each row's left-right order alike)
    but different rows (one's odd rows lifted to a bright band): different pictures,
    which the thumbnails tell; a resized copy of either is still found."""
    from PIL import Image

    rng = random.Random(3)
    grid = [[rng.randrange(0, 120) for _ in range(9)] for _ in range(8)]
    banded = [[v // 3 + (160 if y % 2 else 0) for v in row] for y, row in enumerate(grid)]
    a, b = _from_grid(grid), _from_grid(banded)
    assert measures.dhash(measures.small(_png(a))) == measures.dhash(measures.small(_png(b)))
    copy = a.resize((144, 128), Image.Resampling.LANCZOS)
    assert _near_pairs({("train", 2): _png(a), ("test", 3): _png(b)}) == []
    found = _near_pairs({("train", 2): _png(a), ("test", 3): _png(b),
                         ("test", 4): _png(copy)})
    assert [(x, y) for x, y, _ in found] == [(2, 4)]


def test_two_pictures_lit_alike_are_refused_by_the_detail_beside_their_gradient():
    """Two abstract pictures with one light gradient (bright left, dark right) and each
    its own detail: their hashes are bits apart and their thumbnails correlate by the
    gradient alone; the detail beside it tells them apart. A resized copy is found."""
    from PIL import Image
    import numpy as np

    def picture(seed):
        rng = random.Random(seed)
        return _from_grid([[min(255, max(0, 220 - 24 * x + 8 * y + rng.randrange(-14, 15)))
                            for x in range(9)] for y in range(8)])

    a, b = picture(1), picture(2)
    small_a, small_b = measures.small(_png(a)), measures.small(_png(b))
    assert (measures.dhash(small_a) ^ measures.dhash(small_b)).bit_count() <= 6
    prints = [np.frombuffer(measures.fingerprint(s), np.int8) for s in (small_a, small_b)]
    assert np.corrcoef(*prints)[0, 1] >= measures.MIN_CORRELATION  # the gradient's doing
    copy = a.resize((144, 128), Image.Resampling.LANCZOS)
    found = _near_pairs({("train", 2): _png(a), ("test", 3): _png(b), ("test", 4): _png(copy)})
    assert [(x, y) for x, y, _ in found] == [(2, 4)]


def test_near_distance_sets_the_bits_within_which_hashes_are_compared(tmp_path):
    from PIL import ImageEnhance

    rng = random.Random(5)
    grid = [[rng.randrange(0, 256) for _ in range(9)] for _ in range(8)]
    a = _from_grid(grid)
    # an edit: lower contrast, and three cells moved just past their right neighbour's
    # level (each flips a bit or two of the hash, the picture barely changes)
    edited = [row[:] for row in grid]
    for y, x in ((0, 3), (2, 5), (4, 1)):
        edited[y][x] = edited[y][x + 1] + (1 if edited[y][x] < edited[y][x + 1] else -1)
    b = ImageEnhance.Contrast(_from_grid(edited)).enhance(0.8)
    d = (measures.dhash(measures.small(_png(a))) ^ measures.dhash(measures.small(_png(b)))).bit_count()
    assert 0 < d <= 16
    images = {("train", 2): _png(a), ("test", 3): _png(b)}
    assert _near_pairs(images, distance=d - 1) == []
    assert _near_pairs(images, distance=d) == [(2, 3, d)]
    for wrong in (17, -1, True, 2.0):
        with pytest.raises(tfrecorder.ConfigError, match="near_distance"):
            tfrecorder.Options(near_distance=wrong)


def test_a_copy_eight_bits_away_is_found_by_default():
    """Copies of smooth pictures (wallpapers at a quarter of their size, or re-encoded
    at quality 70) differ by 7 or 8 bits where neighbouring cells are nearly level: the
    default distance takes them, the thumbnails keep out the pictures it lets in."""
    from PIL import ImageEnhance

    rng = random.Random(6)
    grid = [[rng.randrange(0, 256) for _ in range(9)] for _ in range(8)]
    edited = [row[:] for row in grid]
    for y, x in ((0, 3), (2, 5), (4, 1), (6, 6), (7, 2)):  # each flips a bit or two
        edited[y][x] = edited[y][x + 1] + (1 if edited[y][x] < edited[y][x + 1] else -1)
    a, b = _from_grid(grid), ImageEnhance.Contrast(_from_grid(edited)).enhance(0.8)
    d = (measures.dhash(measures.small(_png(a))) ^ measures.dhash(measures.small(_png(b)))).bit_count()
    assert d == 7
    assert tfrecorder.Options().near_distance == measures.MAX_DISTANCE
    assert _near_pairs({("train", 2): _png(a), ("test", 3): _png(b)}) == [(2, 3, 7)]


def test_copies_are_counted_and_shown_as_groups_not_pairs():
    """13 pictures stored under 12 names each are 13 groups of 12, not 858 pairs; a near
    pair joins the group of its exact copies; one group spans train and test."""
    from tfrecorder._report.findings import HTML_ROWS, Report
    from tfrecorder._writer.shard import ShardStats

    exact = []
    for p in range(13):
        refs = [("train", 0, 12 * p + i, 12 * p + i + 2, f"{p}_{i}.jpg", (0,)) for i in range(12)]
        if p == 0:
            refs[-1] = ("test", 0, 0, 300, "0_in_test.jpg", (0,))
        pairs = [(a, b) for i, a in enumerate(refs) for b in refs[i + 1:]]
        counts = matching._pair_counts((0, "exact", a, b) for a, b in pairs)
        counts["members"] = 0
        exact.append((f"{p:064x}", refs, counts))
    small = ("validation", 0, 0, 400, "small_5.jpg", (0,))
    near = [([(3, "near", exact[5][1][0], small)],
             {"leaks": {"exact": 0, "near": 1}, "duplicates": {"exact": 0, "near": 0},
              "members": 0})]
    shards = [ShardStats("train", 0, 1, "d-train", 155, 1, rows=155, labels={0: 155}),
              ShardStats("test", 0, 1, "d-test", 1, 1, rows=1, labels={0: 1}),
              ShardStats("validation", 0, 1, "d-validation", 1, 1, rows=1, labels={0: 1})]
    data = quality.build(shards, exact, near, label_names=["cat"], multi_label=False,
                         near_duplicates=True, row_json=lambda r: r)
    assert quality.wrong(data) is None
    assert data["counts"]["groups"] == {"exact": 12, "near": 1}
    r = Report("out", data)
    assert sum(data["counts"]["duplicates"].values()) == 12 * 66 + 55
    assert r.groups["group"].nunique() == 13 and len(r.groups) == 13 * 12 + 1
    assert r.groups[r.groups["kind"] == "near"]["image_uri"].tolist()[-1] == "small_5.jpg"
    assert ("copies: 1 image appears 13 times: 13 rows; 12 images appear 12 times each: "
            "144 rows; 1 group spans train and validation; 1 group spans train and test") in (
        r.summary())
    text = str(r).splitlines()
    assert sum(line.startswith("    exact, 12 records") for line in text) == 12
    assert not any("~" in line for line in text)  # no pair listed
    # in a notebook each group is one strip: a row of thumbnails with where each is
    page = r._repr_html_()
    assert page.count("<h4>copies</h4>") == 1 and "<h4>leaks</h4>" not in page
    assert page.count("train row 2<br>") == 1 and page.count("<tr>") == HTML_ROWS
    assert page.count("... and 4 more</td>") == 11 and page.count("... and 5 more</td>") == 1


def test_a_near_group_tells_which_of_its_members_are_the_same_file():
    """One picture shipped under two names beside a resized copy and a second file of its
    own: one near group of four, whose two pairs of identical files are numbered apart and
    whose resized copy has no number; an older report without them still reads."""
    from tfrecorder._report.findings import Report
    from tfrecorder._writer.shard import ShardStats

    def same(sha, refs):
        counts = matching._pair_counts([(0, "exact", *refs)])
        counts["members"] = 0
        return (sha, refs, counts)

    a = [("train", 0, 0, 2, "pic.jpg", (0,)), ("train", 0, 3, 5, "pic-1920.jpg", (0,))]
    b = [("train", 0, 1, 3, "other.jpg", (0,)), ("test", 0, 0, 9, "other-again.jpg", (0,))]
    half = ("train", 0, 2, 4, "pic-half.jpg", (0,))
    near = [([(5, "near", a[0], half), (7, "near", half, b[0])],
             matching._pair_counts([(5, "near", a[0], half), (7, "near", half, b[0])]))]
    near[0][1]["members"] = 0
    shards = [ShardStats("train", 0, 1, "d-train", 4, 1, rows=4, labels={0: 4}),
              ShardStats("test", 0, 1, "d-test", 1, 1, rows=1, labels={0: 1})]
    data = quality.build(shards, [same("ab" * 32, a), same("cd" * 32, b)], near,
                         label_names=["sky"], multi_label=False, near_duplicates=True,
                         row_json=lambda r: r)
    assert quality.wrong(data) is None
    [group] = data["groups"]
    assert group["kind"] == "near"
    assert [(r["image_uri"], r.get("same_bytes")) for r in group["rows"]] == [
        ("pic.jpg", 1), ("other.jpg", 2), ("pic-half.jpg", None), ("pic-1920.jpg", 1),
        ("other-again.jpg", 2)]
    r = Report("out", data)
    assert r.groups["same_bytes"].tolist() == [1, 2, pd.NA, 1, 2]
    line = next(x for x in str(r).splitlines() if x.startswith("    near, 5 records"))
    assert "pic.jpg [same bytes 1]; train row 3 ('sky') other.jpg [same bytes 2]" in line
    assert "pic-half.jpg;" in line
    assert "same bytes 1" in r._repr_html_()
    # a report written before the field: the column is there, empty
    for row in group["rows"]:
        row.pop("same_bytes", None)
    assert Report("out", data).groups["same_bytes"].isna().all()
    data["groups"][0]["rows"][0]["same_bytes"] = 0
    assert "same_bytes" in quality.wrong(data)


def test_a_conflict_shows_each_records_whole_set_of_labels():
    """A detection image's boxes: [sky] against [sky, tree], not 'sky' against 'sky'."""
    from tfrecorder._report.findings import Report
    from tfrecorder._writer.shard import ShardStats

    refs = [("train", 0, 0, 2, "a.jpg", (0,)), ("test", 0, 0, 5, "a_again.jpg", (0, 1))]
    counts = matching._pair_counts([(0, "exact", *refs)])
    counts["members"] = 0
    shards = [ShardStats("train", 0, 1, "d-train", 1, 1, rows=1, labels={0: 1}),
              ShardStats("test", 0, 1, "d-test", 1, 1, rows=2, labels={0: 1, 1: 1})]
    data = quality.build(shards, [("ab" * 32, refs, counts)], [], label_names=["sky", "tree"],
                         multi_label=False, near_duplicates=False, row_json=lambda r: r)
    r = Report("out", data)
    assert r.conflicts["labels"].tolist() == [["sky"], ["sky", "tree"]]
    assert "train row 2 [sky] a.jpg; test row 5 [sky, tree] a_again.jpg" in str(r)
    # its records hold several rows (boxes): a group counts records
    assert "copies: 1 image appears twice: 2 records;" in r.summary()


# --- image problems, in the same pass ----------------------------------------------------

def test_image_problems_are_told_by_pixels_and_headers():
    from PIL import Image, ImageEnhance

    photo = _photo(11)
    assert measures.pixel_issues(photo) == {}
    dark = measures.pixel_issues(ImageEnhance.Brightness(photo).enhance(0.15))
    assert list(dark) == ["dark"] and 0 <= dark["dark"] < measures.DARK
    light = Image.new("RGB", (160, 120), (250, 250, 250))
    assert set(measures.pixel_issues(light)) == {"light", "low_information", "low_detail"}
    noise = Image.effect_noise((160, 120), 60).convert("RGB")
    assert measures.pixel_issues(noise) == {}
    # every level alike (8 bits of entropy: not low_information), but too plain to hash
    gradient = Image.linear_gradient("L").resize((160, 120)).convert("RGB")
    assert set(measures.pixel_issues(gradient)) == {"low_detail"}
    assert measures.header_issues(640, 480, 1) == {"grayscale": 0.0}
    assert measures.header_issues(1000, 100, 3) == {"odd_aspect_ratio": 0.1}
    assert measures.header_issues(640, 480, 3) == {}



def test_low_information_is_cleanvisions_entropy_of_the_decode_before_its_reduction():
    """CleanVision's figure: the histogram of the image as stored, in its own mode. Fine
    noise of 16 levels has 4 bits of entropy, which the small decode averages down to
    under 2; a grey picture stored as RGB counts its levels in each band (log2(3) more)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    fine = Image.fromarray(rng.integers(120, 136, (256, 256), dtype=np.uint8))
    small = measures.small(_png(fine))
    assert fine.entropy() > 3.9 and small.convert("L").entropy() < 2
    assert "low_information" not in measures.pixel_issues(small)
    few = Image.fromarray(rng.integers(120, 124, (64, 64), dtype=np.uint8))  # 2 bits
    assert measures.pixel_issues(few)["low_information"] == pytest.approx(0.2, abs=0.01)
    assert "low_information" not in measures.pixel_issues(few.convert("RGB"))
    # the writer's decode (pre-sizing) is measured before its reduction too
    problems = looker.Looker(near=False, pixels=True).measure(_png(fine), fine)[3]
    assert "low_information" not in problems

def test_blur_is_measured_alike_on_a_photo_and_its_smaller_or_re_encoded_copies(monkeypatch):
    """``blurry`` is scored on a view at most 64 px across that is never enlarged: a
    sharp 16:9 picture (fine texture on a gradient), its half-size copy and a copy at
    JPEG quality 70 score alike; the picture blurred scores far lower. Measured on the
    small decode, about 58 px across for the whole picture and enlarged to 64, the
    original was softened and scored 0.05 under its own half-size copy."""
    import numpy as np
    from PIL import Image, ImageFilter

    monkeypatch.setattr(measures, "BLURRY", 1.01)  # every score reported, to compare
    rng = np.random.default_rng(0)
    texture = Image.fromarray(rng.normal(0, 24, (36, 64)).astype(np.float32), "F")
    texture = np.asarray(texture.resize((640, 360), Image.Resampling.BICUBIC))
    grad = np.linspace(100, 160, 640)[None, :] * np.ones((360, 1))
    sharp = Image.fromarray(np.clip(grad + texture, 0, 255).astype(np.uint8)).convert("RGB")

    def blur(data: bytes) -> float:
        return looker.Looker(near=True, pixels=True).measure(data)[3]["blurry"]

    whole = blur(_png(sharp))
    half = blur(_jpeg(sharp.resize((320, 180), Image.Resampling.LANCZOS), 85))
    q70 = blur(_jpeg(sharp, 70))
    assert abs(whole - half) < 0.02 and abs(whole - q70) < 0.02
    assert whole >= 0.29  # not blurry at CleanVision's threshold
    blurred = blur(_png(sharp.filter(ImageFilter.GaussianBlur(8))))
    assert blurred < whole - 0.1 and blurred < half - 0.1
    # the writer's own decode (pre-sizing) is viewed alike
    mine = looker.Looker(near=False, pixels=True).measure(_png(sharp), sharp)[3]["blurry"]
    assert mine == pytest.approx(whole, abs=0.01)


def _problem_table(tmp_path):
    """Ten ordinary photos in train, and in test: a dark one, a grey one, a long thin
    one and a much larger one; their CSV."""
    from PIL import ImageEnhance

    folder = tmp_path / "img"
    folder.mkdir()
    rows = []
    for i in range(10):
        (folder / f"{i}.jpg").write_bytes(_jpeg(_photo(i)))
        rows.append(("TRAIN", f"img/{i}.jpg", "cat"))
    (folder / "dark.jpg").write_bytes(_jpeg(ImageEnhance.Brightness(_photo(20)).enhance(0.1)))
    (folder / "grey.png").write_bytes(_png(_photo(21).convert("L")))
    (folder / "thin.jpg").write_bytes(_jpeg(_photo(22, size=(400, 40))))
    (folder / "big.jpg").write_bytes(_jpeg(_photo(23, size=(1600, 1200))))
    rows += [("TEST", f"img/{n}", "dog") for n in ("dark.jpg", "grey.png", "thin.jpg", "big.jpg")]
    csv = tmp_path / "data.csv"
    csv.write_text("".join(f"{s},{u},{lab}\n" for s, u, lab in rows))
    return csv


@pytest.mark.slow
def test_the_report_lists_image_problems_by_record(tmp_path, run_cli):
    """Header problems by default; pixel ones where the run decodes the images; each
    names its record's split, row and label; --fail-on takes their names."""
    csv = _problem_table(tmp_path)
    tfrecorder.convert(str(csv), str(tmp_path / "plain"))
    plain = tfrecorder.report(str(tmp_path / "plain"))
    assert plain.issues[["issue", "split", "row", "label"]].values.tolist() == [
        ["grayscale", "test", 12, "dog"], ["odd_aspect_ratio", "test", 13, "dog"],
        ["odd_size", "test", 13, "dog"], ["odd_size", "test", 14, "dog"]]
    assert "issues: 1 grayscale, 1 odd_aspect_ratio, 2 odd_size" in plain.summary()
    tfrecorder.convert(str(csv), str(tmp_path / "near"), near_duplicates=True)
    near = tfrecorder.report(str(tmp_path / "near"))
    assert near.issues[["issue", "row", "image_uri"]].values.tolist()[0] == [
        "dark", 11, "img/dark.jpg"]
    assert near.counts["issues"]["dark"] == 1 and 0 <= near.issues["score"][0] < measures.DARK
    # pre-sizing decodes the images too: their pixel problems come with it
    tfrecorder.convert(str(csv), str(tmp_path / "sized"), shorter_side=100)
    sized = tfrecorder.report(str(tmp_path / "sized"))
    assert sized.issues[sized.issues["issue"] == "dark"]["row"].tolist() == [11]
    failing = run_cli("report", str(tmp_path / "near"), "--fail-on", "dark,leaks")
    assert failing.returncode == 3 and "1 dark" in failing.stderr
    assert "image problems" in failing.stdout and "img/dark.jpg" in failing.stdout
    assert run_cli("report", str(tmp_path / "plain"), "--fail-on", "dark").returncode == 0
    assert run_cli("report", str(tmp_path / "plain"), "--fail-on", "issues").returncode == 3
    assert run_cli("report", str(tmp_path / "plain"), "--fail-on", "murky").returncode == 2
    # an update reports the problems of the records it keeps, from their rows files
    with csv.open("a") as f:
        f.write("TRAIN,img/0.jpg,cat\n".replace("0.jpg", "1.jpg").replace("TRAIN", "TEST"))
    (tmp_path / "img" / "new.jpg").write_bytes(_jpeg(_photo(30)))
    with csv.open("a") as f:
        f.write("TRAIN,img/new.jpg,cat\n")
    tfrecorder.convert(str(csv), str(tmp_path / "near"), mode="update", near_duplicates=True)
    after = tfrecorder.report(str(tmp_path / "near"))
    assert after.issues[after.issues["issue"] == "dark"]["row"].tolist() == [11]


# --- detection: the boxes' problems ----------------------------------------------------

def _png_mask(height, width, box) -> bytes:
    from PIL import Image

    img = Image.new("L", (width, height), 0)
    x0, y0, x1, y1 = box
    img.paste(1, (x0, y0, x1, y1))
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


def test_box_problems_of_one_record():
    from tfrecorder._report import boxes

    h, w = 100, 200  # a box is (ymin, xmin, ymax, xmax), relative
    def flat(*bs):
        return [c for b in bs for c in b]

    assert boxes.problems({"objects/bbox": [], "objects/label": []}, h, w) == {"no_boxes": 0.0}
    fine = (0.1, 0.1, 0.5, 0.5)
    assert boxes.problems({"objects/bbox": flat(fine), "objects/label": [0]}, h, w) == {}
    tiny = (0.1, 0.1, 0.12, 0.5)  # 2 pixels high
    flat_box = (0.3, 0.3, 0.3, 0.6)  # no height
    found = boxes.problems({"objects/bbox": flat(fine, tiny, flat_box),
                            "objects/label": [0, 0, 1]}, h, w)
    assert found == {"tiny_box": 0.5, "degenerate_box": 0.0}
    again = (0.1, 0.1, 0.5, 0.501)
    assert set(boxes.problems({"objects/bbox": flat(fine, again), "objects/label": [1, 1]},
                              h, w)) == {"duplicate_box"}
    # the same place under two labels is two objects
    assert boxes.problems({"objects/bbox": flat(fine, again), "objects/label": [0, 1]},
                          h, w) == {}
    assert boxes.problems({"objects/bbox": flat((-0.1, 0, 0.5, 0.5)), "objects/label": [0]},
                          h, w) == {"box_outside": 0.0}
    # masks: one fills its box (20..100 x 10..50 pixels), one lies elsewhere, one is empty
    filled = _png_mask(h, w, (20, 10, 100, 50))
    elsewhere = _png_mask(h, w, (150, 60, 190, 90))
    empty = _png_mask(h, w, (0, 0, 0, 0))
    for masks, expected in (([filled], {}), ([elsewhere], {"mask_box_mismatch": 0.0}),
                            ([empty], {"mask_box_mismatch": 0.0})):
        assert boxes.problems({"objects/bbox": flat(fine), "objects/label": [0],
                               "objects/mask": masks}, h, w) == expected


@pytest.mark.slow  # a conversion end to end
def test_the_report_tells_box_problems_and_fails_on_them(tmp_path, run_cli):
    from tests.conftest import encode

    for i in range(4):
        (tmp_path / f"{i}.jpg").write_bytes(encode(seed=i, size=(200, 100)))
    rows = [  # AutoML detection rows: x_min, y_min,,, x_max, y_max,,
        "TRAIN,0.jpg,cat,0.1,0.1,,,0.5,0.5,,",
        "TRAIN,0.jpg,cat,0.1,0.1,,,0.5,0.5,,",      # annotated twice
        "TRAIN,1.jpg,dog,0.1,0.1,,,0.5,0.12,,",     # 2 pixels high
        "TRAIN,2.jpg,dog,0.3,0.3,,,0.3,0.6,,",      # no width
        "TEST,3.jpg,,,,,,,,,",                      # no annotations
    ]
    (tmp_path / "boxes.csv").write_text("\n".join(rows) + "\n")
    out = str(tmp_path / "out")
    tfrecorder.convert(str(tmp_path / "boxes.csv"), out)
    r = tfrecorder.report(out)
    assert r.found(["boxes", "duplicate_box", "tiny_box", "degenerate_box", "no_boxes",
                    "box_outside", "issues"]) == {
        "boxes": 4, "duplicate_box": 1, "tiny_box": 1, "degenerate_box": 1, "no_boxes": 1}
    listed = {(i.issue, i.image_uri) for i in r.issues.itertuples()}
    assert {("duplicate_box", "0.jpg"), ("tiny_box", "1.jpg"), ("degenerate_box", "2.jpg"),
            ("no_boxes", "3.jpg")} <= listed
    assert r.data["stats"]["train"]["labels"] == {"cat": 2, "dog": 2}  # boxes per label
    failing = run_cli("report", out, "--fail-on", "tiny_box,box_outside")
    assert failing.returncode == 3 and "1 tiny_box" in failing.stderr
    assert run_cli("report", out, "--fail-on", "box_outside").returncode == 0
    # an update keeping those records keeps their problems (from their rows files)
    (tmp_path / "4.jpg").write_bytes(encode(seed=4, size=(200, 100)))
    (tmp_path / "boxes.csv").write_text("\n".join(rows + ["TRAIN,4.jpg,cat,0.2,0.2,,,0.6,0.6,,"])
                                        + "\n")
    tfrecorder.convert(str(tmp_path / "boxes.csv"), out, mode="update")
    assert tfrecorder.report(out).found(["boxes"]) == {"boxes": 4}
