"""The ``astra`` evaluator model: predicts the time ASTRA-sim 2.x reports for a schedule, in ns.

``evaluate(schedule, topology, size, model="astra")`` turns the schedule into the very Chakra traces
``synth export chakra`` writes (:func:`lower`: :func:`synth.trace.schedule_to_et`, then the
ordering nodes of :func:`sequence_sends`) and runs them through a re-implementation of ASTRA-sim's
custom-collective executor and analytical network (:func:`simulate`). Every rank's finish time is checked
against the real ASTRA-sim 2.x binaries by ``make astra-check`` (``bench/bench_astra.py``).

Executor (ASTRA-sim's ``CustomAlgorithm``)
    Every dependency-free node of a rank's trace is issued at once; the nodes one completion frees are
    issued together, in an order ASTRA-sim takes from a hash set (the model: file order; the exported
    traces are made not to depend on it). A send completes when its data reaches the destination; a
    recv completes when its matching message has arrived and the recv has been posted (whichever is
    later; a recv posted after the arrival completes through an event 0 ns ahead); a COMP node takes
    ``duration_micros`` x 1000 ns, and 0 µs becomes 1 ns, and the COMP nodes of a rank that end in the
    same ns run together where the first of them was scheduled (``Sys::register_event`` keeps one list
    per rank and tick). Sends and recvs match on (tag, src, dst, size), first in first out. Events of one
    ns run in the order they were created. A rank is done when all its nodes are; the result is the last
    rank's finish time (``sys[i] finished, T cycles``).

Network, one dimension (congestion-aware backend)
    Devices are the npus 0..n-1 and, for a Switch, one switch n. Each direction of a link is its own
    FIFO server. A message is stored and forwarded per link: a link that is free starts it at once,
    delivers it to the next device after ``floor(latency + size / bw)`` ns and is free again after
    ``floor(size / bw)`` ns; a busy link queues it, first come first served. Routes: Ring goes
    clockwise (+1) unless anticlockwise is strictly shorter; FullyConnected is one hop; Switch two
    hops (npu -> switch -> npu). ``bw`` is in bytes per ns from the YAML value in GB/s with
    GB = 2^30 bytes: ``bw = GBps * 2^30 / 1e9``, computed in IEEE doubles exactly as ASTRA-sim does.

Network, several dimensions (congestion-unaware backend; the congestion-aware one takes one dimension)
    No contention: a message costs ``floor(hops * latency + size / bw)`` ns in the lowest dimension
    where source and destination differ (Ring: shorter direction; FullyConnected 1; Switch 2).

Topologies ASTRA-sim cannot describe (no ``dimensions`` and not a uniform ring, fully-connected or
single-switch network) are simulated the same store-and-forward way on their physical links along each
transfer's own path (bandwidth in GB/s = 10^9 bytes/s, latency in µs): a prediction for an
ASTRA-sim-like simulator of that network, not of ASTRA-sim itself.

Rounding, worked out from ASTRA-sim's published numbers (8 NPUs, 50 GB/s, 500 ns, 1 MiB in 8 chunks):
one 128 KiB hop is 500 + 131072 / 53.6870912 = 2941.406 ns, truncated to 2941 per hop (each hop is
an integer event delay). Ring allgather: 7 hops in sequence = 20587 ns; on a Switch 14 hops = 41174;
ring allreduce: 14 hops plus 7 one-ns reductions = 41181; direct allgather on FullyConnected: 2941;
the MSCCL-converted ring allreduce with 7 µs reductions: 41174 + 49000 = 90174 ns.

Compute time: COMP durations come from the schedule's ``params["et"]`` (see :mod:`synth.trace`;
the Chakra importer stores the durations it read there), else 0 µs (1 ns) per reduction.

Modules: :mod:`~synth.astra.system` (the system ASTRA-sim is told about), :mod:`~synth.astra.network` (its
networks as FIFO link servers), :mod:`~synth.astra.replay` (the executor and the event loop),
:mod:`~synth.astra.order` (ordering nodes that make the traces independent of the issue order); the model
itself (lowering a schedule and timing it) is here.

Examples
--------
>>> from synth.library import load_topology
>>> from synth.algorithms import synthesize
>>> topo = load_topology("ring:n=8,bandwidth=53.6870912,latency=0.5")  # 50 GB/s in ASTRA-sim's GB
>>> astra_time_ns(synthesize(topo, "allgather", "ring"), topo, 2**20)
20587
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from synth.astra.network import Network, astra_network, network_for, physical_network, smallest_message
from synth.astra.order import DELAY_PREFIX, ORDER_ATTR, ORDER_PREFIX, sequence_sends
from synth.astra.replay import SimulationResult, simulate
from synth.astra.system import (
    AstraDim,
    AstraSystem,
    astra_system,
    gbps_to_astra,
    is_network_yaml,
    load_network_yaml,
    us_to_ns,
)
from synth.errors import InputError, LimitError, SynthError
from synth.plan import Plan
from synth.schedule import Schedule, ScheduleForm
from synth.topology import Topology

__all__ = [
    "DELAY_PREFIX", "ORDER_ATTR", "ORDER_PREFIX", "AstraDim", "AstraSystem", "Lowered", "Network", "SimulationResult",
    "astra_finish_ns", "astra_network", "astra_system", "astra_time_ns", "check_message_size", "gbps_to_astra",
    "is_network_yaml", "load_network_yaml", "lower", "network_for", "physical_network", "schedule_fingerprint", "sequence_sends",
    "simulate", "simulate_astra", "smallest_message", "us_to_ns",
]


# ---------------------------------------------------------------------------------------- model
@dataclass
class Lowered:
    """A schedule lowered for ASTRA-sim at one size: the traces (ordered), their run, the network."""

    program: Any
    result: SimulationResult
    network: Network
    system: AstraSystem | None


def lower(schedule: Schedule, topology: Topology, size: int, comp_duration_us: int | None = None,
          tag_base: int = 0, extras: bool = True, slices: int = 1, window: int | None = None) -> Lowered:
    """The traces ``synth export chakra`` writes for ``schedule`` at ``size`` bytes, and their simulation.

    :func:`synth.trace.schedule_to_et` builds the nodes (``slices`` messages per transfer, ``window``
    in flight), :func:`sequence_sends` fixes the order of sends that share a link. Refuses (LimitError)
    messages ASTRA-sim cannot run (:func:`smallest_message`) on a network it describes.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> topo = load_topology("switch:n=4,bandwidth=53.6870912,latency=0.5")
    >>> lowered = lower(synthesize(topo, "allgather", "direct"), topo, 2**20)
    >>> lowered.result.finish_ns, lowered.program.order_nodes  # ASTRA-sim 2.x reports the same finish times
    ([20528, 25410, 30292, 30292], 8)
    """
    from synth.trace import schedule_to_et

    if len(schedule.ranks) != topology.num_ranks:
        raise InputError("", "topology", f"the schedule has {len(schedule.ranks)} ranks, the topology "
                         f"{topology.num_ranks} gpus")
    program = schedule_to_et(schedule, size, comp_duration_us, tag_base, extras, slices, window)
    system, _ = astra_system(topology)
    _check_message(system, topology, schedule, size, slices)
    network = network_for(topology, program.paths)
    result = sequence_sends(program, network)
    return Lowered(program, result, network, system)


def check_message_size(schedule: ScheduleForm, topology: Topology, size: int, slices: int = 1) -> None:
    """Refuse (LimitError) a size whose messages take under 1 ns on a network ASTRA-sim describes
    (:func:`smallest_message`): ASTRA-sim aborts on them. Nothing to check where it describes none."""
    _check_message(astra_system(topology)[0], topology, schedule, size, slices)


def _check_message(system: AstraSystem | None, topology: Topology, schedule: ScheduleForm, size: int,
                   slices: int) -> None:
    from synth.trace import chunk_bytes, slice_sizes

    if system is None or system.npus != topology.num_ranks:
        return
    smallest = smallest_message(system)
    message = min(slice_sizes(chunk_bytes(schedule, size), slices))
    if message < smallest:
        chunks = schedule.collective.chunks
        fits = chunks * (slices * smallest - 1) + 1
        speed = min(d.bytes_per_ns for d in system.dims)
        raise LimitError(f"messages of {message} bytes ({size} bytes in {chunks} chunks"
                         + (f" of {slices} slices" if slices > 1 else "")
                         + f") take under 1 ns on this network's links ({speed:.4g} bytes per ns): ASTRA-sim "
                         "aborts on them (an assertion in its event queue, exit 134). The smallest message it "
                         f"runs here is {smallest} bytes: use a size of at least {fits} bytes"
                         + (" or fewer slices" if slices > 1 else "") + ".")


def astra_finish_ns(schedule: Schedule, topology: Topology, size: int, comp_duration_us: int | None = None,
                    slices: int = 1, window: int | None = None) -> list[int]:
    """Predicted ``sys[i] finished, T cycles`` of every rank (ns), as ASTRA-sim prints them.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> topo = load_topology("ring:n=4,bandwidth=53.6870912,latency=0.5")
    >>> astra_finish_ns(synthesize(topo, "allgather", "ring"), topo, 2**20)  # 3 hops of 500 + 262144/53.687 ns
    [16146, 16146, 16146, 16146]
    """
    result = lower(schedule, topology, size, comp_duration_us, extras=False, slices=slices, window=window).result
    if any(t is None for t in result.finish_ns):
        raise SynthError("the traces deadlock: " + "; ".join(result.unmatched[:5]))
    return [int(t) for t in result.finish_ns if t is not None]


def astra_time_ns(schedule: Schedule, topology: Topology, size: int, comp_duration_us: int | None = None,
                  slices: int = 1, window: int | None = None) -> int:
    """Predicted ASTRA-sim time in ns of ``schedule`` at ``size`` bytes on ``topology``: the last rank's
    finish (see :func:`astra_finish_ns`).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> topo = load_topology("fully-connected:n=8,bandwidth=53.6870912,latency=0.5")
    >>> astra_time_ns(synthesize(topo, "allgather", "direct"), topo, 2**20)
    2941
    """
    return max(astra_finish_ns(schedule, topology, size, comp_duration_us, slices, window))


def simulate_astra(schedule: Schedule, topology: Topology, size: int, plan: Plan) -> float:
    """The ``astra`` model for :func:`synth.evaluate.evaluate`: seconds (an integer number of ns).

    ASTRA-sim has no protocols. The plan's slices and window are lowered as ``export chakra --slices
    --window`` lowers them (a window as wide as the slices is none). The model is registered with
    ``slicing=False`` while ``export chakra`` writes one slice per chunk by default, so every plan it gets
    has one slice and the prediction is the default export's.
    """
    schedule.require_point_to_point("the astra model (ASTRA-sim)")
    window = plan.window if plan.window < plan.slices else None
    return astra_time_ns(schedule, topology, size, slices=plan.slices, window=window) / 1e9


def schedule_fingerprint(schedule: Schedule) -> str:
    """First 16 hex digits of the SHA-256 of the schedule's JSON, less a pinned plan and a choice's record:
    which schedule an ASTRA-sim measurement (``make astra-check --record``) is of.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> len(schedule_fingerprint(synthesize(load_topology("switch:n=4"), "allgather", "ring")))
    16
    """
    import dataclasses
    import hashlib

    # ASTRA-sim models no protocol or slicing: a pinned plan is not what it ran; nor is the record of how a
    # choice got to the schedule (milp's simulated epoch candidates)
    left_out = {"plan", "epoch_choice"}
    if left_out & set(schedule.params):
        schedule = dataclasses.replace(schedule, params={k: v for k, v in schedule.params.items() if k not in left_out})
    return hashlib.sha256(schedule.to_json().encode()).hexdigest()[:16]


def _register() -> None:
    from synth.evaluate import register_model

    register_model("astra", simulate_astra, protocols=False, slicing=False)


_register()
