"""Recursive halving-doubling: verified for any rank count and mapping, the closed forms, and the
contention-free BiGraph mapping (no link carries two messages in the same round)."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import topology_documents

from synth.algorithms import synthesize
from synth.algorithms.rhd import bigraph_structure, rhd_mapping
from synth.collectives import Kind
from synth.errors import InputError, NotApplicable
from synth.evaluate import evaluate
from synth.library import SHIPPED_FILES, load_topology
from synth.schedule import Schedule
from synth.topology import Topology
from synth.verify import verify

#: The plain chunk-level α-β model of the closed forms: no protocol costs, every chunk one message.
IDEAL = {"protocol": "ideal", "slices": 1}

KINDS = [Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE]
GIGA = 1e9


def relative(a: float, b: float) -> float:
    return abs(a - b) / b


def own_bigraph(s: int, m: int, bandwidth: float = 12.5, latency: float = 1.0) -> Topology:
    """An EFLOPS BiGraph built here, independent of the library's builder: s upper + s lower switches,
    complete bipartite between the layers, m hosts per switch, hosts numbered lower layer first."""
    switches = [f"L{j}" for j in range(s)] + [f"U{i}" for i in range(s)]
    hosts = [f"h{r}" for r in range(2 * s * m)]
    links = [(h, switches[r // m], bandwidth, latency) for r, h in enumerate(hosts)]
    links += [(f"U{i}", f"L{j}", bandwidth, latency) for i in range(s) for j in range(s)]
    return Topology.build("own-bigraph", hosts, switches, links)


def round_of(schedule: Schedule) -> list[int]:
    """Each transfer's round: its depth in the dependency graph (rounds are lock-step)."""
    depth = [0] * len(schedule.transfers)
    for t in schedule.transfers:
        depth[t.id] = 1 + max((depth[d] for d in t.deps), default=0)
    return depth


def messages_per_link_and_round(schedule: Schedule) -> int:
    """The most distinct (src, dst) messages any directed link carries in one round."""
    rounds = round_of(schedule)
    use: dict[tuple[int, tuple[str, str]], set[tuple[int, int]]] = defaultdict(set)
    for t in schedule.transfers:
        for hop in zip(t.path, t.path[1:], strict=False):
            use[(rounds[t.id], hop)].add((t.src, t.dst))
    return max(len(pairs) for pairs in use.values())


@pytest.mark.parametrize("n", [2, 4, 8, 16])
@pytest.mark.parametrize("kind", KINDS)
def test_closed_forms_power_of_two(n, kind):
    """RS, AG: log2(p)α + ((p-1)/p)nβ; AR (Rabenseifner): 2 log2(p)α + 2((p-1)/p)nβ; α = 2 link latencies."""
    topo = load_topology(f"switch:n={n}")
    schedule = synthesize(topo, kind, "rhd")
    verify(schedule, topo)
    alpha, beta, levels = 1e-6, 1 / (50.0 * GIGA), n.bit_length() - 1
    factor = 2 if kind == Kind.ALLREDUCE else 1
    for size in (1024 * n, 2**30):
        expected = factor * (levels * alpha + (n - 1) / n * size * beta)
        assert relative(evaluate(schedule, topo, size, **IDEAL).time_s, expected) < 1e-9


@pytest.mark.parametrize("n", [3, 6, 12])
def test_allreduce_with_folding(n):
    """Non-power of two: fold (α + nβ), Rabenseifner on p' ranks, unfold (α + nβ)."""
    topo = load_topology(f"switch:n={n}")
    schedule = synthesize(topo, Kind.ALLREDUCE, "rhd")
    verify(schedule, topo)
    assert schedule.params["folded"] == n - (1 << (n.bit_length() - 1))
    p2 = 1 << (n.bit_length() - 1)
    alpha, beta, size = 1e-6, 1 / (50.0 * GIGA), 2**28
    expected = 2 * (alpha + size * beta) + 2 * ((p2.bit_length() - 1) * alpha + (p2 - 1) / p2 * size * beta)
    assert relative(evaluate(schedule, topo, size, **IDEAL).time_s, expected) < 1e-9


@pytest.mark.parametrize("n", range(2, 18))
def test_every_rank_count_verifies(n):
    topo = load_topology(f"switch:n={n}")
    for kind in KINDS:
        verify(synthesize(topo, kind, "rhd"), topo)


@pytest.mark.parametrize("spec", sorted(set(SHIPPED_FILES.values())))
def test_shipped_topologies_verify(spec):
    topo = load_topology(spec)
    for kind in KINDS:
        verify(synthesize(topo, kind, "rhd"), topo)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, 13), seed=st.integers(0, 10**6), chunks_factor=st.integers(1, 2))
