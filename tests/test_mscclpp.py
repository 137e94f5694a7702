"""MSCCL++ execution plans: the plan's structure as the executor parses it, a symbolic
replay of the plan (every gpu's threadblocks run concurrently, semaphores count, multimem reads and writes
the whole group) that must reach the collective's postcondition in any interleaving, determinism, the
refusals, and ``synth export mscclpp``."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
from helpers import assert_refused, run_cli

from synth.algorithms import synthesize
from synth.collectives import Collective, Kind
from synth.errors import NotApplicable
from synth.export.mscclpp import MSCCLPP_COMMIT, plan_json, to_mscclpp_plan, write_mscclpp_plan
from synth.library import load_topology
from synth.schedule import ScheduleBuilder
from synth.topology import Topology
from synth.verify import verify

#: Op names the executor's parser accepts (execution_plan.cc getOpType at MSCCLPP_COMMIT).
PARSER_OPS = {"nop", "barrier", "put", "pws", "pwsf", "get", "copy", "signal", "wait", "flush", "re", "res", "rre",
              "rres", "ppkt", "rppkt", "respkt", "cpkt", "upkt", "repkt", "recpkt", "recspkt", "glres", "gstore",
              "gstorepkt", "rlxsignal", "rlxwait", "pipeline", "sem_acquire", "sem_release"}


# ------------------------------------------------------------------------------------------ schedules
def ring_allreduce():
    topo = load_topology("dgx-h100")
    return synthesize(topo, "allreduce", "ring"), topo


def nvls_allreduce(topo: Topology | None = None, skip: int | None = None):
    """NVLS allreduce: per chunk c, the switch reduces every rank's c to rank c, which multicasts it back.
    With ``skip``, rank ``skip`` does not contribute to chunk 0's reduce (a subset of the group)."""
    topo = topo or load_topology("dgx-h100")
    n = topo.num_ranks
    gpus = topo.gpus
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, n, n), topo.name, gpus, "nvls")
    for c in range(n):
        k = b.add_switch_op("nvs", "reduce", c)
        for r in range(n):
            if c == 0 and r == skip:
                continue
            b.add_to_switch(r, k, (gpus[r], "nvs"))
        out = b.add_from_switch(k, c, ("nvs", gpus[c]))
        after = [out]
        if c == 0 and skip is not None:  # the skipped rank adds its part point to point, through the switch
            after.append(b.add(skip, 0, 0, (gpus[skip], "nvs", gpus[0]), "reduce", deps=[out]))
        m = b.add_switch_op("nvs", "multicast", c)
        b.add_to_switch(c, m, (gpus[c], "nvs"), deps=after)
        for r in range(n):
            if r != c:
                b.add_from_switch(m, r, ("nvs", gpus[r]))
    return b.build(), topo


def nvls_reducescatter():
    """Reduce-scatter by ld_reduce alone: chunk c's sum goes to rank c only."""
    topo = load_topology("dgx-h100")
    n, gpus = topo.num_ranks, topo.gpus
    b = ScheduleBuilder(Collective(Kind.REDUCESCATTER, n, n), topo.name, gpus, "nvls-rs")
    for c in range(n):
        k = b.add_switch_op("nvs", "reduce", c)
        for r in range(n):
            b.add_to_switch(r, k, (gpus[r], "nvs"))
        b.add_from_switch(k, c, ("nvs", gpus[c]))
    return b.build(), topo


