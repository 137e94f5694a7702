"""The exact verifier: each kind of broken schedule is rejected with a message naming the transfer, random
mutations never crash it, and whatever it accepts really is correct in every execution order."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import change, drop, mutations, replace_transfers, topologies

from synth import Collective, Kind, Schedule, Transfer, VerificationError, load_topology, synthesize, verify
from synth.algorithms import REGISTRY
from synth.errors import InputError, SynthError


def rejected(schedule: Schedule, topology, transfer: int | None, *fragments: str) -> VerificationError:
    """Assert the verifier rejects ``schedule``, naming ``transfer`` and saying every fragment."""
    with pytest.raises(VerificationError) as info:
        verify(schedule, topology)
    error = info.value
    message = str(error)
    assert error.transfer == transfer, message
    if transfer is not None:
        assert message.startswith(f"transfer {transfer}:"), message
    for fragment in fragments:
        assert fragment in message, message
    return error


@pytest.fixture(scope="module")
def ring4():
    return load_topology("ring:n=4")


@pytest.fixture(scope="module")
def allgather(ring4):
    schedule = synthesize(ring4, "allgather", "ring")
    verify(schedule, ring4)
    # chunk 0 travels 0 -> 1 -> 2 -> 3 as transfers 0, 1, 2 (each depending on the one before)
    assert [(t.src, t.dst, t.chunk, t.deps) for t in schedule.transfers[:3]] == [
        (0, 1, 0, ()), (1, 2, 0, (0,)), (2, 3, 0, (1,))]
    return schedule


# ------------------------------------------------------------------------------------ valid input
@pytest.mark.parametrize("spec", ["ring:n=2", "ring:n=5", "switch:n=6", "fully-connected:n=4"])
def test_every_baseline_schedule_verifies(spec):
    topology = load_topology(spec)
    count = 0
    for algorithm in ("ring", "direct", "binomial"):
        for kind in REGISTRY[algorithm].collectives:
            for chunks in (None, 2 * topology.num_ranks):
                schedule = synthesize(topology, kind, algorithm, chunks=chunks)
                report = verify(schedule, topology)
                assert report.transfers == len(schedule.transfers) > 0
                assert report.depth >= 1
                count += 1
    assert count == 16  # direct does alltoallv too (1 chunk per pair, or 2N rounded over the pairs)


def test_report_depth_and_link_load(ring4, allgather):
    report = verify(allgather, ring4)
    assert report.transfers == 12
    assert report.depth == 3  # each chunk crosses three hops, one after the other
    assert report.max_chunks_on_a_link == 3  # every ring link carries three chunks


def test_empty_schedule_is_checked_against_the_postcondition(ring4):
    schedule = Schedule(Collective(Kind.ALLGATHER, 4, 4), ring4.name, ring4.gpus, "empty", {}, ())
    rejected(schedule, ring4, None, "postcondition", "holding nothing")


def test_verifier_accepts_deps_listed_out_of_id_order(ring4, allgather):
    # transfer ids need not be a topological order: reverse the list and remap the deps
    count = len(allgather.transfers)
    flipped = [dataclasses.replace(t, deps=tuple(count - 1 - d for d in t.deps))
               for t in reversed(allgather.transfers)]
    schedule = replace_transfers(allgather, flipped)
    assert any(d > t.id for t in schedule.transfers for d in t.deps)
    assert verify(schedule, ring4).depth == 3


# ---------------------------------------------------------------------- one test per kind of breakage
def test_path_not_made_of_links(ring4, allgather):
    broken = change(allgather, 0, path=("gpu0", "gpu2", "gpu1"))  # gpu0-gpu2 is no link on a 4-ring
    rejected(broken, ring4, 0, "path hop gpu0 -> gpu2 is not a link")


def test_path_of_unknown_nodes(ring4, allgather):
    broken = change(allgather, 4, path=("gpu2", "nowhere", "gpu3"))
    rejected(broken, ring4, 4, "not a link")


def test_path_visiting_a_node_twice(ring4, allgather):
    broken = change(allgather, 0, path=("gpu0", "gpu1", "gpu2", "gpu1"))
    rejected(broken, ring4, 0, "visits a node twice")


def test_path_not_starting_at_src(ring4, allgather):
    broken = change(allgather, 1, path=("gpu0", "gpu1"))  # transfer 1 is 1 -> 2
    rejected(broken, ring4, 1, "path runs gpu0 -> gpu1", "ranks 1 (gpu1) and 2 (gpu2)")


def test_path_not_ending_at_dst(ring4, allgather):
    broken = change(allgather, 1, path=("gpu1", "gpu0"))
    rejected(broken, ring4, 1, "path runs gpu1 -> gpu0")


def test_path_too_short(ring4, allgather):
    broken = change(allgather, 2, path=("gpu2",))
    rejected(broken, ring4, 2, "fewer than 2 nodes")


def test_src_equals_dst(ring4, allgather):
    broken = change(allgather, 0, dst=0, path=("gpu0", "gpu1"))
    rejected(broken, ring4, 0, "src and dst are both rank 0")


def test_dependency_cycle(ring4, allgather):
    broken = change(allgather, 0, deps=(2,))  # 0 -> 2 -> 1 -> 0
    rejected(broken, ring4, 0, "cycle")


def test_self_dependency(ring4, allgather):
    broken = change(allgather, 5, deps=(4, 5))
    rejected(broken, ring4, 5, "cycle")


def test_unknown_dependency(ring4, allgather):
    broken = change(allgather, 3, deps=(99,))
    rejected(broken, ring4, 3, "depends on unknown transfer 99")


def test_send_before_the_data_arrived(ring4, allgather):
    # transfer 2 forwards chunk 0 from rank 2, which only has it after transfer 1; drop that order
    broken = change(allgather, 2, deps=())
    rejected(broken, ring4, 2, "rank 2 sends chunk 0 that transfer 1 writes", "not among its transitive deps")


def test_send_with_only_an_indirect_dep_is_fine(ring4, allgather):
    # depending on the producer transitively (through another transfer) is enough
    chain = change(allgather, 2, deps=(1,))
    assert verify(chain, ring4).depth == 3
    rewired = change(chain, 1, deps=(0, 3))
    assert verify(rewired, ring4).transfers == 12


def test_send_of_data_the_source_never_holds(ring4, allgather):
    broken = change(allgather, 0, src=2, dst=3, path=("gpu2", "gpu3"))  # rank 2 holds no chunk 0 at the start
    rejected(broken, ring4, 0, "rank 2 sends chunk 0, which it does not hold")


def test_race_write_write(ring4, allgather):
    # a second, unordered copy of chunk 0 into rank 1 (both write rank 1's chunk 0)
    extra = Transfer(0, 0, 1, 0, "copy", ("gpu0", "gpu1"), ())
    broken = replace_transfers(allgather, list(allgather.transfers) + [extra])
    rejected(broken, ring4, 12, "race on rank 1 chunk 0", "transfers 0 and 12 both write it")


def test_race_write_write_ordered_is_fine(ring4, allgather):
    extra = Transfer(0, 0, 1, 0, "copy", ("gpu0", "gpu1"), (1,))  # after 1 has read it: no race
    assert verify(replace_transfers(allgather, list(allgather.transfers) + [extra]), ring4).transfers == 13


def test_race_read_write():
    topology = load_topology("switch:n=4")
    schedule = synthesize(topology, "broadcast", "binomial", root=0)
    assert [(t.src, t.dst, t.deps) for t in schedule.transfers] == [(0, 1, ()), (0, 2, ()), (1, 3, (0,))]
    # rank 2 overwrites rank 1's chunk after the first write (ordered) but unordered with 2's read of it
    extra = Transfer(3, 2, 1, 0, "copy", ("gpu2", "sw0", "gpu1"), (0, 1))
    broken = replace_transfers(schedule, list(schedule.transfers) + [extra])
    rejected(broken, topology, 3, "race on rank 1 chunk 0", "overwrites the value that transfer 2 reads")


def test_reduce_counting_a_contribution_twice(ring4):
    schedule = synthesize(ring4, "reducescatter", "ring")
    # chunk 0 is reduced 1 -> 2 -> 3 -> 0 by transfers 0, 1, 2; rank 1 adds its contribution again
    extra = Transfer(0, 1, 0, 0, "reduce", ("gpu1", "gpu0"), (2,))
    broken = replace_transfers(schedule, list(schedule.transfers) + [extra])
    rejected(broken, ring4, 12, "would count the contribution of rank(s) [1] twice")


def test_reduce_into_a_cell_with_no_partial_value(ring4, allgather):
    topology = load_topology("ring:n=4")
    schedule = synthesize(topology, "reduce", "binomial", root=0)
    assert verify(schedule, topology)
    broadcast = synthesize(topology, "broadcast", "binomial", root=0)
    broken = change(broadcast, 0, op="reduce")
    rejected(broken, topology, 0, "op 'reduce' in a broadcast")


def test_postcondition_not_met(ring4, allgather):
    broken = drop(allgather, 2)  # chunk 0 never reaches rank 3
    rejected(broken, ring4, None, "postcondition: rank 3 ends with chunk 0 holding nothing",
             "expected the contribution(s) of rank(s) 0")


def test_postcondition_partial_reduction(ring4):
    schedule = synthesize(ring4, "allreduce", "ring")
    broken = drop(schedule, 0)  # rank 1's contribution to chunk 0 never joins the reduction
    error = rejected(broken, ring4, None, "postcondition", "chunk 0", "expected every rank's contribution")
    assert "0, 2, 3" in str(error)


def test_wrong_rank_count(ring4, allgather):
    other = load_topology("switch:n=8")  # no gpu named like ring:n=4's: not a group of it either
    renamed = dataclasses.replace(allgather, ranks=("a", "b", "c", "d"))
    rejected(renamed, other, None, f"the schedule has 4 ranks but topology {other.name!r} has 8 gpus")


def test_fewer_ranks_are_a_process_group_judged_on_the_fabric(ring4, allgather):
    # 4 of ring:n=8's gpus are a group (synth.groups): gpu3 -> gpu0 is no link of the bigger ring
    rejected(allgather, load_topology("ring:n=8"), 5, "path hop gpu3 -> gpu0 is not a link")


def test_rank_that_is_not_a_gpu():
    topology = load_topology("switch:n=4")
    schedule = synthesize(topology, "allgather", "ring")
    broken = dataclasses.replace(schedule, ranks=("gpu0", "gpu1", "gpu2", "sw0"))
    rejected(broken, topology, None, "rank 3 is 'sw0', which is not a gpu")
    unknown = dataclasses.replace(schedule, ranks=("gpu0", "gpu1", "gpu2", "gpu9"))
    rejected(unknown, topology, None, "rank 3 is 'gpu9'")


def test_rank_listed_twice(ring4, allgather):
    broken = dataclasses.replace(allgather, ranks=("gpu0", "gpu1", "gpu1", "gpu3"))
    rejected(broken, ring4, None, "lists a gpu twice")


def test_ranks_in_another_order_are_checked_against_paths(ring4, allgather):
    # a permuted rank list makes the paths start at the wrong gpus
    broken = dataclasses.replace(allgather, ranks=("gpu1", "gpu0", "gpu2", "gpu3"))
    rejected(broken, ring4, 0, "path runs gpu0 -> gpu1 but src/dst are ranks 0 (gpu1) and 1 (gpu0)")


def test_chunk_out_of_range(ring4, allgather):
    rejected(change(allgather, 3, chunk=4), ring4, 3, "chunk 4 is out of range 0..3")
    rejected(change(allgather, 3, chunk=-1), ring4, 3, "chunk -1 is out of range 0..3")


def test_rank_out_of_range(ring4, allgather):
    rejected(change(allgather, 3, src=7), ring4, 3, "src rank 7 is out of range 0..3")
    rejected(change(allgather, 3, dst=-1), ring4, 3, "dst rank -1 is out of range 0..3")


def test_alltoall_chunk_ids_are_global():
    topology = load_topology("switch:n=3")
    schedule = synthesize(topology, "alltoall", "direct")
    assert verify(schedule, topology).transfers == 6
    # a chunk id beyond N*C is out of range; a wrong origin is a send of data the source does not hold
    rejected(change(schedule, 0, chunk=9), topology, 0, "chunk 9 is out of range 0..8")
    first = schedule.transfers[0]
    rejected(change(schedule, 0, chunk=first.chunk + 3), topology, 0, "which it does not hold")


# ------------------------------------------------------------------------- properties (hypothesis)
def _reference_replay(schedule: Schedule, rng: random.Random) -> bool:
    """Execute the schedule in one random order the deps allow; True when every postcondition holds and
    no contribution was counted twice. Independent of the verifier's own replay."""
    coll = schedule.collective
    value = {}
    for rank in range(coll.num_ranks):
        for chunk, mask in coll.initial(rank):
            value[(rank, chunk)] = mask
    waiting = {t.id: set(t.deps) for t in schedule.transfers}
    ready = [tid for tid, deps in waiting.items() if not deps]
    children = {t.id: [] for t in schedule.transfers}
    for t in schedule.transfers:
        for dep in set(t.deps):
            children[dep].append(t.id)
    done = 0
    slot_chunk = {}  # (rank, "scratch", slot) -> the chunk it holds
    while ready:
        tid = ready.pop(rng.randrange(len(ready)))
        t = schedule.transfers[tid]
        source = (t.src, t.chunk) if t.src_scratch is None else (t.src, "scratch", t.src_scratch)
        target = (t.dst, t.chunk) if t.dst_scratch is None else (t.dst, "scratch", t.dst_scratch)
        held = value.get(source, 0)
        if t.src_scratch is not None and slot_chunk.get(source) != t.chunk:
            return False
        if t.op == "reduce":
            current = value.get(target, 0)
            if current & held or (t.dst_scratch is not None and slot_chunk.get(target) != t.chunk):
                return False
            value[target] = current | held
        else:
            value[target] = held
            if t.dst_scratch is not None:
                slot_chunk[target] = t.chunk
        done += 1
        for child in children[tid]:
            waiting[child].discard(tid)
            if not waiting[child]:
                ready.append(child)
    if done != len(schedule.transfers):
        return False
    return all(value.get((rank, chunk), 0) == mask
               for rank in range(coll.num_ranks) for chunk, mask in coll.final(rank))


