"""bench/gpu_gaps.py: kernel base names and the idle-gap arithmetic of a timeline (union of overlapping
GPU activities, gaps grouped by their neighbours, the steady window, passes cut at result downloads),
on hand-made timelines."""
import os
import sqlite3
import sys
from pathlib import Path

import pytest

REPO = Path(os.environ.get("FLASHDLLM_SOURCE_DIR", Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(REPO / "bench"))
import gpu_gaps  # noqa: E402


@pytest.mark.parametrize("name,base", [
    ("void flashdllm::kernels::(anonymous namespace)::select_kernel<0, 1>(float const*, int)", "select_kernel"),
    ("nvjet_sm90_tst_192x64_64x6_1x2_h_bz_TNT", "nvjet_sm90_tst_192x64_64x6_1x2_h_bz_TNT"),
    ("void cutlass::device_kernel<GemmKernel<Shape<_128, _64>>>(Params)", "device_kernel"),
    ("rmsnorm_vec8_kernel<2>", "rmsnorm_vec8_kernel")])
def test_base_name(name, base):
    assert gpu_gaps.base_name(name) == base


def test_gaps_are_the_idle_time_between_the_union_of_activities():
    # a [0, 10), b [5, 20) overlaps a; gap 20 -> 30; c [30, 40), memcpy [40, 45) back to back; gap 45 -> 60;
    # d [60, 100). The window is the whole span (from 0 to 1 of the kernel span).
    acts = [(0, 10, "a"), (5, 20, "b"), (30, 40, "c"), (40, 45, "memcpy HtoD"), (60, 100, "d")]
    span, busy, gaps, groups, n = gpu_gaps.analyse(acts, 0.0, 1.0, min_gap_ns=0)
    assert (span, busy, n) == (100, 20 + 15 + 40, 5)
    assert sorted(gaps) == [(10, "b", "c"), (15, "memcpy HtoD", "d")]
    assert dict(groups) == {("b", "c"): [10], ("memcpy HtoD", "d"): [15]}
    # A gap shorter than min_gap is idle time but not grouped; the window keeps whole activities only.
    _, _, gaps, groups, _ = gpu_gaps.analyse(acts, 0.0, 1.0, min_gap_ns=12)
    assert len(gaps) == 2 and list(groups) == [("memcpy HtoD", "d")]
    span, busy, gaps, _, n = gpu_gaps.analyse(acts, 0.25, 1.0, min_gap_ns=0)
    assert (span, busy, n, gaps) == (70, 55, 3, [(15, "memcpy HtoD", "d")])


def test_activities_reads_an_nsys_export(tmp_path):
    db = tmp_path / "t.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, demangledName INTEGER)")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, end INTEGER, copyKind INTEGER)")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(1, "void ns::k1<int>(int)"), (2, "k2")])
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?)", [(50, 60, 2), (10, 20, 1)])
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (30, 35, 1)")
    con.commit()
    con.close()
    assert gpu_gaps.activities(str(db)) == [(10, 20, "k1"), (30, 35, "memcpy HtoD"), (50, 60, "k2")]


def test_passes_split_at_result_downloads():
    # Per iteration: main pass (memset, upload, plan, layers, select, two downloads), then a verify pass
    # (upload, plan, layers, select, gather_columns, two downloads). Gaps: 50 before the memset (the
    # host between iterations), 30 before the verify upload, 5 after each upload, 10 and 1 inside.
    acts, t = [], 0

    def add(d, label, gap=0):
        nonlocal t
        t += gap
        acts.append((t, t + d, label))
        t += d

    for _ in range(4):
        add(1, "memset", 50), add(2, "memcpy HtoD", 10), add(3, "plan_kernel", 5), add(900, "graph", 10)
        add(5, "select_kernel", 1), add(2, "memcpy DtoH", 1), add(1, "memcpy DtoH", 1)
        add(2, "memcpy HtoD", 30), add(3, "plan_kernel", 5), add(190, "graph", 10), add(5, "select_kernel", 1)
        add(1, "gather_columns_kernel", 1), add(2, "memcpy DtoH", 1), add(1, "memcpy DtoH", 1)
    got = gpu_gaps.passes(acts, 0.0, 1.0)
    # The window ends with the last kernel, so the last downloads fall outside it and the last verify
    # pass is not complete; the first main pass has no download before it: 3 of each.
    assert len(got["verify"]) == 3 and len(got["main"]) == 3
    # (wall, busy, lead-in, idle inside), ns.
    assert set(got["verify"]) == {(30 + 2 + 5 + 3 + 10 + 190 + 1 + 5 + 1 + 1 + 1 + 2 + 1 + 1,
                                   2 + 3 + 190 + 5 + 1 + 2 + 1, 30 + 2 + 5, 10 + 1 + 1 + 1 + 1)}
    assert set(got["main"]) == {(50 + 1 + 10 + 2 + 5 + 3 + 10 + 900 + 1 + 5 + 1 + 2 + 1 + 1,
                                 1 + 2 + 3 + 900 + 5 + 2 + 1, 50 + 1 + 10 + 2 + 5, 10 + 1 + 1 + 1)}


def test_activities_reads_graph_level_traces(tmp_path):
    db = tmp_path / "g.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER, end INTEGER)")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, end INTEGER)")
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (20, 90)")
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (5, 6)")
    con.commit()
    con.close()
    assert gpu_gaps.activities(str(db)) == [(5, 6, "memset"), (20, 90, "graph")]