# ------------------------------------------------------------------------------------------ the replay
class Replay:
    """Runs a plan's ops symbolically: cells hold sets of contributions (the ranks whose input is summed in),
    memory/port channels count signals per (receiver, sender) pair, device semaphores count, and a switch
    channel reads and writes the same position on every gpu of its group. Every threadblock of every gpu is
    a process; ``rng`` picks which runnable one steps next, so different seeds try different interleavings. A
    gpu's buffers hold its input only once its kernel has started (its first op): reading or writing another
    gpu's buffers before that is an error, as the user may still be writing them; so is writing into a gpu
    whose threadblocks have all ended (the user may already read its output)."""

    def __init__(self, plan: dict, initial: dict) -> None:
        self.plan = plan
        self.initial = initial
        self.started: set[int] = set()
        self.finished: set[int] = set()
        self.cells: dict[tuple[int, str, int], frozenset | None] = {}
        self.tokens: Counter = Counter()
        self.sems: Counter = Counter()

    def _peer(self, gpu: dict, tb: dict, kind: str, local: int) -> int:
        ids = next(ch["channel_ids"] for ch in tb["channels"] if ch["channel_type"] == kind)
        entry = next(ch for ch in gpu["channels"] if ch["channel_type"] == kind)
        return entry["connected_to"][ids[local]]

    def _switch(self, gpu: dict, tb: dict, local: int) -> tuple[str, list[int]]:
        ids = next(ch["channel_ids"] for ch in tb["channels"] if ch["channel_type"] == "switch")
        entry = [ch for ch in gpu["channels"] if ch["channel_type"] == "switch"][ids[local]]
        (group,) = entry["rank_groups"]
        assert group["size"] == len(group["ranks"])
        return entry["buffer_type"], group["ranks"]

    def _remote(self, gpu: dict, tb: dict, kind: str, local: int) -> tuple[int, str]:
        ids = next(rb["remote_buffer_ids"] for rb in tb["remote_buffer_refs"] if rb["access_channel_type"] == kind)
        buffer = gpu["remote_buffers"][ids[local]]
        assert kind in buffer["access_channel_types"]
        return buffer["rank"], buffer["type"]

    def write(self, key: tuple[int, str, int], value: frozenset) -> None:
        assert key[0] in self.started, f"writes {key} before gpu {key[0]}'s kernel started"
        assert key[0] not in self.finished, f"writes {key} after gpu {key[0]}'s kernel ended"
        self.cells[key] = value

    def read(self, key: tuple[int, str, int]) -> frozenset:
        assert key[0] in self.started, f"reads {key} before gpu {key[0]}'s kernel started"
        value = self.cells.get(key)
        assert value is not None, f"reads {key} before anything was written there"
        return value

    def step(self, g: int, tb: dict, op: dict) -> bool:
        """Run ``op`` on gpu ``g``; False when it must wait."""
        gpu = self.plan["gpus"][g]
        name = op["name"]
        if g not in self.started:
            self.started.add(g)
            self.cells.update((key, value) for key, value in self.initial.items() if key[0] == g)
        if name == "wait":
            peers = [(self._peer(gpu, tb, op["channel_type"], i), op["channel_type"]) for i in op["channel_ids"]]
            if any(self.tokens[(g, p, kind)] <= 0 for p, kind in peers):
                return False
            for p, kind in peers:
                self.tokens[(g, p, kind)] -= 1
        elif name == "signal":
            for i in op["channel_ids"]:
                self.tokens[(self._peer(gpu, tb, op["channel_type"], i), g, op["channel_type"])] += 1
        elif name == "sem_acquire":
            (sem,) = op["semaphore_ids"]
            if self.sems[(g, sem)] <= 0:
                return False
            self.sems[(g, sem)] -= 1
        elif name == "sem_release":
            for sem in op["semaphore_ids"]:
                self.sems[(g, sem)] += 1
        elif name in ("put", "pwsf"):
            (src,), (dst,) = op["src_buff"], op["dst_buff"]
            peer, btype = self._remote(gpu, tb, op["channel_type"], dst["buffer_id"])
            self.write((peer, btype, dst["index"]), self.read((g, src["type"], src["index"])))
            if name == "pwsf":
                (cid,) = op["channel_ids"]
                assert self._peer(gpu, tb, "port", cid) == peer
                self.tokens[(peer, g, "port")] += 1
        elif name == "copy":
            (src,), (dst,) = op["src_buff"], op["dst_buff"]
            self.write((g, dst["type"], dst["index"]), self.read((g, src["type"], src["index"])))
        elif name == "re":
            first, other = op["src_buff"]
            (dst,) = op["dst_buff"]
            a, b = self.read((g, first["type"], first["index"])), self.read((g, other["type"], other["index"]))
            assert not a & b, f"gpu {g} counts {sorted(a & b)} twice"
            self.write((g, dst["type"], dst["index"]), a | b)
        elif name == "glres":
            (src,), (dst,) = op["src_buff"], op["dst_buff"]
            btype, ranks = self._switch(gpu, tb, src["switch_channel_id"])
            assert g in ranks
            total: frozenset = frozenset()
            for r in ranks:
                value = self.read((r, btype, src["index"]))
                assert not total & value, f"ld_reduce counts {sorted(total & value)} twice"
                total |= value
            out_type, out_ranks = self._switch(gpu, tb, dst["switch_channel_id"])
            for r in out_ranks:
                self.write((r, out_type, dst["index"]), total)
        elif name == "gstore":
            (src,), (dst,) = op["src_buff"], op["dst_buff"]
            value = self.read((g, src["type"], src["index"]))
            out_type, out_ranks = self._switch(gpu, tb, dst["switch_channel_id"])
            assert g in out_ranks
            for r in out_ranks:
                self.write((r, out_type, dst["index"]), value)
        else:
            assert name == "nop", name
        return True

    def run(self, rng: random.Random) -> None:
        pcs = {(g["id"], tb["id"]): 0 for g in self.plan["gpus"] for tb in g["threadblocks"]}
        tbs = {(g["id"], tb["id"]): tb for g in self.plan["gpus"] for tb in g["threadblocks"]}
        while True:
            live = [key for key, pc in pcs.items() if pc < len(tbs[key]["ops"])]
            if not live:
                break
            rng.shuffle(live)
            for key in live:
                tb = tbs[key]
                if self.step(key[0], tb, tb["ops"][pcs[key]]):
                    pcs[key] += 1
                    if all(pc == len(tbs[k]["ops"]) for k, pc in pcs.items() if k[0] == key[0]):
                        self.finished.add(key[0])
                    break
            else:
                stuck = {key: tbs[key]["ops"][pcs[key]] for key in live}
                raise AssertionError(f"deadlock: {stuck}")
        assert all(v == 0 for v in self.tokens.values()), "signals left unconsumed"
        assert all(v == 0 for v in self.sems.values())


