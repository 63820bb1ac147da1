"""Step confidence calibrated to the episode outcome (ALGORITHMS.md §5) on coin-collector games.

The agent states, after every action, its chance that the episode will succeed; c_t is the expected
value of the stated probability (d + 0.5)/10 under the model's distribution over ten confidence
tokens (`trainers.multiturn.expected_confidence`), asked with the step number and the step limit,
and notes when the command is not a listed choice and how many earlier ones were not (stop 16).
The base model learned that format from pre-training items answered with random digits, so it is
uncalibrated. Per seed, two trainings from the same base: with the calibration term (the
group-normalized advantage −(c_d − y)² of every level, on the confidence token only:
`calibration_loss`) and its readout (the scale tokens of `trainers.readout`, fitted after each
iteration), and without either (confidence stated with the digits, not trained). Then held-out games
are played with sampling and the step confidences graded against each episode's outcome: AUROC, ECE
(10 bins), Brier — pooled and at the first step — and selective execution at 0.5, on two held-out
sets: 64 games x 2 episodes (the verdict) and the former 8 games x 16 episodes. Goal (issue 6): with
the term, held-out step AUROC >= 0.75 and ECE <= 0.15 (medians over seeds).

Run from the repo root: `.venv/bin/python bench/calibration.py` (env BENCH_ITERS, BENCH_SEEDS,
BENCH_HELD_GAMES, BENCH_EPISODES, BENCH_LR, BENCH_CALIB_WEIGHT, BENCH_READOUT_STEPS,
BENCH_TRAIN_GAMES, BENCH_JOBS to resize; 10 seeds on 2 cores: about 17-22 min, 1027 s measured at stop 17).
"""

from __future__ import annotations

import functools
import math
import multiprocessing
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from evaluators.calibration import calibration_report  # noqa: E402
from proas import GAMES, base_model, prepare, tasks  # noqa: E402
from trainers.grpo import GRPOConfig  # noqa: E402
from trainers.models import load_policy  # noqa: E402
from trainers.multiturn import MultiTurnConfig, MultiTurnTrainer, confidence_records, play_episodes  # noqa: E402
from trainers.threads import usable_cores  # noqa: E402

ITERS = int(os.environ.get("BENCH_ITERS", "24"))
SEEDS = [int(s) for s in os.environ.get("BENCH_SEEDS", "0,1,2,3,4,5,6,7,8,9").split(",")]
"""10 seeds: per-seed ECE spans 0.01-0.28, and 5 seeds gave a median (0.155) that 10 did not confirm (0.183)."""
TRAIN_GAMES = int(os.environ.get("BENCH_TRAIN_GAMES", "64"))
"""Distinct training games. With 8 (bench/proas.py's setting) the policy learns those games by heart
(training success 0.96, held-out 0.68), and an action that fails on held-out games (an invalid command,
followed by a lost episode 0.8 of the time) is recoverable on the training games (lost 0.2 of the time):
a confidence calibrated on the training episodes cannot be calibrated on the held-out ones. 64 games,
with the default weight, was chosen on tuning seeds 100 and 101 among 8, 32 and 64 (docs/agent.md)."""
JOBS = int(os.environ.get("BENCH_JOBS", str(min(2, usable_cores()))))
HELD_GAMES = int(os.environ.get("BENCH_HELD_GAMES", "64"))
EPISODES_PER_GAME = int(os.environ.get("BENCH_EPISODES", "2"))
"""The verdict's held-out set: 64 games x 2 sampled episodes. With a nearly constant c_t the ECE is the
distance between its level and the held-out step outcome rate, and on the former 8 games x 16 episodes
(same 128 episodes) that rate depended on which 8 games were drawn: chosen before the bench ran with
it (docs/agent.md, stop 15). The 8-game measure is still printed, for every model, as a second table."""
SMALL = (GAMES, 16)
"""The measure before stop 15: bench/proas.py's 8 held-out games x 16 episodes."""
LR = float(os.environ.get("BENCH_LR", "3e-4"))
"""As bench/proas.py: at 1e-3 the policy of this model collapses within 12 iterations (docs/agent.md)."""
CALIB_WEIGHT = float(os.environ.get("BENCH_CALIB_WEIGHT", str(MultiTurnConfig.calib_weight)))
"""The trainer's default weight of the term: 1 since stop 16, when the confidence question began to note
unlisted commands (chosen by a rule set before the runs, on tuning seeds 100-109; docs/agent.md)."""
READOUT_STEPS = int(os.environ.get("BENCH_READOUT_STEPS", str(MultiTurnConfig.readout_steps)))
"""With the term: the scale tokens' readout fit (`trainers.readout`); without it: none (the digits)."""
TAU = 0.5


