"""Sketches: small JSON files that restrict the ``milp`` synthesizer so bigger cases become tractable.

In the spirit of TACCL's communication sketches, a sketch says which gpus may use the links between
boxes, whether every box must do the same thing (rotational symmetry), how many chunks to use, and how
the time axis is cut. Every field is optional; an empty object ``{}`` is the unrestricted problem.

Format ``synth.sketch/1``
-------------------------
::

    {
      "format": "synth.sketch/1",
      "name": "ndv2-one-relay-per-gpu",
      "chunks": 32,
      "box_size": 8,
      "relays": [0, 1, 2, 3, 4, 5, 6, 7],
      "pairing": "same-index",
      "intra_box": "direct",
      "symmetry": "rotate-boxes",
      "epoch_us": 2.5,
      "epochs": 24
    }

``format``
    Optional; when present it must be ``"synth.sketch/1"``.
``name``
    Free text, copied into the schedule's params.
``chunks``
    Total chunk count C per buffer (a multiple of the gpu count for allgather, reduce-scatter and
    alltoall). Default: the algorithm's default.
``box_size``
    Gpus per box, for topologies that do not record boxes (gpu ``r`` is in box ``r // box_size``).
    Topologies with boxes (``ndv2:boxes=2``, ``dgx-a100:boxes=2``...) ignore it unless it agrees.
``relays``
    Local indices (0-based position of a gpu inside its box) of the gpus that may use inter-box links,
    i.e. send to or receive from a gpu of another box over a route through switches. Every other gpu
    reaches other boxes only through a relay gpu of its box. Default: every gpu.
``pairing``
    ``"any"`` (default): a relay may reach any relay of another box. ``"same-index"``: relay ``i`` of
    one box reaches only relay ``i`` of the other boxes (TACCL's "one NIC peer per gpu").
``intra_box``
    ``"all"`` (default): inside a box, any pair joined by a direct link or a route through switches
    only is a link of the model. ``"direct"``: only pairs joined by a direct gpu-to-gpu link (e.g. drop
    the PCIe route through the NIC inside an NDv2 box).
``symmetry``
    ``"none"`` (default) or ``"rotate-boxes"``: box b+1 does exactly what box b does, shifted by one box
    (chunk, sender, receiver and epoch all rotate). It needs identical boxes of equal size.
``epoch_us``
    The epoch length in microseconds (default: chosen from the α-β of the links and the message size).
``epochs``
    The largest number of epochs the model may use (the horizon); too few make the sketch infeasible.

A sketch whose restrictions leave some gpu unable to reach another (``"relays": []`` on two boxes),
or whose horizon is too short, makes ``milp`` raise :class:`~synth.errors.InfeasibleError`; a malformed
file raises :class:`~synth.errors.InputError` naming the field.

Examples
--------
>>> sketch = Sketch.from_dict({"relays": [0], "symmetry": "rotate-boxes"})
>>> sketch.relays, sketch.symmetry, sketch.pairing
((0,), 'rotate-boxes', 'any')
>>> Sketch.from_dict({"pairing": "some"})
Traceback (most recent call last):
...
synth.errors.InputError: sketch: pairing: Input should be 'any' or 'same-index'
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from synth.documents import read_document
from synth.errors import InputError, invalid
from synth.topology import Topology

FORMAT: Final = "synth.sketch/1"


class _SketchModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    format: Literal["synth.sketch/1"] = FORMAT
    name: str = ""
    chunks: int | None = Field(default=None, ge=1, le=1_000_000)
    box_size: int | None = Field(default=None, ge=1)
    relays: list[int] | None = None
    pairing: Literal["any", "same-index"] = "any"
    intra_box: Literal["all", "direct"] = "all"
    symmetry: Literal["none", "rotate-boxes"] = "none"
    epoch_us: float | None = Field(default=None, gt=0, le=1e9)
    epochs: int | None = Field(default=None, ge=1, le=100_000)

    @field_validator("relays")
    @classmethod
    def _relays(cls, value: list[int] | None) -> list[int] | None:
        if value is not None:
            if any(index < 0 for index in value):
                raise ValueError("local gpu indices must be >= 0")
            if len(set(value)) != len(value):
                raise ValueError("a local gpu index is listed twice")
        return value


class Sketch:
    """A validated sketch (see the module docstring for the format).

    Attributes mirror the JSON fields; ``relays`` is a tuple or None (every gpu).
    """

    def __init__(self, model: _SketchModel, source: str = "") -> None:
        self.source = source
        self.name = model.name
        self.chunks = model.chunks
        self.box_size = model.box_size
        self.relays: tuple[int, ...] | None = tuple(model.relays) if model.relays is not None else None
        self.pairing = model.pairing
        self.intra_box = model.intra_box
        self.symmetry = model.symmetry
        self.epoch_us = model.epoch_us
        self.epochs = model.epochs

    @classmethod
    def from_dict(cls, data: Any, source: str = "sketch") -> Sketch:
        """Validate a parsed sketch document; raises :class:`InputError` naming the field."""
        if not isinstance(data, dict):
            raise InputError(source, "", f"expected a JSON object, got {type(data).__name__}")
        try:
            model = _SketchModel.model_validate(data)
        except ValidationError as error:
            raise invalid(error, source, root="sketch", expected="format, name, chunks, box_size, relays, "
                          "pairing, intra_box, symmetry, epoch_us, epochs") from None
        return cls(model, source)

    @classmethod
    def from_file(cls, path: str | Path) -> Sketch:
        """Load a sketch from a JSON or YAML file."""
        return cls.from_dict(read_document(path), str(path))

    def to_dict(self) -> dict[str, Any]:
        """The sketch as a JSON-ready dict (defaults included)."""
        return {"format": FORMAT, "name": self.name, "chunks": self.chunks, "box_size": self.box_size,
                "relays": list(self.relays) if self.relays is not None else None, "pairing": self.pairing,
                "intra_box": self.intra_box, "symmetry": self.symmetry, "epoch_us": self.epoch_us,
                "epochs": self.epochs}

    def boxes(self, topology: Topology) -> tuple[int, ...] | None:
        """The box index of every rank: the topology's, else from ``box_size``; None when neither."""
        if self.box_size is not None:
            n = topology.num_ranks
            if n % self.box_size:
                raise InputError(self.source, "box_size", f"{n} gpus do not split into boxes of {self.box_size}")
            derived = tuple(r // self.box_size for r in range(n))
            if topology.boxes is not None and _normalized(topology.boxes) != derived:
                raise InputError(self.source, "box_size", f"disagrees with the boxes recorded in {topology.name}")
            return derived
        return topology.boxes

    def local_index(self, topology: Topology) -> tuple[int, ...] | None:
        """The position of every rank inside its box, or None without boxes."""
        boxes = self.boxes(topology)
        if boxes is None:
            return None
        seen: dict[int, int] = {}
        result = []
        for box in boxes:
            result.append(seen.get(box, 0))
            seen[box] = seen.get(box, 0) + 1
        return tuple(result)


def _normalized(boxes: tuple[int, ...]) -> tuple[int, ...]:
    labels: dict[int, int] = {}
    return tuple(labels.setdefault(b, len(labels)) for b in boxes)


def load_sketch(value: Sketch | str | Path | dict[str, Any] | None) -> Sketch:
    """A sketch from a :class:`Sketch`, a dict, a file path, or None (the empty sketch).

    Examples
    --------
    >>> load_sketch(None).symmetry
    'none'
    """
    if value is None:
        return Sketch.from_dict({})
    if isinstance(value, Sketch):
        return value
    if isinstance(value, dict):
        return Sketch.from_dict(value)
    path = Path(str(value))
    if not path.exists():
        raise InputError(str(value), "sketch", "no such sketch file")
    return Sketch.from_file(path)
