"""``synth algorithms``: every registered algorithm with its collectives, options and description."""

from __future__ import annotations

import json
import re

import pytest
from helpers import assert_refused, run_cli

from synth.algorithms import REGISTRY
from synth.choose import synthesize
from synth.collectives import Kind
from synth.errors import InputError
from synth.library import load_topology

#: Algorithms quick enough to run with every default spelled out (milp and mcf call solvers).
QUICK = ["nccl", "ring", "direct", "binomial", "forest", "tree", "rhd", "bruck", "hierarchical", "multidim"]


@pytest.fixture
def cli(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    return lambda *args: run_cli(list(args), capsys, monkeypatch)


def listing(cli, *args: str) -> list[dict]:
    outcome = cli("algorithms", "--json", *args)
    assert outcome.code == 0 and "Traceback" not in outcome.err, outcome.err
    return json.loads(outcome.out)


def test_lists_every_registered_algorithm_with_its_collectives(cli):
    entries = listing(cli)
    assert [e["name"] for e in entries] == list(REGISTRY)
    for entry in entries:
        assert {Kind(k) for k in entry["collectives"]} == set(REGISTRY[entry["name"]].collectives)
        assert entry["description"] == REGISTRY[entry["name"]].summary and entry["description"]


def test_listed_options_are_the_ones_synthesize_accepts(cli):
    # synthesize's own refusal of an unknown option names what the algorithm takes
    topology = load_topology("ring:n=4")
    for entry in listing(cli):
        kind = Kind(entry["collectives"][0])
        with pytest.raises(InputError) as refused:
            synthesize(topology, kind, entry["name"], no_such_option=1)
        accepted = re.search(r"it takes (.*)$", str(refused.value)).group(1).split(", ")
        assert list(entry["options"]) == [name for name in accepted if name != "progress"], entry["name"]


@pytest.mark.parametrize("name", QUICK)
def test_listed_defaults_are_the_defaults(cli, name):
    # spelling out every listed default gives the same schedule as giving none
    entry = next(e for e in listing(cli) if e["name"] == name)
    topology = load_topology("ndv2:boxes=2" if name == "hierarchical" else "ring:n=4")
    kind = Kind(entry["collectives"][0])
    given = {key: value for key, value in entry["options"].items() if value is not None}
    assert synthesize(topology, kind, name, **given).transfers == synthesize(topology, kind, name).transfers


def test_filter_by_collective_and_table(cli):
    names = [e["name"] for e in listing(cli, "-c", "alltoall")]
    assert names == [name for name, entry in REGISTRY.items() if Kind.ALLTOALL in entry.collectives]
    assert "ring" not in names and "mcf" in names
    outcome = cli("algorithms", "--collective", "broadcast")
    assert outcome.code == 0
    rows = re.findall(r"^│ (\w+) ", outcome.out, flags=re.M)
    assert rows == [name for name, entry in REGISTRY.items() if Kind.BROADCAST in entry.collectives]


def test_bad_collective_is_refused(cli):
    assert_refused(cli("algorithms", "-c", "allsum"), "--collective", "unknown collective")


def test_generate_help_points_at_the_listing(cli):
    outcome = cli("generate", "--help")
    assert outcome.code == 0 and "synth algorithms" in outcome.out
