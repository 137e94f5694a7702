"""Tree allreduce: NCCL's double binary tree (pipelined) and the binomial tree.

Double binary tree (``shape="double"``, the default), as NCCL builds it over ranks 0..N-1:

- Tree A is an in-order binary tree: the parent of rank r > 0 is (r XOR b) OR 2b, where b is r's lowest
  set bit, or r XOR b when that is out of range; rank 0 is the root and has a single child. Odd ranks
  are leaves.
- Tree B is A mirrored (rank r plays N-1-r) when N is even, shifted by one (r plays r-1 mod N) when N
  is odd. With N even every rank is an inner node of at most one tree, so each rank sends and receives
  about 2n in total: time about 2·log2(N)·α + 2·n·β for large n.
- Half of the chunks go up and down tree A, the other half tree B. Each chunk is reduced towards the
  root (the reductions of two children into their parent are chained, as the verifier requires) and
  then broadcast back down; chunks pipeline, so a chunk is going up while the previous ones come down.

Binomial tree (``shape="binomial"``): reduce to rank 0 along a binomial tree, then broadcast back along
it; with one chunk the time is 2·ceil(log2 N)·(α + n·β).

The trees are built on virtual ranks; ``mapping[v]`` is the gpu that plays virtual rank v. By default
(``mapping="auto"``) it is the identity when every tree edge joins two gpus without a relay, else a mapping
that makes it so where one exists (:func:`synth.algorithms.utils.relay_free_mapping`: on DGX-1 both
trees then run over NVLinks only). A tree edge between gpus that no path through switches and forwarding
gpus joins still goes through relay gpus' scratch (:func:`synth.algorithms.utils.send`).
"""

from __future__ import annotations

from collections.abc import Sequence

from synth.algorithms.binomial import binomial_edges
from synth.algorithms.utils import OrderedBuilder, make_collective, relay_free_mapping, send
from synth.collectives import Kind
from synth.errors import InputError
from synth.schedule import COPY, REDUCE, Schedule
from synth.topology import Topology

SHAPES = ("double", "binomial")


def binary_tree_parents(n: int) -> list[int | None]:
    """Parent of each rank in NCCL's in-order binary tree on ranks 0..n-1 (rank 0 is the root).

    Examples
    --------
    >>> binary_tree_parents(8)
    [None, 2, 4, 2, 0, 6, 4, 6]
    """
    parents: list[int | None] = [None]
    for rank in range(1, n):
        low = rank & -rank
        parent = (rank ^ low) | (low << 1)
        parents.append(parent if parent < n else rank ^ low)
    return parents


def double_binary_tree(n: int) -> tuple[list[int | None], list[int | None]]:
    """Parents of each rank in NCCL's two complementary binary trees (see the module docstring).

    Examples
    --------
    >>> double_binary_tree(4)
    ([None, 2, 0, 2], [1, 3, 1, None])
    """
    first = binary_tree_parents(n)
    second: list[int | None] = [None] * n
    for rank in range(n):
        if n % 2 == 0:
            parent = first[n - 1 - rank]
            second[rank] = None if parent is None else n - 1 - parent
        else:
            parent = first[(rank - 1) % n]
            second[rank] = None if parent is None else (parent + 1) % n
    return first, second


def _children(parents: list[int | None]) -> list[list[int]]:
    children: list[list[int]] = [[] for _ in parents]
    for rank, parent in enumerate(parents):
        if parent is not None:
            children[parent].append(rank)
    return children


class _TreeBuilder:
    """Adds tree transfers with the verifier's ordering (via :class:`OrderedBuilder`) plus FIFO order on
    each connection: a connection (a key such as (tree, src, dst), or src alone for one-port sends)
    carries its chunks one after another, which is what makes chunks pipeline down a tree."""

    def __init__(self, builder: OrderedBuilder, topology: Topology, mapping: list[int]) -> None:
        self.builder = builder
        self.topology = topology
        self.mapping = mapping
        self.last: dict[object, int] = {}

    def add(self, src: int, dst: int, chunk: int, op: str, connection: object) -> None:
        """Add the transfer from virtual rank ``src`` to virtual rank ``dst`` on ``connection``."""
        previous = self.last.get(connection)
        deps = [] if previous is None else [previous]
        self.last[connection] = send(self.builder, self.topology, self.mapping[src], self.mapping[dst], chunk,
                                     op, deps)  # type: ignore[arg-type]


