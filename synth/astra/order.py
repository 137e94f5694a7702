"""Ordering nodes that make the traces independent of the order in which ASTRA-sim issues ready sends."""

from __future__ import annotations

from typing import Any

from synth.astra.network import Network
from synth.astra.replay import SimulationResult, simulate
from synth.errors import SynthError

# ------------------------------------------------------------------------------------------ order
#: Name prefix and extra attribute of the ordering COMP nodes :func:`sequence_sends` adds.
ORDER_PREFIX = "order_after_"
DELAY_PREFIX = "delay_"
ORDER_ATTR = "order_after"
MAX_ORDER_ROUNDS = 200
MAX_DELAYS = 16


def sequence_sends(program: Any, network: Network) -> SimulationResult:
    """Make the traces' outcome independent of the order in which ASTRA-sim issues simultaneously ready
    nodes; returns the final run.

    ASTRA-sim issues the nodes that one completion frees in the order of a hash set (the Chakra feeder's
    ``std::unordered_set``) and runs the events of one ns in the order they were created, so where two
    messages reach one link in the same ns, which goes first may depend on that hash order, which no trace
    states. :func:`simulate` reports every such tie, and this adds nodes until none is left:

    - two sends of a rank reach their link in the same ns: the second (in the order the model issued
      them, file order for nodes freed together) waits for an *ordering node* of the first, a COMP node of
      0 µs (1 ns in ASTRA-sim) with the first send's dependencies, so it starts exactly 1 ns later, while
      the first still occupies the link (every message takes at least 1 ns there,
      :func:`smallest_message`): the link serves them in the same order at the same times;
    - a send reaches its link in the same ns as a message passing through (a Ring's npu forwarding):
      the send waits for a *delay node* (the same kind of COMP node, with the send's own dependencies)
      and starts 1 ns later, behind the passing message (at most :data:`MAX_DELAYS` times per send);
    - two messages pass through a link in the same ns (at a Switch): their order is their creation
      order, fixed unless their histories part at nodes one completion freed together; those nodes are
      then ordered 1 ns apart as above.

    Ordering nodes are named ``order_after_<node>``, delay nodes ``delay_<send>``; both carry the extra
    attribute ``order_after`` (the node's id) and are appended to each rank's node list. Networks without
    links (congestion-unaware) need none. Tests check the result by issuing simultaneously ready nodes in
    reversed and random orders (:func:`simulate`'s ``order``).
    """
    from synth.proto.et_def import NodeType
    from synth.trace import EtNode

    result = simulate(program, network)
    base_length = [len(nodes) for nodes in program.nodes]
    after_of: dict[tuple[int, int], int] = {}  # (rank, node index) -> index of its ordering node
    next_id = [max((node.id for node in nodes), default=-1) + 1 for nodes in program.nodes]

    def add_dep(rank: int, index: int, dep_id: int) -> None:
        node = program.nodes[rank][index]
        if dep_id in node.deps:
            return
        node.deps = tuple(sorted({*node.deps, dep_id}))
        if (rank, index) in after_of:  # an ordering node keeps its node's dependencies
            add_dep(rank, after_of[(rank, index)], dep_id)

    def ordering_node(rank: int, index: int) -> int:
        found = after_of.get((rank, index))
        if found is None:
            nodes = program.nodes[rank]
            found = after_of[(rank, index)] = len(nodes)
            nodes.append(EtNode(next_id[rank], ORDER_PREFIX + nodes[index].name, NodeType.COMP_NODE,
                                nodes[index].deps, extras={ORDER_ATTR: nodes[index].id}))
            next_id[rank] += 1
        return found

    delayed: dict[tuple[int, int], int] = {}
    for _ in range(MAX_ORDER_ROUNDS):
        # a send that keeps meeting messages passing through (a link busy every ns) stays after MAX_DELAYS
        delays = [send for send in result.delays if delayed.get(send, 0) < MAX_DELAYS]
        if not result.ties and not delays:
            program.order_nodes = sum(len(nodes) - length for nodes, length in zip(program.nodes, base_length,
                                                                                  strict=True))
            return result
        for group in result.ties:  # 1 ns apart, in the order this run issued them
            for (rank, earlier), (_, later) in zip(group, group[1:], strict=False):
                add_dep(rank, later, program.nodes[rank][ordering_node(rank, earlier)].id)
        for rank, index in delays:  # 1 ns later than its dependencies allow
            delayed[(rank, index)] = delayed.get((rank, index), 0) + 1
            nodes = program.nodes[rank]
            delay = EtNode(next_id[rank], DELAY_PREFIX + nodes[index].name, NodeType.COMP_NODE, nodes[index].deps,
                           extras={ORDER_ATTR: nodes[index].id})
            next_id[rank] += 1
            nodes.append(delay)
            add_dep(rank, index, delay.id)
        result = simulate(program, network)
    raise SynthError(f"could not make the traces independent of ASTRA-sim's issue order in {MAX_ORDER_ROUNDS} rounds")
