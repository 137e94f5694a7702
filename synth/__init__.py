"""synth: a collective-schedule synthesizer.

Topology -> algorithm -> Schedule -> verifier / evaluator -> exporters.

The names below are imported on first use (PEP 562), so ``import synth`` and ``synth --help`` stay fast.

Examples
--------
>>> import synth
>>> topo = synth.load_topology("switch:n=4")
>>> schedule = synth.synthesize(topo, "allreduce", "ring")
>>> synth.verify(schedule, topo).transfers
24
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from synth.algorithms import synthesize
    from synth.collectives import Collective, Kind
    from synth.errors import InputError, NotApplicable, SynthError, VerificationError
    from synth.evaluate import congestion, evaluate
    from synth.library import load_topology
    from synth.schedule import Schedule, Transfer
    from synth.topology import Topology
    from synth.verify import verify

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_WHERE = {
    "synthesize": "synth.choose", "Collective": "synth.collectives", "Kind": "synth.collectives",
    "InputError": "synth.errors", "NotApplicable": "synth.errors", "SynthError": "synth.errors",
    "VerificationError": "synth.errors", "congestion": "synth.evaluate", "evaluate": "synth.evaluate",
    "load_topology": "synth.library", "Schedule": "synth.schedule", "Transfer": "synth.schedule",
    "Topology": "synth.topology", "verify": "synth.verify",
}

__all__ = [
    "Collective", "InputError", "Kind", "NotApplicable", "Schedule", "SynthError", "Topology", "Transfer",
    "VerificationError", "__version__", "congestion", "evaluate", "load_topology", "synthesize", "verify",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (``synth.evaluate`` stays the module once imported)."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'synth' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """The package's module type: importing the submodules ``synth.evaluate`` and ``synth.verify`` does not
    hide the functions of the same names (``synth.evaluate(...)`` is the function, as it always was)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("evaluate", "verify") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
