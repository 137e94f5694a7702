"""The lowered MSCCL program: the runtime's limits, and per gpu its buffers, threadblocks and steps."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from synth.collectives import Kind
from synth.errors import InputError
from synth.export.msccl.writer import program_xml

if TYPE_CHECKING:
    from synth.export.msccl.routing import RuntimeRouting

#: The runtime's ``coll`` spelling per collective.
COLL_NAME = {Kind.ALLREDUCE: "allreduce", Kind.ALLGATHER: "allgather", Kind.REDUCESCATTER: "reducescatter",
             Kind.ALLTOALL: "alltoall", Kind.BROADCAST: "broadcast", Kind.REDUCE: "reduce"}
PROTOCOLS = ("Simple", "LL", "LL128")
#: Default ``maxBytes``: 1 TiB (the algorithm applies to every practical size).
DEFAULT_MAX_BYTES = 1 << 40
#: A position in a gpu's buffers: (``"i"``, ``"o"`` or ``"s"``, offset in chunks).
Location = tuple[str, int]


@dataclass(frozen=True)
class MscclLimits:
    """The MSCCL runtime's limits (see :mod:`synth.export.msccl`).

    ``max_gpus`` and ``parser_nodes`` are the executor's XML parser's (``msccl_parser.h`` in
    msccl-executor-nccl and in RCCL: ``MAX_SUBS`` 1024, ``MAX_NODES`` 4096). Each rank's parser keeps one
    node for ``<algo>``, one for every ``<gpu>`` element and one for each of its own ``<tb>`` and ``<step>``
    elements, and fails when a further element would need node ``MAX_NODES`` (so at most ``parser_nodes - 1``);
    the ``<gpu>`` elements are children of ``<algo>``, whose table of ``MAX_SUBS`` children is not bounds
    checked: a program with more gpus overwrites the parser's memory.
    """

    max_channels: int = 32
    max_tbs_per_channel: int = 32
    sms: int = 108
    max_steps: int = 256
    max_cnt: int = 72
    max_gpus: int = 1024
    parser_nodes: int = 4096

    def check(self) -> None:
        """Reject impossible settings with a clear message."""
        for name, value, lower, upper in (("max_channels", self.max_channels, 1, 32),
                                          ("max_tbs_per_channel", self.max_tbs_per_channel, 1, 1024),
                                          ("sms", self.sms, 1, 100_000), ("max_steps", self.max_steps, 2, 1 << 20),
                                          ("max_gpus", self.max_gpus, 1, 1 << 20),
                                          ("parser_nodes", self.parser_nodes, 4, 1 << 30)):
            if not lower <= value <= upper:
                raise InputError("", name, f"expected {lower}..{upper}, got {value}")


@dataclass(slots=True)
class Step:
    """One ``<step>`` of a threadblock, with the XML's attribute names."""

    type: str
    srcbuf: str = "i"
    srcoff: int = -1
    dstbuf: str = "i"
    dstoff: int = -1
    cnt: int = 1
    depid: int = -1
    deps: int = -1
    hasdep: int = 0


@dataclass
class Threadblock:
    """One ``<tb>``: its send peer, recv peer (-1: none), channel and steps."""

    send: int
    recv: int
    chan: int
    steps: list[Step] = field(default_factory=list)


@dataclass
class MscclProgram:
    """A lowered schedule: per gpu its buffer sizes and threadblocks."""

    name: str
    coll: str
    proto: str
    ngpus: int
    nchunksperloop: int
    nchannels: int
    buffers: list[tuple[int, int, int]]
    tbs: list[list[Threadblock]]
    min_bytes: int = 0
    max_bytes: int = DEFAULT_MAX_BYTES
    #: the runtime's paths against the schedule's (set by :func:`export_msccl` when given the topology)
    routing: RuntimeRouting | None = None

    def xml(self) -> str:
        """The XML text (deterministic: same program, same bytes; see :func:`program_xml`)."""
        return program_xml(self)

    def stats(self) -> dict[str, int]:
        """Threadblocks, steps and channels, for reports."""
        steps = [len(tb.steps) for gpu in self.tbs for tb in gpu]
        return {"gpus": self.ngpus, "channels": self.nchannels, "threadblocks": sum(len(g) for g in self.tbs),
                "max_tbs_per_gpu": max(len(g) for g in self.tbs), "steps": sum(steps),
                "max_steps_per_tb": max(steps, default=0),
                "max_parser_nodes": max(parser_nodes(self.ngpus, gpu) for gpu in self.tbs)}


def parser_nodes(ngpus: int, gpu_tbs: list[Threadblock]) -> int:
    """The nodes one rank's MSCCL XML parser keeps for a program (see :class:`MscclLimits`): ``<algo>``,
    every ``<gpu>``, and the rank's own ``<tb>`` and ``<step>`` elements."""
    return 1 + ngpus + len(gpu_tbs) + sum(len(tb.steps) for tb in gpu_tbs)


def iter_steps(program: MscclProgram) -> Iterator[tuple[int, int, Step]]:
    """(gpu, threadblock, step) for every step of a lowered program."""
    for g, gpu_tbs in enumerate(program.tbs):
        for b, tb in enumerate(gpu_tbs):
            for step in tb.steps:
                yield g, b, step
