"""Shards split by recorded timings: every cell in exactly one shard, the same split on every machine and
Python (PYTHONHASHSEED, process), balanced to within the largest cell of the mean, and a timings file that is
not {cell id: seconds} refused in one line naming the file and the key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from support import REPO
from xisa.errors import UsageError
from xisa.spec.shard import ShardPlan, assign_shards, cell_weights, make_plan, read_timings, shard_of

CELL_IDS = st.lists(st.from_regex(r"[a-z]{1,6}:[a-z0-9]{1,6}@(gfx942|sm_90|gfx1100)", fullmatch=True),
                    unique=True, max_size=300)


@settings(max_examples=60, deadline=None)
@given(ids=CELL_IDS, count=st.integers(1, 20), seconds=st.lists(st.floats(0, 30), min_size=300, max_size=300),
       known=st.floats(0, 1))
def test_every_cell_is_in_exactly_one_shard(ids, count, seconds, known):
    timings = {cid: s for cid, s in zip(ids, seconds) if zlib.crc32(cid.encode()) % 100 < known * 100}
    plan = make_plan(ids, count, timings)
    shards = plan.loads(ids)
    assert len(shards) == count
    flat = [cid for shard in shards for cid in shard]
    assert sorted(flat) == sorted(ids) and len(flat) == len(set(flat))
    for index, shard in enumerate(shards):
        assert all(plan.shard_of(cid) == index for cid in shard)


@pytest.mark.unit
@settings(max_examples=60, deadline=None)
@given(weights=st.dictionaries(st.text(min_size=1, max_size=8), st.integers(0, 100000), max_size=200),
       count=st.integers(1, 16))
def test_longest_first_keeps_the_slowest_shard_within_one_cell_of_the_mean(weights, count):
    assignment = assign_shards(weights, count)
    loads = [0] * count
    for cid, index in assignment.items():
        loads[index] += weights[cid]
    assert max(loads) <= sum(loads) / count + max(weights.values(), default=0)


@pytest.mark.unit
def test_a_skewed_selection_balances_where_the_hash_split_does_not():
    """520 cells, 13 targets: the sm_* cells cost three times the others (as ptxas and nvdisasm make them)."""
    ids = [f"k:c{case}@{target}" for case in range(40) for target in
           ("gfx1100", "gfx1151", "gfx1200", "gfx1201", "gfx90a", "gfx942", "gfx950",
            "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120")]
    timings = {cid: (0.9 if "@sm_" in cid else 0.3) + zlib.crc32(cid.encode()) % 7 / 100 for cid in ids}
    weights = cell_weights(ids, timings)
    for count in (2, 4, 8, 16):
        plan = make_plan(ids, count, timings)
        loads = [sum(weights[c] for c in shard) for shard in plan.loads(ids)]
        hashed = [0] * count
        for cid in ids:
            hashed[shard_of(cid, count)] += weights[cid]
        assert max(loads) / (sum(loads) / count) <= 1.01 < max(hashed) / (sum(hashed) / count)


@pytest.mark.unit
def test_cells_without_a_recorded_time_weigh_the_median_known_one():
    weights = cell_weights(["a", "b", "c", "d", "new"], {"a": 0.1, "b": 0.2, "c": 5.0, "d": 0.3, "gone": 9.0})
    assert weights == {"a": 100, "b": 200, "c": 5000, "d": 300, "new": 300}
    assert cell_weights(["x", "y"], {}) == {"x": 1000, "y": 1000}   # nothing known: every cell alike


@pytest.mark.unit
def test_the_split_is_pinned():
    """The same checkout and timings file give this split with every xisa of this version: a change to the
    algorithm (or its tie-breaks) must show up here, not as shards that no longer merge."""
    weights = {"a": 500, "b": 400, "c": 400, "d": 300, "e": 300, "f": 100, "g": 0}
    assert ShardPlan(count=3, weights=weights).loads(list(weights)) == [["a", "f", "g"], ["b", "d"], ["c", "e"]]


SPLIT = """
import json, sys
from xisa.spec.shard import make_plan
ids = [f"kernel_{i % 17}:case_{i}@{('gfx942', 'sm_90', 'gfx1100')[i % 3]}" for i in range(600)]
timings = {cid: (i * 7919 % 1000) / 997 for i, cid in enumerate(ids) if i % 5}
plan = make_plan(ids, 7, timings)
print(json.dumps({cid: plan.shard_of(cid) for cid in ids}, sort_keys=True))
"""


def test_the_split_is_the_same_in_every_process_and_hash_seed():
    runs = set()
    for seed in ("0", "1", "12345", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)}
        proc = subprocess.run([sys.executable, "-c", SPLIT], env=env, capture_output=True, text=True, check=True)
        runs.add(proc.stdout)
    assert len(runs) == 1
    split = json.loads(runs.pop())
    assert sorted(set(split.values())) == list(range(7))


@pytest.mark.unit
@pytest.mark.parametrize("text,field,needle", [
    ("not json", "--timings", "not a JSON file"),
    ("[1, 2]", "--timings", "is a JSON list"),
    ('{"k:c@gfx942": -1}', "k:c@gfx942", "not a number of seconds"),
    ('{"k:c@gfx942": true}', "k:c@gfx942", "not a number of seconds"),
    ('{"k:c@gfx942": "1.5"}', "k:c@gfx942", "not a number of seconds"),
    ('{"k:c@gfx942": NaN}', "k:c@gfx942", "not a number of seconds"),
])
def test_a_bad_timings_file_is_refused_naming_the_file_and_key(tmp_path, text, field, needle):
    path = tmp_path / f"t{zlib.crc32(text.encode())}.json"
    path.write_text(text)
    with pytest.raises(UsageError) as info:
        read_timings(path)
    line = str(info.value)
    assert line.startswith(f"{path}: {field}: ") and needle in line and "(fix: " in line and "\n" not in line


@pytest.mark.unit
def test_a_missing_timings_file_is_refused(tmp_path):
    with pytest.raises(UsageError, match="cannot read the timings file"):
        read_timings(tmp_path / "absent.json")
