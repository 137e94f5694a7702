"""Relays are explicit: no algorithm emits a path that crosses a gpu which does not forward, on any shipped
topology or on random ones; where two gpus have no other way, the schedule relays through scratch."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import topology_documents

from synth.algorithms import REGISTRY, synthesize
from synth.errors import InfeasibleError, LimitError, NotApplicable
from synth.library import TOPOLOGY_DIR, load_topology, shipped_files
from synth.routing import crossed_gpu
from synth.schedule import Schedule
from synth.topology import Topology
from synth.verify import verify

#: milp takes minutes on 32+ gpus even without CP-SAT; it runs here on the smaller systems and on random ones
MILP_MAX_GPUS = 16
#: (algorithm, file) pairs that take tens of seconds; the random topologies below exercise the same code
SLOW = {("mcf", "tpu-v4-4x4x4.json"), ("forest", "mi250-2box.json"), ("milp", "ndv2-2box.json")}


def _options(algorithm: str) -> dict:
    return {"cpsat": "never"} if algorithm == "milp" else {}


def _check(schedule: Schedule, topology: Topology) -> None:
    verify(schedule, topology)
    for t in schedule.transfers:
        assert crossed_gpu(topology, t.path) is None, (schedule.algorithm, t)
        assert t.local == (len(t.path) == 1)


def _every_schedule(topology: Topology, skip=frozenset()):
    for algorithm in REGISTRY.values():
        if algorithm.name in skip or (algorithm.name == "milp" and topology.num_ranks > MILP_MAX_GPUS):
            continue
        for kind in sorted(algorithm.collectives):
            try:
                yield synthesize(topology, kind, algorithm.name, **_options(algorithm.name))
            except (NotApplicable, LimitError, InfeasibleError):  # documented refusals
                continue


@pytest.mark.parametrize("name", [name for name, _ in shipped_files()])
@pytest.mark.slow
def test_every_algorithm_on_every_shipped_topology_verifies_without_crossing_a_gpu(name):
    topology = load_topology(TOPOLOGY_DIR / name)
    skip = {algorithm for algorithm, file in SLOW if file == name}
    count = 0
    for schedule in _every_schedule(topology, skip):
        _check(schedule, topology)
        count += 1
    assert count >= 10


@st.composite
def mixed_topologies(draw) -> Topology:
    """Random topologies whose gpus forward or not at random."""
    document = draw(topology_documents(max_gpus=6, max_switches=2))
    for node in document["nodes"]:
        if node["type"] == "gpu" and draw(st.booleans()):
            node["forwards"] = True
    return Topology.from_dict(document, "random")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology=mixed_topologies())
def test_every_algorithm_on_random_topologies_verifies_without_crossing_a_gpu(topology):
    for schedule in _every_schedule(topology):
        _check(schedule, topology)


def test_dgx1_relays_use_scratch_and_direct_allgather_forwards_what_it_received():
    dgx1 = load_topology("dgx1")
    mapped = synthesize(dgx1, "allreduce", "tree")
    assert all(t.dst_scratch is None for t in mapped.transfers), "the default mapping keeps both trees on NVLinks"
    assert sorted(mapped.params["mapping"]) == list(range(8))
    tree = synthesize(dgx1, "allreduce", "tree", mapping="identity")
    relayed = [t for t in tree.transfers if t.dst_scratch is not None]
    assert relayed, "NCCL's tree on ranks in order pairs gpus without an NVLink on DGX-1"
    for t in relayed:  # each relay hop is a copy into scratch, read once by a dependent hop onward
        onward = [u for u in tree.transfers if u.src == t.dst and u.src_scratch == t.dst_scratch]
        assert t.op == "copy" and len(onward) == 1 and t.id in onward[0].deps
    gather = synthesize(dgx1, "allgather", "direct")
    assert all(t.src_scratch is None and t.dst_scratch is None for t in gather.transfers)
    received = {(t.dst, t.chunk) for t in gather.transfers}
    assert len(received) == len(gather.transfers) == 8 * 7, "every gpu receives every chunk exactly once"
