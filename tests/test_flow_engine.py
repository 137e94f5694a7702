"""The flow simulator's two engines (synth.flow): the compiled event loop gives the reference engine's
result to the last digit (time, events, rate updates, link-sharing work), and the same refusals."""

from __future__ import annotations

import dataclasses
import functools

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from strategies import topologies

from synth import flow, flow_reference, load_topology, synthesize
from synth.algorithms.forest import forest_trees
from synth.errors import InputError, LimitError, SynthError, VerificationError
from synth.flow import FlowResult, simulate, simulate_detailed
from synth.plan import make_plan
from synth.schedule import Schedule


def outcome(schedule, topology, size, plan, engine, **options) -> FlowResult | tuple[str, str]:
    """The engine's result, or the refusal it raised (type name and message)."""
    try:
        return simulate_detailed(schedule, topology, size, plan, engine=engine, **options)
    except SynthError as refusal:
        return type(refusal).__name__, str(refusal)


def same(schedule, topology, size, plan, **options) -> FlowResult | tuple[str, str]:
    """Both engines' outcome, checked identical (a float compared with ==: bit for bit but for -0.0)."""
    compiled = outcome(schedule, topology, size, plan, "compiled", **options)
    reference = outcome(schedule, topology, size, plan, "reference", **options)
    assert compiled == reference, (compiled, reference, plan.describe(), options)
    if isinstance(compiled, FlowResult):
        assert compiled.time_s.hex() == reference.time_s.hex()
    return compiled


def with_local_ops(schedule: Schedule, every: int) -> Schedule:
    """Every ``every``-th transfer made a local op (its path the one gpu it starts from): no time."""
    transfers = tuple(dataclasses.replace(t, path=t.path[:1]) if t.id % every == 0 else t
                      for t in schedule.transfers)
    return dataclasses.replace(schedule, transfers=transfers)


def check_limits(schedule, topology, size, plan) -> None:
    """Both engines agree without limits, at cutoffs around the time and at work limits around the work."""
    full = same(schedule, topology, size, plan)
    assert isinstance(full, FlowResult)
    for factor in (0.5, 0.999, 1.0, 1.5):
        same(schedule, topology, size, plan, cutoff=full.time_s * factor)
    for limit in {0, full.sharing_work // 2, max(0, full.sharing_work - 1), full.sharing_work}:
        same(schedule, topology, size, plan, work_limit=limit)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology=topologies(max_gpus=6, max_switches=2), data=st.data())
def test_compiled_engine_gives_the_reference_result(topology, data):
    algorithm, kind = data.draw(st.sampled_from([("ring", "allgather"), ("ring", "allreduce"),
                                                 ("direct", "alltoall"), ("direct", "allgather"),
                                                 ("binomial", "broadcast"), ("binomial", "reduce"),
                                                 ("forest", "allgather"), ("forest", "allreduce")]))
    chunks = data.draw(st.sampled_from([None, 2 * topology.num_ranks]))
    try:
        schedule = synthesize(topology, kind, algorithm, chunks=chunks)
    except SynthError:
        event("refused")
        return  # forest refuses some random fabrics
    event(algorithm)
    if data.draw(st.booleans()):
        schedule = with_local_ops(schedule, data.draw(st.integers(2, 5)))
    size = data.draw(st.sampled_from([1000, 2**20, 10**9]))
    plan = make_plan(schedule.chunks, size, data.draw(st.sampled_from(["ideal", "LL", "LL128", "Simple"])),
                     slices=data.draw(st.sampled_from([1, 2, 3, 7])),
                     window=data.draw(st.sampled_from([1, 2, 8])))
    check_limits(schedule, topology, size, plan)