BASE_CASES = [("ring:n=4", "allgather", "ring"), ("ring:n=3", "allreduce", "ring"),
              ("switch:n=4", "reducescatter", "ring"), ("switch:n=3", "alltoall", "direct"),
              ("ring:n=5", "broadcast", "binomial"), ("fully-connected:n=4", "reduce", "binomial"),
              ("fully-connected:n=3", "allgather", "direct")]


@pytest.mark.parametrize("spec,kind,algorithm", BASE_CASES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_random_mutations_are_accepted_only_when_correct(spec, kind, algorithm, data, seed):
    topology = load_topology(spec)
    original = synthesize(topology, kind, algorithm)
    mutant = data.draw(mutations(original, topology))
    try:
        verify(mutant, topology)
    except VerificationError as error:
        message = str(error)
        assert "\n" not in message and message
        if error.transfer is not None:
            assert 0 <= error.transfer < len(mutant.transfers)
            assert message.startswith(f"transfer {error.transfer}:")
        return
    # accepted: every execution order must end correctly (sample a few)
    rng = random.Random(seed)
    for _ in range(5):
        assert _reference_replay(mutant, rng), "the verifier accepted a schedule that fails in some order"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology=topologies(max_gpus=5), data=st.data())
def test_mutations_on_random_topologies_never_crash(topology, data):
    kind = data.draw(st.sampled_from(["allgather", "reducescatter", "allreduce", "alltoall", "broadcast",
                                      "reduce"]))
    algorithm = {"alltoall": "direct", "broadcast": "binomial", "reduce": "binomial"}.get(kind, "ring")
    schedule = synthesize(topology, kind, algorithm)
    verify(schedule, topology)
    assert _reference_replay(schedule, random.Random(0))
    mutant = data.draw(mutations(schedule, topology))
    try:
        verify(mutant, topology)
    except SynthError as error:
        assert isinstance(error, VerificationError)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_reachability_matches_networkx_ancestors(data):
    """The verifier's chain-jumping ancestor search agrees with a plain graph search on random DAGs."""
    import networkx as nx

    from synth.verify import _Reachability, _topological_order

    count = data.draw(st.integers(1, 14))
    deps = [tuple(sorted(set(data.draw(st.lists(st.integers(0, i - 1), max_size=3))))) if i else ()
            for i in range(count)]
    shuffle = data.draw(st.permutations(range(count)))  # ids need not follow the dependency order
    inverse = {old: new for new, old in enumerate(shuffle)}
    transfers = [None] * count
    for old in range(count):
        new = inverse[old]
        transfers[new] = Transfer(new, 0, 1, 0, "copy", ("gpu0", "gpu1"), tuple(inverse[d] for d in deps[old]))
    schedule = Schedule(Collective(Kind.BROADCAST, 2, 1, root=0), "x", ("gpu0", "gpu1"), "dag", {}, tuple(transfers))
    order, topo_index = _topological_order(schedule)
    reach = _Reachability(schedule, order, topo_index)
    graph = nx.DiGraph()
    graph.add_nodes_from(range(count))
    graph.add_edges_from((d, t.id) for t in transfers for d in t.deps)
    for b in range(count):
        ancestors = nx.ancestors(graph, b)
        for a in range(count):
            assert reach.before(a, b) == (a in ancestors), (a, b)