def replay(plan: dict, schedule, seeds=range(12)) -> None:
    """The plan reaches the collective's postcondition in every interleaving tried."""
    coll = schedule.collective
    data = "o" if coll.kind == Kind.ALLGATHER else "i"
    initial = {(r, data, chunk): frozenset({value.bit_length() - 1}) for r in range(coll.num_ranks)
               for chunk, value in coll.initial(r)}
    for seed in seeds:
        run = Replay(plan, initial)
        run.run(random.Random(seed))
        for r in range(coll.num_ranks):
            for chunk, value in coll.final(r):
                want = frozenset(i for i in range(coll.num_ranks) if value >> i & 1)
                assert run.cells.get((r, data, chunk)) == want, (seed, r, chunk, run.cells.get((r, data, chunk)))


# ------------------------------------------------------------------------------------------ structure
def check_structure(plan: dict, n: int) -> Counter:
    """What the executor's parser needs, and the executor's limits; returns op counts."""
    for field in ("name", "collective", "protocol", "inplace", "gpus", "num_threads_per_block", "buffer_alignment",
                  "min_message_size", "max_message_size", "reuse_resources", "use_double_scratch_buffer"):
        assert field in plan
    assert [g["id"] for g in plan["gpus"]] == list(range(n))
    counts: Counter = Counter()
    for gpu in plan["gpus"]:
        for field in ("input_chunks", "output_chunks", "scratch_chunks", "threadblocks", "channels", "remote_buffers"):
            assert field in gpu
        assert [tb["id"] for tb in gpu["threadblocks"]] == list(range(len(gpu["threadblocks"])))
        kinds = Counter(ch["channel_type"] for ch in gpu["channels"] if ch["channel_type"] != "switch")
        assert all(v == 1 for v in kinds.values())
        for tb in gpu["threadblocks"]:
            assert len(tb["ops"]) <= 64
            for ch in tb["channels"]:
                assert len(ch["channel_ids"]) <= 16
                entries = [c for c in gpu["channels"] if c["channel_type"] == ch["channel_type"]]
                size = len(entries) if ch["channel_type"] == "switch" else len(entries[0]["connected_to"])
                assert all(0 <= i < size for i in ch["channel_ids"])
            for rb in tb["remote_buffer_refs"]:
                assert all(0 <= i < len(gpu["remote_buffers"]) for i in rb["remote_buffer_ids"])
            for op in tb["ops"]:
                assert op["name"] in PARSER_OPS
                counts[op["name"]] += 1
                assert len(op.get("channel_ids", ())) <= 8
                for sem in op.get("semaphore_ids", ()):
                    assert 0 <= sem < len(gpu["semaphores"])
                for buff in op.get("src_buff", []) + op.get("dst_buff", []):
                    limit = {"i": gpu["input_chunks"], "o": gpu["output_chunks"], "s": gpu["scratch_chunks"]}
                    if "type" in buff:
                        assert 0 <= buff["index"] < limit[buff["type"]]
    # channels are paired: rank a lists b exactly when b lists a, with the same type
    for gpu in plan["gpus"]:
        for ch in gpu["channels"]:
            if ch["channel_type"] == "switch":
                continue
            for peer in ch["connected_to"]:
                other = [c for c in plan["gpus"][peer]["channels"] if c["channel_type"] == ch["channel_type"]]
                assert other and gpu["id"] in other[0]["connected_to"]
    return counts


