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

Chunk count from the message size (``size``, double tree only): NCCL's tree pipelines in chunks whose
size it picks per message (``computeColl`` in ``src/enqueue.cc`` of NCCL v2.16.5, Simple protocol):
start from one step of the 4 MiB buffer (512 KiB) and halve it while the bytes per channel are less than
8 x depth chunks (down to 128 KiB), 4 x depth (down to 64 KiB) and depth (down to 32 KiB), where depth
is the tree's depth. Each tree carries half the message, so it gets ``ceil((size / 2) / chunk)`` chunks,
at most :data:`MAX_CHUNKS_PER_TREE` (beyond that the evaluator's slices pipeline the rest). At 1 KiB
that is one chunk per tree: fewer dependent steps, each paying its latency once. Without ``size`` the
double tree keeps 16 chunks.
"""

from __future__ import annotations

from collections.abc import Sequence

from synth.algorithms.binomial import binomial_edges
from synth.algorithms.utils import OrderedBuilder, make_collective, relay_free_mapping, send
from synth.collectives import Collective, Kind
from synth.errors import InputError, NotApplicable
from synth.schedule import COPY, REDUCE, Schedule
from synth.topology import Topology

SHAPES = ("double", "binomial")
#: Default chunk count of the double tree when no ``size`` is given.
DEFAULT_DOUBLE_CHUNKS = 16
#: Most chunks one tree (one NCCL tree channel) is cut into.
MAX_CHUNKS_PER_TREE = 64
#: NCCL's default buffer per protocol over its 8 steps: one step in bytes (LL and LL128 on the wire).
STEP_BYTES = {"LL": 524_288 // 8, "LL128": 4_915_200 // 8, "Simple": (4 << 20) // 8}


def nccl_tree_chunk_bytes(bytes_per_channel: int, depth: int, protocol: str = "Simple", ppn: float = 1.0,
                          nodes: int = 1) -> int:
    """The data bytes of one chunk of NCCL's tree at this message size (NCCL v2.16.5 ``computeColl``).

    Simple: a 512 KiB step, halved while ``bytes_per_channel // chunk`` is below 8 x depth (down to
    128 KiB), 4 x depth (64 KiB) and depth (32 KiB). LL: half a 64 KiB step (4 data bytes per 8).
    LL128: a 600 KiB step halved while below (1 + log2(nodes) + 0.1 ppn) x 64 / ppn chunks (down to
    128 KiB) and x 16 / ppn (32 KiB), 120 of every 128 bytes data.

    Examples
    --------
    >>> nccl_tree_chunk_bytes(2**30, 7), nccl_tree_chunk_bytes(2**20, 7), nccl_tree_chunk_bytes(1024, 3)
    (524288, 65536, 32768)
    >>> nccl_tree_chunk_bytes(2**20, 7, "LL")
    32768
    """
    chunk = STEP_BYTES[protocol]
    if protocol == "LL":
        return chunk // 2
    if protocol == "LL128":
        steps = 1 + (max(1, nodes).bit_length() - 1) + 0.1 * ppn
        while bytes_per_channel // chunk < steps * 64 / ppn and chunk > 131072:
            chunk //= 2
        while bytes_per_channel // chunk < steps * 16 / ppn and chunk > 32768:
            chunk //= 2
        return chunk * 15 // 16
    for factor, floor in ((8, 131072), (4, 65536), (1, 32768)):
        while bytes_per_channel // chunk < depth * factor and chunk > floor:
            chunk //= 2
    return chunk


def tree_depth(parents: list[int | None]) -> int:
    """The number of edges on the longest path from a rank to the root.

    Examples
    --------
    >>> tree_depth([None, 0, 1, 1])
    2
    """
    depth = 0
    for rank in range(len(parents)):
        steps, node = 0, rank
        while parents[node] is not None:
            node, steps = parents[node], steps + 1  # type: ignore[assignment]
        depth = max(depth, steps)
    return depth


def chunks_for_size(size: int, bytes_per_tree: float, depth: int, protocol: str = "Simple", ppn: float = 1.0,
                    nodes: int = 1) -> int:
    """Chunks one tree carrying ``bytes_per_tree`` of a ``size``-byte message is cut into (see the module
    docstring), between 1 and :data:`MAX_CHUNKS_PER_TREE`.

    Examples
    --------
    >>> chunks_for_size(1024, 512, 3), chunks_for_size(2**30, 2**29, 3)
    (1, 64)
    """
    chunk = nccl_tree_chunk_bytes(int(bytes_per_tree), depth, protocol, ppn, nodes)
    return max(1, min(MAX_CHUNKS_PER_TREE, -(-int(bytes_per_tree) // chunk)))




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


def _add_tree_chunk(adder: _TreeBuilder, parents: list[int | None], chunk: int, tree_index: int,
                    up: bool = True, down: bool = True) -> None:
    """Reduce ``chunk`` up the tree given by ``parents`` and/or broadcast it back down."""
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
    if up:
        for node in post_order:
            for child in children[node]:
                adder.add(child, node, chunk, REDUCE, (tree_index, child, node))
    if down:
        for node in reversed(post_order):
            for child in children[node]:
                adder.add(node, child, chunk, COPY, (tree_index, node, child))


def tree_schedule(topology: Topology, kind: Kind, trees: list[list[int | None]], chunks_per_tree: int,
                  algorithm: str, params: dict[str, object], root: int | None = None) -> Schedule:
    """Pipelined tree schedule: tree i (a parent per rank, its root has None) carries chunks
    ``i*k .. (i+1)*k - 1`` (k = ``chunks_per_tree``). Allreduce reduces each chunk up its tree and
    broadcasts it back down; broadcast only goes down and reduce only up (every tree rooted at
    ``root``). Each connection carries its chunks in order, so chunks pipeline.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> s = tree_schedule(load_topology("switch:n=3"), Kind.ALLREDUCE, [[None, 0, 1]], 2, "demo", {})
    >>> len(s.transfers)  # 2 chunks x (2 reductions up + 2 copies down)
    8
    """
    if kind not in (Kind.ALLREDUCE, Kind.BROADCAST, Kind.REDUCE):
        raise NotApplicable(f"a tree schedule does allreduce, broadcast and reduce, not {kind}")
    coll = make_collective(topology, kind, chunks_per_tree * len(trees), root)
    if kind != Kind.ALLREDUCE and any(parents[coll.root] is not None for parents in trees):  # type: ignore[index]
        raise InputError("", "root", f"every tree of a {kind} must be rooted at rank {coll.root}")
    builder = OrderedBuilder(coll, topology.name, topology.gpus, algorithm, params)
    adder = _TreeBuilder(builder, topology, list(range(topology.num_ranks)))
    for index, parents in enumerate(trees):
        for local in range(chunks_per_tree):
            _add_tree_chunk(adder, parents, index * chunks_per_tree + local, index,
                            up=kind != Kind.BROADCAST, down=kind != Kind.REDUCE)
    return builder.build()


def grouped_chains(topology: Topology, collective: Collective, chains: Sequence[Sequence[list[int | None]]],
                   algorithm: str, params: dict[str, object]) -> Schedule:
    """One broadcast (allgatherv) or reduce (reduce-scatterv) per rank of its shard, all in one group: rank
    r's chunks (:meth:`~synth.collectives.Collective.owned`) are dealt in equal consecutive blocks to the
    trees ``chains[r]`` (one per channel, each rooted at r) and pipelined down them (or reduced up them into
    r). The ranks' operations share each channel's connections in rank order, one after another, as the
    operations of one group run on a channel.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.collectives import Collective
    >>> coll = Collective.uneven(Kind.ALLGATHER, [2, 0, 1])
    >>> chain = lambda root: [[None if r == root else (r - 1) % 3 for r in range(3)]]
    >>> s = grouped_chains(load_topology("ring:n=3"), coll, [chain(r) for r in range(3)], "demo", {})
    >>> len(s.transfers)  # 3 chunks, each down a chain of 2 links
    6
    """
    if collective.kind not in (Kind.ALLGATHER, Kind.REDUCESCATTER):
        raise NotApplicable(f"grouped chains do allgather and reducescatter, not {collective.kind}")
    builder = OrderedBuilder(collective, topology.name, topology.gpus, algorithm, params)
    adder = _TreeBuilder(builder, topology, list(range(topology.num_ranks)))
    gather = collective.kind == Kind.ALLGATHER
    for root, trees in enumerate(chains):
        owned = collective.owned(root)
        if not owned:
            continue
        if any(parents[root] is not None for parents in trees) or len(owned) % len(trees):
            raise InputError("", "chains", f"rank {root}'s {len(owned)} chunks need trees rooted at it, a whole "
                             "number of chunks each")
        per_tree = len(owned) // len(trees)
        for channel, parents in enumerate(trees):
            for chunk in owned[channel * per_tree:(channel + 1) * per_tree]:
                _add_tree_chunk(adder, parents, chunk, channel, up=not gather, down=gather)
    return builder.build()


def tree(topology: Topology, kind: Kind, *, chunks: int | None = None, root: int | None = None,
         shape: str = "double", mapping: Sequence[int] | str = "auto", size: int | str | None = None) -> Schedule:
    """Tree allreduce: NCCL's double binary tree (default) or a binomial tree.

    Parameters
    ----------
    topology : Topology
    kind : Kind
        ``allreduce``.
    chunks : int, optional
        Total chunks C, pipelined down the trees. Double tree: an even number (half per tree; default
        from ``size``, else 16). Binomial: default 1.
    shape : {"double", "binomial"}
        The tree shape.
    mapping : "auto", "identity" or list of int
        The gpu playing each virtual rank (see the module docstring); ``params["mapping"]`` records it
        when it is not the identity.
    size : int or str, optional
        The message size (bytes, or ``"64KiB"``) the double tree's chunk count is chosen for (see the
        module docstring); ignored when ``chunks`` is given.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> s = tree(load_topology("switch:n=4"), Kind.ALLREDUCE, chunks=2)
    >>> len(s.transfers)  # per chunk 3 reductions up and 3 copies down
    12
    >>> tree(load_topology("dgx1"), Kind.ALLREDUCE, size="1KiB").chunks, tree(load_topology("dgx1"), Kind.ALLREDUCE).chunks
    (2, 16)
    """
    from synth.units import parse_size

    if shape not in SHAPES:
        raise InputError("", "shape", f"expected one of {', '.join(SHAPES)}, got {shape!r}")
    n = topology.num_ranks
    size_bytes = parse_size(size, "size") if size is not None else None
    if shape == "double":
        trees = double_binary_tree(n)
        shape_parents = [trees[0], trees[1]]
        if chunks is None:
            depth = max(tree_depth(list(t)) for t in trees)
            chunks = DEFAULT_DOUBLE_CHUNKS if size_bytes is None else 2 * chunks_for_size(size_bytes, size_bytes / 2,
                                                                                          depth)
    else:
        binomial_parents: list[int | None] = [None] * n
        for _, parent, child in binomial_edges(n, 0):
            binomial_parents[child] = parent
        shape_parents = [binomial_parents]
    coll = make_collective(topology, kind, chunks, root, default_chunks=1)
    tree_edges = [(r, p) for parents in shape_parents for r, p in enumerate(parents) if p is not None]
    physical = _resolve_mapping(topology, mapping, tree_edges)
    params: dict[str, object] = {"shape": shape, "chunks": coll.chunks}
    if size_bytes is not None:
        params["size"] = size_bytes
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
        params["parents"] = list(binomial_parents)
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
    return [int(rank) for rank in mapping]
