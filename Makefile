# The README's two commands: `make run` and `make test`. Everything a fresh machine needs happens here.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-fast test-explore lint bench bench-quick bench-record docs astra-check catalog-check clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/synth demo

# ruff, the layer contract (tests/test_layers.py: which modules may import which; see docs/architecture.md),
# then mypy ([tool.mypy] in pyproject.toml: strict on the core modules)
lint: $(STAMP)
	$(BIN)/ruff check synth tests bench
	$(BIN)/python -m pytest -p no:cacheprovider -q tests/test_layers.py
	$(BIN)/mypy

# -n auto: one pytest worker per core (pytest-xdist); --dist loadfile keeps each test file on one worker, as
# the README's blocks build on each other in one folder (tests/test_readme.py).
test: $(STAMP) lint
	$(BIN)/python -m pytest -n auto --dist loadfile

# The same without the tests marked slow (over about 4 s each): a quicker loop while working; make test runs all.
test-fast: $(STAMP) lint
	$(BIN)/python -m pytest -n auto --dist loadfile -m "not slow"

# The property tests with new random examples (make test runs a fixed, derandomized set: tests/conftest.py).
test-explore: $(STAMP)
	HYPOTHESIS_PROFILE=explore $(BIN)/python -m pytest -n auto --dist loadfile

# Benchmarks print their tables and write them to bench/results/local/ (ignored by git); bench-record
# rewrites the recorded figures in bench/results/ (then `make docs` remakes the tables made from them).
bench: $(STAMP)
	$(BIN)/python -m bench

bench-quick: $(STAMP)
	$(BIN)/python -m bench --quick

bench-record: $(STAMP)
	$(BIN)/python -m bench --record

# The generated parts of README.md and docs/: the CLI reference (from the commands' help, also docs/cli.md) and
# every figure table (from bench/results/*.json). tests/test_readme.py fails until they are regenerated.
docs: $(STAMP)
	$(BIN)/python -m synth.cli.reference --write
	$(BIN)/python -m bench.tables --write

# Re-verify and re-simulate every schedule of the catalog at 1 GiB (half an hour; `make test` re-simulates the
# smaller entries and checks everything else about the larger ones)
catalog-check: $(STAMP)
	$(BIN)/synth catalog --check

# ASTRA-sim against the astra model, every rank to the ns. Needs the ASTRA-sim 2.x analytical binaries (not part
# of synth): SYNTH_ASTRA_BIN=/path/to/AstraSim_Analytical_Congestion_Aware (the Unaware one is looked up next to it,
# or SYNTH_ASTRA_BIN_UNAWARE). ASTRA_CHECK_FLAGS=--quick for the 8-npu subset, --record FILE to save the numbers.
astra-check: $(STAMP)
	$(BIN)/python -m bench.bench_astra --markdown $(ASTRA_CHECK_FLAGS)

clean:
	rm -rf $(VENV) build *.egg-info