@functools.cache
def held_out_sets() -> dict[str, tuple]:
    """name -> (held-out task, games, sampled episodes per game); the first is the verdict's. Built once
    per process (a worker grades every model it trains)."""
    big = tasks({"confidence": True, "games": HELD_GAMES}, TRAIN_GAMES)[1]
    small = tasks({"confidence": True}, TRAIN_GAMES)[1]
    return {f"{HELD_GAMES} games x {EPISODES_PER_GAME}": (big, HELD_GAMES, EPISODES_PER_GAME),
            f"{SMALL[0]} games x {SMALL[1]}": (small, *SMALL)}


def held_out_report(model, tok, held, games: int, per_game: int) -> dict:
    torch.manual_seed(1234)
    envs = [held.make_env(g) for g in range(games) for _ in range(per_game)]
    eps = play_episodes(model, tok, envs, [str(i) for i in range(len(envs))], greedy=False, max_new_tokens=10,
                        confidence=True)
    rep = calibration_report(confidence_records(eps), TAU, outcomes={i: bool(e.result.success) for i, e in enumerate(eps)})
    rep["success"] = sum(e.result.success for e in eps) / len(eps)
    return rep


def flat(r: dict) -> dict[str, float]:
    p, f, s = r["pooled"], r["first_step"], r["selective"]
    return {"success": r["success"], "AUROC": p["auroc"], "ECE": p["ece"], "Brier": p["brier"],
            "AUROC@1": f["auroc"], "ECE@1": f["ece"], "cover@.5": s["coverage"], "succ|exec": s["success_executed"]}


def grade(model, tok) -> dict[str, dict[str, float]]:
    """The model's metrics on each held-out set."""
    return {name: flat(held_out_report(model, tok, *h)) for name, h in held_out_sets().items()}


def training_task():
    """The training games: none is one a player could not tell from a game of the verdict's held-out set
    (`tasks` keeps them apart; until stop 26 only from the 8-game set's, and 22 of the 64 training games and 2
    of the base model's 8 pre-training games had a held-out game's first screen and walkthrough)."""
    return tasks({"confidence": True, "games": HELD_GAMES}, TRAIN_GAMES)[0]


def train_and_grade(seed: int, weight: float, readout_steps: int = 0) -> dict[str, dict[str, float]]:
    """One training from the base model (in a worker process: one torch thread) and its held-out metrics."""
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    train = training_task()
    model, tok = load_policy(base_model(train), "cpu")
    # every run trains its ITERS iterations: the failure clock the multi-turn trainer has since stop 53 does not stop
    # it (the bench measures calibration after a fixed training, as its figures before stop 53 did)
    cfg = MultiTurnConfig(GRPOConfig(lr=LR, steps=ITERS, group_size=8, prompts_per_step=4, max_new_tokens=10,
                                     warmup_steps=2, seed=seed, stop_on_collapse=False), confidence=True, calib_weight=weight,
                          readout_steps=readout_steps)
    MultiTurnTrainer(model, tok, cfg, [train]).train()
    return grade(model, tok)


def median_of(col: str, values: list[float]) -> float:
    """The median over seeds. An AUROC is nan where a seed's held-out episodes were all won (or all
    lost): nothing to rank. It counts as 0.5 here, as in a search's `auroc` metric, never as a pass.
    Other nan values (no episode executed at τ) are left out."""
    if col.startswith("AUROC"):
        values = [0.5 if math.isnan(v) else v for v in values]
    kept = [v for v in values if not math.isnan(v)]
    return statistics.median(kept) if kept else float("nan")