def test_any_mapping_verifies(n, seed, chunks_factor):
    topo = load_topology(f"switch:n={n}")
    mapping = list(range(n))
    random.Random(seed).shuffle(mapping)
    for kind in KINDS:
        p2 = 1 << (n.bit_length() - 1)
        chunks = (p2 if kind == Kind.ALLREDUCE else n) * chunks_factor
        schedule = synthesize(topo, kind, "rhd", mapping=mapping, chunks=chunks)
        verify(schedule, topo)
        assert schedule.params["mapping"] == mapping


@settings(max_examples=15, deadline=None)
@given(document=topology_documents(max_gpus=7))
def test_random_topologies_verify(document):
    topo = Topology.from_dict(document)
    for kind in KINDS:
        verify(synthesize(topo, kind, "rhd"), topo)


def test_bigraph_mapping_is_contention_free_at_64_hosts():
    topo = load_topology("bigraph:upper=8,lower=8,hosts_per_switch=4")
    schedule = synthesize(topo, Kind.ALLREDUCE, "rhd")
    verify(schedule, topo)
    assert schedule.params["mapping_kind"] == "bigraph"
    assert messages_per_link_and_round(schedule) == 1


@pytest.mark.parametrize("topo", [load_topology("bigraph"), own_bigraph(4, 4), own_bigraph(8, 2)],
                         ids=["library-bigraph", "own-4x4", "own-8x2"])
def test_bigraph_mapping_is_contention_free(topo):
    """The mapped halving-doubling: no directed link carries messages of two (src, dst) pairs in the same
    round (the transfers of one pair in one round are one message cut into chunks), so every round
    costs exactly α + bytes/B and the time is the closed form; the identity mapping shares links."""
    mapping = rhd_mapping(topo)
    assert sorted(mapping) == list(range(topo.num_ranks))
    p = topo.num_ranks
    levels = p.bit_length() - 1
    for kind in KINDS:
        mapped = synthesize(topo, kind, "rhd")
        verify(mapped, topo)
        assert mapped.params["mapping"] == mapping and mapped.params["mapping_kind"] == "bigraph"
        assert messages_per_link_and_round(mapped) == 1
        # every exchange crosses the layers: host -> upper -> lower -> host, 3 links of 1 µs
        assert {len(t.path) for t in mapped.transfers} == {4}
        factor = 2 if kind == Kind.ALLREDUCE else 1
        size = 2**30
        expected = factor * (levels * 3e-6 + (p - 1) / p * size / (12.5 * GIGA))
        assert relative(evaluate(mapped, topo, size, **IDEAL).time_s, expected) < 1e-9
        plain = synthesize(topo, kind, "rhd", mapping="identity")
        verify(plain, topo)
        assert messages_per_link_and_round(plain) > 1
        assert evaluate(plain, topo, size, **IDEAL).time_s > 1.5 * evaluate(mapped, topo, size, **IDEAL).time_s


def test_bigraph_detection_and_reasons():
    upper, lower = bigraph_structure(own_bigraph(2, 2))
    assert sorted(map(len, upper + lower)) == [2, 2, 2, 2]
    with pytest.raises(NotApplicable, match="not a BiGraph"):
        rhd_mapping(load_topology("switch:n=8"))
    with pytest.raises(NotApplicable, match="not a BiGraph"):
        rhd_mapping(load_topology("dgx1"))
    with pytest.raises(NotApplicable, match="as many upper as lower"):
        rhd_mapping(load_topology("bigraph:upper=4,lower=2,hosts_per_switch=2"))
    with pytest.raises(NotApplicable, match="m <= s"):
        rhd_mapping(load_topology("bigraph:upper=2,lower=2,hosts_per_switch=4"))
    # auto falls back to the identity where the mapping does not apply
    schedule = synthesize(load_topology("bigraph:upper=2,lower=2,hosts_per_switch=4"), Kind.ALLREDUCE, "rhd")
    assert schedule.params["mapping_kind"] == "identity"
    with pytest.raises(NotApplicable, match="not a BiGraph"):
        synthesize(load_topology("switch:n=4"), Kind.ALLREDUCE, "rhd", mapping="bigraph")


def test_bad_options_are_clear():
    topo = load_topology("switch:n=6")
    with pytest.raises(InputError, match="mapping"):
        synthesize(topo, Kind.ALLGATHER, "rhd", mapping=[0, 1, 2])
    with pytest.raises(InputError, match="multiple of 4"):
        synthesize(topo, Kind.ALLREDUCE, "rhd", chunks=6)
    with pytest.raises(InputError, match="multiple of the rank count"):
        synthesize(topo, Kind.ALLGATHER, "rhd", chunks=4)