# ------------------------------------------------------------- forwarding gpus, relays, scratch, local ops
def _line(forwards: bool):
    """Three gpus a - b - c in a line (no switch): a reaches c only through b."""
    from synth.topology import Topology

    return Topology.build("line", ["a", "b", "c"], [], [("a", "b", 10.0), ("b", "c", 10.0)], forwards=forwards)


def _manual(kind: Kind, chunks: int, root: int | None, transfers: list[Transfer]) -> Schedule:
    return Schedule(Collective(kind, 3, chunks, root), "line", ("a", "b", "c"), "manual", {}, tuple(transfers))


def test_a_path_may_cross_a_gpu_only_where_the_gpu_forwards():
    through_b = [Transfer(0, 0, 1, 0, "copy", ("a", "b")), Transfer(1, 0, 2, 0, "copy", ("a", "b", "c"))]
    schedule = _manual(Kind.BROADCAST, 1, 0, through_b)
    assert verify(schedule, _line(forwards=True)).transfers == 2
    error = rejected(schedule, _line(forwards=False), 1, "path a -> b -> c crosses gpu b, which does not forward",
                     "emit a relay: copy to b, then a dependent copy onward",
                     "or mark the gpu as forwarding in the topology")
    assert "\n" not in str(error)
    # the relay: copy to b, then a dependent copy onward
    relayed = [Transfer(0, 0, 1, 0, "copy", ("a", "b")), Transfer(1, 1, 2, 0, "copy", ("b", "c"), (0,))]
    assert verify(_manual(Kind.BROADCAST, 1, 0, relayed), _line(forwards=False)).depth == 2


