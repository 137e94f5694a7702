"""How close synth's ``nccl`` predictions come to public nccl-tests / rccl-tests measurements.

Table ``measured``: for every row of ``bench/data/nccl_tests_measured.csv`` (public outputs, each with its
source) that matches a library system, synth's ``nccl`` schedule for that collective on that system at that
size, evaluated by the flow model (plan rule, auto protocol), at line rate and at achievable rates
(``SYSTEM@achievable``, :mod:`synth.library.achievable`; ``SYSTEM@achievable:efa`` or ``:tcpxo`` where the
row's NICs are AWS EFA or GCP TCPXO): predicted busbw over measured busbw at large sizes (>= 256 MiB),
predicted time over measured time at small ones (<= 64 KiB).

Table ``measured_summary``: per link-rate model and library (NCCL, whose rules synth's ``nccl`` follows,
and RCCL, whose own differ), the median and worst ratios at large and small sizes (worst: the ratio
farthest from 1, as a factor), and the rows synth leaves out with the reason. Rows their own source reports
as degraded (a bug report's slow run) are in ``measured`` but not counted in the summary.

``python -m bench --only measured``; ``--quick`` keeps the one-box and two-box systems.
"""

from __future__ import annotations

import csv
import math
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import Table  # noqa: E402
from synth import Kind, load_topology, synthesize, verify  # noqa: E402
from synth.evaluate import evaluate  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "nccl_tests_measured.csv"
LARGE = 256 << 20
SMALL = 64 << 10
KINDS = {"allreduce": Kind.ALLREDUCE, "allgather": Kind.ALLGATHER, "reducescatter": Kind.REDUCESCATTER,
         "alltoall": Kind.ALLTOALL}


def system_of(row: dict[str, str]) -> tuple[str | None, str]:
    """The library spec matching a measured row's hardware, or None and why not."""
    gpu, per_box, boxes, nic = row["gpu"], int(row["gpus_per_box"]), int(row["boxes"]), row["nic"]
    several = f":boxes={boxes}" if boxes > 1 else ""
    if gpu.startswith(("H100", "H20")) and per_box == 8:
        if "200 Gb/s" in nic and boxes > 1:
            return f"dgx-h100{several},nic_bandwidth=25", "8 x 200 Gb/s NICs"
        return f"dgx-h100{several}", ""
    if gpu.startswith("A100") and per_box == 8:
        if boxes == 1:
            return "dgx-a100", ""
        if "EFA 100" in nic:  # 4 x 100 Gb/s per box: 50 GB/s shared by 8 gpus
            return f"dgx-a100{several},nic_bandwidth=6.25", "4 x 100 Gb/s EFA per box as 6.25 GB/s per gpu"
        if "HDR" in nic and "200" in nic:  # 4 x 200 Gb/s per server
            return f"dgx-a100{several},nic_bandwidth=12.5", "4 x 200 Gb/s HDR per box as 12.5 GB/s per gpu"
        return f"dgx-a100{several}", ""
    if gpu.startswith("B200") and per_box == 8:
        return f"dgx-b200{several}", ""
    if gpu.startswith("GB200") and per_box == 72 and boxes == 1:
        return "gb200-nvl72", ""
    if gpu.startswith(("MI300X", "MI325X")) and per_box == 8:
        return f"mi300x{several}", "MI325X on MI300X's xGMI rates" if gpu.startswith("MI325X") else ""
    if gpu.startswith("MI250X") and per_box == 16 and boxes == 1:
        return "mi250", ""
    return None, f"no library system of {per_box} {gpu} per box"


def network_of(row: dict[str, str]) -> str:
    """The network stack of a row's NICs as ``SPEC@achievable:NETWORK`` names it (InfiniBand and RoCE: ib)."""
    nic = row["nic"]
    return "efa" if "EFA" in nic else "tcpxo" if "TCPXO" in nic else "ib"


def rows(quick: bool) -> list[dict[str, str]]:
    with DATA.open(newline="") as handle:
        data = list(csv.DictReader(handle))
    return [r for r in data if not quick or int(r["boxes"]) <= 2]