def test_a_dependency_cycle_stalls_both_engines():
    topology = load_topology("ring:n=4")
    schedule = synthesize(topology, "allgather", "ring")
    count = len(schedule.transfers)
    looped = dataclasses.replace(schedule, transfers=tuple(dataclasses.replace(t, deps=((t.id - 1) % count,))
                                                           for t in schedule.transfers))
    plan = make_plan(schedule.chunks, 2**20, "Simple")
    stalled = same(looped, topology, 2**20, plan)
    assert stalled[0] == VerificationError.__name__ and "stalled" in stalled[1]
    with pytest.raises(VerificationError):
        simulate(looped, topology, 2**20, plan)


@functools.cache
def _library_case(spec: str, kind: str, algorithm: str) -> tuple:
    topology = load_topology(spec)
    return topology, synthesize(topology, kind, algorithm)


@pytest.mark.parametrize("spec,kind,algorithm,size,protocol", [
    ("dgx1", "allreduce", "ring", 2**26, "Simple"),
    ("dgx1", "allreduce", "forest", 2**24, "LL128"),
    ("mi250", "allreduce", "forest", 2**26, "Simple"),
    ("mi250", "allgather", "ring", 2**22, "LL"),
    ("dgx-a100:boxes=2", "allgather", "forest", 2**24, "Simple"),
    ("switch:n=8", "alltoall", "direct", 2**22, "Simple")])
def test_library_systems_give_the_reference_result(spec, kind, algorithm, size, protocol):
    topology, schedule = _library_case(spec, kind, algorithm)
    plan = make_plan(schedule.chunks, size, protocol)
    full = same(schedule, topology, size, plan)
    assert isinstance(full, FlowResult) and full.events > 0
    same(schedule, topology, size, plan, cutoff=full.time_s * 0.999)
    if full.sharing_work:
        same(schedule, topology, size, plan, work_limit=full.sharing_work - 1)


def test_trees_form_streams_through_both_engines():
    topology = load_topology("dgx-a100:boxes=2")
    form = forest_trees(topology, "allreduce")
    plan = make_plan(form.chunks, 2**24, "Simple", slices=4)
    streamed = same(form, topology, 2**24, plan)
    assert streamed == simulate_detailed(form.expand(), topology, 2**24, plan)


def test_a_small_memo_is_emptied_as_the_reference_empties_it(monkeypatch):
    # a memo of one entry is emptied on every new set of active flows: more filling, the same in both
    topology, schedule = _library_case("dgx-a100:boxes=2", "allgather", "forest")
    plan = make_plan(schedule.chunks, 2**24, "Simple", slices=4)
    roomy = same(schedule, topology, 2**24, plan)
    for memo_bytes in (1, 16 * 40, 16 * 400):
        monkeypatch.setattr(flow, "MEMO_BYTES", memo_bytes)
        monkeypatch.setattr(flow_reference, "MEMO_BYTES", memo_bytes)
        tight = same(schedule, topology, 2**24, plan)
        assert tight.time_s == roomy.time_s and tight.sharing_work >= roomy.sharing_work


def test_an_unknown_engine_is_refused():
    topology, schedule = _library_case("dgx1", "allreduce", "ring")
    with pytest.raises(InputError, match="engine"):
        simulate_detailed(schedule, topology, 2**20, make_plan(schedule.chunks, 2**20, "Simple"), engine="fast")


def test_the_work_limit_message_is_the_reference_one():
    topology, schedule = _library_case("switch:n=8", "alltoall", "direct")
    plan = make_plan(schedule.chunks, 2**22, "Simple", slices=4)
    refused = same(schedule, topology, 2**22, plan, work_limit=0)
    assert refused[0] == LimitError.__name__ and "work limit of 0 after 1 events" in refused[1]


def test_kernels_compile_without_a_writable_cache(monkeypatch):
    # numba refuses cache=True where it finds no writable cache folder: the kernels are then compiled
    # in each process instead of failing the import
    from synth import flow_kernels

    seen = []

    def njit(**options):
        seen.append(options)
        if options.get("cache"):
            raise RuntimeError("cannot cache function: no locator available")
        return lambda function: function

    monkeypatch.setattr(flow_kernels, "njit", njit)
    assert flow_kernels._compiled(len) is len
    assert seen == [{"cache": True, "error_model": "numpy", "nogil": True}, {"error_model": "numpy", "nogil": True}]


