"""Each trainer algorithm from the embedded base model on the quickstart domains, 3 seeds:
median held-out accuracy before → after, side by side in one process.

Goal (issue: trainer layer): every algorithm improves on the base model on every benchmark. The quickstart
is single-turn, so the algorithms declared only for multi-turn agents (ProAS: bench/proas.py) are left out.
Run from the repo root after `make setup`:  .venv/bin/python bench/trainers.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402

from bench.common import quickstart, score_table  # noqa: E402
from sro.executor import run_trial  # noqa: E402
from sro.recipe import Recipe  # noqa: E402
from trainers.algorithms import ALGORITHMS  # noqa: E402

SEEDS = (0, 1, 2)
# one shared recipe, the middle of the quickstart space; only the algorithm changes
RECIPE = {"lr": 1e-4, "steps": 30, "group_size": 8, "prompts_per_step": 16, "eps": 0.2, "temperature": 1.0,
          "max_new_tokens": 8}


def main() -> int:
    console = Console()
    ctx = quickstart()
    base = ctx.score_base()
    keys = list(base)
    table = score_table("held-out accuracy, median of 3 seeds (base → after 30 steps)", keys, "algorithm",
                        ("trial s",))
    failures = []
    names = [n for n in ALGORITHMS.names() if "single_turn" in ALGORITHMS.get(n).applies_to]
    for name in names:
        runs = []
        t0 = time.monotonic()
        for seed in SEEDS:
            out = run_trial(Recipe({**RECIPE, "algorithm": name, "seed": seed}), ctx)
            runs.append(out.scores)
        med = {k: statistics.median(r[k] for r in runs) for k in keys}
        secs = (time.monotonic() - t0) / len(SEEDS)
        table.add_row(name, *[f"{base[k]:.3f} → {med[k]:.3f}" for k in keys], f"{secs:.0f}")
        if not all(med[k] > base[k] for k in keys):
            failures.append(name)
    console.print(table)
    ok = not failures
    console.print(f"summary: {len(names) - len(failures)}/{len(names)} single-turn algorithms "
                  f"improve every benchmark over the base model (median of {len(SEEDS)} seeds)"
                  + ("" if ok else f"; not: {', '.join(failures)}"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