def test_a_relayed_partial_sum_goes_through_scratch():
    topology = _line(forwards=False)
    # reduce to c: a's contribution relays through b's scratch slot 0, then b's own reduces into c
    via_scratch = [Transfer(0, 0, 1, 0, "copy", ("a", "b"), (), None, 0),
                   Transfer(1, 1, 2, 0, "reduce", ("b", "c"), (0,), 0, None),
                   Transfer(2, 1, 2, 0, "reduce", ("b", "c"), (1,))]
    assert verify(_manual(Kind.REDUCE, 1, 2, via_scratch), topology).transfers == 3
    # through b's data cell instead, a's partial overwrites b's own contribution: b's is lost
    via_data = [Transfer(0, 0, 1, 0, "copy", ("a", "b")), Transfer(1, 1, 2, 0, "reduce", ("b", "c"), (0,))]
    rejected(_manual(Kind.REDUCE, 1, 2, via_data), topology, None, "postcondition", "rank(s) 0, 2")
    # the scratch slot must be ordered like any cell: an unordered second write is a race
    racy = [*via_scratch, Transfer(3, 0, 1, 0, "copy", ("a", "b"), (), None, 0)]
    rejected(_manual(Kind.REDUCE, 1, 2, racy), topology, 3, "race on rank 1 scratch slot 0 (chunk 0)")