def _add_tree_chunk(adder: _TreeBuilder, parents: list[int | None], chunk: int, tree_index: int) -> None:
    """Reduce ``chunk`` up the tree given by ``parents`` and broadcast it back down."""
    children = _children(parents)
    root = parents.index(None)
    post_order: list[int] = []
    stack = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            post_order.append(node)
            continue
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(children[node]))
    for node in post_order:
        for child in children[node]:
            adder.add(child, node, chunk, REDUCE, (tree_index, child, node))
    for node in reversed(post_order):
        for child in children[node]:
            adder.add(node, child, chunk, COPY, (tree_index, node, child))


def tree(topology: Topology, kind: Kind, *, chunks: int | None = None, root: int | None = None,
         shape: str = "double", mapping: Sequence[int] | str = "auto") -> Schedule:
    """Tree allreduce: NCCL's double binary tree (default) or a binomial tree.

    Parameters
    ----------
    topology : Topology
    kind : Kind
        ``allreduce``.
    chunks : int, optional
        Total chunks C, pipelined down the trees. Double tree: an even number (half per tree; default
        16). Binomial: default 1.
    shape : {"double", "binomial"}
        The tree shape.
    mapping : "auto", "identity" or list of int
        The gpu playing each virtual rank (see the module docstring); ``params["mapping"]`` records it
        when it is not the identity.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> s = tree(load_topology("switch:n=4"), Kind.ALLREDUCE, chunks=2)
    >>> len(s.transfers)  # per chunk 3 reductions up and 3 copies down
    12
    """
    if shape not in SHAPES:
        raise InputError("", "shape", f"expected one of {', '.join(SHAPES)}, got {shape!r}")
    n = topology.num_ranks
    coll = make_collective(topology, kind, chunks, root, default_chunks=16 if shape == "double" else 1)
    if shape == "double":
        trees = double_binary_tree(n)
        shape_parents = [trees[0], trees[1]]
    else:
        binomial_parents: list[int | None] = [None] * n
        for _, parent, child in binomial_edges(n, 0):
            binomial_parents[child] = parent
        shape_parents = [binomial_parents]
    tree_edges = [(r, p) for parents in shape_parents for r, p in enumerate(parents) if p is not None]
    physical = _resolve_mapping(topology, mapping, tree_edges)
    params: dict[str, object] = {"shape": shape, "chunks": coll.chunks}
    if physical != list(range(n)):
        params["mapping"] = physical
    builder = OrderedBuilder(coll, topology.name, topology.gpus, "tree", params)
    adder = _TreeBuilder(builder, topology, physical)
    if shape == "double":
        if coll.chunks % 2:
            raise InputError("", "chunks", f"the double binary tree needs an even chunk count (half per tree), "
                             f"got {coll.chunks}")
        params["parents"] = [list(trees[0]), list(trees[1])]
        half = coll.chunks // 2
        for chunk in range(coll.chunks):
            _add_tree_chunk(adder, trees[chunk // half], chunk, chunk // half)
    else:
        edges = binomial_edges(n, 0)
        parents: list[int | None] = [None] * n
        for _, parent, child in edges:
            parents[child] = parent
        params["parents"] = list(parents)
        # one-port: each rank sends one message at a time, in round order, as the classic algorithm does
        for chunk in range(coll.chunks):
            for _, parent, child in reversed(edges):
                adder.add(child, parent, chunk, REDUCE, child)
            for _, parent, child in edges:
                adder.add(parent, child, chunk, COPY, parent)
    return builder.build()


def _resolve_mapping(topology: Topology, mapping: Sequence[int] | str, edges: list[tuple[int, int]]) -> list[int]:
    n = topology.num_ranks
    if mapping == "auto":
        return relay_free_mapping(topology, edges) or list(range(n))
    if mapping == "identity":
        return list(range(n))
    if isinstance(mapping, str) or not isinstance(mapping, Sequence) or sorted(
            v for v in mapping if isinstance(v, int) and not isinstance(v, bool)) != list(range(n)):
        raise InputError("", "mapping", f"expected 'auto', 'identity' or a permutation of 0..{n - 1}, got {mapping!r}")
    return list(mapping)
