"""Recursive halving-doubling (Rabenseifner): reduce-scatter, allgather and allreduce for any rank count.

The algorithm runs on *virtual* ranks 0..N-1; ``mapping[v]`` is the physical rank that plays virtual
rank v (identity by default). Let p' be the largest power of two <= N and e = N - p'.

- Non-powers of two are folded the standard way (as MPICH does): for v < 2e, even virtual rank v first
  sends to v+1 (its whole vector for reduce-scatter and allreduce, reduced into v+1's; its own block for
  allgather), the p' remaining ranks run the power-of-two algorithm, and at the end v+1 sends v what it
  needs (its block, or the whole result).
- Reduce-scatter is recursive halving: in round k (distance p'/2, p'/4, ..., 1) every rank sends the
  half of its current window that its partner keeps and reduces the half it keeps.
- Allgather is recursive doubling (distance 1, 2, ..., p'/2): every rank sends everything it holds.
- Allreduce is reduce-scatter by halving, then allgather by doubling.

Rounds are lock-step, as in MPI implementations: every transfer of a round depends on the previous
round's transfers of both its endpoints. So on a uniform network every round costs α + (bytes sent) β,
and the times are the closed forms: reduce-scatter and allgather log2(p)·α + ((p-1)/p)·n·β, allreduce
2·log2(p)·α + 2((p-1)/p)·n·β. Partners that no path through switches and forwarding gpus joins exchange
through relay gpus' scratch (:func:`synth.algorithms.utils.send`).

On an EFLOPS BiGraph (two switch layers, complete bipartite, m hosts on each of s + s switches, s and
m powers of two, m <= s), :func:`rhd_mapping` gives the contention-free rank mapping: the layer of a
virtual rank is the parity of its bits, so every exchange crosses layers, and the hosts of one switch
exchange with hosts on distinct switches of the other layer in every round. Then no inter-switch link
carries two messages in the same round. The mapping is built from two subspaces S and T of the
even-parity vectors of GF(2)^log2(N), of dimension log2(m) with S ∩ T = {0}: upper switches hold the
cosets of S among even vectors, lower switches the cosets of T among odd vectors; two ranks in one
round differ in one bit, and a coset of S and a translated coset of T meet in at most one vector.
``mapping="auto"`` (the default) uses it whenever the topology is such a BiGraph.
"""

from __future__ import annotations

from collections.abc import Sequence

import networkx as nx

from synth.algorithms.utils import OrderedBuilder, make_collective, relay_free_mapping, send
from synth.collectives import Kind
from synth.errors import InputError, NotApplicable
from synth.schedule import COPY, REDUCE, Schedule
from synth.topology import Topology


def _power_of_two(value: int) -> bool:
    return value >= 1 and value & (value - 1) == 0


def bigraph_structure(topology: Topology) -> tuple[list[list[int]], list[list[int]]]:
    """Detect an EFLOPS BiGraph: return (upper switches, lower switches), each a list of switches given
    as the sorted ranks of the hosts on it; raise :class:`NotApplicable` saying what is missing.

    The upper layer is the side of the bipartite switch graph that holds the first switch.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> upper, lower = bigraph_structure(load_topology("bigraph:upper=2,lower=2,hosts_per_switch=2"))
    >>> upper, lower
    ([[0, 1], [2, 3]], [[4, 5], [6, 7]])
    """
    graph = topology.graph
    switches = list(topology.switches)
    if not switches:
        raise NotApplicable("not a BiGraph: the topology has no switches")
    home: dict[str, list[int]] = {s: [] for s in switches}
    for rank, gpu in enumerate(topology.gpus):
        successors = list(graph.successors(gpu))
        predecessors = list(graph.predecessors(gpu))
        if len(successors) != 1 or predecessors != successors or topology.is_gpu(successors[0]):
            raise NotApplicable(f"not a BiGraph: gpu {gpu} is not linked (both ways) to exactly one switch")
        home[successors[0]].append(rank)
    fabric = nx.Graph()
    fabric.add_nodes_from(switches)
    for u, v in graph.edges:
        if not topology.is_gpu(u) and not topology.is_gpu(v):
            if not graph.has_edge(v, u):
                raise NotApplicable(f"not a BiGraph: switch link {u} -> {v} has no reverse direction")
            fabric.add_edge(u, v)
    if not nx.is_connected(fabric) or not nx.is_bipartite(fabric):
        raise NotApplicable("not a BiGraph: the switches do not form a connected bipartite graph")
    colour = nx.bipartite.color(fabric)
    first = colour[switches[0]]
    upper = [s for s in switches if colour[s] == first]
    lower = [s for s in switches if colour[s] != first]
    if not lower:
        raise NotApplicable("not a BiGraph: the switches do not form two layers")
    if fabric.number_of_edges() != len(upper) * len(lower):
        raise NotApplicable("not a BiGraph: not every upper switch is linked to every lower switch")
    if any(not home[s] for s in switches):
        raise NotApplicable("not a BiGraph: a switch holds no host")
    return [sorted(home[s]) for s in upper], [sorted(home[s]) for s in lower]