def test_scratch_slots_hold_one_chunk_and_start_empty():
    topology = _line(forwards=False)
    empty = [Transfer(0, 1, 2, 0, "copy", ("b", "c"), (), 3, None)]
    rejected(_manual(Kind.BROADCAST, 1, 1, empty), topology, 0, "rank 1 sends scratch slot 3 (chunk 0)",
             "which it does not hold")
    other = [Transfer(0, 0, 1, 1, "copy", ("a", "b"), (), None, 0), Transfer(1, 1, 2, 0, "copy", ("b", "c"), (0,), 0)]
    rejected(_manual(Kind.BROADCAST, 2, 0, other), topology, 1, "from scratch slot 0, which holds chunk 1")
    wrong_reduce = [Transfer(0, 0, 1, 1, "copy", ("a", "b"), (), None, 0),
                    Transfer(1, 2, 1, 0, "reduce", ("c", "b"), (0,), None, 0)]
    rejected(_manual(Kind.ALLREDUCE, 2, None, wrong_reduce), topology, 1,
             "reduces chunk 0 into scratch slot 0 of rank 1, which holds chunk 1")
    rejected(change(_manual(Kind.BROADCAST, 1, 0, empty), 0, dst_scratch=-1), topology, 0,
             "dst_scratch -1 is not a scratch slot")