def test_ring_allreduce_plan_structure_and_replay():
    schedule, topo = ring_allreduce()
    verify(schedule, topo)
    plan = to_mscclpp_plan(schedule, topo)
    counts = check_structure(plan, topo.num_ranks)
    p2p = [t for t in schedule.transfers if not t.local]
    assert counts["put"] == len(p2p)
    assert counts["re"] == sum(t.op == "reduce" for t in schedule.transfers)
    assert counts["glres"] == counts["gstore"] == 0
    assert plan["collective"] == "allreduce" and plan["protocol"] == "Simple" and plan["inplace"] is True
    replay(plan, schedule)


def test_nvls_allreduce_uses_switch_channels_and_replays():
    schedule, topo = nvls_allreduce()
    verify(schedule, topo)
    plan = to_mscclpp_plan(schedule, topo)
    counts = check_structure(plan, topo.num_ranks)
    # each reduce and its multicast become one glres, issued by the chunk's owner
    assert counts["glres"] == topo.num_ranks and counts["gstore"] == 0 and counts["put"] == 0
    for gpu in plan["gpus"]:
        switch = [ch for ch in gpu["channels"] if ch["channel_type"] == "switch"]
        assert switch == [{"channel_type": "switch", "buffer_type": "i",
                           "rank_groups": [{"size": 8, "ranks": list(range(8))}]}]
        glres = [op for tb in gpu["threadblocks"] for op in tb["ops"] if op["name"] == "glres"]
        assert [op["src_buff"][0]["index"] for op in glres] == [gpu["id"]]
    replay(plan, schedule)


def test_the_replay_catches_a_plan_without_its_start_handshake():
    """Without the first signal/wait with every peer, a gpu writes (ring) or multimem-reads (NVLS) a peer's
    buffer before the peer's kernel has started: the replay must see it."""
    import copy

    for build, problem in ((ring_allreduce, "before gpu"), (nvls_allreduce, "before gpu")):
        schedule, topo = build()
        plan = copy.deepcopy(to_mscclpp_plan(schedule, topo))
        for gpu in plan["gpus"]:
            ops = gpu["threadblocks"][0]["ops"]
            assert [op["name"] for op in ops[:2]] == ["signal", "wait"]
            del ops[:2]
        with pytest.raises(AssertionError, match=problem):
            replay(plan, schedule, seeds=range(20))


def test_nvls_allgather_multicasts_with_gstore():
    topo = load_topology("dgx-h100")
    schedule = synthesize(topo, "allgather", "nvls")
    plan = to_mscclpp_plan(schedule, topo)
    counts = check_structure(plan, topo.num_ranks)
    assert counts["gstore"] == topo.num_ranks and counts["glres"] == counts["put"] == 0
    replay(plan, schedule)


def test_switch_op_reading_scratch_uses_a_scratch_switch_channel():
    """Every rank copies its value to scratch slot 0; the switch reduces slot 0 of every gpu and stores the sum
    to every data cell: glres reads one switch channel (scratch) and writes another (input)."""
    topo = load_topology("dgx-h100")
    n, gpus = topo.num_ranks, topo.gpus
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, n, 1), topo.name, gpus, "scratch-nvls")
    copies = [b.add(r, r, 0, (gpus[r],), dst_scratch=0) for r in range(n)]
    k = b.add_switch_op("nvs", "reduce", 0)
    for r in range(n):
        b.add_to_switch(r, k, (gpus[r], "nvs"), deps=[copies[r]], src_scratch=0)
    for r in range(n):
        b.add_from_switch(k, r, ("nvs", gpus[r]))
    schedule = b.build()
    verify(schedule, topo)
    plan = to_mscclpp_plan(schedule, topo)
    counts = check_structure(plan, n)
    assert counts["glres"] == 1 and counts["copy"] == n
    for gpu in plan["gpus"]:
        assert sorted(ch["buffer_type"] for ch in gpu["channels"] if ch["channel_type"] == "switch") == ["i", "s"]
        assert gpu["scratch_chunks"] == 1
    replay(plan, schedule)