def predict(spec: str, kind: Kind, size: int, cache: dict[tuple[str, Kind, int], tuple[float, float]]
            ) -> tuple[float, float]:
    """(time s, busbw GB/s) of synth's nccl schedule, verified."""
    key = (spec, kind, size)
    if key not in cache:
        topology = load_topology(spec)
        schedule = synthesize(topology, kind, "nccl", size=size)
        verify(schedule, topology)
        result = evaluate(schedule, topology, size)
        cache[key] = (result.time_s, result.busbw_GBps)
    return cache[key]


def _worst(ratios: list[float]) -> float:
    return max(ratios, key=lambda r: abs(math.log(r))) if ratios else float("nan")


def run(quick: bool) -> list[Table]:
    """The tables of the module docstring."""
    table = Table("measured", "synth's nccl prediction against public nccl-tests / rccl-tests runs",
                  ["source", "gpu", "boxes", "collective", "size", "measured busbw GB/s", "system", "network",
                   "line-rate busbw GB/s", "achievable busbw GB/s", "achievable / measured",
                   "measured us", "achievable us", "time ratio"])
    cache: dict[tuple[str, Kind, int], tuple[float, float]] = {}
    groups = [(model, library) for model in ("line rate", "achievable") for library in ("nccl", "rccl")]
    large: dict[tuple[str, str], list[float]] = {group: [] for group in groups}
    small: dict[tuple[str, str], list[float]] = {group: [] for group in groups}
    skipped: dict[str, int] = {}
    degraded: set[str] = set()
    for row in rows(quick):
        size = int(row["bytes"])
        if not (size >= LARGE or size <= SMALL) or row["collective"] not in KINDS:
            continue
        spec, why = system_of(row)
        if spec is None:
            skipped[why] = skipped.get(why, 0) + 1
            continue
        kind = KINDS[row["collective"]]
        measured_busbw, measured_us = float(row["busbw_GBps"]), float(row["time_us"])
        line_time, line_busbw = predict(spec, kind, size, cache)
        network = network_of(row)
        ach_time, ach_busbw = predict(spec + "@achievable" + ("" if network == "ib" else f":{network}"), kind, size,
                                      cache)
        busbw_ratio = ach_busbw / measured_busbw if size >= LARGE and measured_busbw > 0 else None
        time_ratio = ach_time * 1e6 / measured_us if size <= SMALL else None
        source = row["source"].removeprefix("https://github.com/")
        library = "rccl" if row["library"].strip().lower() == "rccl" else "nccl"
        if "degraded" in row["source_note"]:
            degraded.add(source)
        elif size >= LARGE and measured_busbw > 0:
            large[("line rate", library)].append(line_busbw / measured_busbw)
            large[("achievable", library)].append(ach_busbw / measured_busbw)
        elif size <= SMALL:
            small[("line rate", library)].append(line_time * 1e6 / measured_us)
            small[("achievable", library)].append(ach_time * 1e6 / measured_us)
        table.add(source[:60], row["gpu"], int(row["boxes"]), row["collective"], size, measured_busbw, spec, network,
                  line_busbw, ach_busbw, busbw_ratio, measured_us, ach_time * 1e6, time_ratio)
    summary = Table("measured_summary", "synth's nccl prediction over the measured value: median and worst",
                    ["links", "library", "rows >= 256 MiB", "median busbw ratio", "worst busbw ratio",
                     "rows <= 64 KiB", "median time ratio", "worst time ratio"])
    for group in groups:
        big, little = large[group], small[group]
        summary.add(*group, len(big), statistics.median(big) if big else None, _worst(big) if big else None,
                    len(little), statistics.median(little) if little else None, _worst(little) if little else None)
    summary.notes = ("left out: " + "; ".join(f"{why} ({count} rows)" for why, count in sorted(skipped.items()))
                     + "; not counted, reported as degraded by their source: " + ", ".join(sorted(degraded)))
    table.notes = ("flow model, plan rule with auto protocol; busbw ratio at >= 256 MiB, time ratio at "
                   "<= 64 KiB; a ratio above 1 means synth predicts faster than measured.")
    return [table, summary]


if __name__ == "__main__":
    for result in run("--quick" in sys.argv):
        print(result)