def test_local_ops_copy_and_reduce_between_buffers_of_one_rank():
    topology = _line(forwards=False)
    # reduce at b, all-pairs style: a's and c's contributions land in b's scratch, then b reduces them
    # locally into its data cell, one after the other
    received = [Transfer(0, 0, 1, 0, "copy", ("a", "b"), (), None, 0), Transfer(1, 2, 1, 0, "copy", ("c", "b"), (), None, 1)]
    local = [Transfer(2, 1, 1, 0, "reduce", ("b",), (0,), 0, None), Transfer(3, 1, 1, 0, "reduce", ("b",), (1, 2), 1, None)]
    report = verify(_manual(Kind.REDUCE, 1, 1, received + local), topology)
    assert (report.transfers, report.max_chunks_on_a_link) == (4, 1)  # local ops cross no link
    unordered = [local[0], dataclasses.replace(local[1], deps=(1,))]
    rejected(_manual(Kind.REDUCE, 1, 1, received + unordered), topology, 3, "race on rank 1 chunk 0")
    # b copies its data to scratch, and sends the copy on
    staged = [Transfer(0, 1, 1, 0, "copy", ("b",), (), None, 5), Transfer(1, 1, 0, 0, "copy", ("b", "a"), (0,), 5),
              Transfer(2, 1, 2, 0, "copy", ("b", "c"), (0,), 5)]
    assert verify(_manual(Kind.BROADCAST, 1, 1, staged), topology).depth == 2
    rejected(_manual(Kind.BROADCAST, 1, 1, [dataclasses.replace(staged[0], path=("b", "a"))]), topology, 0,
             "a local op on rank 1 (src == dst) has the path [b] (its gpu alone)")
    rejected(_manual(Kind.BROADCAST, 1, 1, [dataclasses.replace(staged[0], dst_scratch=None)]), topology, 0,
             "reads and writes the same buffer (data cell of chunk 0)")
    rejected(_manual(Kind.BROADCAST, 1, 1, [dataclasses.replace(staged[0], src_scratch=5)]), topology, 0,
             "reads and writes the same buffer (scratch slot 5)")


def test_schedule_format_2_carries_scratch_and_local_ops_and_format_1_is_still_read(tmp_path):
    relay = _manual(Kind.BROADCAST, 1, 1, [Transfer(0, 1, 1, 0, "copy", ("b",), (), None, 2),
                                           Transfer(1, 1, 0, 0, "copy", ("b", "a"), (0,), 2, None),
                                           Transfer(2, 1, 2, 0, "copy", ("b", "c"), (0,), 2, None)])
    text = relay.to_json()
    assert '"format": "synth.schedule/2"' in text and '"dst_scratch":2' in text and '"path":["b"]' in text
    back = Schedule.from_json(text)
    assert back == relay and back.scratch_slots() == [0, 3, 0]
    verify(back, _line(forwards=False))
    old = json.loads(synthesize(load_topology("ring:n=4"), "allgather", "ring").to_json())
    old["format"] = "synth.schedule/1"
    assert len(Schedule.from_dict(old).transfers) == 12
    old["transfers"][0]["dst_scratch"] = 0
    with pytest.raises(InputError, match="transfers.0.dst_scratch: scratch slots need format 'synth.schedule/2'"):
        Schedule.from_dict(old, "old.json")
    data = json.loads(text)
    data["transfers"][0]["path"] = []
    with pytest.raises(InputError, match=r"transfers.0.path: expected a list of at least 1 node id \(a local op"):
        Schedule.from_dict(data)
    data["transfers"][0]["path"], data["transfers"][0]["dst_scratch"] = ["b"], -2
    with pytest.raises(InputError, match="transfers.0.dst_scratch: expected a scratch slot"):
        Schedule.from_dict(data)
