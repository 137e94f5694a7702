"""Bruck allgather, reduce-scatter and alltoall: verified for any rank count, and the closed forms of
cost-models.md."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from strategies import topology_documents

from synth.algorithms import synthesize
from synth.collectives import Kind
from synth.errors import NotApplicable
from synth.evaluate import evaluate
from synth.library import SHIPPED_FILES, load_topology
from synth.topology import Topology
from synth.verify import verify

#: The plain chunk-level α-β model of the closed forms: no protocol costs, every chunk one message.
IDEAL = {"protocol": "ideal", "slices": 1}

GIGA = 1e9


def relative(a: float, b: float) -> float:
    return abs(a - b) / b


@pytest.mark.parametrize("n", [2, 3, 5, 6, 8, 11, 16])
def test_allgather_closed_form(n):
    """⌈log2 p⌉α + ((p-1)/p)·n·β for every p (the last round sends only the missing blocks)."""
    topo = load_topology(f"switch:n={n}")
    schedule = synthesize(topo, Kind.ALLGATHER, "bruck")
    verify(schedule, topo)
    rounds = math.ceil(math.log2(n))
    assert schedule.params["rounds"] == rounds
    alpha, beta = 1e-6, 1 / (50.0 * GIGA)
    for size in (1024 * n, 2**30):
        expected = rounds * alpha + (n - 1) / n * size * beta
        assert relative(evaluate(schedule, topo, size, **IDEAL).time_s, expected) < 1e-9


@pytest.mark.parametrize("n", [2, 3, 5, 6, 8, 11, 16])
def test_reducescatter_is_the_allgather_reversed(n):
    """The same ⌈log2 p⌉ rounds and bytes as the allgather, each copy a reduction, in reverse order."""
    topo = load_topology(f"switch:n={n}")
    gather = synthesize(topo, Kind.ALLGATHER, "bruck")
    scatter = synthesize(topo, Kind.REDUCESCATTER, "bruck")
    verify(scatter, topo)
    assert scatter.params["rounds"] == math.ceil(math.log2(n))
    assert {t.op for t in scatter.transfers} == {"reduce"}
    # transfer for transfer: the allgather's copy r -> s of a block is a reduction s -> r of it
    assert sorted((t.dst, t.src, t.chunk) for t in gather.transfers) == sorted(
        (t.src, t.dst, t.chunk) for t in scatter.transfers)
    for size in (1024 * n, 2**30):
        assert relative(evaluate(scatter, topo, size, **IDEAL).time_s,
                        evaluate(gather, topo, size, **IDEAL).time_s) < 1e-9


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_alltoall_closed_form(n):
    """Power of two: log2(p)·α + (n/2)·log2(p)·β (half the blocks move in every round)."""
    topo = load_topology(f"switch:n={n}")
    schedule = synthesize(topo, Kind.ALLTOALL, "bruck")
    verify(schedule, topo)
    levels = n.bit_length() - 1
    alpha, beta = 1e-6, 1 / (50.0 * GIGA)
    for size in (1024 * n, 2**30):
        expected = levels * alpha + size / 2 * levels * beta
        assert relative(evaluate(schedule, topo, size, **IDEAL).time_s, expected) < 1e-9


@pytest.mark.parametrize("n", range(2, 18))
def test_every_rank_count_verifies(n):
    topo = load_topology(f"switch:n={n}")
    for kind in (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLTOALL):
        for chunks in (n, 2 * n):
            schedule = synthesize(topo, kind, "bruck", chunks=chunks)
            verify(schedule, topo)
            assert schedule.params["rounds"] == math.ceil(math.log2(n))


@pytest.mark.parametrize("spec", sorted(set(SHIPPED_FILES.values())))
def test_shipped_topologies_verify(spec):
    topo = load_topology(spec)
    for kind in (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLTOALL):
        verify(synthesize(topo, kind, "bruck"), topo)


def test_other_collectives_are_refused():
    with pytest.raises(NotApplicable, match="does not do allreduce"):
        synthesize(load_topology("switch:n=4"), Kind.ALLREDUCE, "bruck")


@settings(max_examples=15, deadline=None)
@given(document=topology_documents(max_gpus=7))
def test_random_topologies_verify(document):
    topo = Topology.from_dict(document)
    for kind in (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLTOALL):
        schedule = synthesize(topo, kind, "bruck")
        verify(schedule, topo)
        assert schedule.to_json() == synthesize(topo, kind, "bruck").to_json()
