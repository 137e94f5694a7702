"""Scale-out fabrics of hosts and switches: EFLOPS BiGraph and the dragonfly."""

from __future__ import annotations

from synth.library.building import (
    SWITCH_HOP_US,
    LinkSpec,
    bandwidth_value,
    integer_at_least,
    latency_value,
    require,
    within_build_limits,
)
from synth.library.registry import entry
from synth.topology import Topology


@entry("bigraph", "EFLOPS BiGraph: two switch layers, complete bipartite, hosts on every switch", shipped=True)
def bigraph(upper: int = 4, lower: int = 4, hosts_per_switch: int = 4, bandwidth: float = 12.5,
            latency: float = 1.0) -> Topology:
    """Alibaba EFLOPS BiGraph (HPCA 2020): upper-layer switches ``up{i}`` each linked to every
    lower-layer switch ``low{j}`` (no links inside a layer), ``hosts_per_switch`` hosts on every switch.

    Hosts are ``gpu{r}``, numbered switch by switch (upper layer first). Switch hops between hosts:
    same switch 1, opposite layer 2, same layer 3. The default is the common 32-host size (4+4 switches,
    4 hosts each). 12.5 GB/s (100 Gb/s) and 1.0 µs per link are assumptions (parameters).

    Examples
    --------
    >>> t = bigraph()
    >>> t.num_ranks, len(t.switches), t.has_link("up0", "low3"), t.has_link("up0", "up1")
    (32, 8, True, False)
    """
    upper = integer_at_least(upper, "upper", 1)
    lower = integer_at_least(lower, "lower", 1)
    hosts_per_switch = integer_at_least(hosts_per_switch, "hosts_per_switch", 1)
    bandwidth, latency = bandwidth_value(bandwidth, "bandwidth"), latency_value(latency, "latency")
    switch_ids = [f"up{i}" for i in range(upper)] + [f"low{j}" for j in range(lower)]
    within_build_limits(len(switch_ids) * (hosts_per_switch + 1), len(switch_ids) * hosts_per_switch + upper * lower)
    hosts = [f"gpu{r}" for r in range(len(switch_ids) * hosts_per_switch)]
    links: list[LinkSpec] = [(h, switch_ids[r // hosts_per_switch], bandwidth, latency) for r, h in enumerate(hosts)]
    links += [(f"up{i}", f"low{j}", bandwidth, latency) for i in range(upper) for j in range(lower)]
    return Topology.build(
        "bigraph", hosts, switch_ids, links,
        description=f"EFLOPS BiGraph: {upper}+{lower} switches (complete bipartite), {hosts_per_switch} hosts "
                    f"per switch, {bandwidth} GB/s per link")


@entry("dragonfly", "dragonfly (Kim et al. 2008): groups of fully connected routers, terminals on each router, "
       "relative global links")
def dragonfly(p: int = 2, a: int = 4, h: int = 2, groups: int | None = None, bandwidth: float = 25.0,
              global_bandwidth: float | None = None, latency: float = SWITCH_HOP_US) -> Topology:
    """A dragonfly network: ``groups`` groups of ``a`` routers, ``p`` terminals (gpus) on every router.

    Routers of a group are fully connected (local links); every router has ``h`` global ports. Global
    port k of group G (k = router * h + port, 0 <= k < a*h) goes to group G + 1 + (k mod (groups - 1)),
    arriving on the port with the opposite offset (the "relative" arrangement, so moving every group to
    the next is a symmetry). ``groups`` defaults to the largest, a*h + 1 (one global link per pair of
    groups); a smaller value must make groups - 1 divide a*h (parallel global links). Terminal t of
    router r of group G is ``gpu{(G*a + r)*p + t}`` on router ``g{G}.r{r}``; boxes are groups.

    Sources: J. Kim, W. J. Dally, S. Scott, D. Abts, "Technology-Driven, Highly-Scalable Dragonfly
    Topology", ISCA 2008 (groups, a/p/h, balance a = 2p = 2h, g <= a*h + 1). Assumptions (parameters):
    25 GB/s per link (200 Gb/s ports, as HPE Slingshot's), global links as fast as local ones, 0.5 µs per
    hop. The default (p=2, a=4, h=2: 9 groups, 72 gpus) is the smallest balanced one. Gpus do not
    forward: the routers do.

    Examples
    --------
    >>> t = dragonfly()
    >>> t.num_ranks, len(t.switches), t.has_link("g0.r0", "g1.r3"), t.has_link("g0.r1", "g3.r2")
    (72, 36, True, True)
    """
    p, a, h = integer_at_least(p, "p", 1), integer_at_least(a, "a", 1), integer_at_least(h, "h", 1)
    groups = a * h + 1 if groups is None else integer_at_least(groups, "groups", 2)
    require((a * h) % (groups - 1) == 0, f"groups - 1 ({groups - 1}) must divide a*h ({a * h})")
    bandwidth, latency = bandwidth_value(bandwidth, "bandwidth"), latency_value(latency, "latency")
    global_bandwidth = bandwidth if global_bandwidth is None else bandwidth_value(global_bandwidth, "global_bandwidth")
    require(groups * a * p >= 2, "the network needs at least 2 gpus")
    within_build_limits(groups * a * (p + 1), groups * a * (p + a + h))
    gpus = [f"gpu{r}" for r in range(groups * a * p)]
    routers = [f"g{g}.r{r}" for g in range(groups) for r in range(a)]
    links: list[LinkSpec] = [(gpus[index], routers[index // p], bandwidth, latency) for index in range(len(gpus))]
    for g in range(groups):
        links += [(f"g{g}.r{i}", f"g{g}.r{j}", bandwidth, latency) for i in range(a) for j in range(i + 1, a)]
    span = groups - 1
    global_links: list[LinkSpec] = []
    for g in range(groups):
        for k in range(a * h):
            offset = k % span + 1
            other = (g + offset) % groups
            k_other = (k // span) * span + (span - offset)
            if (g, k) < (other, k_other):
                global_links.append((f"g{g}.r{k // h}", f"g{other}.r{k_other // h}", global_bandwidth, latency))
    return Topology.build(
        "dragonfly", gpus, routers, links + global_links, boxes=[r // (a * p) for r in range(len(gpus))],
        description=f"dragonfly: {groups} groups x {a} routers x {p} gpus, {h} global links per router, "
                    f"{bandwidth:g} GB/s local, {global_bandwidth:g} GB/s global")
