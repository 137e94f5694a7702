"""The paths the MSCCL runtime takes for an exported program, against the schedule's own."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from synth.errors import InputError
from synth.export.msccl.importer import import_msccl
from synth.export.msccl.program import MscclProgram
from synth.schedule import Schedule
from synth.topology import Topology


@dataclass
class RuntimeRouting:
    """The paths the MSCCL runtime takes for an exported program, against the schedule's own.

    MSCCL XML names only the two ends of each message; the runtime picks the path (NCCL's transport
    between the two gpus). synth models that choice as :func:`import_msccl` does (a shortest path through
    switches and forwarding gpus only, balanced among equal ones, :class:`synth.export.RouteBalancer`), so
    the schedule the runtime runs is the XML read back. A schedule whose paths differ from those (a
    ``forest`` schedule that spreads trees over NICs) can lose bandwidth: its congestion time grows.

    Attributes
    ----------
    planned : Fraction
        Congestion time per byte (s/B) of the schedule as synthesized, with its own paths.
    runtime : Fraction
        Congestion time per byte of what the runtime runs.
    rerouted : int
        Transfers whose path the runtime chooses differently (counted as a multiset of (src, dst, path)).
    transfers : int
    schedule : Schedule
        What the runtime runs: the XML read back on the topology.
    """

    planned: Fraction
    runtime: Fraction | None
    rerouted: int
    transfers: int
    schedule: Schedule | None
    #: why the XML could not be read back as the runtime routes it (e.g. a pair of ranks with no path through
    #: switches and forwarding gpus), else ""
    problem: str = ""

    @property
    def loss(self) -> Fraction:
        """Relative growth of the congestion time, runtime / planned - 1 (0 when nothing is lost)."""
        if self.runtime is None or not self.planned:
            return Fraction(0)
        return self.runtime / self.planned - 1

    def to_dict(self, size: int) -> dict[str, Any]:
        """JSON-ready fields for ``export msccl --json`` at a message of ``size`` bytes."""
        return {"size": size, "planned_congestion_time_s": float(self.planned * size),
                "runtime_congestion_time_s": None if self.runtime is None else float(self.runtime * size),
                "loss": float(self.loss), "rerouted_transfers": self.rerouted, "transfers": self.transfers,
                "problem": self.problem or None}


def runtime_routing(schedule: Schedule, topology: Topology, program: MscclProgram,
                    text: str | None = None, path: str | Path | None = None) -> RuntimeRouting:
    """Read ``program``'s XML back as the runtime would route it and compare congestion with ``schedule``.

    ``text`` is ``program.xml()`` when the caller has it already; ``path`` a file holding it (read as it
    is parsed, so a large program's text is never whole in memory).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> topo = load_topology("switch:n=4")
    >>> schedule = synthesize(topo, "allreduce", "ring")
    >>> from synth.export.msccl import lower_msccl
    >>> routing = runtime_routing(schedule, topo, lower_msccl(schedule))
    >>> routing.rerouted, routing.loss
    (0, Fraction(0, 1))
    """
    from collections import Counter

    from synth.evaluate import congestion

    planned = congestion(schedule, topology).seconds_per_byte
    try:
        if path is not None:
            from synth.fileio import read_back

            with read_back(path) as stream:  # the XML just written, even before it is put in place
                back = import_msccl(path, topology, topology_name=schedule.topology, text=stream)
        else:
            back = import_msccl("exported XML", topology, topology_name=schedule.topology,
                                text=program.xml() if text is None else text)
    except OSError as error:
        return RuntimeRouting(planned, None, 0, len(schedule.transfers), None, f"cannot read {path}: {error}")
    except InputError as error:
        return RuntimeRouting(planned, None, 0, len(schedule.transfers), None, error.problem)
    before = Counter((t.src, t.dst, t.path) for t in schedule.transfers)
    after = Counter((t.src, t.dst, t.path) for t in back.transfers)
    rerouted = sum((after - before).values())
    return RuntimeRouting(planned, congestion(back, topology).seconds_per_byte, rerouted, len(schedule.transfers), back)