def rhd_mapping(topology: Topology) -> list[int]:
    """The contention-free halving-doubling rank mapping on an EFLOPS BiGraph.

    Returns ``mapping`` with ``mapping[v]`` = the physical rank playing virtual rank v. Raises
    :class:`NotApplicable` with the reason when the topology is not a BiGraph with s upper and s lower
    switches of m hosts each, s and m powers of two and m <= s.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> rhd_mapping(load_topology("bigraph:upper=2,lower=2,hosts_per_switch=2"))
    [0, 4, 6, 1, 5, 2, 3, 7]
    """
    upper, lower = bigraph_structure(topology)
    s = len(upper)
    sizes = {len(hosts) for hosts in upper + lower}
    if len(lower) != s or len(sizes) != 1:
        raise NotApplicable(f"the contention-free mapping needs as many upper as lower switches and the same "
                            f"host count on every switch; got {s} upper, {len(lower)} lower, hosts per switch "
                            f"{sorted(sizes)}")
    m = sizes.pop()
    if not (_power_of_two(s) and _power_of_two(m) and m <= s):
        raise NotApplicable(f"the contention-free mapping needs s switches per layer and m hosts per switch to "
                            f"be powers of two with m <= s; got s={s}, m={m}")
    n = 2 * s * m
    bits = n.bit_length() - 1
    a = m.bit_length() - 1
    # S and T: spans of e0^e1..e0^ea and of e0^e(a+1)..e0^e(2a), even-parity and meeting only in 0
    s_basis = [1 | 1 << k for k in range(1, a + 1)]
    t_basis = [1 | 1 << k for k in range(a + 1, 2 * a + 1)]

    def span(basis: list[int]) -> list[int]:
        elements = [0]
        for vector in basis:
            elements += [e ^ vector for e in elements]
        return sorted(elements)

    def cosets(parity: int, subspace: list[int]) -> list[list[int]]:
        seen: set[int] = set()
        result = []
        for x in range(1 << bits):
            if bin(x).count("1") % 2 == parity and x not in seen:
                coset = sorted(x ^ e for e in subspace)
                seen.update(coset)
                result.append(coset)
        return result

    mapping = [0] * n
    for switches, groups in ((upper, cosets(0, span(s_basis))), (lower, cosets(1, span(t_basis)))):
        for hosts, coset in zip(switches, groups, strict=True):
            for host, virtual in zip(hosts, coset, strict=True):
                mapping[virtual] = host
    return mapping


def exchange_pairs(n: int) -> list[tuple[int, int]]:
    """The virtual rank pairs that exchange data in rhd on ``n`` ranks (folding and every round).

    Examples
    --------
    >>> exchange_pairs(3)
    [(0, 1), (1, 2)]
    """
    p2 = 1 << (n.bit_length() - 1)
    extras = n - p2
    rep = [2 * i + 1 if i < extras else i + extras for i in range(p2)]
    pairs = [(2 * i, 2 * i + 1) for i in range(extras)]
    for level in range(p2.bit_length() - 1):
        pairs += [(rep[i], rep[i ^ (1 << level)]) for i in range(p2) if i < i ^ (1 << level)]
    return pairs


def _resolve_mapping(topology: Topology, mapping: Sequence[int] | str | None) -> tuple[list[int], str]:
    n = topology.num_ranks
    if mapping is None or mapping == "auto":
        try:
            return rhd_mapping(topology), "bigraph"
        except NotApplicable:
            found = relay_free_mapping(topology, exchange_pairs(n))
            if found is not None and found != list(range(n)):
                return found, "relay-free"
            return list(range(n)), "identity"
    if mapping == "identity":
        return list(range(n)), "identity"
    if mapping == "bigraph":
        return rhd_mapping(topology), "bigraph"
    if isinstance(mapping, str) or not all(isinstance(v, int) and not isinstance(v, bool) for v in mapping) \
            or sorted(mapping) != list(range(n)):
        raise InputError("", "mapping", f"expected 'auto', 'identity', 'bigraph' or a permutation of 0..{n - 1}, "
                         f"got {mapping!r}")
    return list(mapping), "given"


class LockstepRounds:
    """Lock-step rounds over an :class:`OrderedBuilder`, as MPI-style algorithms run: every transfer of a
    round depends on the previous round's transfers of both its endpoints (call :meth:`end_round`
    between rounds). A message between ranks that no forwarding path joins goes through relay gpus
    (:func:`synth.algorithms.utils.send`); the round waits for its last hop. Used by rhd and bruck."""

    def __init__(self, builder: OrderedBuilder, topology: Topology) -> None:
        self.builder = builder
        self.topology = topology
        self.previous: dict[int, list[int]] = {}
        self.current: dict[int, list[int]] = {}

    def send(self, src: int, dst: int, chunks: Sequence[int], op: str) -> None:
        """Send ``chunks`` from rank ``src`` to rank ``dst`` in the current round (one message)."""
        deps = self.previous.get(src, []) + self.previous.get(dst, [])
        for chunk in chunks:
            tid = send(self.builder, self.topology, src, dst, chunk, op, deps)  # type: ignore[arg-type]
            self.current.setdefault(src, []).append(tid)
            self.current.setdefault(dst, []).append(tid)

    def end_round(self) -> None:
        """Close the current round."""
        self.previous.update(self.current)
        self.current = {}


