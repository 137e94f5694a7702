"""``synth export msccl``: lower a schedule, work out the runtime's routing, write the XML atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from synth.export.msccl.lower import lower_msccl
from synth.export.msccl.program import MscclProgram
from synth.export.msccl.routing import runtime_routing
from synth.export.msccl.writer import program_xml_parts
from synth.schedule import Schedule
from synth.topology import Topology


def export_msccl(schedule: Schedule, path: str | Path, topology: Topology | None = None,
                 **options: Any) -> MscclProgram:
    """Lower ``schedule`` (see :func:`lower_msccl`) and write the XML atomically to ``path``.

    With ``topology``, also works out the paths the runtime takes (:func:`runtime_routing`, reading the
    file back) and stores them in the program's ``routing``.
    """
    from synth.fileio import atomic_write_parts

    program = lower_msccl(schedule, **options)
    atomic_write_parts(path, lambda: program_xml_parts(program))
    if topology is not None:  # read back from the file written: its text is never whole in memory
        program.routing = runtime_routing(schedule, topology, program, path=path)
    return program
