"""Edges of sro.pruning, sro.budget and sro.pareto that no test pinned: a mutation review found each change named
in a test's docstring (an operator flipped, a constant changed, `any` for `all`...) passing every existing test.
Hand-made fronts, costs and Spent/Budget values; no training."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import torch

import sro.pruning as pruning
from sro.budget import Budget, BudgetError, Spent
from sro.config import PruningConfig
from sro.ledger import TrialRecord
from sro.pareto import front_numbers, pareto_mask
from sro.pruning import Pruner, TrialPruned, dominating_count, pruned_cost, saved_budget
from sro.recipe import Recipe

OBJ = [("a/x", "max"), ("cost", "min")]


# ---------- sro.pareto ----------

def test_pareto_mask_of_no_points_is_empty_and_a_single_point_is_its_own_front():
    """`pts.size == 0` → `== 1` (one point, one objective: an empty mask, so a lone trial was off the front) and
    `np.zeros(0)` → `np.zeros(1)` (a mask one longer than the points)."""
    assert pareto_mask(np.array([]), [True]).tolist() == []
    assert pareto_mask(np.zeros((0, 2)), [True, False]).tolist() == []
    assert pareto_mask(np.array([[0.5]]), [True]).tolist() == [True]
    only = TrialRecord(4, "complete", Recipe({"v": 0}), scores={"acc": 0.5})
    assert front_numbers([only], [("acc", "max")]) == {4}


# ---------- sro.budget ----------

def test_a_fresh_study_has_spent_nothing():
    """Spent's defaults (each 0 → 1 passed): a fresh study would have used a second, a trial, a GPU-hour or a
    token of the smallest budgets."""
    assert dataclasses.astuple(Spent()) == (0.0, 0, 0.0, 0.0, 0, 0.0, 0.0, 0.0)
    tight = Budget.parse("1s,1trials,0.01gpu-h,1tok")
    assert tight.exhausted(Spent()) is None and tight.fraction_used(Spent()) == 0.0
    for cost in ("wall_s", "gpu_h", "tokens"):
        assert Spent().total(cost) == 0.0


def test_finished_only_drops_every_running_count():
    """`finished_only` setting `running` (or `running_wall_s`, `running_gpu_h`) to 1 instead of 0 passed: the
    search asks it whether the finished trials alone spent the budget, and one phantom running trial filled a
    trial budget."""
    s = Spent(wall_s=10.0, trials=2, gpu_h=0.5, tokens=100.0, running=3, running_wall_s=7.0, running_gpu_h=0.25,
              running_tokens=40.0)
    assert s.finished_only() == Spent(wall_s=10.0, trials=2, gpu_h=0.5, tokens=100.0)
    assert Budget.parse("3trials").exhausted(s.finished_only()) is None
    assert Budget.parse("3trials").exhausted(s) == "2/3 trials done and 3 running in other workers"
    assert Budget.parse("11s").exhausted(s.finished_only()) is None
    assert Budget.parse("0.6gpu-h").exhausted(s.finished_only()) is None


def test_token_units_scale_plain_and_giga_tokens():
    """The `tok` scale 1 → 0 (a plain token budget refused as not positive) and `gtok` 1e9 → 0 passed."""
    assert Budget.parse("500tok").tokens == 500.0
    assert Budget.parse("2Gtok").tokens == 2e9 and Budget.parse("3gtok").tokens == 3e9


def test_a_budget_without_limits_has_used_nothing():
    """`fraction_used`'s `default=0.0` → 1.0 passed: a budget with no limit showed a full progress bar."""
    assert Budget().fraction_used(Spent(wall_s=50.0, trials=3, running=1)) == 0.0
    assert Budget().exhausted(Spent(wall_s=50.0, trials=3)) is None


def test_a_bare_number_needs_a_unit_and_is_quoted_without_its_spaces():
    """A bare `1` was called not positive under `float(n) <= 1`, and `group(0)` for `group(1)` quoted the
    spaces around a bare number."""
    with pytest.raises(BudgetError, match=re.escape("budget '1' needs a unit: 1m for minutes, 1trials")):
        Budget.parse("1")
    with pytest.raises(BudgetError, match=re.escape("budget '0.5' needs a unit: 0.5m for minutes")):
        Budget.parse("0.5")
    with pytest.raises(BudgetError, match=re.escape("budget '5' needs a unit: 5m for minutes")):
        Budget.parse("2h, 5 ")
    with pytest.raises(BudgetError, match=re.escape("budget '0' must be positive")):
        Budget.parse("0")


# ---------- sro.pruning: the rule ----------

def test_two_scores_a_dominating_trial_need_be_better_on_one_score_only():
    """`any` → `all` over the scores passed (every test had one score): with two benchmarks, a trial better on one
    and tied on the other dominates and counts."""
    objs = [("a/x", "max"), ("b/y", "max"), ("cost", "min")]
    earlier = [{"a/x": 0.6, "b/y": 0.5, "cost": 10.0}] * 3
    assert dominating_count({"a/x": 0.5, "b/y": 0.5, "cost": 10.0}, earlier, objs) == 3
    assert Pruner(objs).should_prune({"a/x": 0.5, "b/y": 0.5, "cost": 12.0}, earlier) == 3
    # tied on both scores: the cost alone prunes nothing
    assert Pruner(objs).should_prune({"a/x": 0.6, "b/y": 0.5, "cost": 12.0}, earlier) == 0