def rhd(topology: Topology, kind: Kind, *, chunks: int | None = None, root: int | None = None,
        mapping: Sequence[int] | str | None = None) -> Schedule:
    """Recursive halving-doubling reduce-scatter, allgather or allreduce.

    Parameters
    ----------
    topology : Topology
    kind : Kind
        ``reducescatter``, ``allgather`` or ``allreduce``.
    chunks : int, optional
        Total chunks C. Reduce-scatter and allgather: a multiple of N (default N). Allreduce: a multiple
        of p', the largest power of two <= N (default p').
    mapping : "auto", "identity", "bigraph" or list of int, optional
        Virtual-to-physical rank mapping; ``auto`` (default) is the BiGraph contention-free mapping when
        it applies, else the identity when every exchange needs no relay, else a mapping under which none
        does if one is found (:func:`synth.algorithms.utils.relay_free_mapping`), else the identity.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> s = rhd(load_topology("switch:n=8"), Kind.ALLREDUCE)
    >>> len(s.transfers), s.params["rounds"]  # 3 halving + 3 doubling rounds of 8 x 4 + ... transfers
    (112, 6)
    """
    n = topology.num_ranks
    p2 = 1 << (n.bit_length() - 1)
    extras = n - p2
    coll = make_collective(topology, kind, chunks, root, default_chunks=p2 if kind == Kind.ALLREDUCE else n)
    if kind == Kind.ALLREDUCE and coll.chunks % p2:
        raise InputError("", "chunks", f"rhd allreduce needs chunks to be a multiple of {p2} (the largest power "
                         f"of two <= {n} ranks), got {coll.chunks}")
    phys, mapping_kind = _resolve_mapping(topology, mapping)
    # virtual rank -> new rank among the p2 that run the power-of-two core, and back
    members = [[2 * i, 2 * i + 1] if i < extras else [i + extras] for i in range(p2)]
    rep = [group[-1] for group in members]
    if kind == Kind.ALLREDUCE:
        per = coll.chunks // p2
        blocks = [list(range(i * per, (i + 1) * per)) for i in range(p2)]
    else:
        per = coll.chunks // n
        blocks = [[c for v in group for c in range(phys[v] * per, (phys[v] + 1) * per)] for group in members]
    everything = list(range(coll.chunks))
    params = {"chunks": coll.chunks, "mapping": phys, "mapping_kind": mapping_kind, "folded": extras}
    builder = OrderedBuilder(coll, topology.name, topology.gpus, "rhd", params)
    rounds = LockstepRounds(builder, topology)
    count = 0

    def send(v_src: int, v_dst: int, chunk_list: Sequence[int], op: str) -> None:
        rounds.send(phys[v_src], phys[v_dst], chunk_list, op)

    def finish_round() -> None:
        nonlocal count
        rounds.end_round()
        count += 1

    if extras:  # fold
        for i in range(extras):
            if kind == Kind.ALLGATHER:
                send(2 * i, 2 * i + 1, blocks[i][:per], COPY)
            else:
                send(2 * i, 2 * i + 1, everything, REDUCE)
        finish_round()
    levels = p2.bit_length() - 1
    if kind in (Kind.REDUCESCATTER, Kind.ALLREDUCE):
        for level in reversed(range(levels)):
            mask = 1 << level
            for i in range(p2):
                partner = i ^ mask
                window = [j for j in range(p2) if j >> (level + 1) == i >> (level + 1)]
                given = [c for j in window if j & mask == partner & mask for c in blocks[j]]
                send(rep[i], rep[partner], given, REDUCE)
            finish_round()
    if kind in (Kind.ALLGATHER, Kind.ALLREDUCE):
        for level in range(levels):
            mask = 1 << level
            for i in range(p2):
                held = [c for j in range(p2) if j >> level == i >> level for c in blocks[j]]
                send(rep[i], rep[i ^ mask], held, COPY)
            finish_round()
    if extras:  # unfold
        for i in range(extras):
            if kind == Kind.REDUCESCATTER:
                own = range(phys[2 * i] * per, (phys[2 * i] + 1) * per)
                send(2 * i + 1, 2 * i, list(own), COPY)
            elif kind == Kind.ALLGATHER:
                kept = set(range(phys[2 * i] * per, (phys[2 * i] + 1) * per))
                send(2 * i + 1, 2 * i, [c for c in everything if c not in kept], COPY)
            else:
                send(2 * i + 1, 2 * i, everything, COPY)
        finish_round()
    builder.params["rounds"] = count
    return builder.build()