def joint_same(parts, **options) -> flow.JointResult:
    """Both engines' joint result, checked identical to the last digit."""
    compiled = flow.simulate_together(parts, engine="compiled", **options)
    reference = flow.simulate_together(parts, engine="reference", **options)
    assert compiled == reference
    assert [t.hex() for t in compiled.finish_s] == [t.hex() for t in reference.finish_s]
    return compiled


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology=topologies(max_gpus=6, max_switches=2), data=st.data())
def test_joint_simulation_gives_the_reference_result(topology, data):
    """Two schedules of different kinds, sizes, protocols and slicings at once: both engines agree; each
    alone (one part) is exactly its plain simulation; together neither finishes before its lone time
    by more than the model's reordering anomaly."""
    parts = []
    for _ in range(2):
        algorithm, kind = data.draw(st.sampled_from([("ring", "allgather"), ("ring", "allreduce"),
                                                     ("direct", "alltoall"), ("binomial", "broadcast"),
                                                     ("forest", "allgather")]))
        try:
            schedule = synthesize(topology, kind, algorithm)
        except SynthError:
            event("refused")
            return
        size = data.draw(st.sampled_from([1000, 2**20, 10**8]))
        plan = make_plan(schedule.chunks, size, data.draw(st.sampled_from(["ideal", "LL", "Simple"])),
                         slices=data.draw(st.sampled_from([1, 2, 3])), window=data.draw(st.sampled_from([1, 8])))
        parts.append((schedule, topology, size, plan))
    together = joint_same(parts)
    for (schedule, view, size, plan), finish in zip(parts, together.finish_s, strict=True):
        alone = joint_same([(schedule, view, size, plan)])
        assert alone.finish_s[0] == simulate_detailed(schedule, view, size, plan).time_s
        assert finish >= alone.finish_s[0] * (1 - 0.02)
    assert together.time_s == max(together.finish_s)


def test_two_copies_share_a_link_at_half_rate_each():
    topo = load_topology("ring:n=2,latency=0,bandwidth=1")
    ring = synthesize(topo, "allgather", "ring")
    plan = make_plan(ring.chunks, 10**9, "ideal")
    alone = simulate(ring, topo, 10**9, plan)
    together = joint_same([(ring, topo, 10**9, plan)] * 2)
    assert together.finish_s == (pytest.approx(2 * alone), pytest.approx(2 * alone))
    other = make_plan(ring.chunks, 10**9, "LL")  # half the payload rate on the wire
    mixed = joint_same([(ring, topo, 10**9, plan), (ring, topo, 10**9, other)])
    assert mixed.finish_s[0] < mixed.finish_s[1]


def test_groups_on_disjoint_boxes_do_not_slow_each_other():
    from synth.groups import group_view, parse_group

    fabric = load_topology("dgx-h100:boxes=2")
    parts = []
    for index in (0, 1):
        view = group_view(fabric, parse_group(fabric, f"tp=8:{index}"))
        schedule = synthesize(view, "allreduce", "ring")
        parts.append((schedule, view, 2**26, make_plan(schedule.chunks, 2**26, "Simple")))
    together = joint_same(parts)
    assert together.finish_s == tuple(simulate(s, v, n, p) for s, v, n, p in parts)


def test_a_joint_simulation_refuses_parts_on_other_fabrics():
    a, b = load_topology("ring:n=4"), load_topology("ring:n=5")
    ra, rb = synthesize(a, "allgather", "ring"), synthesize(b, "allgather", "ring")
    with pytest.raises(InputError, match="one fabric"):
        flow.simulate_together([(ra, a, 1000, make_plan(ra.chunks, 1000, "LL")),
                                (rb, b, 1000, make_plan(rb.chunks, 1000, "LL"))])
