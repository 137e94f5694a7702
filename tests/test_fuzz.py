"""Property-based fuzzing with a bounded budget: the loaders turn any document into a model or a clear
InputError, and every registered algorithm on random topologies gives a verified schedule or a clear
SynthError refusal. Never another exception."""

from __future__ import annotations

import copy
import inspect
import json
import math

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from strategies import topologies, topology_documents

from synth import Schedule, Topology, load_topology, synthesize, verify
from synth.algorithms import REGISTRY
from synth.collectives import ROOTED, Kind, min_transfers
from synth.documents import parse_json, parse_yaml
from synth.errors import InputError, NotApplicable, SynthError

FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def fuzz(examples: int) -> settings:
    """The fuzzing settings with a budget of ``examples`` inputs."""
    return settings(FUZZ, max_examples=examples)

json_scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
                | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
json_values = st.recursive(json_scalars, lambda children: st.lists(children, max_size=4)
                           | st.dictionaries(st.text(max_size=8), children, max_size=4), max_leaves=20)
FIELD_NAMES = ["name", "description", "nodes", "links", "id", "type", "src", "dst", "bandwidth", "latency",
               "bidirectional", "box", "dimensions", "kind", "size", "metadata"]


def _paths(value, prefix=()):
    """Every location inside a JSON value, as a tuple of keys/indices."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, prefix + (index,))


@st.composite
def damaged_documents(draw, valid: st.SearchStrategy) -> object:
    """A valid document with one to three random edits: a value replaced, a key removed or added, a list
    element duplicated or removed. Most results are invalid in one specific place."""
    doc = copy.deepcopy(draw(valid))
    for _ in range(draw(st.integers(1, 3))):
        locations = list(_paths(doc))
        where = draw(st.sampled_from(locations))
        if not where:
            doc = draw(json_values) if draw(st.booleans()) else doc
            continue
        parent = doc
        for key in where[:-1]:
            parent = parent[key]
        last = where[-1]
        action = draw(st.sampled_from(["replace", "delete", "add_key", "duplicate"]))
        if action == "replace":
            parent[last] = draw(json_values)
        elif action == "delete":
            del parent[last]
        elif action == "add_key" and isinstance(parent, dict):
            parent[draw(st.sampled_from(FIELD_NAMES) | st.text(max_size=6))] = draw(json_values)
        elif action == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[last]))
    return doc


# ------------------------------------------------------------------------------------------ loaders
@fuzz(150)
@given(document=json_values | damaged_documents(topology_documents(max_gpus=4)))
def test_topology_loader_gives_a_topology_or_an_input_error(document):
    try:
        topology = Topology.from_dict(document, source="fuzz.json")
    except InputError as error:
        message = str(error)
        assert message.startswith("fuzz.json: ") and "\n" not in message
        return
    # accepted: the model keeps the documented invariants
    assert topology.num_ranks >= 2
    for _, _, data in topology.graph.edges(data=True):
        assert math.isfinite(data["bandwidth"]) and data["bandwidth"] > 0
        assert math.isfinite(data["latency"]) and data["latency"] >= 0
    again = Topology.from_dict(topology.to_dict(), source="again")
    assert again.gpus == topology.gpus
    assert sorted(again.graph.edges) == sorted(topology.graph.edges)


@fuzz(100)
@given(data=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_json_and_yaml_parsers_give_a_value_or_an_input_error(data):
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    for parse in (parse_json, parse_yaml):
        try:
            parse(text, "fuzz")
        except InputError as error:
            assert "\n" not in str(error)


@fuzz(40)
@given(document=damaged_documents(topology_documents(max_gpus=4)), suffix=st.sampled_from([".json", ".yaml"]))
def test_topology_files_of_any_content(document, suffix, tmp_path_factory):
    import yaml

    folder = tmp_path_factory.mktemp("fuzz")
    path = folder / f"t{suffix}"
    try:
        text = json.dumps(document) if suffix == ".json" else yaml.safe_dump(document)
    except (ValueError, yaml.YAMLError):
        return
    path.write_text(text)
    try:
        load_topology(str(path))
    except InputError as error:
        assert str(path) in str(error)


_BASE_SCHEDULES = {}


def _base_schedule_document(kind: str) -> dict:
    if kind not in _BASE_SCHEDULES:
        topology = load_topology("ring:n=4")
        algorithm = {"alltoall": "direct", "broadcast": "binomial"}.get(kind, "ring")
        _BASE_SCHEDULES[kind] = json.loads(synthesize(topology, kind, algorithm).to_json())
    return copy.deepcopy(_BASE_SCHEDULES[kind])


@fuzz(150)
@given(document=damaged_documents(st.sampled_from(["allgather", "allreduce", "alltoall", "broadcast"])
                                  .map(_base_schedule_document)))
def test_schedule_loader_and_verifier_never_crash(document):
    try:
        schedule = Schedule.from_dict(document, source="fuzz.json")
    except InputError as error:
        assert str(error).startswith("fuzz.json: ")
        return
    try:
        verify(schedule, load_topology("ring:n=4"))
    except SynthError:
        pass


# -------------------------------------------------------------------------------------- algorithms
#: Keep solver-backed algorithms inside the test budget (only options the function accepts are passed).
BUDGET_OPTIONS = {"time_limit_s": 5.0, "progress": None, "workers": 1}
EXAMPLES = {"milp": 6, "mcf": 10, "forest": 12}


def _call(topology: Topology, kind: Kind, name: str, **options):
    accepted = inspect.signature(REGISTRY[name].load()).parameters
    options.update({key: value for key, value in BUDGET_OPTIONS.items() if key in accepted})
    return synthesize(topology, kind, name, **options)


#: Refusals other than NotApplicable and InputError (the algorithm gave up on a request it accepts: a limit,
#: a solver's failure) may be at most this share of the examples; every algorithm must verify at least one.
MAX_REFUSED_SHARE = 0.25
#: Algorithms that need structure random topologies lack: where no example applied, they must build a
#: verified schedule on this topology instead (so "not applicable" everywhere cannot hide a broken one).
STRUCTURED = {"multidim": "torus:dims=2x3", "hierarchical": "ndv2:boxes=2", "nvls": "dgx-h100",
              "nvls_tree": "dgx-h100:boxes=2", "collnet": "dgx-superpod:sus=1,nodes_per_su=4,sharp=true",
              "insw": "dgx-h100"}


@pytest.mark.parametrize("name", list(REGISTRY))
@pytest.mark.slow
def test_every_algorithm_on_random_topologies(name):
    algorithm = REGISTRY[name]
    outcomes: dict[str, int] = {}

    @fuzz(EXAMPLES.get(name, 20))
    @given(topology=topologies(max_gpus=5, max_switches=2), data=st.data())
    def check(topology, data):
        kind = data.draw(st.sampled_from(sorted(algorithm.collectives)))
        options = {}
        if data.draw(st.booleans()):
            options["chunks"] = topology.num_ranks * data.draw(st.integers(1, 2))
        if kind in ROOTED:
            options["root"] = data.draw(st.integers(0, topology.num_ranks - 1))
        try:
            schedule = _call(topology, kind, name, **options)
        except SynthError as refusal:
            message = str(refusal)
            assert message and "\n" not in message.strip(), message
            event(f"refused: {type(refusal).__name__}")
            # NotApplicable and InputError (an option this algorithm does not take) turn the request down;
            # anything else is the algorithm giving up on a request it accepts
            outcome = "not applicable" if isinstance(refusal, NotApplicable | InputError) else "refused"
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            return
        event("verified")
        outcomes["verified"] = outcomes.get("verified", 0) + 1
        report = verify(schedule, topology)  # a schedule that comes out must be correct
        assert report.transfers == len(schedule.transfers)
        # the limits module's lower bound holds (it refuses requests up front on the strength of it)
        assert report.transfers >= min_transfers(kind, topology.num_ranks, schedule.chunks)
        assert schedule.kind == kind and schedule.collective.num_ranks == topology.num_ranks
        assert Schedule.from_json(schedule.to_json()) == schedule

    check()
    # hypothesis replays failing and shrunk examples too: judge the share over everything it ran
    total = sum(outcomes.values())
    if not outcomes.get("verified") and name in STRUCTURED:
        topology = load_topology(STRUCTURED[name])
        for kind in sorted(algorithm.collectives):
            verify(_call(topology, kind, name, **({"root": 0} if kind in ROOTED else {})), topology)
            outcomes["verified"] = outcomes.get("verified", 0) + 1
    assert outcomes.get("verified", 0) >= 1, outcomes
    assert outcomes.get("refused", 0) <= MAX_REFUSED_SHARE * total, outcomes


@fuzz(60)
@given(options=st.dictionaries(st.sampled_from(["chunks", "root", "order", "reverse", "bogus"]),
                               json_scalars | st.lists(json_scalars, max_size=5) | st.lists(st.integers(-2, 5), max_size=5),
                               max_size=3),
       name=st.sampled_from(["ring", "direct", "binomial"]))
def test_baselines_refuse_bad_options_clearly(options, name):
    """Options as ``-O key=value`` would pass them: junk types and unknown names are SynthErrors."""
    topology = load_topology("ring:n=4")
    kind = sorted(REGISTRY[name].collectives)[0]
    assume(options)
    try:
        schedule = synthesize(topology, kind, name, **options)
    except SynthError as refusal:
        assert str(refusal) and "\n" not in str(refusal)
        return
    verify(schedule, topology)


# ------------------------------------------------------------------------------- demand and job files
VALID_DEMANDS = [{"format": "synth.demand/1", "ranks": 3, "unit": "bytes", "matrix": [[0, 5, 1], [2, 0, 0], [0, 7, 0]]},
                 {"format": "synth.demand/1", "ranks": 2, "unit": "weights", "matrix": [[0, 0.5], [1.5, 0]]}]
VALID_JOBS = [
    {"format": "synth.job/1", "objective": "makespan", "collectives": [
        {"name": "dp", "collective": "allreduce", "size": "1MiB", "group": "dp=2", "algorithm": ["ring", "nccl"]},
        {"name": "ep", "collective": "alltoallv", "size": 4096, "group": ["b0.gpu0", "b1.gpu0"],
         "demand": {"format": "synth.demand/1", "ranks": 2, "unit": "bytes", "matrix": [[0, 3], [1, 0]]}}]},
    {"format": "synth.job/1", "objective": "weighted", "collectives": [
        {"collective": "allgather", "size": "64KiB", "shards": [1, 2], "group": "dp=2:1", "weight": 2},
        {"collective": "alltoallv", "size": "1MiB", "group": "tp=8:0", "demand": {"moe": {"top_k": 2, "zipf": 1.0}}}]},
    {"format": "synth.job/1", "collectives": [
        {"name": "tp", "collective": "allreduce", "size": "16MiB", "group": "tp=8:*"},
        {"name": "dp", "collective": "reducescatter", "size": "16MiB", "group": "dp=2:*", "shards": "1,3"}]},
]


@fuzz(150)
@given(document=json_values | damaged_documents(st.sampled_from(VALID_DEMANDS)))
def test_demand_loader_gives_a_demand_or_an_input_error(document):
    from synth.demand import Demand

    try:
        demand = Demand.from_dict(document, source="fuzz.json")
    except InputError as error:
        assert str(error).startswith("fuzz.json") and "\n" not in str(error)
        return
    assert demand.total > 0 and all(row[i] == 0 for i, row in enumerate(demand.matrix))
    assert Demand.from_dict(demand.to_dict()) == demand


@fuzz(150)
@given(document=json_values | damaged_documents(st.sampled_from(VALID_JOBS)))
def test_job_loader_gives_a_job_or_an_input_error(document):
    from synth.jobs import Job

    topology = _h100_pair()
    try:
        job = Job.from_dict(document, topology, source="fuzz.json")
    except InputError as error:
        assert str(error).startswith("fuzz.json") and "\n" not in str(error)
        return
    assert 1 <= len(job.collectives) <= 16 and len({c.name for c in job.collectives}) == len(job.collectives)
    for c in job.collectives:
        assert c.size >= 1 and c.weight > 0
        assert c.members is None or len(set(c.members)) == len(c.members) >= 2


_TOPOLOGIES: dict[str, Topology] = {}


def _h100_pair() -> Topology:
    if "h100" not in _TOPOLOGIES:
        _TOPOLOGIES["h100"] = load_topology("dgx-h100:boxes=2")
    return _TOPOLOGIES["h100"]
