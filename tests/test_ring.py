"""Ring with one or several channels: verified schedules, the closed forms of cost-models.md, options."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import topology_documents

from synth.algorithms import synthesize
from synth.algorithms.ring import channel_rings, hamiltonian_cycle
from synth.collectives import Kind
from synth.errors import InputError
from synth.evaluate import evaluate
from synth.library import SHIPPED_FILES, load_topology
from synth.topology import Topology
from synth.verify import verify

#: The plain chunk-level α-β model of the closed forms: no protocol costs, every chunk one message.
IDEAL = {"protocol": "ideal", "slices": 1}

KINDS = [Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE]
GIGA = 1e9


def relative(a: float, b: float) -> float:
    return abs(a - b) / b


@pytest.mark.parametrize("spec, alpha_links", [("switch:n=8", 2), ("ring:n=8", 1), ("fully-connected:n=5", 1)])
@pytest.mark.parametrize("kind", KINDS)
def test_closed_forms_on_uniform_networks(spec, alpha_links, kind):
    """Ring AG/RS: (p-1)α + ((p-1)/p)nβ; AR: 2(p-1)α + 2((p-1)/p)nβ (γ = 0), α = path latency."""
    topo = load_topology(spec)
    schedule = synthesize(topo, kind, "ring")
    verify(schedule, topo)
    p = topo.num_ranks
    alpha = alpha_links * 0.5e-6
    beta = 1 / (50.0 * GIGA)
    factor = 2 if kind == Kind.ALLREDUCE else 1
    for n in (4096 * p, 2**30):
        expected = factor * ((p - 1) * alpha + (p - 1) / p * n * beta)
        assert relative(evaluate(schedule, topo, n, **IDEAL).time_s, expected) < 1e-9


def test_two_channels_use_both_directions_of_a_ring():
    """Two channels on a bidirectional ring: each direction carries half, so the bandwidth term halves."""
    topo = load_topology("ring:n=8")
    one = synthesize(topo, Kind.ALLREDUCE, "ring")
    two = synthesize(topo, Kind.ALLREDUCE, "ring", channels=2)
    verify(two, topo)
    assert two.params["orders"] == [list(range(8)), list(range(8))[::-1]]
    p, n, alpha, beta = 8, 2**30, 0.5e-6, 1 / (50.0 * GIGA)
    expected = 2 * ((p - 1) * alpha + (p - 1) / p * (n / 2) * beta)
    assert relative(evaluate(two, topo, n, **IDEAL).time_s, expected) < 1e-9
    assert evaluate(two, topo, n, **IDEAL).time_s < 0.51 * evaluate(one, topo, n, **IDEAL).time_s


def test_default_is_unchanged_single_ring():
    topo = load_topology("ring:n=4")
    schedule = synthesize(topo, Kind.ALLGATHER, "ring")
    assert schedule.params == {"order": [0, 1, 2, 3], "chunks": 4}
    assert [(t.src, t.dst, t.chunk) for t in schedule.transfers[:3]] == [(0, 1, 0), (1, 2, 0), (2, 3, 0)]


def test_extra_channels_take_link_disjoint_rings_on_dgx1():
    topo = load_topology("dgx1")
    rings = channel_rings(topo, 4)
    assert rings[1] == rings[0][::-1] and rings[3] == rings[2][::-1]
    edges = [{frozenset((r[i], r[(i + 1) % 8])) for i in range(8)} for r in (rings[0], rings[2])]
    assert not edges[0] & edges[1]
    for ring in (rings[0], rings[2]):  # every hop is an NVLink
        assert all(topo.has_link(topo.gpus[ring[i]], topo.gpus[ring[(i + 1) % 8]]) for i in range(8))
    for kind in KINDS:
        verify(synthesize(topo, kind, "ring", channels=4), topo)


@pytest.mark.parametrize("spec", sorted(set(SHIPPED_FILES.values())))
def test_channels_verify_on_shipped_topologies(spec):
    topo = load_topology(spec)
    verify(synthesize(topo, Kind.ALLREDUCE, "ring", channels=2), topo)


def test_bad_options_are_clear():
    topo = load_topology("ring:n=4")
    with pytest.raises(InputError, match="channels"):
        synthesize(topo, Kind.ALLGATHER, "ring", channels=0)
    with pytest.raises(InputError, match="multiple of 8"):
        synthesize(topo, Kind.ALLGATHER, "ring", channels=2, chunks=4)
    with pytest.raises(InputError, match="permutation"):
        synthesize(topo, Kind.ALLGATHER, "ring", order=[0, 0, 1, 2])


def test_hamiltonian_cycle_helper():
    assert hamiltonian_cycle({0: {1}, 1: {0}}) == [0, 1]
    assert hamiltonian_cycle({0: {1, 2}, 1: {0}, 2: {0}}) is None
    square = {0: {1, 3}, 1: {0, 2}, 2: {1, 3}, 3: {0, 2}}
    cycle = hamiltonian_cycle(square)
    assert sorted(cycle) == [0, 1, 2, 3] and all(cycle[(i + 1) % 4] in square[cycle[i]] for i in range(4))


@settings(max_examples=15, deadline=None)
@given(document=topology_documents(max_gpus=6), channels=st.integers(1, 3))
def test_random_topologies_verify(document, channels):
    topo = Topology.from_dict(document)
    for kind in KINDS:
        schedule = synthesize(topo, kind, "ring", channels=channels)
        verify(schedule, topo)
        assert schedule == synthesize(topo, kind, "ring", channels=channels)  # deterministic
