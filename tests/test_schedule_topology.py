"""A schedule carries what it needs to find its topology (``topology_file``, relative to the
schedule, and ``topology_sha256``), so every command that loads a schedule works without ``--topology``,
and a different topology (given, found at that path, or in the library) is refused, never silently used."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import assert_refused, run_cli

from synth import load_topology
from synth.schedule import Schedule
from synth.topology import Topology, fingerprint


@pytest.fixture
def cli(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    return lambda *args: run_cli([str(a) for a in args], capsys, monkeypatch)


def write_pair(path: Path, bandwidth: float = 10.0) -> Path:
    path.write_text(json.dumps({"name": "pair", "nodes": [{"id": "a", "type": "gpu"}, {"id": "b", "type": "gpu"}],
                                "links": [{"src": "a", "dst": "b", "bandwidth": bandwidth}]}))
    return path


def ok(outcome):
    assert outcome.code == 0 and "Traceback" not in outcome.out + outcome.err, outcome.err
    return outcome


SCHEDULE_COMMANDS = [["verify"], ["evaluate", "-s", "1MiB"], ["explain"], ["export", "msccl", "-o", "x.xml"],
                     ["export", "chakra", "-o", "traces"]]


def run_on(cli, schedule: Path, command: list[str]):
    head = command[:2] if command[0] == "export" else command[:1]
    return cli(*head, schedule, *command[len(head):])


def test_generate_records_the_file_and_the_fingerprint(cli, tmp_path):
    (tmp_path / "topos").mkdir()
    topology = write_pair(tmp_path / "topos" / "pair.json")
    (tmp_path / "out").mkdir()
    ok(cli("generate", topology, "-c", "allreduce", "-o", "out/s.json"))
    data = json.loads((tmp_path / "out" / "s.json").read_text())
    assert data["topology_file"] == "../topos/pair.json"
    assert data["topology_sha256"] == fingerprint(Topology.from_file(topology))
    schedule = Schedule.from_file(tmp_path / "out" / "s.json")
    assert schedule.topology_file == "../topos/pair.json" and Schedule.from_json(schedule.to_json()) == schedule
    ok(cli("generate", "ring:n=4", "-c", "allgather", "-o", "lib.json"))
    data = json.loads((tmp_path / "lib.json").read_text())
    assert "topology_file" not in data and data["topology_sha256"] == fingerprint(load_topology("ring:n=4"))


@pytest.mark.parametrize("command", SCHEDULE_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_every_command_finds_the_topology_file_from_anywhere(cli, tmp_path, monkeypatch, command):
    (tmp_path / "work").mkdir()
    topology = write_pair(tmp_path / "work" / "pair.json")
    ok(cli("generate", topology, "-c", "allreduce", "-o", tmp_path / "work" / "s.json"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    ok(run_on(cli, tmp_path / "work" / "s.json", command))
    # the two move together: the relative path still holds
    shutil.move(tmp_path / "work", tmp_path / "moved")
    ok(run_on(cli, tmp_path / "moved" / "s.json", command))


@pytest.mark.parametrize("command", SCHEDULE_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_different_topology_is_refused(cli, tmp_path, command):
    topology = write_pair(tmp_path / "pair.json")
    ok(cli("generate", topology, "-c", "allreduce", "-o", "s.json"))
    other = write_pair(tmp_path / "other.json", bandwidth=20.0)  # same gpus, a different link
    line = assert_refused(run_on(cli, tmp_path / "s.json", [*command[:2], "--topology", other, *command[2:]]
                                 if command[0] == "export" else [*command, "--topology", other]),
                          "s.json", "different topology")
    assert "other.json" in line
    write_pair(topology, bandwidth=30.0)  # the recorded file changed since
    assert_refused(run_on(cli, tmp_path / "s.json", command), "s.json", "different topology")
    topology.unlink()  # gone, and the library has no 'pair'
    assert_refused(run_on(cli, tmp_path / "s.json", command), "s.json", "is missing")
    assert not (tmp_path / "x.xml").exists() and not (tmp_path / "traces").exists()


def test_the_same_topology_under_another_name_is_accepted(cli, tmp_path):
    topology = write_pair(tmp_path / "pair.json")
    ok(cli("generate", topology, "-c", "allreduce", "-o", "s.json"))
    copy = tmp_path / "copy.yaml"
    copy.write_text("name: renamed\ndescription: the same links\nnodes: [{id: a, type: gpu}, {id: b, type: gpu}]\n"
                    "links: [{src: a, dst: b, bandwidth: 10.0}]\n")
    ok(cli("verify", "s.json", "--topology", copy))


def test_library_schedules_keep_working_and_are_checked(cli, tmp_path):
    ok(cli("generate", "torus:dims=2x2", "-c", "allgather", "-o", "s.json"))
    ok(cli("verify", "s.json"))
    data = json.loads((tmp_path / "s.json").read_text())
    data["topology_sha256"] = "0" * 64
    (tmp_path / "s.json").write_text(json.dumps(data))
    assert_refused(cli("verify", "s.json"), "s.json", "not the topology the schedule was made for")


def test_schedules_without_the_fields_work_as_before(cli, tmp_path):
    ok(cli("generate", "ring:n=4", "-c", "allgather", "-o", "s.json"))
    data = json.loads((tmp_path / "s.json").read_text())
    del data["topology_sha256"]
    (tmp_path / "s.json").write_text(json.dumps(data))
    ok(cli("verify", "s.json"))
    ok(cli("verify", "s.json", "--topology", "ring:n=4"))


def test_imports_record_their_topology(cli, tmp_path):
    topology = write_pair(tmp_path / "pair.json")
    ok(cli("generate", topology, "-c", "allgather", "-o", "s.json"))
    ok(cli("export", "msccl", "s.json", "-o", "s.xml"))
    ok(cli("import", "msccl", "s.xml", "--topology", topology, "-o", "back.json"))
    data = json.loads((tmp_path / "back.json").read_text())
    assert data["topology_file"] == "pair.json"
    ok(cli("evaluate", "back.json", "-s", "1MiB"))


@pytest.mark.parametrize("field, value, expect", [("topology_sha256", "xyz", "64 lower-case hex digits"),
                                                  ("topology_sha256", 5, "64 lower-case hex digits"),
                                                  ("topology_file", "", "expected a file path"),
                                                  ("topology_file", ["a"], "expected a file path")])
def test_malformed_fields_are_refused(cli, tmp_path, field, value, expect):
    ok(cli("generate", "ring:n=4", "-c", "allgather", "-o", "s.json"))
    data = json.loads((tmp_path / "s.json").read_text())
    data[field] = value
    (tmp_path / "s.json").write_text(json.dumps(data))
    assert_refused(cli("verify", "s.json"), "s.json", expect)


def test_fingerprint_ignores_names_and_order_but_not_links():
    a = Topology.from_dict({"name": "a", "nodes": [{"id": "x", "type": "gpu"}, {"id": "y", "type": "gpu"},
                                                   {"id": "s", "type": "switch"}],
                            "links": [{"src": "x", "dst": "s", "bandwidth": 5}, {"src": "y", "dst": "s", "bandwidth": 5}]})
    b = Topology.from_dict({"name": "b", "description": "same", "nodes": [{"id": "s", "type": "switch"},
                                                                          {"id": "x", "type": "gpu"},
                                                                          {"id": "y", "type": "gpu"}],
                            "links": [{"src": "y", "dst": "s", "bandwidth": 5}, {"src": "x", "dst": "s", "bandwidth": 5}]})
    assert fingerprint(a) == fingerprint(b)
    swapped = Topology.from_dict({"name": "c", "nodes": [{"id": "y", "type": "gpu"}, {"id": "x", "type": "gpu"},
                                                         {"id": "s", "type": "switch"}],
                                  "links": [{"src": "x", "dst": "s", "bandwidth": 5},
                                            {"src": "y", "dst": "s", "bandwidth": 5}]})
    assert fingerprint(swapped) != fingerprint(a)  # rank order is part of it
    slower = Topology.from_dict({"name": "a", "nodes": [{"id": "x", "type": "gpu"}, {"id": "y", "type": "gpu"},
                                                        {"id": "s", "type": "switch"}],
                                 "links": [{"src": "x", "dst": "s", "bandwidth": 5},
                                           {"src": "y", "dst": "s", "bandwidth": 5, "latency": 1}]})
    assert fingerprint(slower) != fingerprint(a)
