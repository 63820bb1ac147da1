"""`sro.importance`: fANOVA importances over hand-made studies whose objectives depend on known parameters."""

from __future__ import annotations

import html
import math

import numpy as np
import pytest

from sro.importance import MIN_TRIALS, parameter_importances
from sro.ledger import TrialRecord
from sro.recipe import Recipe
from sro.space import Param, RecipeSpace, Simplex

SPACE = RecipeSpace(params=[
    Param("lr", "float", 1e-6, 1e-3, log=True), Param("steps", "int", 10, 60),
    Param("algorithm", "categorical", choices=["grpo", "proas"]),
    Param("proas.lam", "float", 0.0, 1.0, condition={"algorithm": ["proas"]})],
    simplexes=[Simplex("mix", ["mix.a", "mix.b"])])
OBJECTIVES = [("a/x", "max"), ("cost", "min")]


def _study(n: int, seed: int = 0, flat_score: bool = False, lam: float = 0.0) -> list[TrialRecord]:
    """`n` complete trials: the score peaks at lr = 10^-4.5 (nothing else moves it but noise), the cost is three
    seconds a step; the algorithm, the mixture and ProAS's λ (only in ProAS trials) are drawn and matter to neither
    (`lam`: a ProAS trial's score falls by `lam`·λ)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        algorithm = ["grpo", "proas"][i % 2]
        a = float(rng.uniform())
        values = {"lr": float(10 ** rng.uniform(-6, -3)), "steps": int(rng.integers(10, 61)), "algorithm": algorithm,
                  "mix.a": a, "mix.b": 1 - a} | ({"proas.lam": float(rng.uniform())} if algorithm == "proas" else {})
        score = 0.5 if flat_score else 1 - (math.log10(values["lr"]) + 4.5) ** 2 / 3 + 0.01 * float(rng.normal())
        score -= lam * values.get("proas.lam", 0.0)
        out.append(TrialRecord(i, "complete", Recipe(values), scores={"a/x": score},
                               cost={"wall_s": 3.0 * values["steps"] + float(rng.normal())}))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_parameter_an_objective_depends_on_explains_most_of_it(seed):
    imp = parameter_importances(_study(20, seed), OBJECTIVES, SPACE)
    assert set(imp.by_objective) == {"a/x", "cost"} and imp.trials == 20 and not imp.note
    score, cost = imp.by_objective["a/x"], imp.by_objective["cost"]
    assert max(score, key=score.get) == "lr" and score["lr"] > 0.5, score
    assert max(cost, key=cost.get) == "steps" and cost["steps"] > 0.7, cost
    assert all(0.0 <= v <= 1.0 for v in (*score.values(), *cost.values()))
    assert imp.left_out == ["proas.lam"]  # in the ProAS trials only


def test_fewer_complete_trials_than_the_minimum_estimate_nothing_and_say_so():
    records = _study(MIN_TRIALS)
    records[0].state = "failed"  # a failed trial is not evidence
    records[1].scores = {"a/x": float("nan")}  # nor one without every objective
    imp = parameter_importances(records, OBJECTIVES, SPACE)
    assert imp.by_objective == {} and imp.trials == MIN_TRIALS - 2
    assert imp.note == f"needs {MIN_TRIALS} complete trials with every objective; the study has {MIN_TRIALS - 2}"


def test_a_flat_objective_is_named_and_the_others_still_estimated():
    imp = parameter_importances(_study(12, flat_score=True), OBJECTIVES, SPACE)
    assert set(imp.by_objective) == {"cost"} and "a/x: the same value in every complete trial" in imp.note


def test_values_outside_the_current_space_and_without_a_space_are_assessed():
    """A trial of an earlier space version (lr above today's range, steps an int outside it) is still evidence:
    the range is widened to it; and with no space at all the scales come from the trials."""
    records = _study(12)
    records[0].recipe.values["lr"], records[1].recipe.values["steps"] = 5e-3, 90
    for space in (SPACE, None):
        imp = parameter_importances(records, OBJECTIVES, space)
        assert set(imp.by_objective["cost"]) == {"lr", "steps", "algorithm", "mix.a", "mix.b"}


def test_the_report_shows_the_importances_or_says_why_not(tmp_path, monkeypatch):
    import sro.report as report
    from sro.budget import Spent

    def page(records):
        data = {"name": "imp", "objectives": [{k: d} for k, d in OBJECTIVES]}
        info = {"base_scores": {}, "spent": Spent(), "overlap": {}, "hypervolume": {}, "lower": [], "space": SPACE}
        monkeypatch.setattr(report, "_load", lambda run_dir: (data, records, info))
        return " ".join(html.unescape(report.write_report(tmp_path).read_text(encoding="utf-8")).split())

    shown = page(_study(20))
    assert "What moved each objective" in shown and "over 20 complete trials" in shown
    assert ("assessed within the complete trials where they are active (their share of the variance there, beside the "
            "parameters those trials share): proas.lam (10 trials)") in shown and "left out" not in shown
    assert "proas.lam (within its 10 trials)" in shown  # its bar says so
    assert "left out (not in every complete trial, or one value throughout): proas.lam" in page(_study(9))  # 4 ProAS
    assert r"of a\u002fx's variance" in shown  # the figure's hover text (plotly's JSON escapes the slash)
    assert "not estimated: needs 5 complete trials with every objective; the study has 2" in page(_study(2))
    def broken(*a, **k):
        raise ValueError("a forest that cannot grow")

    monkeypatch.setattr(report, "parameter_importances", broken)  # the rest of the report is still written
    shown = page(_study(20))
    assert "not estimated: the estimate failed (ValueError: a forest that cannot grow)" in shown
    assert "Pareto front" in shown and "Learning curves" in shown



@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_conditional_parameter_is_assessed_within_the_trials_where_it_is_active(seed):
    """ProAS's λ only in ProAS trials: left out of the whole study's fANOVA, and until stop 57 nowhere else, so
    which ProAS knob mattered was not answered. Within the 15 ProAS trials of 30 it is assessed beside lr and the
    rest: most of the score's variance where the score falls with it, little where it does not."""
    matters = parameter_importances(_study(30, seed, lam=3.0), OBJECTIVES, SPACE)
    assert matters.left_out == ["proas.lam"] and matters.active_in == {"proas.lam": 15}
    assert matters.within["a/x"]["proas.lam"] > 0.6, matters.within  # 0.80-0.94 on seeds 0-5
    idle = parameter_importances(_study(30, seed), OBJECTIVES, SPACE)  # 0.03-0.21 on seeds 0-5 (15 trials: rough)
    assert idle.within["a/x"]["proas.lam"] < 0.3 and idle.within["cost"]["proas.lam"] < 0.3, idle.within
    assert matters.within["a/x"]["proas.lam"] > 3 * idle.within["a/x"]["proas.lam"]
    few = parameter_importances(_study(2 * MIN_TRIALS - 1, seed), OBJECTIVES, SPACE)  # 4 ProAS trials: too few
    assert few.within == {} and few.active_in == {} and few.by_objective
