"""Tree allreduce: NCCL's double binary tree and the binomial tree; structure, verification, and the
closed forms of cost-models.md."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from strategies import topology_documents

from synth.algorithms import synthesize
from synth.algorithms.tree import binary_tree_parents, double_binary_tree
from synth.collectives import Kind
from synth.errors import InputError, NotApplicable
from synth.evaluate import congestion, evaluate
from synth.library import SHIPPED_FILES, load_topology
from synth.topology import Topology
from synth.verify import verify

#: The plain chunk-level α-β model of the closed forms: no protocol costs, every chunk one message.
IDEAL = {"protocol": "ideal", "slices": 1}

GIGA = 1e9


def relative(a: float, b: float) -> float:
    return abs(a - b) / b


def child_counts(parents: list[int | None]) -> list[int]:
    counts = [0] * len(parents)
    for parent in parents:
        if parent is not None:
            counts[parent] += 1
    return counts


@pytest.mark.parametrize("n", range(2, 40))
def test_double_binary_tree_structure(n):
    for parents in double_binary_tree(n):
        assert parents.count(None) == 1
        assert max(child_counts(parents)) <= 2
        for rank in range(n):  # every rank reaches the root
            seen = 0
            while parents[rank] is not None and seen <= n:
                rank, seen = parents[rank], seen + 1
            assert seen <= n
    first, second = double_binary_tree(n)
    inner_in_both = [r for r in range(n) if child_counts(first)[r] and child_counts(second)[r]]
    # even N: complementary trees (NCCL's mirror); odd N: only rank 0 (NCCL's shift)
    assert inner_in_both == ([] if n % 2 == 0 else [0] if n > 1 else [])


def test_in_order_tree_shape():
    assert binary_tree_parents(8) == [None, 2, 4, 2, 0, 6, 4, 6]
    assert double_binary_tree(8)[1] == [1, 3, 1, 7, 5, 3, 5, None]  # rank r plays 7 - r


@pytest.mark.parametrize("n", range(2, 18))
@pytest.mark.parametrize("shape", ["double", "binomial"])
def test_every_rank_count_verifies(n, shape):
    topo = load_topology(f"switch:n={n}")
    for chunks in (2, 6):
        verify(synthesize(topo, Kind.ALLREDUCE, "tree", shape=shape, chunks=chunks), topo)


@pytest.mark.parametrize("spec", sorted(set(SHIPPED_FILES.values())))
def test_shipped_topologies_verify(spec):
    topo = load_topology(spec)
    for shape in ("double", "binomial"):
        verify(synthesize(topo, Kind.ALLREDUCE, "tree", shape=shape), topo)


@pytest.mark.parametrize("n", [4, 8, 16])
def test_binomial_closed_form(n):
    """Binomial reduce then broadcast, one chunk: 2·log2(p)·(α + nβ), α = 2 link latencies."""
    topo = load_topology(f"switch:n={n}")
    schedule = synthesize(topo, Kind.ALLREDUCE, "tree", shape="binomial")
    levels = n.bit_length() - 1
    for size in (4096, 2**30):
        expected = 2 * levels * (1e-6 + size / (50.0 * GIGA))
        assert relative(evaluate(schedule, topo, size, **IDEAL).time_s, expected) < 1e-9


def test_double_tree_bandwidth_term_is_exact_and_pipelining_approaches_it():
    """cost-models.md: about 2·log2(p)·α + 2·n·β at large n. The 2nβ term is exact: on a switch every
    inner node's link carries 2n (n/2 up and 2·n/2 down in its inner tree, n/2 each way as a leaf of the
    other), which the schedule's exact congestion bound shows. The flow time is that plus the pipeline
    fill: with K chunks per tree it lies between 2nβ and 2nβ(1 + 2·log2(p)/K) and falls towards 2nβ
    as K grows (latency 0 here, so only the bandwidth term is compared)."""
    topo = load_topology("switch:n=8,latency=0")
    beta = Fraction(1, 50 * 10**9)
    size = 2**30
    previous = None
    for chunks in (8, 32, 128):
        schedule = synthesize(topo, Kind.ALLREDUCE, "tree", chunks=chunks)
        verify(schedule, topo)
        assert congestion(schedule, topo).seconds_per_byte == 2 * beta
        per_tree = chunks // 2
        time = evaluate(schedule, topo, size, **IDEAL).time_s
        bandwidth_term = float(2 * size * beta)
        assert bandwidth_term * (1 - 1e-9) <= time <= bandwidth_term * (1 + 2 * 3 / per_tree)
        if previous is not None:
            assert time < previous
        previous = time
    assert time < bandwidth_term * 1.05


def test_double_tree_latency_grows_with_log_p():
    """Small messages: the pipeline depth (2·log2(p) hops plus K-1 chunks) times α."""
    times = []
    for n in (4, 16):
        topo = load_topology(f"switch:n={n}")
        times.append(evaluate(synthesize(topo, Kind.ALLREDUCE, "tree", chunks=2), topo, 64, **IDEAL).time_s)
    ring_16 = evaluate(synthesize(load_topology("switch:n=16"), Kind.ALLREDUCE, "ring"),
                       load_topology("switch:n=16"), 64, **IDEAL).time_s
    assert times[0] < times[1]  # deeper trees take longer
    assert times[1] < ring_16  # log depth beats the ring's 2(p-1) steps at tiny sizes


def test_bad_options_are_clear():
    topo = load_topology("switch:n=4")
    with pytest.raises(InputError, match="shape"):
        synthesize(topo, Kind.ALLREDUCE, "tree", shape="ternary")
    with pytest.raises(InputError, match="even chunk count"):
        synthesize(topo, Kind.ALLREDUCE, "tree", chunks=3)
    with pytest.raises(NotApplicable, match="does not do allgather"):
        synthesize(topo, Kind.ALLGATHER, "tree")


@settings(max_examples=15, deadline=None)
@given(document=topology_documents(max_gpus=7))
def test_random_topologies_verify(document):
    topo = Topology.from_dict(document)
    for shape in ("double", "binomial"):
        schedule = synthesize(topo, Kind.ALLREDUCE, "tree", shape=shape, chunks=4)
        verify(schedule, topo)
        assert schedule.to_json() == synthesize(topo, Kind.ALLREDUCE, "tree", shape=shape, chunks=4).to_json()
