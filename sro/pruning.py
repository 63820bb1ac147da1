"""Multi-objective pruning: stop a trial whose intermediate results are dominated, at the same fidelity,
by enough earlier trials.

While a trial trains, at set fractions of its steps (default 1/3 and 2/3) the policy is scored on the
first `items` items of every held-out benchmark, and the cost so far (wall seconds) is measured. These
values, per objective, are the trial's intermediate results at that fidelity; they are stored in the
ledger (`Ledger.report_intermediate`). The trial is stopped — recorded as `pruned` with its partial
results (`Ledger.end_early`) — when at least `min_dominating` earlier trials' results *at the same
fraction* dominate it (no worse on every objective, better on one) and are better on a score, not on the cost
alone (`dominating_count`); each earlier recipe counts once, by its latest run. With fewer than `min_dominating`
earlier results at that fraction nothing is pruned, so the rule is safe in a young study.

Optuna's pruners need a single intermediate value and cannot prune multi-objective studies; this rule
compares whole objective vectors. Related: successive halving and Hyperband prune by rank at fixed
fidelities (Li et al. 2018, arXiv 1603.06560); domination at equal fidelity is the multi-objective
counterpart of "worse than most at the same rung".

The budget saved by a pruned trial is the steps it did not run, and their seconds estimated from its
own pace so far (`saved_steps`, `saved_s` in its cost).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from sro.ledger import TrialRecord, counted

Objective = tuple[str, str]


def dominates(a: Sequence[float], b: Sequence[float], directions: Sequence[str]) -> bool:
    """True when vector `a` is no worse than `b` on every objective and better on at least one.

    `directions[i]` is "max" or "min"; a nan on either side makes the pair incomparable."""
    better = False
    for x, y, d in zip(a, b, directions):
        if x != x or y != y:
            return False
        if d == "min":
            x, y = -x, -y
        if x < y:
            return False
        better = better or x > y
    return better


def dominating_count(values: dict[str, float], earlier: Sequence[dict[str, float]],
                     objectives: Sequence[Objective]) -> int:
    """How many of the `earlier` result dicts dominate `values` (all keyed by objective) *and* are better on a
    score: at one fraction of their steps a longer recipe has always cost more, so where the 50-item subset
    scores tie (flat early, in steps of 0.02) the cost alone pruned every longer recipe, and a trial 0.01 s
    slower than three equal ones (a review, stop 37). Where every objective is a cost, domination alone."""
    keys, dirs = [k for k, _ in objectives], [d for _, d in objectives]
    scores = [i for i, k in enumerate(keys) if k != "cost"] or list(range(len(keys)))
    mine = [float(values.get(k, float("nan"))) for k in keys]

    def counts(e: dict[str, float]) -> bool:
        theirs = [float(e.get(k, float("nan"))) for k in keys]
        return dominates(theirs, mine, dirs) and any(
            (theirs[i] > mine[i]) if dirs[i] == "max" else (theirs[i] < mine[i]) for i in scores)

    return sum(counts(e) for e in earlier)


ITEMS = "items"
"""Key of the number of items per benchmark an intermediate result was scored on, beside its objectives (whose
keys are `cost` and `domain/benchmark`, never this)."""


def fraction_key(fraction: float) -> str:
    return f"{fraction:.3f}"


class TrialPruned(Exception):
    """Raised from the training loop when the pruning rule stops a trial."""

    def __init__(self, fraction: float, step: int, values: dict[str, float], dominated_by: int,
                 eval_s: float = 0.0) -> None:
        super().__init__(f"pruned at {fraction:.0%} of its steps (step {step}): dominated by {dominated_by} "
                         "earlier trials at the same fraction")
        self.fraction, self.step, self.values, self.dominated_by = fraction, step, values, dominated_by
        self.eval_s = eval_s
        """Seconds the trial's earlier intermediate evaluations took (inside its training's wall time)."""


@dataclasses.dataclass
class Pruner:
    """The pruning rule and its settings (`PruningConfig` in the project YAML carries the help text)."""

    objectives: list[Objective]
    fractions: tuple[float, ...] = (1 / 3, 2 / 3)
    items: int = 50
    min_dominating: int = 3
    min_steps: int = 6

    def checkpoints(self, steps: int) -> dict[int, float]:
        """Step → fraction, for the fractions that fall strictly inside a trial of `steps` steps; none
        for a trial shorter than `min_steps` (its evaluations would cost more than pruning can save).

        The step is the first at or past the fraction (`ceil`): a trial is never judged on less training
        than the fraction it is compared at. With `round` (until stop 38) a 7-step trial was judged at step 2,
        0.29 of its training, against results at 1/3, a bias towards pruning it."""
        out: dict[int, float] = {}
        if steps < self.min_steps:
            return out
        for f in self.fractions:
            s = max(1, math.ceil(f * steps - 1e-9))  # 0.07 · 100 is 7.000000000000001
            if s < steps:
                out.setdefault(s, f)
        return out

    def earlier(self, history: Sequence[TrialRecord], fraction: float,
                recipe_key: str | None = None) -> list[dict[str, float]]:
        """The intermediate results at `fraction` of the runs in `history` that have one: one per run (an
        interrupted trial whose late result became a new trial, `late_of`, counts once, as that trial),
        and none of recipe `recipe_key`, the one being judged (a retry is not judged against its own
        interrupted attempt). Until stop 30 both counted: one run could prune a trial twice over, and a
        retry was pruned by its own cheaper first attempt. Only results scored on as many items as this
        pruner's `items` count (a study resumed with another `pruning.items` compared results scored on 50
        items with those on 10, a review at stop 52)."""
        key = fraction_key(fraction)

        def same_items(values: dict[str, float]) -> bool:  # results from before stop 53 do not say: as before
            return values.get(ITEMS, self.items) == self.items

        # one result per recipe, its latest run's: a recipe stopped by the budget or interrupted runs again on
        # resume, and its two runs counted twice towards `min_dominating` (a review, stop 37); a superseded
        # trial's run is its late result's (`counted`, as the budget counts it)
        latest: dict[str, dict[str, float]] = {}
        for r in sorted(counted(history), key=lambda r: r.number):
            if (key in r.intermediate and same_items(r.intermediate[key])
                    and (recipe_key is None or r.recipe.key != recipe_key)):
                latest[r.recipe.key] = r.intermediate[key]
        return list(latest.values())

    def should_prune(self, values: dict[str, float], earlier: Sequence[dict[str, float]]) -> int:
        """The number of dominating earlier results when it reaches `min_dominating`, else 0."""
        if len(earlier) < self.min_dominating:
            return 0
        n = dominating_count(values, earlier, self.objectives)
        return n if n >= self.min_dominating else 0

    def hook(self, ctx: Any, steps: int, history: Sequence[TrialRecord],
             report: Callable[[float, dict[str, float]], None], turns: int = 0,
             recipe_key: str | None = None) -> Callable[[int, Any, Any], None]:
        """The `on_checkpoint(step, model, tokenizer)` callback for `run_trial`.

        At each checkpoint it scores the model on benchmark subsets (`subset_scores`), adds the cost so
        far, hands the values to `report` (the ledger) and raises `TrialPruned` when the rule says so.
        `history` is the study's trials before this one; `turns`: the earlier turns an agent's prompts
        show (the recipe's `mt.history`), as in its final scoring; `recipe_key`: the trial's recipe, whose
        other runs in `history` do not judge it (`earlier`).
        """
        points = self.checkpoints(steps)
        t0 = time.monotonic()
        eval_s = 0.0  # the earlier checkpoints' scoring, which the trainer's wall time includes

        def on_checkpoint(step: int, model: Any, tokenizer: Any) -> None:
            nonlocal eval_s
            if step not in points:
                return
            f = points[step]
            t_eval = time.monotonic()
            values = {**subset_scores(ctx, model, tokenizer, self.items, turns),
                      "cost": round(time.monotonic() - t0, 2)}
            report(f, {**values, ITEMS: float(self.items)})  # the fidelity, beside the fraction that keys it
            n = self.should_prune(values, self.earlier(history, f, recipe_key))
            if n:
                raise TrialPruned(f, step, values, n, eval_s)
            eval_s += time.monotonic() - t_eval

        return on_checkpoint


def subset_scores(ctx: Any, model: Any, tokenizer: Any, items: int, turns: int = 0) -> dict[str, float]:
    """Scores of `model` on the first `items` items of every benchmark of `ctx` (a `SearchContext`;
    `turns`: its `score`'s `history`), leaving the model's train/eval mode and torch's random state as
    they were, so training goes on exactly as it would have without the evaluation."""
    import torch  # here: `sro show` and `sro export` read `saved_budget` without loading torch

    small = {k: dataclasses.replace(b, items=b.items[:items]) for k, b in ctx.benchmarks.items()}
    training = model.training
    try:
        with torch.random.fork_rng():  # CPU and accelerator generators restored on the way out
            return dataclasses.replace(ctx, benchmarks=small).score(model, tokenizer, history=turns)
    finally:
        model.train(training)


def saved_budget(records: Sequence[TrialRecord]) -> dict[str, float]:
    """What pruning saved over a study: {"trials", "steps", "seconds"} summed over pruned trials."""
    pruned = [r for r in records if r.state == "pruned"]
    return {"trials": float(len(pruned)), "steps": sum(r.cost.get("saved_steps", 0.0) for r in pruned),
            "seconds": sum(r.cost.get("saved_s", 0.0) for r in pruned)}


def training_seconds(curve: Sequence[dict[str, float]], eval_s: float) -> float | None:
    """The seconds a pruned trial's training took: its last step's `wall_s` (a step that failed on non-finite
    values records none) less the intermediate evaluations inside it; None without a timed step."""
    walls = [float(c["wall_s"]) for c in curve if "wall_s" in c]
    return max(0.0, walls[-1] - eval_s) if walls else None


def pruned_cost(cost_so_far: dict[str, float], step: int, steps: int, train_s: float | None = None,
                scoring_s: float = 0.0, limit_s: float | None = None) -> dict[str, float]:
    """A pruned trial's cost: what it spent, plus the steps it did not run and their estimated seconds:
    those steps at its training pace so far (`train_s`, the seconds its `step` steps took, the intermediate
    evaluations left out; the whole wall time if None) and the final held-out scoring it skipped
    (`scoring_s`); with `limit_s` (the trial's time limit) no more steps than would have fitted in it. Until
    stop 25 the pace was the whole wall time's, the model's loading and the
    intermediate evaluations included, and the skipped scoring was left out."""
    left = max(0, steps - step)
    pace = float(cost_so_far.get("wall_s", 0.0) if train_s is None else train_s) / max(1, step)
    if limit_s is not None and pace > 0:  # the time limit it ran under would have stopped it first (a review,
        room = max(0.0, limit_s - float(cost_so_far.get("wall_s", 0.0)) - scoring_s)  # stop 37): no more saved
        left = min(left, int(room // pace))
    return {**cost_so_far, "saved_steps": float(left), "saved_s": round(pace * left + (scoring_s if left else 0.0), 2)}
