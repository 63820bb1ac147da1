"""Tests of sro.pruning: the domination rule on hand-made fronts, checkpoints, the training hook, the ledger's
early end, and the search wiring (pruned trials kept with partial results, budget saved, never re-run)."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from sro.config import ConfigError, load_project
from sro.ledger import Ledger, TrialRecord
from sro.pruning import Pruner, TrialPruned, dominates, dominating_count, pruned_cost, saved_budget, subset_scores
from sro.recipe import Recipe
from sro.space import RecipeSpace

ROOT = Path(__file__).resolve().parents[1]
OBJ = [("a/x", "max"), ("cost", "min")]


def test_dominates_with_mixed_directions_and_nan() -> None:
    dirs = ["max", "min"]
    assert dominates([0.5, 10.0], [0.4, 12.0], dirs)
    assert dominates([0.5, 10.0], [0.5, 12.0], dirs)  # equal on one, better on the other
    assert not dominates([0.5, 10.0], [0.5, 10.0], dirs)  # equal everywhere: no domination
    assert not dominates([0.6, 13.0], [0.5, 12.0], dirs)  # better score, but costlier
    assert not dominates([float("nan"), 1.0], [0.1, 12.0], dirs)


def test_pruning_decisions_on_a_hand_made_front() -> None:
    # earlier results at the same fraction: (score, cost so far)
    earlier = [{"a/x": 0.5, "cost": 10.0}, {"a/x": 0.6, "cost": 8.0}, {"a/x": 0.4, "cost": 5.0},
               {"a/x": 0.7, "cost": 20.0}]
    p = Pruner(OBJ, min_dominating=3)
    worst = {"a/x": 0.3, "cost": 25.0}  # dominated by all four
    assert dominating_count(worst, earlier, OBJ) == 4 and p.should_prune(worst, earlier) == 4
    middling = {"a/x": 0.45, "cost": 9.0}  # only (0.6, 8) dominates it
    assert dominating_count(middling, earlier, OBJ) == 1 and p.should_prune(middling, earlier) == 0
    two = {"a/x": 0.45, "cost": 12.0}  # (0.5, 10) and (0.6, 8): two < 3
    assert dominating_count(two, earlier, OBJ) == 2 and p.should_prune(two, earlier) == 0
    assert Pruner(OBJ, min_dominating=2).should_prune(two, earlier) == 2
    # too few earlier trials at this fraction: never pruned, however bad
    assert p.should_prune(worst, earlier[:2]) == 0
    # a front point is never pruned
    assert p.should_prune({"a/x": 0.8, "cost": 1.0}, earlier) == 0


def test_checkpoints_and_earlier_results_by_fraction() -> None:
    p = Pruner(OBJ)
    assert p.checkpoints(30) == {10: 1 / 3, 20: 2 / 3}
    assert p.checkpoints(5) == {}  # shorter than min_steps
    assert Pruner(OBJ, fractions=(0.5,), min_steps=2).checkpoints(2) == {1: 0.5}
    # never judged on less training than the fraction compared at (round put 1/3 of 7 steps at step 2: 0.29)
    assert p.checkpoints(7) == {3: 1 / 3, 5: 2 / 3} and p.checkpoints(9) == {3: 1 / 3, 6: 2 / 3}
    assert all(s / n >= f for n in range(6, 200) for s, f in p.checkpoints(n).items())
    from sro.ledger import TrialRecord

    recs = [TrialRecord(0, "complete", Recipe({"v": 0}), intermediate={"0.333": {"a/x": 0.1, "cost": 1.0}}),
            TrialRecord(1, "pruned", Recipe({"v": 1}), intermediate={"0.333": {"a/x": 0.2, "cost": 2.0},
                                                                     "0.667": {"a/x": 0.3, "cost": 3.0}})]
    assert p.earlier(recs, 1 / 3) == [{"a/x": 0.1, "cost": 1.0}, {"a/x": 0.2, "cost": 2.0}]
    assert p.earlier(recs, 2 / 3) == [{"a/x": 0.3, "cost": 3.0}]
    # one run counts once: trial 2 is the late result of trial 1, which another worker had marked interrupted
    # (both carry its intermediate results); and a retry of recipe v=0 is not judged by its own first attempt
    late = TrialRecord(2, "complete", Recipe({"v": 1}), intermediate=recs[1].intermediate, late_of=1)
    assert p.earlier([*recs, late], 1 / 3) == [{"a/x": 0.1, "cost": 1.0}, {"a/x": 0.2, "cost": 2.0}]
    assert p.earlier([*recs, late], 1 / 3, recipe_key=Recipe({"v": 0}).key) == [{"a/x": 0.2, "cost": 2.0}]
    # the same fidelity is the same items too: a result scored on 10 items does not judge one on 50 (p.items)
    other = [TrialRecord(0, "complete", Recipe({"v": 0}), intermediate={"0.333": {"a/x": 0.1, "items": 10.0}}),
             TrialRecord(1, "complete", Recipe({"v": 1}), intermediate={"0.333": {"a/x": 0.2, "items": 50.0}})]
    assert p.earlier(other, 1 / 3) == [{"a/x": 0.2, "items": 50.0}]
    assert Pruner(OBJ, items=10).earlier(other, 1 / 3) == [{"a/x": 0.1, "items": 10.0}]


@dataclasses.dataclass
class _Bench:
    items: list[int]


@dataclasses.dataclass
class _Ctx:
    """Stands in for `SearchContext`: scores are the share of items seen, and consume random numbers."""

    benchmarks: dict[str, _Bench]

    turns: list[int] = dataclasses.field(default_factory=list)

    def score(self, model, tok, history: int = 0) -> dict[str, float]:
        torch.rand(5)  # like sampling would: the hook must restore the RNG state
        model.eval()
        self.turns.append(history)
        return {k: len(b.items) / 100 for k, b in self.benchmarks.items()}


def test_hook_scores_subsets_reports_and_prunes() -> None:
    ctx = _Ctx({"a/x": _Bench(list(range(100)))})
    model = torch.nn.Linear(2, 2).train()
    reported: list[tuple[float, dict]] = []
    from sro.ledger import TrialRecord

    bad = [TrialRecord(i, "complete", Recipe({"i": i}), intermediate={"0.333": {"a/x": 0.9, "cost": 0.0}})
           for i in range(3)]
    p = Pruner(OBJ, items=20)
    hook = p.hook(ctx, 30, bad[:2], lambda f, v: reported.append((f, v)))
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    hook(9, model, None)  # not a checkpoint: nothing happens
    hook(10, model, None)  # 1/3: scored on 20 items, reported; only 2 earlier results → goes on
    assert torch.equal(torch.rand(3), expected) and model.training
    assert reported[0][0] == pytest.approx(1 / 3) and reported[0][1]["a/x"] == 0.2 and reported[0][1]["cost"] >= 0
    assert reported[0][1]["items"] == 20  # the fidelity it was scored at, beside the fraction
    hook = p.hook(ctx, 30, bad, lambda f, v: reported.append((f, v)))
    with pytest.raises(TrialPruned, match=r"pruned at 33% of its steps \(step 10\): dominated by 3") as e:
        hook(10, model, None)
    assert e.value.values["a/x"] == 0.2 and e.value.step == 10
    assert subset_scores(ctx, model, None, 7) == {"a/x": 0.07} and len(ctx.benchmarks["a/x"].items) == 100
    # an agent recipe's intermediate episodes show its `mt.history` turns, as its final scoring does
    ctx.turns.clear()
    p.hook(ctx, 30, [], lambda f, v: None, turns=2)(10, model, None)
    assert ctx.turns == [2]


def test_a_pruned_trial_knows_how_long_its_earlier_evaluations_took(monkeypatch) -> None:
    """The saved seconds' pace leaves the intermediate evaluations out: the exception carries the time
    the earlier checkpoints' scoring took inside the training's wall time (not the pruning one's)."""
    import sro.pruning as pruning

    ctx = _Ctx({"a/x": _Bench(list(range(100)))})
    model = torch.nn.Linear(2, 2)
    clock = iter([0.0, 10.0, 14.0, 14.0, 20.0, 29.0])  # hook built; 1/3 scored from 10 to 14 s; 2/3 from 20 s
    monkeypatch.setattr(pruning.time, "monotonic", lambda: next(clock))
    from sro.ledger import TrialRecord

    dominate = [TrialRecord(i, "complete", Recipe({"i": i}), intermediate={"0.667": {"a/x": 0.9, "cost": 0.0}})
                for i in range(3)]
    hook = Pruner(OBJ, items=20).hook(ctx, 30, dominate, lambda f, v: None)
    hook(10, model, None)
    with pytest.raises(TrialPruned) as e:
        hook(20, model, None)
    assert e.value.eval_s == 4.0 and e.value.values["cost"] == 29.0


def test_pruned_cost_and_saved_budget() -> None:
    cost = pruned_cost({"wall_s": 12.0, "samples": 80.0}, step=10, steps=30)
    assert cost == {"wall_s": 12.0, "samples": 80.0, "saved_steps": 20.0, "saved_s": 24.0}
    # at the training's own pace (8 s for 10 steps: 0.8 s a step), plus the final scoring it skipped
    paced = pruned_cost({"wall_s": 12.0}, step=10, steps=30, train_s=8.0, scoring_s=3.0)
    assert paced["saved_s"] == pytest.approx(0.8 * 20 + 3.0)
    assert pruned_cost({"wall_s": 12.0}, step=30, steps=30, train_s=8.0, scoring_s=3.0)["saved_s"] == 0.0
    from sro.pruning import training_seconds

    # the last timed step, the evaluations inside it left out; a step that failed on non-finite values has no time
    assert training_seconds([{"wall_s": 4.0}, {"wall_s": 9.0}, {"collapsed": 1.0}], eval_s=2.0) == 7.0
    assert training_seconds([{"collapsed": 1.0}], 2.0) is None and training_seconds([{"wall_s": 1.0}], 5.0) == 0.0
    from sro.ledger import TrialRecord

    recs = [TrialRecord(0, "pruned", Recipe({}), cost=cost), TrialRecord(1, "complete", Recipe({}), cost={"wall_s": 5}),
            TrialRecord(2, "pruned", Recipe({}), cost=pruned_cost({"wall_s": 3.0}, 3, 9))]
    assert saved_budget(recs) == {"trials": 2.0, "steps": 26.0, "seconds": 30.0}


SPACE = RecipeSpace.from_yaml("""\
version: 1
designer: test
fixed: {algorithm: grpo, max_new_tokens: 4}
params:
  lr: {kind: float, low: 0.001, high: 0.003, log: true, why: small}
  steps: {kind: int, low: 2, high: 3, why: short}
""")


def test_ledger_end_early_keeps_partial_results_off_the_front(micro_project, tmp_path) -> None:
    project = load_project(micro_project("early"))
    ledger = Ledger(project, tmp_path / "early")
    recipes = [Recipe(v, dict(SPACE.fixed)) for v in SPACE.sobol(4, seed=0)]
    t0 = ledger.start(recipes[0], SPACE)
    ledger.report_intermediate(t0, 1 / 3, {"arithmetic/add": 0.2, "cost": 1.0})
    ledger.report_intermediate(t0, 2 / 3, {"arithmetic/add": 0.1, "cost": 2.0})
    ledger.end_early(t0, "pruned", {"arithmetic/add": 0.1}, {"wall_s": 2.0, "saved_steps": 1.0}, [], "dominated")
    t1 = ledger.start(recipes[1], SPACE)
    ledger.end_early(t1, "collapsed", {}, {"wall_s": 1.0}, [{"reward": 0.0}], "reward fell")
    t2 = ledger.start(recipes[2], SPACE)
    ledger.finish(t2, {"arithmetic/add": 0.05}, {"wall_s": 4.0}, [])
    with pytest.raises(ValueError, match="state must be one of"):
        ledger.end_early(ledger.start(recipes[3], SPACE), "failed", {}, {}, [])
    assert ledger.start(recipes[2], SPACE) is None  # finished already: a second claim is withdrawn
    recs = Ledger(project, tmp_path / "early").records()
    assert [r.state for r in recs[:3]] == ["pruned", "collapsed", "complete"]
    assert all(r.finished for r in recs[:3])
    assert recs[0].scores == {"arithmetic/add": 0.1} and recs[0].message == "dominated"
    assert recs[0].intermediate == {"0.333": {"arithmetic/add": 0.2, "cost": 1.0},
                                    "0.667": {"arithmetic/add": 0.1, "cost": 2.0}}
    assert Ledger(project, tmp_path / "early").spent().trials == 3  # the three ended trials count
    # only complete trials are on the front: the pruned one's better partial score does not count
    assert [t.number for t in Ledger(project, tmp_path / "early").study.best_trials] == [2]


def test_pruning_config_validates(micro_project) -> None:
    p = micro_project("cfg", "pruning: {at: [0.5, 1.5]}\n")
    with pytest.raises(ConfigError, match="strictly between 0 and 1"):
        load_project(p)
    with pytest.raises(ConfigError, match=r"differ in their first 3 decimals \(got \[0.3331, 0.3334\]\)"):
        load_project(micro_project("cfg3", "pruning: {at: [0.3331, 0.3334]}\n"))
    assert load_project(micro_project("cfg4", "pruning: {at: [0.333, 0.334]}\n")).pruning.at == [0.333, 0.334]
    assert load_project(micro_project("cfg2", "pruning: {enabled: false, items: 10}\n")).pruning.enabled is False


@pytest.mark.slow
def test_search_prunes_keeps_partial_results_and_reports_savings(micro_project, tmp_path, monkeypatch) -> None:
    """In-process search of 2 trials of 6-7 steps; the rule is forced to fire for the second trial, so
    the wiring (hook → TrialPruned → ledger.end_early → show/report) is tested, not the tiny model's luck."""
    from rich.console import Console

    from sro.budget import Budget
    from sro.search import run_search

    runs = tmp_path / "runs"
    (runs / "pr").mkdir(parents=True)
    (runs / "pr" / "space.yaml").write_text(SPACE.to_yaml().replace("high: 3", "high: 7").replace("low: 2", "low: 6"))
    project = load_project(micro_project("pr", "pruning: {min_dominating: 1, items: 8}\n"))
    monkeypatch.setattr(Pruner, "should_prune", lambda self, values, earlier: len(earlier))
    summary = run_search(project, Budget.parse("2trials"), runs, "random", Console(quiet=True))
    states = [r.state for r in summary.trials]
    assert states == ["complete", "pruned"], states
    first, pruned = summary.trials[0], summary.trials[1]
    assert set(first.intermediate) == {"0.333", "0.667"}  # evaluated at both checkpoints, went on
    assert set(pruned.intermediate) == {"0.333"} and pruned.cost["saved_steps"] >= 3
    assert set(pruned.scores) == {"arithmetic/add"} and len(pruned.curve) == 2  # stopped at step 2 of 6-7
    assert pruned.intermediate["0.333"]["items"] == 8
    assert pruned.cost["tokens"] == pruned.curve[-1]["tokens"] > 0  # what it trained counts against a token budget
    assert len({r.recipe.key for r in summary.trials}) == 2
    hv = Ledger(project, runs / "pr").get("hypervolume")
    assert hv["trials"] == [0] and len(hv["hypervolume"]) == 1 and hv["hypervolume"][0] > 0
    env = {"PYTHONPATH": str(ROOT), "COLUMNS": "200", "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-m", "sro.cli", "show", str(runs / "pr")], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "pruned" in r.stdout and "pruning stopped 1 trial(s) early" in r.stdout
    assert "hypervolume after each complete trial" in r.stdout
    html = (runs / "pr" / "report.html").read_text()
    assert "Hypervolume" in html and "pruning stopped 1 trial(s) early" in html
    assert math.isfinite(summary.trials[1].cost["saved_s"])


def test_no_checkpoint_on_the_last_step():
    """A test audit's mutation (stop 33): a checkpoint allowed on a trial's last step (an evaluation that can save
    nothing) passed every test."""
    assert Pruner(OBJ, fractions=(0.95,)).checkpoints(6) == {}


def test_one_recipe_counts_once_and_a_tie_on_scores_prunes_nothing_by_cost_alone() -> None:
    """A review at stop 37: a recipe stopped by the budget and run again on resume counted twice towards
    `min_dominating` (two recipes pruned a third); and where the subset scores tie, the cost alone pruned: a
    trial 0.01 s slower than three equal ones, and every longer recipe (at one fraction of its steps it has
    always cost more)."""
    objectives = [("a/x", "max"), ("cost", "min")]
    p = Pruner(objectives)
    x, y = Recipe({"lr": 1e-3}), Recipe({"lr": 2e-3})
    at = lambda s, c: {"0.333": {"a/x": s, "cost": c}}  # noqa: E731
    hist = [TrialRecord(0, "stopped", x, intermediate=at(0.50, 40.0)),
            TrialRecord(1, "complete", x, intermediate=at(0.52, 40.1)),
            TrialRecord(2, "complete", y, intermediate=at(0.52, 41.0))]
    earlier = p.earlier(hist, 1 / 3, recipe_key=Recipe({"lr": 3e-3}).key)
    assert earlier == [{"a/x": 0.52, "cost": 40.1}, {"a/x": 0.52, "cost": 41.0}]  # x's latest run only
    assert p.should_prune({"a/x": 0.48, "cost": 45.0}, earlier) == 0  # two recipes, not three
    flat = [{"a/x": 0.0, "cost": 30.0 + i * 0.01} for i in range(3)]
    assert p.should_prune({"a/x": 0.0, "cost": 300.0}, flat) == 0 and p.should_prune({"a/x": 0.0, "cost": 30.03}, flat) == 0
    assert p.should_prune({"a/x": -0.1, "cost": 300.0}, flat) == 3  # worse on the score too: pruned
    costs_only = Pruner([("cost", "min")])
    assert costs_only.should_prune({"cost": 9.0}, [{"cost": 1.0}] * 3) == 3


def test_saved_budget_stays_within_the_time_limit_the_trial_had() -> None:
    """100 of 300 steps in 100 s (110 s in all, 10 s of scoring to come) with 150 s of budget left: 30 more
    steps would have fitted, so the saving is 30 steps and 40 s, not 200 steps (it claimed more than the study
    could have spent; a review, stop 37)."""
    cost = pruned_cost({"wall_s": 110.0}, step=100, steps=300, train_s=100.0, scoring_s=10.0, limit_s=150.0)
    assert cost["saved_steps"] == 30.0 and cost["saved_s"] == 40.0
    assert pruned_cost({"wall_s": 110.0}, 100, 300, train_s=100.0, scoring_s=10.0)["saved_steps"] == 200.0


# ---------- edges no test pinned (mutation testing, stop 38: each change below passed every test) ----------

def test_a_tie_on_one_objective_and_worse_on_the_other_is_dominated():
    from sro.pareto import pareto_mask

    assert pareto_mask(np.array([[1.0, 0.0], [0.0, 0.0]]), [True, True]).tolist() == [True, False]
    assert pareto_mask(np.array([[1.0, 0.0], [1.0, 0.0]]), [True, True]).tolist() == [True, True]  # equal: both


def test_the_front_holds_complete_trials_with_every_objective_only():
    """A pruned trial's partial scores and a trial missing an objective (recorded before the objectives
    changed) are never on the front that `sro show` and the report star."""
    from sro.pareto import front_numbers

    objs = [("acc", "max"), ("cost", "min")]
    done = TrialRecord(0, "complete", Recipe({"v": 0}), scores={"acc": 0.5}, cost={"wall_s": 10.0})
    pruned = TrialRecord(1, "pruned", Recipe({"v": 1}), scores={"acc": 0.9}, cost={"wall_s": 1.0})
    missing = TrialRecord(2, "complete", Recipe({"v": 2}), scores={}, cost={"wall_s": 2.0})
    assert front_numbers([done, pruned, missing], objs) == {0}


def test_budget_units_boundaries_and_clamps():
    from sro.budget import Budget, BudgetError, Spent

    assert Budget.parse("5ktok").tokens == 5000 and Budget.parse("2gpuh").gpu_h == 2 and Budget.parse("90sec").wall_s == 90
    with pytest.raises(BudgetError, match="ambiguous"):
        Budget.parse("5k")
    with pytest.raises(BudgetError, match="write e.g. 1trials"):
        Budget.parse("0.5trials")
    ten = Budget.parse("10m")
    assert ten.exhausted(Spent(wall_s=600.0)) is not None and ten.exhausted(Spent(wall_s=599.0)) is None
    assert ten.remaining_wall_s(Spent(wall_s=700.0)) == 0 and ten.fraction_used(Spent(wall_s=1200.0)) == 1.0
    assert Spent(tokens=1.0, running=1, running_tokens=5.0).finished_only().total("tokens") == 1.0


def test_the_hypervolume_history_is_in_trial_order_and_drops_infinite_outcomes():
    from sro.optimizer.hypervolume import outcomes

    objs = [("acc", "max"), ("cost", "min")]
    recs = [TrialRecord(n, "complete", Recipe({"v": n}), scores={"acc": a}, cost={"wall_s": 1.0})
            for n, a in ((2, 0.3), (1, float("inf")), (0, 0.1))]
    nums, Y = outcomes(recs, objs)
    assert nums == [0, 2] and Y.tolist() == [[0.1, -1.0], [0.3, -1.0]]


def test_two_fractions_at_one_step_keep_the_first_label_and_float_error_does_not_move_a_checkpoint():
    assert Pruner(OBJ, fractions=(0.3, 0.33)).checkpoints(6) == {2: 0.3}
    assert 0.07 * 100 > 7 and Pruner(OBJ, fractions=(0.07,)).checkpoints(100) == {7: 0.07}
