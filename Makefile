# SRO: `make setup` builds .venv; `make demo` runs the quickstart search; `make test` runs the suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test clean

setup: $(STAMP)

# torch first, pinned: the CPU build that lies on this disk (a bare `torch` would pull a CUDA build)
$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,bench]'
	touch $(STAMP)

demo: setup
	$(BIN)/sro search search_spaces/quickstart.yaml

test: setup
	$(BIN)/python -m pytest -q

clean:
	rm -rf runs/quickstart runs/.cache
