"""The MSCCL XML text of a lowered program: out of place, ``minBytes`` and ``maxBytes`` always present."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from synth.export.msccl.program import MscclProgram


def program_xml(program: MscclProgram) -> str:
    """The XML text of ``program`` (deterministic: same program, same bytes).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> from synth.export.msccl import lower_msccl
    >>> text = program_xml(lower_msccl(synthesize(load_topology("switch:n=2"), "allgather", "ring")))
    >>> print(text.splitlines()[1])
      <gpu id="0" i_chunks="1" o_chunks="2" s_chunks="0">
    """
    return "".join(program_xml_parts(program))


def program_xml_parts(program: MscclProgram) -> Iterator[str]:
    """The XML text of ``program`` in consecutive parts (the opening line, one ``<gpu>`` element each, the
    closing line), so a large program can be written without its whole text in memory."""
    yield (f'<algo name="{escape_attribute(program.name)}" proto="{program.proto}" nchannels="{program.nchannels}" '
           f'nchunksperloop="{program.nchunksperloop}" ngpus="{program.ngpus}" coll="{program.coll}" inplace="0" '
           f'outofplace="1" minBytes="{program.min_bytes}" maxBytes="{program.max_bytes}">\n')
    for gpu, (i_chunks, o_chunks, s_chunks) in enumerate(program.buffers):
        lines = [f'  <gpu id="{gpu}" i_chunks="{i_chunks}" o_chunks="{o_chunks}" s_chunks="{s_chunks}">']
        for tb_id, tb in enumerate(program.tbs[gpu]):
            lines.append(f'    <tb id="{tb_id}" send="{tb.send}" recv="{tb.recv}" chan="{tb.chan}">')
            for s, step in enumerate(tb.steps):
                lines.append(f'      <step s="{s}" type="{step.type}" srcbuf="{step.srcbuf}" srcoff="{step.srcoff}" '
                             f'dstbuf="{step.dstbuf}" dstoff="{step.dstoff}" cnt="{step.cnt}" '
                             f'depid="{step.depid}" deps="{step.deps}" hasdep="{step.hasdep}"/>')
            lines.append("    </tb>")
        lines.append("  </gpu>\n")
        yield "\n".join(lines)
    yield "</algo>\n"


def escape_attribute(text: str) -> str:
    """``text`` as an XML attribute value between double quotes."""
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")
