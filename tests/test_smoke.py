"""End-to-end smoke test of the core pipeline: topology -> algorithm -> verify -> evaluate."""

from synth import evaluate, load_topology, synthesize, verify


def test_ring_allreduce_pipeline():
    topo = load_topology("ring:n=4")
    schedule = synthesize(topo, "allreduce", "ring")
    report = verify(schedule, topo)
    assert report.transfers == 24
    result = evaluate(schedule, topo, 4 * 2**20)
    assert result.time_s > result.congestion_time_s > 0
