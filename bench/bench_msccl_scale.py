"""MSCCL export at scale: ``synth export msccl`` of the optimal allgather on DGX A100 clusters of 64 to
2,048 gpus.

Table ``msccl_scale``: per cluster, the trees-form optimal allgather is generated (not timed), then
``synth export msccl FILE -o FILE.xml --json`` runs in a fresh process, timed whole: loading and expanding
the trees form, verifying, lowering, writing the XML, reading it back for the paths the runtime takes, and
the flow model's prediction at 1 GiB. Reported: wall time, that process's peak RSS, the XML's size, and the
program's runtime figures (channels, most threadblocks per gpu, most steps per threadblock), and the flow
model's time at 1 GiB of the program read back beside the schedule's own under the same plan.
*parser nodes* is the most nodes one rank's MSCCL XML parser keeps (``<algo>``, every ``<gpu>``, the rank's
``<tb>`` and ``<step>`` elements; the stock parser holds 4,095 and at most 1,024 ``<gpu>`` elements): past
1,024 gpus the program is exported for a parser built with larger tables (``--max-gpus``,
``--parser-nodes``), since no stock MSCCL executor can load it.
``SYNTH_MAX_TRANSFERS`` is raised for the 2,048-gpu row (4,192,256 transfers, over the default 4,000,000);
``SYNTH_BENCH_MSCCL_GPUS`` (comma-separated gpu counts, multiples of 8) picks the rows. The 2,048-gpu row
takes about 13 minutes and 9 GB on the 2-core machine.

Run ``python -m bench --only msccl_scale`` or ``python bench/bench_msccl_scale.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import Table  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TRANSFER_LIMIT = "5000000"
GPUS = (64, 256, 512, 1024, 2048)
#: The most ``<gpu>`` elements a stock MSCCL executor's XML parser takes (``MAX_SUBS``), and the node table
#: assumed past it (a parser rebuilt with larger tables).
STOCK_GPUS = 1024
PARSER_NODES_PAST_STOCK = 1 << 16

#: Runs the export in a child and reports its wall time and peak RSS (RUSAGE_CHILDREN: that child alone).
_WRAPPER = (
    "import json, resource, subprocess, sys, time; started = time.perf_counter(); "
    "done = subprocess.run([sys.executable, '-m', 'synth', 'export', 'msccl', *sys.argv[1:]], "
    "capture_output=True, text=True); "
    "print(json.dumps({'rc': done.returncode, 'err': done.stderr[-400:], 'out': done.stdout, "
    "'wall_s': time.perf_counter() - started, "
    "'peak_rss_mib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))")


def measure(spec: str, gpus: int, folder: str) -> dict:
    """Generate the trees-form optimal allgather on ``spec`` in ``folder`` and export it to MSCCL in a
    fresh process; the export's ``--json`` fields plus ``wall_s``, ``peak_rss_mib`` and ``xml_mib``."""
    env = dict(os.environ, SYNTH_MAX_TRANSFERS=TRANSFER_LIMIT, PYTHONPATH=str(ROOT))
    schedule, xml = str(Path(folder, "allgather.json")), str(Path(folder, "allgather.xml"))
    subprocess.run([sys.executable, "-m", "synth", "generate", spec, "-c", "allgather", "-a", "forest", "--compact",
                    "-o", schedule], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    larger = ["--max-gpus", str(gpus), "--parser-nodes", str(PARSER_NODES_PAST_STOCK)] if gpus > STOCK_GPUS else []
    done = subprocess.run([sys.executable, "-c", _WRAPPER, schedule, "-o", xml, "--json", *larger],
                          capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    row = json.loads(done.stdout.strip().splitlines()[-1])
    if row["rc"] != 0:
        raise RuntimeError(f"{spec}: synth export msccl failed: {row['err']}")
    row.update(json.loads(row.pop("out")), xml_mib=Path(xml).stat().st_size / 2**20)
    return row


def gpu_counts(quick: bool) -> list[int]:
    chosen = os.environ.get("SYNTH_BENCH_MSCCL_GPUS")
    if chosen:
        return [int(value) for value in chosen.split(",")]
    return [64] if quick else list(GPUS)


def run(quick: bool) -> list[Table]:
    """The MSCCL export table (see the module docstring)."""
    table = Table("msccl_scale", "MSCCL export of the optimal allgather against cluster size",
                  ["topology", "gpus", "transfers", "export s", "peak RSS MiB", "XML MiB", "channels",
                   "max tbs/gpu", "max steps/tb", "parser nodes", "runtime paths", "program ms", "schedule ms"])
    for gpus in gpu_counts(quick):
        spec = f"dgx-a100:boxes={gpus // 8}"
        with tempfile.TemporaryDirectory() as folder:
            row = measure(spec, gpus, folder)
        routing = row.get("routing") or {}
        rerouted = routing.get("rerouted_transfers")
        table.add(spec, gpus, routing.get("transfers"), round(row["wall_s"], 1), round(row["peak_rss_mib"]),
                  round(row["xml_mib"], 1), row["channels"], row["max_tbs_per_gpu"], row["max_steps_per_tb"],
                  row["max_parser_nodes"], "the schedule's own" if rerouted == 0 else f"{rerouted} rerouted",
                  round(row["predicted"]["time_s"] * 1e3, 3), round(row["schedule_predicted_time_s"] * 1e3, 3))
    table.notes = (
        "Each row: `synth generate SPEC -c allgather -a forest --compact` (not timed), then `synth export msccl "
        "FILE -o FILE.xml --json` in a fresh process, timed whole (expanding the trees form, verifying, lowering, "
        "writing the XML, reading it back for the runtime's paths, the flow model's prediction at 1 GiB), with "
        f"SYNTH_MAX_TRANSFERS={int(TRANSFER_LIMIT):,}. peak RSS = the export's process. program ms = the flow "
        "model's time at 1 GiB of the program read back (threadblocks running their steps in order); schedule ms "
        "= the schedule's own under the same plan. parser nodes = the most nodes one rank's MSCCL XML parser keeps "
        f"(a stock executor: at most 4,095, and at most {STOCK_GPUS:,} gpus; larger rows are exported with "
        "--max-gpus and --parser-nodes for a parser built with larger tables).")
    return [table]


if __name__ == "__main__":
    from bench.__main__ import main

    sys.exit(main(["--only", "msccl_scale", *sys.argv[1:]]))
