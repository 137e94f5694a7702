"""Schema and arithmetic checks for bench/data/nccl_tests_measured.csv.

Every row of that file is a line printed by nccl-tests / rccl-tests in a public
source.  The checks below re-derive algbw from size and time, and busbw from
algbw with the nccl-tests bus-bandwidth factor, so a mistyped number shows up.
"""

import csv
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent.parent / "bench" / "data" / "nccl_tests_measured.csv"

COLUMNS = [
    "source", "source_note", "gpu", "gpus_per_box", "boxes", "intra", "nic",
    "library", "version", "nvls", "algo", "protocol", "collective", "dtype",
    "bytes", "time_us", "algbw_GBps", "busbw_GBps", "placement",
]

# nccl-tests prints algbw/busbw with two decimals, so a printed value can be off
# by 0.005 from the exact one; busbw is derived from the unrounded algbw, which
# adds at most factor * 0.005 (factor < 2).  REL is the 2% allowance.
REL = 0.02
ABS_ALG = 0.006
ABS_BUS = 0.016

BUS_FACTOR = {
    "allreduce": lambda n: 2.0 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}


def load_rows():
    with DATA.open(newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == COLUMNS
        return list(reader)


ROWS = load_rows()


def test_row_and_source_counts():
    assert len(ROWS) >= 30
    assert len({r["source"] for r in ROWS}) >= 10


def test_no_empty_fields_and_enums():
    for r in ROWS:
        for c in COLUMNS:
            assert r[c].strip() != "", (c, r)
        assert r["library"] in {"nccl", "rccl"}, r
        assert r["nvls"] in {"on", "off", "unknown", "n/a"}, r
        assert r["algo"] in {"ring", "tree", "nvls", "nvlstree", "collnet", "default"}, r
        assert r["collective"] in BUS_FACTOR, r
        assert r["placement"] in {"out-of-place", "in-place"}, r
        if r["library"] == "rccl":
            assert r["nvls"] == "n/a", r


def _num(r):
    n = int(r["gpus_per_box"]) * int(r["boxes"])
    size = int(r["bytes"])
    t = float(r["time_us"])
    alg = float(r["algbw_GBps"])
    bus = float(r["busbw_GBps"])
    return n, size, t, alg, bus


def test_numbers_parse_and_are_positive():
    for r in ROWS:
        n, size, t, alg, bus = _num(r)
        assert n >= 2, r
        assert size > 0, r
        assert t > 0, r
        assert alg >= 0 and bus >= 0, r


@pytest.mark.parametrize("r", ROWS, ids=lambda r: f"{r['source'][-40:]}:{r['bytes']}:{r['placement']}")
def test_algbw_matches_size_over_time(r):
    _, size, t, alg, _ = _num(r)
    expected = size / t / 1e3  # bytes / us -> GB/s
    assert abs(alg - expected) <= REL * expected + ABS_ALG, (alg, expected)


@pytest.mark.parametrize("r", ROWS, ids=lambda r: f"{r['source'][-40:]}:{r['bytes']}:{r['placement']}")
def test_busbw_matches_nccl_tests_factor(r):
    n, size, t, alg, bus = _num(r)
    factor = BUS_FACTOR[r["collective"]](n)
    expected = alg * factor
    assert abs(bus - expected) <= REL * expected + ABS_BUS, (bus, expected, n)


def test_coverage():
    sizes = [int(r["bytes"]) for r in ROWS]
    assert min(sizes) <= 64 * 1024
    assert max(sizes) >= 256 * 1024 * 1024
    assert any(r["library"] == "rccl" for r in ROWS)
    assert any(int(r["boxes"]) > 1 for r in ROWS)
    assert any(int(r["boxes"]) == 1 for r in ROWS)
