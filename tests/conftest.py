from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MICRO = """\
name: {name}
base_model: tiny
seed: 0
domains:
  arithmetic:
    sources:
      - reasoning_gym: basic_arithmetic
        config: {{min_terms: 2, max_terms: 2, max_digits: 1, operators: ["+"], allow_negation: false,
                 allow_parentheses: false}}
    benchmarks:
      - name: add
        reasoning_gym: basic_arithmetic
        config: {{min_terms: 2, max_terms: 2, max_digits: 1, operators: ["+"], allow_negation: false,
                 allow_parentheses: false}}
        size: 24
objectives:
  - arithmetic/add: max
  - cost: min
budget: 2trials
runtime: {{tiny_pretrain_steps: 30, threads: 2}}
"""


@pytest.fixture
def micro_project(tmp_path: Path):
    """Write a micro project YAML (one domain, 24 held-out items, 30 pre-training steps)."""

    def make(name: str = "micro", extra: str = "") -> Path:
        p = tmp_path / f"{name}.yaml"
        p.write_text(MICRO.format(name=name) + extra)
        return p

    return make
