"""ASTRA-sim's custom-collective executor and event loop, replayed on Chakra traces (see :mod:`synth.astra`)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from synth.astra.network import Network, _Link
from synth.errors import InputError, SynthError


# ------------------------------------------------------------------------------------ simulator
@dataclass
class SimulationResult:
    """Finish time per rank in ns (None for a rank that never finished) and the send/recv matches."""

    finish_ns: list[int | None]
    #: (src rank, send node id, dst rank, recv node id, arrival ns) per delivered message, in order
    matches: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)
    #: nodes whose order ASTRA-sim would leave to chance, each group in the order this run issued them
    #: (``(rank, node index)``, one rank per group): two sends of a rank that reach a link in the same
    #: ns, or two nodes one completion freed together whose messages reach a link in the same ns
    ties: list[list[tuple[int, int]]] = field(default_factory=list)
    #: sends ``(rank, node index)`` that reach a link in the same ns as a message passing through it
    delays: list[tuple[int, int]] = field(default_factory=list)
    #: per link that carried anything, the messages it started, in order: (start ns, src rank, tag)
    link_log: dict[Any, list[tuple[int, int, int]]] = field(default_factory=dict)

    @property
    def time_ns(self) -> int:
        """The collective's time: the last rank's finish."""
        if any(t is None for t in self.finish_ns):
            raise SynthError("the traces deadlock: " + "; ".join(self.unmatched[:5]))
        return max((t for t in self.finish_ns if t is not None), default=0)


_Context = tuple[int, int, Any]  # (step id, call id or -1, (rank, node index) or None)


def simulate(program: Any, network: Network, order: str | int | None = None) -> SimulationResult:
    """Run an :class:`~synth.trace.EtProgram` as ASTRA-sim's custom-collective executor does.

    Besides the finish times, it reports every place where two messages reach one link in the same ns
    in an order ASTRA-sim could take differently (:attr:`SimulationResult.ties` and ``delays``, see
    :func:`sequence_sends`). For two messages passing through a link, every event remembers where it was
    created (the event being processed, and the node whose issue created it when that happened while
    issuing the nodes one completion freed); events of one ns run in creation order, so the order of two
    of them is fixed unless their creation histories part at one such batch of nodes, which ASTRA-sim
    issues in hash-set order.

    Parameters
    ----------
    program : EtProgram
    network : Network
        Reset before the run.
    order : None, "reverse" or int
        The order in which nodes that become ready together (freed by one completion, or the roots of a
        rank) are issued: None is file order; "reverse" and a random seed stand in for ASTRA-sim's hash
        set order, to check that a program's outcome does not depend on it.

    Notes
    -----
    Longer than the house limit on purpose: it mirrors ASTRA-sim's executor event by event, as one event
    loop whose handlers (``issue``, ``enqueue``, ``transmit``, ``deliver``, ``done``, the tie detection in
    ``parting``) are nested functions sharing the run's state, each under 45 lines; read together they are
    the replay's definition, and the tie bookkeeping needs every handler's view of the current step.
    """
    import random

    from synth.proto.et_def import NodeType

    network.reset()
    shuffle = random.Random(order).shuffle if isinstance(order, int) and not isinstance(order, bool) else None
    if order is not None and shuffle is None and order != "reverse":
        raise ValueError(f"order must be None, 'reverse' or an integer seed, got {order!r}")
    send_type, recv_type, comp_type = NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE, NodeType.COMP_NODE
    n = program.num_ranks
    children: list[list[list[int]]] = []
    waiting: list[list[int]] = []
    for rank in range(n):
        nodes = program.nodes[rank]
        position = {node.id: i for i, node in enumerate(nodes)}
        kids: list[list[int]] = [[] for _ in nodes]
        counts = [0] * len(nodes)
        for i, node in enumerate(nodes):
            for dep in set(node.deps):
                kids[position[dep]].append(i)
                counts[i] += 1
        for kid_list in kids:
            kid_list.sort()
        children.append(kids)
        waiting.append(counts)
    remaining = [len(program.nodes[r]) for r in range(n)]
    finish: list[int | None] = [None if remaining[r] else 0 for r in range(n)]
    heap: list[tuple[int, int, int, Any]] = []
    now = 0
    sent: dict[tuple[int, int, int, int], int] = {}
    posted: dict[tuple[int, int, int, int], int] = {}
    arrived: dict[tuple[tuple[int, int, int, int], int], int] = {}  # message -> arrival time
    recv_waiting: dict[tuple[tuple[int, int, int, int], int], tuple[int, int]] = {}
    send_of: dict[tuple[tuple[int, int, int, int], int], tuple[int, int]] = {}
    batches: dict[tuple[int, int], tuple[int, list[tuple[int, int]]]] = {}  # (rank, ns) -> (event, entries)
    matches: list[tuple[int, int, int, int, int]] = []
    action_done, action_arrive, action_free, action_batch = 0, 1, 2, 3
    # provenance: every event and every COMP completion in a batch is a *step*
    step_time: list[int] = []
    step_origin: list[_Context] = []
    step_batch: list[int] = []  # the batch event of a COMP completion, else -1
    context: _Context = (-1, -1, None)
    calls = 0
    last_enqueue: dict[int, tuple[int, _Context, tuple[int, int] | None]] = {}  # id(link) -> last enqueue
    parted: dict[tuple[int, int], tuple[int, int, int, int] | None] = {}  # memo of parting(), by step pair
    ties: dict[tuple[Any, ...], list[tuple[int, int]]] = {}  # group -> nodes (rank, index) to order, in issue order
    delays: dict[tuple[int, int], None] = {}  # sends to start 1 ns later
    issued: dict[tuple[int, int], int] = {}  # (rank, node index) -> issue sequence number
    link_log: dict[Any, list[tuple[int, int, int]]] = {}

    def new_step(time: int, batch: int = -1) -> int:
        step_time.append(time)
        step_origin.append(context)
        step_batch.append(batch)
        return len(step_time) - 1

    def at(time: int, action: int, payload: Any) -> int:
        step = new_step(time)
        heapq.heappush(heap, (time, step, action, payload))
        return step

    def created(origin: _Context) -> int:
        return step_time[origin[0]] if origin[0] >= 0 else 0

    def parting(first: _Context, second: _Context) -> tuple[int, int, int, int] | None:
        """Where the histories of two actions of one ns part at a batch of nodes issued in hash order:
        (rank, batch, node issued first, node issued second); None when their order is fixed."""
        walked: list[tuple[int, int]] = []
        found: tuple[int, int, int, int] | None = None
        while True:
            a, b = first[0], second[0]
            if a == b:  # one step: its code runs in a fixed order, except the nodes of one batch
                if first[1] == second[1] != -1 and first[2] != second[2]:
                    found = (first[2][0], first[1], first[2][1], second[2][1])
                break
            if a < 0 or b < 0:
                break  # a rank's roots are issued before any event, ranks in rank order
            if (a, b) in parted:
                found = parted[(a, b)]
                break
            walked.append((a, b))
            batch_a, batch_b = step_batch[a], step_batch[b]
            if batch_a == -1 or batch_a != batch_b:  # events run in creation order (a COMP in its batch's place)
                a, b = (batch_a if batch_a != -1 else a), (batch_b if batch_b != -1 else b)
                if a == b:
                    break
            first, second = step_origin[a], step_origin[b]  # two COMPs of one batch: in registration order
            if created(first) != created(second):
                break
        for pair in walked:
            parted[pair] = found
        return found

    def enqueue(link: _Link, message: list[Any], sender: tuple[int, int] | None = None) -> None:
        """A message joins a link's queue: sent by ``sender`` (rank, node index), else passing through."""
        key = id(link)
        last = last_enqueue.get(key)
        if last is not None and last[0] == now:  # a tie: two messages reach the link in the same ns
            earlier = last[2]
            if sender is not None and earlier is not None:  # two sends of one rank: order them
                ties.setdefault(("link", key, now, sender[0]), []).extend((earlier, sender))
            elif sender is not None or earlier is not None:  # a send and a message passing: the send waits
                delays[sender or earlier] = None  # type: ignore[index]
            else:  # two messages passing: is their order fixed?
                found = parting(last[1], context)
                if found is not None:
                    rank, batch, first, second = found
                    ties.setdefault(("batch", batch, rank), []).extend(((rank, first), (rank, second)))
        last_enqueue[key] = (now, context, sender)
        if link.busy:
            link.pending.append(message)
        else:
            transmit(link, message)

    def transmit(link: _Link, message: list[Any]) -> None:
        link.busy = True
        size = message[2]
        link_log.setdefault(link, []).append((now, message[0][1], message[0][0]))
        at(now + int(link.latency + size / link.bw), action_arrive, message)
        at(now + int(size / link.bw), action_free, link)

    def deliver(message: list[Any]) -> None:
        key, number = message[0], message[1]
        src_rank, send_index = send_of[(key, number)]
        arrived[(key, number)] = now
        done(src_rank, send_index)
        receiver = recv_waiting.pop((key, number), None)
        if receiver is not None:
            matches.append((src_rank, program.nodes[src_rank][send_index].id, receiver[0],
                            program.nodes[receiver[0]][receiver[1]].id, now))
            done(*receiver)

    def issue(rank: int, i: int) -> None:
        node = program.nodes[rank][i]
        kind = node.type
        if kind == send_type:
            if not 0 <= node.peer < n or node.peer == rank:
                raise InputError("", f"rank {rank} node {node.id}", f"sends to invalid rank {node.peer}")
            key = (node.tag, rank, node.peer, node.size)
            number = sent.get(key, 0)
            sent[key] = number + 1
            send_of[(key, number)] = (rank, i)
            message = [key, number, node.size, 0, None]
            if network.delay is not None:
                at(now + network.delay(rank, node.peer, node.size), action_arrive, message)
            else:
                route = message[4] = network.route(rank, node.peer, node.transfer)  # type: ignore[misc]
                enqueue(route[0], message, (rank, i))
        elif kind == recv_type:
            if not 0 <= node.peer < n or node.peer == rank:
                raise InputError("", f"rank {rank} node {node.id}", f"receives from invalid rank {node.peer}")
            key = (node.tag, node.peer, rank, node.size)
            number = posted.get(key, 0)
            posted[key] = number + 1
            if (key, number) in arrived:
                src_rank, send_index = send_of[(key, number)]
                matches.append((src_rank, program.nodes[src_rank][send_index].id, rank, node.id, now))
                at(now, action_done, (rank, i))  # ASTRA-sim: the recv callback, scheduled 0 ns ahead
            else:
                recv_waiting[(key, number)] = (rank, i)
        elif kind == comp_type:
            # ASTRA-sim's Sys::register_event: one list per (rank, tick), run when the tick's first event fires
            when = now + (node.duration_us * 1000 if node.duration_us else 1)
            batch = batches.get((rank, when))
            if batch is None:
                batch = batches[(rank, when)] = (at(when, action_batch, (rank, when)), [])
            batch[1].append((new_step(when, batch[0]), i))
        else:
            at(now, action_done, (rank, i))

    def issue_all(rank: int, ready: list[int]) -> None:
        nonlocal context, calls
        if not ready:
            return
        if len(ready) > 1 and order is not None:
            if shuffle is None:
                ready.reverse()
            else:
                shuffle(ready)
        step, call = context[0], calls
        calls += 1
        for i in ready:
            context = (step, call, (rank, i))
            issued[(rank, i)] = len(issued)
            issue(rank, i)
        context = (step, -1, None)

    def done(rank: int, i: int) -> None:
        remaining[rank] -= 1
        if remaining[rank] == 0:
            finish[rank] = now
        ready = []
        for child in children[rank][i]:
            waiting[rank][child] -= 1
            if waiting[rank][child] == 0:
                ready.append(child)
        issue_all(rank, ready)

    for rank in range(n):
        context = (-1 - rank, -1, None)
        issue_all(rank, [i for i in range(len(program.nodes[rank])) if waiting[rank][i] == 0])
    while heap:
        now, step, action, payload = heapq.heappop(heap)
        context = (step, -1, None)
        if action == action_done:
            done(*payload)
        elif action == action_arrive:
            route = payload[4]
            if route is None:
                deliver(payload)
            else:
                payload[3] += 1
                if payload[3] < len(route):
                    enqueue(route[payload[3]], payload)
                else:
                    deliver(payload)
        elif action == action_batch:
            rank = payload[0]
            for entry, i in batches.pop(payload)[1]:
                context = (entry, -1, None)
                done(rank, i)
        else:
            payload.busy = False
            if payload.pending:
                transmit(payload, payload.pending.popleft())
    unmatched = []
    for (key, _), (rank, i) in sorted(recv_waiting.items()):
        unmatched.append(f"rank {rank} node {program.nodes[rank][i].id} waits for a message from rank {key[1]} "
                         f"with tag {key[0]} and size {key[3]} that is never sent")
    for key, count in sorted(sent.items()):
        extra = count - posted.get(key, 0)
        if extra > 0:
            unmatched.append(f"{extra} message(s) from rank {key[1]} to rank {key[2]} with tag {key[0]} and size "
                             f"{key[3]} are never received")
    for rank in range(n):
        if finish[rank] is None and not any(f"rank {rank} " in u for u in unmatched):
            unmatched.append(f"rank {rank} never finishes (a dependency is never satisfied)")
    groups = []
    for members in ties.values():
        ordered = sorted(set(members), key=issued.__getitem__)
        groups.append(ordered)
    return SimulationResult(finish, matches, unmatched, groups, list(delays), link_log)
