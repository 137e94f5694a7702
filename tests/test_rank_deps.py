"""What one rank sees of a transfer's dependencies (synth.rank_deps), against the definition."""

from hypothesis import given, settings
from hypothesis import strategies as st

from synth.algorithms import synthesize
from synth.errors import InfeasibleError, NotApplicable
from synth.rank_deps import NearestTouching
from tests.strategies import topologies


def nearest_by_definition(transfers, tid: int, rank: int) -> list[int]:
    """Walk back from ``tid``'s deps; a transfer with ``rank`` as an end is kept and not walked past."""
    found, seen, stack = set(), set(), list(transfers[tid].deps)
    while stack:
        dep = stack.pop()
        if dep in seen:
            continue
        seen.add(dep)
        if rank in (transfers[dep].src, transfers[dep].dst):
            found.add(dep)
        else:
            stack.extend(transfers[dep].deps)
    return sorted(found)


@settings(max_examples=25, deadline=None)
@given(topology=topologies(min_gpus=2, max_gpus=6),
       case=st.sampled_from([("allgather", "forest"), ("allreduce", "forest"), ("reduce_scatter", "ring"),
                             ("allreduce", "tree"), ("alltoall", "direct")]))
def test_nearest_touching_matches_the_definition_on_random_schedules(topology, case):
    collective, algorithm = case
    try:
        schedule = synthesize(topology, collective, algorithm)
    except (NotApplicable, InfeasibleError):
        return
    transfers = schedule.transfers
    near = NearestTouching(transfers)
    ranks = range(schedule.collective.num_ranks)
    for t in transfers:  # every rank, not only the ends: the memo is shared across ranks and transfers
        for rank in ranks:
            assert near.deps(t.id, rank) == nearest_by_definition(transfers, t.id, rank)
    for rank in ranks:  # rank by rank, forgetting each one's memo after it, as the MSCCL lowering asks
        near.forget(rank)
        for t in reversed(transfers):
            assert near.deps(t.id, rank) == nearest_by_definition(transfers, t.id, rank)
        near.forget(rank)


def test_a_dependency_chain_through_other_ranks_ends_at_the_nearest_transfer_of_the_rank():
    from synth.library import load_topology

    schedule = synthesize(load_topology("switch:n=4"), "allgather", "ring")
    near = NearestTouching(schedule.transfers)
    chain = [t for t in schedule.transfers if t.chunk == 0]  # 0 -> 1 -> 2 -> 3, each after the one before
    assert [(t.src, t.dst) for t in chain] == [(0, 1), (1, 2), (2, 3)]
    assert near.deps(chain[2].id, 3) == []  # nothing before reaches rank 3
    assert near.deps(chain[2].id, 0) == [chain[0].id]  # the walk passes 1 -> 2 and stops at 0 -> 1


def test_a_forest_of_dependencies_is_answered_from_one_pass_and_matches_the_walk():
    """Allgather trees: every transfer has at most one dependency, so both ends are worked out up front;
    the answers equal the definition and the general walk's (a fresh instance asked for a non-end rank)."""
    from synth.library import load_topology

    schedule = synthesize(load_topology("dgx-a100:boxes=2"), "allgather", "forest")
    transfers = schedule.transfers
    near = NearestTouching(transfers)
    assert near._forest_ends() is not None
    joins = synthesize(load_topology("fully-connected:n=4"), "reduce_scatter", "forest").transfers  # a reduction joins
    assert NearestTouching(joins)._forest_ends() is None
    found_some = False
    for t in transfers:
        for rank in {t.src, t.dst}:
            answer = near.deps(t.id, rank)
            assert answer == nearest_by_definition(transfers, t.id, rank)
            found_some = found_some or bool(answer)
    assert found_some  # a gpu forwarding a chunk waits for its own receive of it
