"""Step confidence calibrated to the episode outcome (ALGORITHMS.md §5) on coin-collector games.

The agent states, after every action, its chance that the episode will succeed (a digit 0-9). The
base model learned that format from pre-training items with random digits, so it is uncalibrated.
Two trainings from the same base: with the calibration term (a group-normalized advantage
−(c_t − y)² on the confidence tokens only) and without it (confidence stated, not trained). Then
held-out games are played with sampling and the step confidences graded against each episode's
outcome: AUROC, ECE (10 bins), Brier — pooled and at the first step — and selective execution.
Goal (issue 6): with the term, held-out step AUROC >= 0.75 and ECE <= 0.15.

Run from the repo root: `.venv/bin/python bench/calibration.py` (BENCH_ITERS to resize).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from evaluators.calibration import calibration_report  # noqa: E402
from proas import GAMES, base_model, tasks  # noqa: E402
from trainers.grpo import GRPOConfig  # noqa: E402
from trainers.models import load_policy  # noqa: E402
from trainers.multiturn import MultiTurnConfig, MultiTurnTrainer, confidence_records, play_episodes  # noqa: E402

ITERS = int(os.environ.get("BENCH_ITERS", "12"))
EPISODES_PER_GAME = 8
TAU = 0.5


def held_out_report(model, tok, held) -> dict:
    torch.manual_seed(1234)
    envs = [held.make_env(g) for g in range(GAMES) for _ in range(EPISODES_PER_GAME)]
    eps = play_episodes(model, tok, envs, [str(i) for i in range(len(envs))], greedy=False, max_new_tokens=10,
                        confidence=True)
    rep = calibration_report(confidence_records(eps), TAU)
    rep["success"] = sum(e.result.success for e in eps) / len(eps)
    return rep


def main() -> int:
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    t0 = time.time()
    train, held = tasks({"confidence": True})
    base = base_model(train)
    rows = {}
    model, tok = load_policy(base, "cpu")
    rows["base"] = held_out_report(model, tok, held)
    for name, w in (("without term", 0.0), ("with term", 1.0)):
        model, tok = load_policy(base, "cpu")
        cfg = MultiTurnConfig(GRPOConfig(lr=1e-3, steps=ITERS, group_size=8, prompts_per_step=4, max_new_tokens=10,
                                         warmup_steps=2, seed=0), confidence=True, calib_weight=w)
        MultiTurnTrainer(model, tok, cfg, [train]).train()
        rows[name] = held_out_report(model, tok, held)
    print(f"held-out: {GAMES} games x {EPISODES_PER_GAME} sampled episodes; {ITERS} training iterations")
    print(f"{'':>14} {'success':>8} {'AUROC':>7} {'ECE':>6} {'Brier':>6} {'AUROC@1':>8} {'ECE@1':>6} "
          f"{'cover@.5':>8} {'succ|exec':>9}")
    for name, r in rows.items():
        p, f, s = r["pooled"], r["first_step"], r["selective"]
        print(f"{name:>14} {r['success']:>8.3f} {p['auroc']:>7.3f} {p['ece']:>6.3f} {p['brier']:>6.3f} "
              f"{f['auroc']:>8.3f} {f['ece']:>6.3f} {s['coverage']:>8.3f} {s['success_executed']:>9.3f}")
    w = rows["with term"]["pooled"]
    ok = w["auroc"] >= 0.75 and w["ece"] <= 0.15
    print(f"{'PASS' if ok else 'FAIL'}: with the calibration term held-out step AUROC {w['auroc']:.3f} (goal >= 0.75), "
          f"ECE {w['ece']:.3f} (goal <= 0.15); without it AUROC {rows['without term']['pooled']['auroc']:.3f}, "
          f"ECE {rows['without term']['pooled']['ece']:.3f} ({time.time() - t0:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