def test_reduce_scatter_by_ld_reduce_alone_stores_to_dead_cells_and_replays():
    schedule, topo = nvls_reducescatter()
    verify(schedule, topo)
    plan = to_mscclpp_plan(schedule, topo)
    assert check_structure(plan, topo.num_ranks)["glres"] == topo.num_ranks
    assert plan["gpus"][0]["input_chunks"] == 8 and plan["gpus"][0]["output_chunks"] == 1
    replay(plan, schedule)


@pytest.mark.parametrize("topology,collective,algorithm", [
    ("switch:n=4", "allgather", "ring"), ("switch:n=4", "reducescatter", "ring"), ("switch:n=4", "broadcast", "binomial"),
    ("switch:n=4", "reduce", "binomial"), ("switch:n=4", "allreduce", "tree"), ("dgx-h100", "allreduce", "nvls"),
    ("dgx-h100", "allgather", "nvls"), ("dgx-h100", "reducescatter", "nvls"), ("dgx-h100", "broadcast", "nvls"),
    ("dgx-h100", "reduce", "nvls"), ("switch:n=4", "allreduce", "rhd"), ("switch:n=4", "allreduce", "nccl"),
    ("dgx-h100", "allgather", "bruck"), ("dgx-h100-2box", "allgather", "hierarchical")])
def test_other_collectives_replay(topology, collective, algorithm):
    topo = load_topology(topology)
    schedule = synthesize(topo, collective, algorithm)
    verify(schedule, topo)
    plan = to_mscclpp_plan(schedule, topo)
    check_structure(plan, topo.num_ranks)
    replay(plan, schedule, seeds=range(4))


def test_two_boxes_use_port_channels():
    topo = load_topology("dgx-h100-2box")
    schedule = synthesize(topo, "allreduce", "ring")
    plan = to_mscclpp_plan(schedule, topo)
    counts = check_structure(plan, topo.num_ranks)
    assert counts["pwsf"] > 0 and counts["pwsf"] + counts["put"] == len(schedule.transfers)
    port = [g for g in plan["gpus"] if any(c["channel_type"] == "port" for c in g["channels"])]
    assert port
    replay(plan, schedule, seeds=range(3))


def test_small_threadblock_limit_chains_threadblocks():
    from synth.export.mscclpp import MscclppLimits

    schedule, topo = ring_allreduce()
    plan = to_mscclpp_plan(schedule, topo, limits=MscclppLimits(max_ops_per_threadblock=12))
    counts = check_structure(plan, topo.num_ranks)
    assert counts["sem_acquire"] == counts["sem_release"] > 0
    replay(plan, schedule, seeds=range(4))
    with pytest.raises(NotApplicable, match="threadblocks"):
        to_mscclpp_plan(schedule, topo, limits=MscclppLimits(max_ops_per_threadblock=12, max_threadblocks=2))


def test_export_is_deterministic(tmp_path):
    for build in (ring_allreduce, nvls_allreduce):
        schedule, topo = build()
        write_mscclpp_plan(schedule, topo, tmp_path / "a.json")
        write_mscclpp_plan(schedule, topo, tmp_path / "b.json")
        assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
        assert plan_json(to_mscclpp_plan(schedule, topo)).encode() == (tmp_path / "a.json").read_bytes()


# ------------------------------------------------------------------------------------------ refusals
def test_refuses_a_reduce_over_a_subset_of_the_group():
    schedule, topo = nvls_allreduce(skip=3)
    verify(schedule, topo)  # a valid schedule: rank 3 adds its part point to point
    with pytest.raises(NotApplicable) as refused:
        to_mscclpp_plan(schedule, topo)
    text = str(refused.value)
    assert "switch op 0" in text and "ranks [3]" in text and "every gpu of a switch channel's group" in text


