"""The solvers behind the bandwidth bounds, a property of the topology (the routing layer).

- :mod:`synth.cuts.network`: exact integer flow networks from a topology; compiled max-flow.
- :mod:`synth.cuts.allgather`: the exact allgather cut bound (the optimal rate x* and its bottleneck cut)
  and the best rate for K trees per root.
- :mod:`synth.cuts.quotient`: max-flows on a fabric's symmetry classes instead of its nodes.
- :mod:`synth.cuts.symmetry`: box translations, rotation groups and gpu orbits.
- :mod:`synth.cuts.alltoall`: the alltoall bound, the max concurrent flow LP and the cut bound beside it.

:mod:`synth.bounds` is the public face of these; the algorithms that meet the bounds (forest, mcf) import
the solvers from here.
"""