def table(rows: dict[str, list[dict[str, float]]], set_name: str) -> dict[str, dict[str, float]]:
    """Print one held-out set's per-seed rows and medians; return the medians."""
    cols = list(rows["base"][0][set_name])
    print(f"held-out: {set_name} sampled episodes; {TRAIN_GAMES} training games, {ITERS} training iterations, "
          f"lr {LR:g}, calibration weight {CALIB_WEIGHT:g}, readout steps {READOUT_STEPS}; "
          f"seeds {','.join(map(str, SEEDS))} (medians; the base row is one model)")
    print(f"{'':>22} " + " ".join(f"{c:>9}" for c in cols))
    for name in ("without term", "with term"):
        for seed, r in zip(SEEDS, rows[name]):
            print(f"{name + ' seed ' + str(seed):>22} " + " ".join(f"{r[set_name][c]:>9.3f}" for c in cols))
    med = {name: {c: median_of(c, [r[set_name][c] for r in rs]) for c in cols} for name, rs in rows.items()}
    for name, r in med.items():
        print(f"{name + (' median' if name != 'base' else ''):>22} " + " ".join(f"{r[c]:>9.3f}" for c in cols))
    return med


BANDS = ((0.0, 0.8), (0.8, 0.95), (0.95, 1.01))


def by_success(rows: list[dict], set_name: str) -> str:
    """The median AUROC of the seeds in each band of held-out success: over 30 seeds of the stop-15
    default the AUROC was high where the policy still failed often and near chance where it won 95% or
    more (few negatives to rank), so a verdict partly reflects how good the policy got on its seeds
    (docs/agent.md, stop 16)."""
    parts = []
    for lo, hi in BANDS:
        vals = [r[set_name]["AUROC"] for r in rows if lo <= r[set_name]["success"] < hi]
        parts.append(f"success {lo:g}-{min(hi, 1):g}: {len(vals)} seeds" +
                     (f", median AUROC {median_of('AUROC', vals):.3f}" if vals else ""))
    return "  with the term, by held-out success: " + "; ".join(parts)


def main() -> int:
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    t0 = time.time()
    train = training_task()
    base = prepare(train)
    sets = held_out_sets()
    for held, games, _ in sets.values():  # generated once here, not by each worker
        for g in range(games):
            held.game_path(g)
    model, tok = load_policy(base, "cpu")
    rows: dict[str, list[dict]] = {"base": [grade(model, tok)], "without term": [], "with term": []}
    jobs = [(seed, name, w, r) for seed in SEEDS
            for name, w, r in (("without term", 0.0, 0), ("with term", CALIB_WEIGHT, READOUT_STEPS))]
    # spawn, not fork: a forked child inherits torch's thread pools mid-state
    with ProcessPoolExecutor(JOBS, mp_context=multiprocessing.get_context("spawn")) as ex:
        futures = [(seed, name, ex.submit(train_and_grade, seed, w, r)) for seed, name, w, r in jobs]
        for seed, name, f in futures:
            rows[name].append(f.result())
            print(f"  [seed {seed} {name}] " + " | ".join(
                f"{set_name}: " + " ".join(f"{k} {v:.3f}" for k, v in r.items() if k in ("success", "AUROC", "ECE"))
                for set_name, r in rows[name][-1].items()) + f" ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    verdict_set, *others = sets
    for set_name in others:
        m = table(rows, set_name)
        print(f"  ({set_name}, the measure before stop 15: with the term AUROC {m['with term']['AUROC']:.3f}, "
              f"ECE {m['with term']['ECE']:.3f}; not the verdict)\n")
    med = table(rows, verdict_set)
    print(by_success(rows["with term"], verdict_set))
    w, wo = med["with term"], med["without term"]
    unranked = sum(math.isnan(r[verdict_set]["AUROC"]) for r in rows["with term"])
    ok = w["AUROC"] >= 0.75 and w["ECE"] <= 0.15
    print(f"{'PASS' if ok else 'FAIL'}: with the calibration term held-out step AUROC {w['AUROC']:.3f} (goal >= 0.75), "
          f"ECE {w['ECE']:.3f} (goal <= 0.15), medians over {len(SEEDS)} seeds on {verdict_set} ({unranked} of "
          f"them with nothing to rank, AUROC counted 0.5); without it "
          f"AUROC {wo['AUROC']:.3f}, ECE {wo['ECE']:.3f} ({time.time() - t0:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
