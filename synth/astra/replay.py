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
    The run's state and its event handlers are :class:`_Replay`: one method per handler (``issue``,
    ``enqueue``, ``transmit``, ``deliver``, ``done``, the tie detection in ``parting``), messages as
    :class:`_Message` records.
    """
    return _Replay(program, network, order).run()


#: The event kinds of the replay's queue.
_DONE, _ARRIVE, _FREE, _BATCH = 0, 1, 2, 3

_Key = tuple[int, int, int, int]  # (tag, src rank, dst rank, size): what a send and its receive agree on


@dataclass(slots=True)
class _Message:
    """One message on its way: the key a receive matches, its number among messages of that key, its size,
    the hop of its route it is on, and the route (None under a fixed-delay network)."""

    key: _Key
    number: int
    size: int
    hop: int = 0
    route: list[_Link] | None = None


class _Replay:
    """One replay of :func:`simulate`: the run's state and its event handlers.

    Provenance: every event and every COMP completion in a batch is a *step* (``step_time``,
    ``step_origin``, ``step_batch``); ``context`` is the step being processed, the issue call and the node
    it was issuing, which :meth:`parting` walks back to tell a fixed order of two same-ns events from one
    that ASTRA-sim's hash-set order decides.
    """

    def __init__(self, program: Any, network: Network, order: str | int | None) -> None:
        import random

        from synth.proto.et_def import NodeType

        network.reset()
        self.shuffle = random.Random(order).shuffle if isinstance(order, int) and not isinstance(order, bool) else None
        if order is not None and self.shuffle is None and order != "reverse":
            raise ValueError(f"order must be None, 'reverse' or an integer seed, got {order!r}")
        self.order = order
        self.program, self.network = program, network
        self.send_type, self.recv_type, self.comp_type = (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE,
                                                          NodeType.COMP_NODE)
        self.n = n = program.num_ranks
        self.children: list[list[list[int]]] = []
        self.waiting: list[list[int]] = []
        for rank in range(n):
            kids, counts = _dependents(program.nodes[rank])
            self.children.append(kids)
            self.waiting.append(counts)
        self.remaining = [len(program.nodes[r]) for r in range(n)]
        self.finish: list[int | None] = [None if self.remaining[r] else 0 for r in range(n)]
        self.heap: list[tuple[int, int, int, Any]] = []
        self.now = 0
        self.sent: dict[_Key, int] = {}
        self.posted: dict[_Key, int] = {}
        self.arrived: dict[tuple[_Key, int], int] = {}  # message -> arrival time
        self.recv_waiting: dict[tuple[_Key, int], tuple[int, int]] = {}
        self.send_of: dict[tuple[_Key, int], tuple[int, int]] = {}
        self.batches: dict[tuple[int, int], tuple[int, list[tuple[int, int]]]] = {}  # (rank, ns) -> (event, entries)
        self.matches: list[tuple[int, int, int, int, int]] = []
        self.step_time: list[int] = []
        self.step_origin: list[_Context] = []
        self.step_batch: list[int] = []  # the batch event of a COMP completion, else -1
        self.context: _Context = (-1, -1, None)
        self.calls = 0
        self.last_enqueue: dict[int, tuple[int, _Context, tuple[int, int] | None]] = {}  # id(link) -> last enqueue
        self.parted: dict[tuple[int, int], tuple[int, int, int, int] | None] = {}  # memo of parting(), by step pair
        self.ties: dict[tuple[Any, ...], list[tuple[int, int]]] = {}  # group -> nodes (rank, index), in issue order
        self.delays: dict[tuple[int, int], None] = {}  # sends to start 1 ns later
        self.issued: dict[tuple[int, int], int] = {}  # (rank, node index) -> issue sequence number
        self.link_log: dict[Any, list[tuple[int, int, int]]] = {}

    # ------------------------------------------------------------------------------ the event queue
    def new_step(self, time: int, batch: int = -1) -> int:
        self.step_time.append(time)
        self.step_origin.append(self.context)
        self.step_batch.append(batch)
        return len(self.step_time) - 1

    def at(self, time: int, action: int, payload: Any) -> int:
        step = self.new_step(time)
        heapq.heappush(self.heap, (time, step, action, payload))
        return step

    def run(self) -> SimulationResult:
        """Issue every rank's roots, then process events in time order until none is left."""
        for rank in range(self.n):
            self.context = (-1 - rank, -1, None)
            self.issue_all(rank, [i for i in range(len(self.program.nodes[rank])) if self.waiting[rank][i] == 0])
        heap = self.heap
        while heap:
            self.now, step, action, payload = heapq.heappop(heap)
            self.context = (step, -1, None)
            if action == _DONE:
                self.done(*payload)
            elif action == _ARRIVE:
                self.arrive(payload)
            elif action == _BATCH:
                rank = payload[0]
                for entry, i in self.batches.pop(payload)[1]:
                    self.context = (entry, -1, None)
                    self.done(rank, i)
            else:
                payload.busy = False
                if payload.pending:
                    self.transmit(payload, payload.pending.popleft())
        return self.result()

    # ------------------------------------------------------------------------------------- ties
    def created(self, origin: _Context) -> int:
        return self.step_time[origin[0]] if origin[0] >= 0 else 0

    def parting(self, first: _Context, second: _Context) -> tuple[int, int, int, int] | None:
        """Where the histories of two actions of one ns part at a batch of nodes issued in hash order:
        (rank, batch, node issued first, node issued second); None when their order is fixed."""
        walked: list[tuple[int, int]] = []
        found: tuple[int, int, int, int] | None = None
        step_batch, step_origin, parted = self.step_batch, self.step_origin, self.parted
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
            if self.created(first) != self.created(second):
                break
        for pair in walked:
            parted[pair] = found
        return found

    def note_tie(self, link: _Link, sender: tuple[int, int] | None) -> None:
        """Record a tie when a message reaches ``link`` in the same ns as the one before it."""
        key, now = id(link), self.now
        last = self.last_enqueue.get(key)
        if last is not None and last[0] == now:  # a tie: two messages reach the link in the same ns
            earlier = last[2]
            if sender is not None and earlier is not None:  # two sends of one rank: order them
                self.ties.setdefault(("link", key, now, sender[0]), []).extend((earlier, sender))
            elif sender is not None or earlier is not None:  # a send and a message passing: the send waits
                self.delays[sender or earlier] = None  # type: ignore[index]
            else:  # two messages passing: is their order fixed?
                found = self.parting(last[1], self.context)
                if found is not None:
                    rank, batch, first, second = found
                    self.ties.setdefault(("batch", batch, rank), []).extend(((rank, first), (rank, second)))
        self.last_enqueue[key] = (now, self.context, sender)

    # ---------------------------------------------------------------------------------- messages
    def enqueue(self, link: _Link, message: _Message, sender: tuple[int, int] | None = None) -> None:
        """A message joins a link's queue: sent by ``sender`` (rank, node index), else passing through."""
        self.note_tie(link, sender)
        if link.busy:
            link.pending.append(message)
        else:
            self.transmit(link, message)

    def transmit(self, link: _Link, message: _Message) -> None:
        link.busy = True
        now, size = self.now, message.size
        self.link_log.setdefault(link, []).append((now, message.key[1], message.key[0]))
        self.at(now + int(link.latency + size / link.bw), _ARRIVE, message)
        self.at(now + int(size / link.bw), _FREE, link)

    def arrive(self, message: _Message) -> None:
        """A message reaches the end of a hop: on to the next link, or delivered."""
        route = message.route
        if route is None:
            self.deliver(message)
            return
        message.hop += 1
        if message.hop < len(route):
            self.enqueue(route[message.hop], message)
        else:
            self.deliver(message)

    def deliver(self, message: _Message) -> None:
        tagged = (message.key, message.number)
        src_rank, send_index = self.send_of[tagged]
        self.arrived[tagged] = self.now
        self.done(src_rank, send_index)
        receiver = self.recv_waiting.pop(tagged, None)
        if receiver is not None:
            nodes = self.program.nodes
            self.matches.append((src_rank, nodes[src_rank][send_index].id, receiver[0],
                                 nodes[receiver[0]][receiver[1]].id, self.now))
            self.done(*receiver)

    # ------------------------------------------------------------------------------------- nodes
    def issue(self, rank: int, i: int) -> None:
        node = self.program.nodes[rank][i]
        kind = node.type
        if kind == self.send_type:
            self.issue_send(rank, i, node)
        elif kind == self.recv_type:
            self.issue_recv(rank, i, node)
        elif kind == self.comp_type:
            # ASTRA-sim's Sys::register_event: one list per (rank, tick), run when the tick's first event fires
            when = self.now + (node.duration_us * 1000 if node.duration_us else 1)
            batch = self.batches.get((rank, when))
            if batch is None:
                batch = self.batches[(rank, when)] = (self.at(when, _BATCH, (rank, when)), [])
            batch[1].append((self.new_step(when, batch[0]), i))
        else:
            self.at(self.now, _DONE, (rank, i))

    def issue_send(self, rank: int, i: int, node: Any) -> None:
        if not 0 <= node.peer < self.n or node.peer == rank:
            raise InputError("", f"rank {rank} node {node.id}", f"sends to invalid rank {node.peer}")
        key = (node.tag, rank, node.peer, node.size)
        number = self.sent.get(key, 0)
        self.sent[key] = number + 1
        self.send_of[(key, number)] = (rank, i)
        message = _Message(key, number, node.size)
        network = self.network
        if network.delay is not None:
            self.at(self.now + network.delay(rank, node.peer, node.size), _ARRIVE, message)
        else:
            assert network.route is not None
            route = message.route = network.route(rank, node.peer, node.transfer)
            self.enqueue(route[0], message, (rank, i))

    def issue_recv(self, rank: int, i: int, node: Any) -> None:
        if not 0 <= node.peer < self.n or node.peer == rank:
            raise InputError("", f"rank {rank} node {node.id}", f"receives from invalid rank {node.peer}")
        key = (node.tag, node.peer, rank, node.size)
        number = self.posted.get(key, 0)
        self.posted[key] = number + 1
        if (key, number) in self.arrived:
            src_rank, send_index = self.send_of[(key, number)]
            self.matches.append((src_rank, self.program.nodes[src_rank][send_index].id, rank, node.id, self.now))
            self.at(self.now, _DONE, (rank, i))  # ASTRA-sim: the recv callback, scheduled 0 ns ahead
        else:
            self.recv_waiting[(key, number)] = (rank, i)

    def issue_all(self, rank: int, ready: list[int]) -> None:
        if not ready:
            return
        if len(ready) > 1 and self.order is not None:
            if self.shuffle is None:
                ready.reverse()
            else:
                self.shuffle(ready)
        step, call = self.context[0], self.calls
        self.calls += 1
        for i in ready:
            self.context = (step, call, (rank, i))
            self.issued[(rank, i)] = len(self.issued)
            self.issue(rank, i)
        self.context = (step, -1, None)

    def done(self, rank: int, i: int) -> None:
        self.remaining[rank] -= 1
        if self.remaining[rank] == 0:
            self.finish[rank] = self.now
        ready = []
        waiting = self.waiting[rank]
        for child in self.children[rank][i]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
        self.issue_all(rank, ready)

    # ------------------------------------------------------------------------------------ result
    def result(self) -> SimulationResult:
        """The finish times, the matches, what never matched and the ties, as :class:`SimulationResult`."""
        nodes = self.program.nodes
        unmatched = []
        for (key, _), (rank, i) in sorted(self.recv_waiting.items()):
            unmatched.append(f"rank {rank} node {nodes[rank][i].id} waits for a message from rank {key[1]} "
                             f"with tag {key[0]} and size {key[3]} that is never sent")
        for key, count in sorted(self.sent.items()):
            extra = count - self.posted.get(key, 0)
            if extra > 0:
                unmatched.append(f"{extra} message(s) from rank {key[1]} to rank {key[2]} with tag {key[0]} and "
                                 f"size {key[3]} are never received")
        for rank in range(self.n):
            if self.finish[rank] is None and not any(f"rank {rank} " in u for u in unmatched):
                unmatched.append(f"rank {rank} never finishes (a dependency is never satisfied)")
        groups = [sorted(set(members), key=self.issued.__getitem__) for members in self.ties.values()]
        return SimulationResult(self.finish, self.matches, unmatched, groups, list(self.delays), self.link_log)


def _dependents(nodes: list[Any]) -> tuple[list[list[int]], list[int]]:
    """Per node of one rank, the indices of the nodes that depend on it (ascending), and how many nodes
    each waits for."""
    position = {node.id: i for i, node in enumerate(nodes)}
    kids: list[list[int]] = [[] for _ in nodes]
    counts = [0] * len(nodes)
    for i, node in enumerate(nodes):
        for dep in set(node.deps):
            kids[position[dep]].append(i)
            counts[i] += 1
    for kid_list in kids:
        kid_list.sort()
    return kids, counts
