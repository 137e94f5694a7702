"""Design-space sweeps: synthesize, verify and evaluate every point of a parameter grid, in parallel on Dask.

A sweep spec (YAML or JSON) names a topology builder from the library and a grid of its parameters (or a
list of fixed topologies: the user's own files and library specs), the collectives, the algorithms and the
message sizes. Every *point* -- one combination of builder parameters (or one fixed topology) x collective
x algorithm -- is synthesized, verified (exactly) and evaluated at every size.
The results are one row per (point, size) in a Parquet file.

Spec format
-----------
::

    name: dgx-a100-nics          # optional, free text
    topology: dgx-a100           # a library builder (`synth topologies` lists them)
    grid:                        # builder parameters; the sweep runs the cross product, first key outermost
      boxes: {from: 1, to: 50}   # inclusive range, step 1 (or `step: k`)
      nic_bandwidth: [12.5, 25, 50, 100]   # a list of values
      latency: 0.7               # a scalar is a fixed parameter
      # size: {from: 2, to: 64, times: 2}  # geometric range: 2, 4, 8, ..., 64
      # dims: [[4, 4], [8, 8]]   # a list of ints is a tuple parameter (shown as "4x4" in the results)
    collectives: [allgather, allreduce]    # any spelling `synth` accepts (ag, all-reduce, ...)
    algorithms: [ring, direct]   # optional; default: every registered algorithm. A collective is paired
                                 # only with the algorithms that support it.
    sizes: [1MiB, 64MiB, 1GiB]   # or a geometric range {from: 1KiB, to: 1GiB, times: 4}
    model: flow                  # optional evaluator model (default flow)
    plan: {protocol: auto}       # optional execution-plan overrides: protocol (auto, LL, LL128, Simple,
                                 # ideal), slice_bytes, slices, window (default: the rule of synth.plan)
    options:                     # optional per-algorithm options, passed to the algorithm as is
      ring: {chunks: 8}

Fixed topologies instead of a builder and its grid (no ``grid`` then)::

    topology: [fabrics/my-cluster.yaml, dgx-a100:boxes=4, dgx1]   # or one of them, without the list
    collectives: [allreduce]
    sizes: [64MiB, 1GiB]

A ``.json``/``.yaml`` entry is a topology file, a relative path taken from the spec file's folder (or a
shipped file such as ``dgx1.json``); it is read and checked when the spec is, and its points carry its
document, so Dask workers need no copy of it. Any other entry is a library spec (``synth topologies``).
The ``topology`` column holds the entry as written.

Unknown keys, unknown parameters or algorithms, empty lists and duplicate values are rejected with an
error naming the spec file and the field.

Results
-------
One row per (point, size), with the columns ``point_id`` (a stable hash of the topology builder, its
parameters (or the fixed topology and its file's content), the collective, the algorithm, its options, the model, the plan overrides and the evaluator's
version), ``topology``, one column per grid parameter, ``num_ranks``, ``collective``, ``algorithm``,
``model``, ``size`` (bytes), ``status`` (``ok``, ``not-applicable`` or ``error``), ``bound_algbw_GBps``
(the largest algbw the topology's lower bound on time allows at that size, empty when none),
``time_s``, ``algbw_GBps``, ``busbw_GBps``, ``percent_of_bound`` (bound time over time), the plan the
time was computed with (``protocol``, ``slices`` per chunk, ``slice_bytes``, ``window``),
``congestion_time_s``, ``synthesis_s`` (wall time of the synthesis alone, the only column that varies
between runs) and ``error`` (the reason when the status is not ``ok``). Rows are in grid order, then size
order. The times are the ones ``synth evaluate`` prints for the same schedule, size, model and plan.

Running
-------
``synth sweep SPEC.yaml -o results.parquet`` runs on a local Dask cluster with one worker process per core
(one core or ``--workers 1``: in process, one point after another); ``--scheduler tcp://HOST:PORT`` runs the
same spec on an existing Dask cluster whose workers can import ``synth``. Points are independent and
idempotent. A failed point is recorded with its error and the sweep goes on. The output is rewritten
atomically every few seconds, so a kill loses at most the points finished since the last flush; re-running
the same command skips every (point, size) already in the output (``--retry-errors`` runs the failed ones
again).

Examples
--------
>>> sweep = parse_spec({"topology": "ring", "grid": {"n": [4, 6]}, "collectives": ["allgather"],
...                     "algorithms": ["ring"], "sizes": ["1MiB"]})
>>> [(p.params["n"], p.collective, p.algorithm) for p in sweep.points]
[(4, 'allgather', 'ring'), (6, 'allgather', 'ring')]
>>> run_point(sweep.points[0], sweep.sizes)[0]["status"]
'ok'
"""

from __future__ import annotations

from synth.sweep.point import failed_rows, run_point
from synth.sweep.results import (
    ERROR,
    EVALUATOR_VERSION,
    LEADING_COLUMNS,
    NOT_APPLICABLE,
    OK,
    RESERVED_COLUMNS,
    TRAILING_COLUMNS,
    Row,
    read_results,
    results_table,
    write_results,
)
from synth.sweep.runners import (
    MAX_WORKERS,
    SCHEDULER_SCHEMES,
    Progress,
    SweepSummary,
    check_scheduler,
    run_sweep,
)
from synth.sweep.spec import MAX_AXIS_VALUES, MAX_POINTS, Point, Sweep, load_spec, parse_spec, point_id

__all__ = [
    "ERROR", "EVALUATOR_VERSION", "LEADING_COLUMNS", "MAX_AXIS_VALUES", "MAX_POINTS", "MAX_WORKERS",
    "NOT_APPLICABLE", "OK", "RESERVED_COLUMNS", "SCHEDULER_SCHEMES", "TRAILING_COLUMNS", "Point", "Progress",
    "Row", "Sweep", "SweepSummary", "check_scheduler", "failed_rows", "load_spec", "parse_spec", "point_id",
    "read_results", "results_table", "run_point", "run_sweep", "write_results",
]
