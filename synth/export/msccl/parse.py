"""Reading MSCCL XML safely (``defusedxml``: no DTDs or entities) into per-gpu buffers and threadblocks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from synth.errors import InputError, ascii_digits

#: Largest accepted XML file, in bytes.
MAX_XML_BYTES = 64 * 1024 * 1024


@dataclass(slots=True)
class XmlStep:
    """One ``<step>`` as read."""

    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int


@dataclass(slots=True)
class XmlThreadblock:
    """One ``<tb>`` as read, its steps in step order."""

    id: int
    send: int
    recv: int
    chan: int
    steps: list[XmlStep]


def parse_xml(text: str | BinaryIO, source: str = "") -> tuple[dict[str, str], list[dict[str, int]],
                                                             list[list[XmlThreadblock]]]:
    """Parse MSCCL XML safely into (algo attributes, per-gpu buffer counts, per-gpu threadblocks).

    ``text`` is the XML text or a binary file open for reading. It is read incrementally, one ``<gpu>``
    element at a time (each dropped once read), so a large program never exists twice in memory as a
    whole tree.
    """
    import io

    import defusedxml
    from defusedxml.ElementTree import ParseError, iterparse

    def number(element: Any, name: str, where: str, default: int | None = None) -> int:
        value = element.get(name)
        if value is None:
            if default is not None:
                return default
            raise InputError(source, f"{where}.{name}", "missing attribute")
        if len(value) > 20:  # checked before converting: 2^63 has 19 digits
            raise InputError(source, f"{where}.{name}", f"expected an integer, got a text of {len(value)} characters")
        ascii_digits(value, source, f"{where}.{name}")
        try:
            return int(value)
        except ValueError:
            raise InputError(source, f"{where}.{name}", f"expected an integer, got {value!r}") from None

    reader = _GpuReader(source, number)
    try:
        depth = 0
        stream = io.StringIO(text) if isinstance(text, str) else text
        for event, element in iterparse(stream, events=("start", "end"), forbid_dtd=True,
                                        forbid_entities=True, forbid_external=True):
            if event == "start":
                depth += 1
                if depth == 1:
                    reader.start(element)
                continue
            depth -= 1
            if depth == 1:  # a child of <algo>, complete
                reader.child(element)
                element.clear()
    except defusedxml.DefusedXmlException as error:
        raise InputError(source, "", f"refused: the XML declares a DTD or entities ({type(error).__name__}); "
                         "MSCCL files need neither") from None
    except ParseError as error:
        raise InputError(source, "", f"invalid XML: {error}") from None
    return reader.finish()


class _GpuReader:
    """The ``<algo>`` element's attributes, then its ``<gpu>`` children one at a time."""

    def __init__(self, source: str, number: Any) -> None:
        self.source, self.number = source, number
        self.algo: dict[str, str] = {}
        self.buffers: list[dict[str, int] | None] = []
        self.tbs: list[list[XmlThreadblock]] = []

    def start(self, root: Any) -> None:
        source, number = self.source, self.number
        if root.tag != "algo":
            raise InputError(source, "", f"expected an <algo> root element, got <{root.tag}>")
        self.algo = dict(root.attrib)
        ngpus = number(root, "ngpus", "algo")
        if not 2 <= ngpus <= 100_000:
            raise InputError(source, "algo.ngpus", f"expected at least 2 gpus, got {ngpus}")
        self.buffers = [None] * ngpus
        self.tbs = [[] for _ in range(ngpus)]

    def child(self, gpu_element: Any) -> None:
        source, number, buffers, ngpus = self.source, self.number, self.buffers, len(self.buffers)
        if gpu_element.tag != "gpu":
            raise InputError(source, "algo", f"unexpected element <{gpu_element.tag}> (expected <gpu>)")
        gpu = number(gpu_element, "id", "gpu")
        where = f"gpu {gpu}"
        if not 0 <= gpu < ngpus or buffers[gpu] is not None:
            raise InputError(source, f"{where}.id", f"expected a new gpu id in 0..{ngpus - 1}")
        counts = buffers[gpu] = {b: number(gpu_element, f"{b}_chunks", where, 0) for b in "ios"}
        if any(v < 0 for v in counts.values()):
            raise InputError(source, where, "chunk counts must be >= 0")
        seen_tbs: set[int] = set()
        for tb_element in gpu_element:
            if tb_element.tag != "tb":
                raise InputError(source, where, f"unexpected element <{tb_element.tag}> (expected <tb>)")
            tb_id = number(tb_element, "id", f"{where} tb")
            tb_where = f"{where} tb {tb_id}"
            if tb_id in seen_tbs:
                raise InputError(source, f"{tb_where}.id", "duplicate threadblock id")
            seen_tbs.add(tb_id)
            send, recv = number(tb_element, "send", tb_where, -1), number(tb_element, "recv", tb_where, -1)
            for label, peer in (("send", send), ("recv", recv)):
                if peer != -1 and (not 0 <= peer < ngpus or peer == gpu):
                    raise InputError(source, f"{tb_where}.{label}", f"expected -1 or another gpu in 0..{ngpus - 1}, "
                                     f"got {peer}")
            self.tbs[gpu].append(XmlThreadblock(tb_id, send, recv, number(tb_element, "chan", tb_where, 0),
                                                self._steps(tb_element, tb_where)))
        self.tbs[gpu].sort(key=lambda tb: tb.id)

    def _steps(self, tb_element: Any, tb_where: str) -> list[XmlStep]:
        source, number = self.source, self.number
        steps = []
        for step_element in tb_element:
            if step_element.tag != "step":
                raise InputError(source, tb_where, f"unexpected element <{step_element.tag}> (expected <step>)")
            s = number(step_element, "s", f"{tb_where} step")
            step_where = f"{tb_where} step {s}"
            steps.append(XmlStep(
                s, step_element.get("type", ""), step_element.get("srcbuf", "i"),
                number(step_element, "srcoff", step_where, -1), step_element.get("dstbuf", "i"),
                number(step_element, "dstoff", step_where, -1), number(step_element, "cnt", step_where, 1),
                number(step_element, "depid", step_where, -1), number(step_element, "deps", step_where, -1)))
        steps.sort(key=lambda st: st.s)
        if [st.s for st in steps] != list(range(len(steps))):
            raise InputError(source, tb_where, "step numbers must be 0, 1, 2, ... without gaps or repeats")
        return steps

    def finish(self) -> tuple[dict[str, str], list[dict[str, int]], list[list[XmlThreadblock]]]:
        if not self.algo and not self.buffers:
            raise InputError(self.source, "", "invalid XML: no root element")
        missing = [g for g, b in enumerate(self.buffers) if b is None]
        if missing:
            raise InputError(self.source, "algo", f"no <gpu> element for gpu(s) {missing[:8]}")
        return self.algo, self.buffers, self.tbs  # type: ignore[return-value]


def read_text(path: str | Path, source: str) -> str:
    """The text of an XML file: at most :data:`MAX_XML_BYTES` bytes of UTF-8."""
    from synth.fileio import note_input

    file = Path(path)
    note_input(file)
    try:
        if file.stat().st_size > MAX_XML_BYTES:
            raise InputError(source, "", f"file is larger than {MAX_XML_BYTES} bytes")
        return file.read_bytes().decode("utf-8")
    except OSError as error:
        raise InputError(source, "", f"cannot read file: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise InputError(source, "", f"not valid UTF-8 at byte {error.start}") from None