def test_refuses_a_switch_across_boxes():
    """An InfiniBand SHARP-style switch joining two boxes: no MSCCL++ switch channel spans boxes."""
    gpus = ["b0.gpu0", "b0.gpu1", "b1.gpu0", "b1.gpu1"]
    from synth.library.nvidia import sharp_capabilities

    topo = Topology.build("sharp-2box", gpus, ["ib"], [(g, "ib", 50.0, 1.0) for g in gpus], boxes=[0, 0, 1, 1],
                          capabilities={"ib": sharp_capabilities()})
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 4, 1), topo.name, gpus, "sharp")
    k = b.add_switch_op("ib", "reduce", 0)
    for r in range(4):
        b.add_to_switch(r, k, (gpus[r], "ib"))
    for r in range(4):
        b.add_from_switch(k, r, ("ib", gpus[r]))
    schedule = b.build()
    verify(schedule, topo)
    with pytest.raises(NotApplicable) as refused:
        to_mscclpp_plan(schedule, topo)
    text = str(refused.value)
    assert "switch op 0" in text and "boxes [0, 1]" in text and "InfiniBand SHARP" in text


def test_refuses_a_lone_reduce_whose_store_would_clobber_a_live_cell():
    """A reduce to rank 0 only, after which rank 1 still reads its own cell of the chunk: glres would have
    stored the sum there first."""
    topo = load_topology("dgx-h100")
    n, gpus = topo.num_ranks, topo.gpus
    b = ScheduleBuilder(Collective(Kind.REDUCE, n, 1, root=0), topo.name, gpus, "lone")
    k = b.add_switch_op("nvs", "reduce", 0)
    for r in range(n):
        b.add_to_switch(r, k, (gpus[r], "nvs"))
    out = b.add_from_switch(k, 0, ("nvs", gpus[0]))
    b.add(1, 1, 0, (gpus[1],), deps=[out], dst_scratch=0)  # rank 1 copies its own value of chunk 0 later
    schedule = b.build()
    with pytest.raises(NotApplicable) as refused:
        to_mscclpp_plan(schedule, topo)
    text = str(refused.value)
    assert "switch op 0" in text and "glres" in text and "transfer" in text


def test_refuses_alltoall_and_other_protocols():
    topo = load_topology("switch:n=4")
    schedule = synthesize(topo, "alltoall", "direct")
    with pytest.raises(NotApplicable, match="alltoall"):
        to_mscclpp_plan(schedule, topo)
    ring = synthesize(topo, "allreduce", "ring")
    from synth.errors import InputError

    with pytest.raises(InputError, match="Simple"):
        to_mscclpp_plan(ring, topo, protocol="LL")


def test_module_names_the_commit_read():
    import synth.export.mscclpp as module

    assert MSCCLPP_COMMIT in (module.__doc__ or "")


# ------------------------------------------------------------------------------------------ CLI
@pytest.fixture
def cli(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)

    def run(*args: str):
        return run_cli(list(args), capsys, monkeypatch)

    return run


def test_cli_export_mscclpp_writes_the_plan(cli, tmp_path):
    schedule, topo = nvls_allreduce()
    Path("nvls.json").write_text(schedule.to_json())
    outcome = cli("export", "mscclpp", "nvls.json", "-t", "dgx-h100", "-o", "plan.json", "--json")
    assert outcome.code == 0, outcome.err
    report = json.loads(outcome.out)
    assert report["output"] == "plan.json" and report["ops"]["glres"] == 8
    assert json.loads(Path("plan.json").read_text()) == to_mscclpp_plan(schedule, topo, name=report["name"])
    outcome = cli("export", "mscclpp", "nvls.json", "-t", "dgx-h100", "-o", "plan2.json")
    assert outcome.code == 0 and "plan2.json" in outcome.out


def test_cli_refusal_exits_2_and_writes_nothing(cli):
    schedule, _ = nvls_allreduce(skip=3)
    Path("subset.json").write_text(schedule.to_json())
    outcome = cli("export", "mscclpp", "subset.json", "-t", "dgx-h100", "-o", "plan.json")
    assert_refused(outcome, "switch op 0", "multimem.ld_reduce")
    assert not Path("plan.json").exists()
