# SRO: `make setup` builds .venv; `make demo` runs the quickstart and agent searches; `make test` runs the suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo demo-quickstart demo-agent lint test clean

setup: $(STAMP)

# torch first, pinned: the CPU build that lies on this disk (a bare `torch` would pull a CUDA build); then
# every other package at the release in constraints.txt, the environment the recorded figures were measured
# in (until stop 26 a fresh venv took the newest releases, and bench/proas.py's verdict moved with them);
# last, BoTorch's fused qLogEHVI kernel (C++, cached under ~/.cache/torch_extensions), which BoTorch 0.18
# would compile in the first search's first proposal or the suite's: about 45 s on 2 cores, once per machine
# (sro/optimizer/fused_kernel.py; without a compiler it says so and BoTorch keeps its pure-Python path)
$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -c constraints.txt -e '.[test,bench,postgres]'
	$(BIN)/python -m sro.optimizer.fused_kernel
	touch $(STAMP)

# the quickstart (two single-turn domains, 8 trials), then the agent example (TextWorld coin
# collector, multi-turn trainer, 5 minutes of trials): about 11 minutes on 2 cores from a fresh clone
demo: setup
	$(BIN)/sro search search_spaces/quickstart.yaml
	$(BIN)/sro search search_spaces/agent.yaml --budget 5m

demo-quickstart: setup
	$(BIN)/sro search search_spaces/quickstart.yaml

demo-agent: setup
	$(BIN)/sro search search_spaces/agent.yaml --budget 5m

# pyflakes and syntax errors (the rules in pyproject.toml), in seconds, before the suite
lint: setup
	$(BIN)/ruff check sro trainers evaluators tests bench search_spaces

# the suite on every core (pytest-xdist; worksteal: the few long end-to-end tests do not queue behind each
# other), one torch thread per worker so that workers do not oversubscribe the cores: on 2 cores 4 m 12 s
# (stop 32; at stop 31 5 m 51 s, against 8 m 15 s in one process). `.venv/bin/python -m pytest tests/FILE.py`
# runs part of it in one process
test: lint
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n auto --dist worksteal

clean:
	rm -rf runs/quickstart runs/agent runs/.cache
