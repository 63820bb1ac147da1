"""Off-policy training: rollouts reused for 4 passes and trained 2 updates stale, on the quickstart
domains from the embedded base model — plain policy gradient, CISPO, GRPO-clip and Proximal KL side
by side on the same recipe and seeds (ALGORITHMS.md §3).

Goal (issue: trainer layer): Proximal KL ends at or above the best of the others (the median over seeds
of each seed's held-out accuracy averaged over the benchmarks) and does not collapse on any seed.
Run from the repo root after `make setup`:  .venv/bin/python bench/offpolicy.py
"""

from __future__ import annotations

import math
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

SEEDS = (0, 1, 2)
ALGOS = ("pg", "cispo", "grpo", "proximal_kl")
# the off-policy regime: every batch is trained on 4 times, 2 updates after it was generated; the
# failure clock watches but does not stop (stop_on_collapse false), so collapsed runs are scored too
RECIPE = {"lr": 1e-3, "steps": 20, "group_size": 8, "prompts_per_step": 16, "eps": 0.2,
          "temperature": 1.0, "num_iterations": 4, "staleness": 2, "stop_on_collapse": False}


def main() -> int:
    console = Console()
    ctx = quickstart()
    base = ctx.score_base()
    keys = list(base)
    table = score_table(f"held-out accuracy, reuse {RECIPE['num_iterations']} x staleness {RECIPE['staleness']}, "
                        f"lr {RECIPE['lr']:g}, {RECIPE['steps']} steps, median of {len(SEEDS)} seeds",
                        keys, "algorithm", ("mean", "collapsed (seeds)", "last |δ_stale|", "trial s"))
    result = {}
    for name in ALGOS:
        runs, collapsed, stale = [], 0, []
        t0 = time.monotonic()
        for seed in SEEDS:
            out = run_trial(Recipe({**RECIPE, "algorithm": name, "seed": seed}), ctx)
            runs.append(out.scores)
            collapsed += "collapsed_at_samples" in out.metrics
            # a step that failed on non-finite values records no stale_kl (a collapse, counted above)
            stale.append(next((c["stale_kl"] for c in reversed(out.curve) if "stale_kl" in c), math.nan))
        med = {k: statistics.median(r[k] for r in runs) for k in keys}
        mean = statistics.median(sum(r[k] for k in keys) / len(keys) for r in runs)
        result[name] = (mean, collapsed)
        table.add_row(name, *[f"{base[k]:.3f} → {med[k]:.3f}" for k in keys], f"{mean:.3f}", str(collapsed),
                      f"{statistics.median(stale):.3f}", f"{(time.monotonic() - t0) / len(SEEDS):.0f}")
        console.print(f"{name}: median mean held-out {mean:.3f}, collapsed on {collapsed} seed(s)")
    console.print(table)
    prox, prox_collapsed = result["proximal_kl"]
    best_other = max(v[0] for k, v in result.items() if k != "proximal_kl")
    ok = prox >= best_other and prox_collapsed == 0
    console.print(f"summary: Proximal KL {prox:.3f} vs best other {best_other:.3f} "
                  f"({prox / max(best_other, 1e-9):.2f}x), collapsed on {prox_collapsed}/{len(SEEDS)} seeds "
                  f"(goal: >= best, no collapse)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
