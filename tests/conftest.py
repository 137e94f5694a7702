"""Hypothesis profiles for the property tests.

``make test`` (and so CI) loads ``ci``: derandomized, the same examples on every run, so whether a commit
lands never depends on the draw. ``make test-explore`` loads ``explore`` (``HYPOTHESIS_PROFILE=explore``):
new random examples on every run, to look for bugs the fixed ones miss (it found the alltoall LP's cleanup
failure that tests/test_mcf.py now keeps as an explicit case).
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
