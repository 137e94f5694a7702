"""synth: a collective-schedule synthesizer.

Topology -> algorithm -> Schedule -> verifier / evaluator -> exporters.

Examples
--------
>>> import synth
>>> topo = synth.load_topology("switch:n=4")
>>> schedule = synth.synthesize(topo, "allreduce", "ring")
>>> synth.verify(schedule, topo).transfers
24
"""

from synth.algorithms import synthesize
from synth.collectives import Collective, Kind
from synth.errors import InputError, NotApplicable, SynthError, VerificationError
from synth.evaluate import congestion, evaluate
from synth.library import load_topology
from synth.schedule import Schedule, Transfer
from synth.topology import Topology
from synth.verify import verify

__version__ = "0.1.0"

__all__ = [
    "Collective", "InputError", "Kind", "NotApplicable", "Schedule", "SynthError", "Topology", "Transfer",
    "VerificationError", "__version__", "congestion", "evaluate", "load_topology", "synthesize", "verify",
]
