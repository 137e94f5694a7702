"""The up-front work estimate of `synth bound` estimates the method that runs: the quotient method on a
fabric with symmetry (its work follows the gpu orbits, not the gpus), the plain one otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from synth import limits
from synth.bounds import quotient_representatives
from synth.library import load_topology
from synth.library.files import topology_json

#: Between the two estimates for 8 DGX A100 boxes (64 gpus, 384 links): plain 147,456, quotient 4,608.
LIMIT = "100000"


def bound_cli(target: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from synth.cli import main; main()", "bound", target]
    return subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "SYNTH_MAX_GRAPH_WORK": LIMIT})


def test_the_estimate_follows_the_quotient_method_where_symmetry_applies():
    topology = load_topology("dgx-a100:boxes=8")
    links = topology.graph.number_of_edges()
    orbits = quotient_representatives(topology)
    assert orbits == 1  # every gpu is alike: one orbit
    plain, quotient = limits.graph_work(topology.num_ranks, links), limits.quotient_work(topology.num_ranks, links, orbits)
    assert quotient < int(LIMIT) < plain


def test_a_symmetric_fabric_runs_and_an_asymmetric_one_of_its_size_is_refused_up_front(tmp_path):
    done = bound_cli("dgx-a100:boxes=8")
    assert done.returncode == 0, done.stderr
    assert "GB/s" in done.stdout
    # the same fabric with one NIC link slower: no symmetry, so the plain method (and estimate) applies
    data = json.loads(topology_json(load_topology("dgx-a100:boxes=8")))
    first = next(link for link in data["links"] if "nic" in link["src"] or "nic" in link["dst"])
    first["bandwidth"] = first["bandwidth"] / 2
    uneven = tmp_path / "uneven.json"
    uneven.write_text(json.dumps(data))
    assert quotient_representatives(load_topology(str(uneven))) is None
    refused = bound_cli(str(uneven))
    assert refused.returncode == 2, refused.stdout
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "SYNTH_MAX_GRAPH_WORK" in lines[0] and "Traceback" not in refused.stderr