def test_a_tie_on_a_min_score_prunes_nothing_by_cost_alone():
    """`theirs < mine` → `<=` for a `min` score passed (every test's score was `max`): a tie on ECE with a higher
    cost was pruned by the cost alone."""
    objs = [("cal/ece", "min"), ("cost", "min")]
    earlier = [{"cal/ece": 0.1, "cost": 10.0}] * 3
    assert Pruner(objs).should_prune({"cal/ece": 0.1, "cost": 20.0}, earlier) == 0
    assert Pruner(objs).should_prune({"cal/ece": 0.2, "cost": 20.0}, earlier) == 3


def test_pruner_defaults_are_the_configs_and_a_tiny_fraction_checks_after_one_step():
    """`items = 50` → 0 passed (the dataclass's defaults are `PruningConfig`'s), and `max(1, ceil(...))` →
    `max(0, ...)`: a fraction below 1e-9 put a checkpoint at step 0, which training never reaches."""
    pc, p = PruningConfig(), Pruner(OBJ)
    assert (p.fractions, p.items, p.min_dominating, p.min_steps) == (tuple(pc.at), pc.items, pc.min_dominating,
                                                                      pc.min_steps)
    assert p.items == 50
    assert Pruner(OBJ, fractions=(1e-12,)).checkpoints(10) == {1: 1e-12}


# ---------- sro.pruning: the hook ----------

class _Model(torch.nn.Module):
    pass


@dataclasses.dataclass
class _Ctx:
    benchmarks: dict
    turns: list = dataclasses.field(default_factory=list)

    def score(self, model, tok, history: int = 0) -> dict[str, float]:
        self.turns.append(history)
        return {"a/x": 0.1}


def test_the_hook_reports_the_seconds_since_it_was_built_rounded_to_hundredths(monkeypatch):
    """`monotonic() - t0` → `+` passed (the clock the tests stubbed started at 0), and so did rounding to 3
    places; without `turns` the episodes show no earlier turns (`turns=0` → 1 passed, in `hook` and
    `subset_scores`)."""
    clock = iter([100.0, 110.0, 112.3456, 113.0])  # built; checkpoint scored from 110 s, cost read at 112.3456
    monkeypatch.setattr(pruning.time, "monotonic", lambda: next(clock))
    ctx, reported = _Ctx({}), []
    dominating = [TrialRecord(i, "complete", Recipe({"i": i}), intermediate={"0.333": {"a/x": 0.9, "cost": 0.0}})
                  for i in range(3)]
    hook = Pruner(OBJ).hook(ctx, 30, dominating, lambda f, v: reported.append(v))
    with pytest.raises(TrialPruned) as e:
        hook(10, _Model(), None)
    assert reported == [{"a/x": 0.1, "cost": 12.35, "items": 50.0}] and e.value.values == {"a/x": 0.1, "cost": 12.35}
    assert e.value.eval_s == 0.0 and ctx.turns == [0]
    assert pruning.subset_scores(ctx, _Model(), None, 5) == {"a/x": 0.1} and ctx.turns == [0, 0]
    assert TrialPruned(0.5, 3, {}, 3).eval_s == 0.0  # no earlier evaluations unless told


# ---------- sro.pruning: the budget a pruned trial saved ----------

def test_saved_budget_counts_a_pruned_trial_without_savings_as_zero():
    """`cost.get("saved_steps", 0.0)` / `("saved_s", 0.0)` → 1.0 passed: a pruned trial recorded without its
    savings (an older ledger) added a step and a second."""
    recs = [TrialRecord(0, "pruned", Recipe({}), cost={"wall_s": 3.0}),
            TrialRecord(1, "pruned", Recipe({}), cost={"wall_s": 3.0, "saved_steps": 4.0, "saved_s": 2.5})]
    assert saved_budget(recs) == {"trials": 2.0, "steps": 4.0, "seconds": 2.5}


def test_pruned_cost_edges_of_the_time_limit_and_the_pace():
    """Each passed: `pace > 0` → `>=` (a zero pace divided by zero under a time limit), `max(0.0, room)` →
    `max(1.0, ...)` (a trial past its limit still saved steps), the missing `wall_s` read as 1.0 (in the pace or
    the room left), and `saved_s` rounded to 3 places."""
    assert pruned_cost({"wall_s": 0.0}, 5, 10, limit_s=100.0) == {"wall_s": 0.0, "saved_steps": 5.0, "saved_s": 0.0}
    # 100 s spent of a 90 s limit: no room, nothing saved (pace 0.5 s a step)
    past = pruned_cost({"wall_s": 100.0}, step=10, steps=30, train_s=5.0, limit_s=90.0)
    assert past["saved_steps"] == 0.0 and past["saved_s"] == 0.0
    # no wall time recorded: pace 0 (nothing to estimate), and the whole limit as room
    assert pruned_cost({}, 2, 10) == {"saved_steps": 8.0, "saved_s": 0.0}
    assert pruned_cost({}, step=10, steps=30, train_s=10.0, limit_s=15.0) == {"saved_steps": 15.0, "saved_s": 15.0}
    # 1/3 s a step, one step left: 0.33 s
    assert pruned_cost({"wall_s": 1.0}, step=3, steps=4)["saved_s"] == 0.33
