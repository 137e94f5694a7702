"""Determinism: the same inputs and options give byte-identical output, for every registered algorithm,
within one process (caches warm) and across processes with different hash seeds (PYTHONHASHSEED)."""

from __future__ import annotations

import hashlib
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_process

from synth import Schedule, load_topology, synthesize, verify
from synth.algorithms import REGISTRY
from synth.collectives import ROOTED
from synth.errors import NotApplicable, SynthError

#: Topologies every algorithm is tried on: a small one with dimensions (multidim, the MILP) and a 2-box
#: system with boxes, switches and NIC rails (hierarchical and everything else).
TOPOLOGIES = ["hypercube:d=2", "dgx-a100:boxes=2"]
#: Solver-backed algorithms run only on the small topology, with a generous limit so they finish by
#: optimality rather than by the clock (a clock-stopped search is not reproducible).
SMALL_ONLY = {"milp"}
SOLVER_OPTIONS = {"time_limit_s": 60.0, "progress": None, "workers": 1}
#: In-switch algorithms need switches that reduce and multicast (NVLS boxes, SHARP leaves; none of TOPOLOGIES'
#: switches does): tried on these too.
IN_SWITCH = {"nvls": ["dgx-h100"], "nvls_tree": ["dgx-h100:boxes=2"],
             "collnet": ["dgx-superpod:sus=1,nodes_per_su=4,sharp=true"],
             "insw": ["dgx-h100", "dgx-superpod:sus=1,nodes_per_su=2,sharp=true"]}


def _options(name: str, kind) -> dict:
    accepted = inspect.signature(REGISTRY[name].load()).parameters
    options = {key: value for key, value in SOLVER_OPTIONS.items() if key in accepted}
    if kind in ROOTED:
        options["root"] = 1
    return options


def cases(name: str) -> list[tuple[str, str]]:
    """(topology, collective) pairs to try for algorithm ``name``."""
    specs = TOPOLOGIES[:1] if name in SMALL_ONLY else TOPOLOGIES + IN_SWITCH.get(name, [])
    return [(spec, kind.value) for spec in specs for kind in sorted(REGISTRY[name].collectives)]


def schedule_bytes(name: str, spec: str, kind: str) -> bytes | None:
    """The schedule's JSON bytes, or None when the algorithm does not apply there."""
    from synth.collectives import parse_kind

    try:
        schedule = synthesize(load_topology(spec), kind, name, **_options(name, parse_kind(kind)))
    except NotApplicable:
        return None
    return schedule.to_json().encode()


def digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("name", list(REGISTRY))
def test_same_inputs_same_bytes_in_one_process(name):
    applied = 0
    for spec, kind in cases(name):
        first = schedule_bytes(name, spec, kind)
        if first is None:
            continue
        applied += 1
        verify(Schedule.from_json(first.decode()), load_topology(spec))
        second = schedule_bytes(name, spec, kind)
        assert first == second, f"{name} {kind} on {spec}: two runs gave different schedules"
    assert applied, f"{name} applied to none of {TOPOLOGIES}: add a topology it supports"


_SCRIPT = """
import json, sys
sys.path.insert(0, {tests!r})
from test_determinism import REGISTRY, cases, digest, schedule_bytes
print(json.dumps({{f"{{name}} {{spec}} {{kind}}": digest(schedule_bytes(name, spec, kind))
                  for name in REGISTRY for spec, kind in cases(name)}}))
"""


def _digests_in_subprocess(seed: str) -> dict[str, str | None]:
    import os

    script = _SCRIPT.format(tests=str(Path(__file__).resolve().parent))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONHASHSEED": seed})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_same_bytes_across_processes_with_different_hash_seeds():
    here = {f"{name} {spec} {kind}": digest(schedule_bytes(name, spec, kind))
            for name in REGISTRY for spec, kind in cases(name)}
    assert any(value is not None for value in here.values())
    for seed in ("0", "4242"):
        there = _digests_in_subprocess(seed)
        different = sorted(key for key in here if here[key] != there.get(key))
        assert not different, f"PYTHONHASHSEED={seed} changes: {different}"


@pytest.mark.slow
def test_cli_output_files_are_byte_identical_across_hash_seeds(tmp_path):
    outputs = []
    for seed in ("1", "2"):
        folder = tmp_path / f"run{seed}"
        folder.mkdir()
        env = {"PYTHONHASHSEED": seed}
        steps = [["generate", "dgx-a100:boxes=2", "-c", "allreduce", "-a", "forest", "-o", "s.json"],
                 ["export", "msccl", "s.json", "-s", "1MiB", "-o", "s.xml"],
                 ["export", "chakra", "s.json", "-s", "1MiB", "-o", "et"]]
        for args in steps:
            outcome = run_process(args, cwd=folder, env=env)
            if outcome.code == 2 and args[0] == "export":
                continue  # an exporter may refuse (limits): then it must refuse in both runs alike
            assert outcome.code == 0, outcome.err
        outputs.append({p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
                        if p.is_file()})
    assert "s.json" in outputs[0]
    assert outputs[0].keys() == outputs[1].keys()
    for name in outputs[0]:
        assert outputs[0][name] == outputs[1][name], f"{name} differs between hash seeds"


def test_refusals_are_deterministic_too():
    topology = load_topology("ring:n=4")
    messages = set()
    for _ in range(2):
        try:
            synthesize(topology, "allgather", "ring", chunks=6)
        except SynthError as error:
            messages.add(str(error))
    assert len(messages) == 1
