"""The Optuna baselines as SRO proposers ("tpe", "nsga2"): the study each proposal builds (directions,
default objectives, seeded trials and NSGA-II generations), the Sobol fill-in when the sampler only repeats,
the simplex sampling, and the samplers' settings. Stop 50's mutation sweep of sro/optimizer/optuna_proposers.py
found these unpinned (24 of 42 mutants survived the tests there were)."""

from __future__ import annotations

from typing import Any

import optuna
import pytest
from optuna.samplers import PartialFixedSampler, RandomSampler

from sro.ledger import TrialRecord
from sro.optimizer.optuna_proposers import NSGA2Proposer, OptunaProposer, TPEProposer
from sro.proposers import sobol_recipes
from sro.recipe import Recipe
from sro.space import Param, RecipeSpace, Simplex

SPACE = RecipeSpace([Param("x", "float", 0.0, 1.0)])


def _spy_studies(monkeypatch: pytest.MonkeyPatch) -> list[optuna.Study]:
    made: list[optuna.Study] = []
    create = optuna.create_study

    def spy(*args: Any, **kw: Any) -> optuna.Study:
        made.append(create(*args, **kw))
        return made[-1]

    monkeypatch.setattr(optuna, "create_study", spy)
    return made


def test_the_study_has_the_projects_directions_or_maximizes_the_complete_trials_scores(monkeypatch) -> None:
    made = _spy_studies(monkeypatch)
    hist = [TrialRecord(0, "complete", Recipe({"x": 0.1}), {"b": 0.5, "a": 0.2}, {"wall_s": 3.0}),
            TrialRecord(1, "failed", Recipe({"x": 0.2}), {"z": 1.0})]  # a failed trial's keys are no objectives
    TPEProposer(SPACE, objectives=[("a", "max"), ("cost", "min")]).propose(hist, 1)
    D = optuna.study.StudyDirection
    assert made[-1].directions == [D.MAXIMIZE, D.MINIMIZE]
    assert made[-1].trials[0].values == [0.2, 3.0]
    TPEProposer(SPACE).propose(hist, 1)  # no objectives given: every complete trial's score, maximized, sorted
    assert made[-1].directions == [D.MAXIMIZE, D.MAXIMIZE] and made[-1].trials[0].values == [0.2, 0.5]
    TPEProposer(SPACE).propose([], 1)
    assert made[-1].directions == [D.MAXIMIZE]  # "score", before any trial


def test_seeded_trials_states_and_nsga2_generations_of_10() -> None:
    """Complete trials with finite values go in COMPLETE, numbered into generations of NSGA-II's population
    (10) by their order among the complete ones; a pruned trial with partial scores, a complete one with an
    infinite value and a failed one go in FAIL, a running one RUNNING."""
    hist = [TrialRecord(i, "complete", Recipe({"x": i / 20}), {"f": float(i)}) for i in range(12)]
    hist.insert(3, TrialRecord(90, "pruned", Recipe({"x": 0.91}), {"f": 5.0}))
    hist.insert(5, TrialRecord(91, "complete", Recipe({"x": 0.92}), {"f": float("inf")}))
    hist.insert(7, TrialRecord(92, "failed", Recipe({"x": 0.93})))
    hist.append(TrialRecord(93, "running", Recipe({"x": 0.94})))
    prop = NSGA2Proposer(SPACE, objectives=[("f", "max")])
    sampler = prop.make_sampler(0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    prop._seed_study(study, sampler, hist, [("f", "max")])
    S = optuna.trial.TrialState
    assert [t.state for t in study.trials] == [S.COMPLETE] * 3 + [S.FAIL, S.COMPLETE, S.FAIL, S.COMPLETE, S.FAIL] + \
        [S.COMPLETE] * 7 + [S.RUNNING]
    key = sampler._get_generation_key()
    gens = [t.system_attrs.get(key) for t in study.trials if t.state == S.COMPLETE]
    assert gens == [0] * 10 + [1] * 2
    assert all(key not in t.system_attrs for t in study.trials if t.state != S.COMPLETE)


class _Stuck(OptunaProposer):
    """A sampler that always suggests x = 0.5: after the first, every recipe it gives has been run."""

    @staticmethod
    def make_sampler(seed: int) -> optuna.samplers.BaseSampler:
        return PartialFixedSampler({"x": 0.5}, RandomSampler(seed=seed))


def test_the_sobol_sequence_fills_in_what_the_sampler_cannot_give_new() -> None:
    hist = [TrialRecord(0, "complete", Recipe({"x": 0.1}), {"score": 1.0})]
    out = _Stuck(SPACE, seed=3).propose(hist, 3)
    assert len(out) == 3 and out[0].values == {"x": 0.5}
    seen = {hist[0].recipe.key, out[0].key}
    assert [r.key for r in out[1:]] == [r.key for r in sobol_recipes(SPACE, 3, 1, 2, seen)]
    # x = 0.5 run already: every ask repeats, and the Sobol sequence gives the one recipe asked for
    hist.append(TrialRecord(1, "complete", Recipe({"x": 0.5}), {"score": 1.0}))
    assert len(_Stuck(SPACE).propose(hist, 1)) == 1
    assert _Stuck(SPACE).propose(hist, 0) == [] and len(_Stuck(SPACE).propose(hist)) == 1  # one by default


def test_a_simplex_is_sampled_as_normalized_uniform_weights() -> None:
    space = RecipeSpace([Param("x", "float", 0.0, 1.0)], [Simplex("mix", ["mix.a", "mix.b", "mix.c"])])
    hist: list[TrialRecord] = []
    for i in range(6):
        (r,) = TPEProposer(space, seed=i).propose(hist, 1)
        hist.append(TrialRecord(i, "complete", r, {"score": r.values["x"]}))
    weights = [[r.recipe.values[m] for m in ("mix.a", "mix.b", "mix.c")] for r in hist]
    for w in weights:
        assert sum(w) == pytest.approx(1.0, abs=1e-5) and min(w) >= 0
    assert len({tuple(w) for w in weights}) == 6 and max(max(w) for w in weights) > 0.4  # not all equal thirds


def test_a_simplexs_weights_on_hand_picked_draws() -> None:
    """`_suggest` on fixed draws: the raw uniforms normalized (a sum under 1 too), rounded to 6 digits as the
    recipe key is; all zero gives equal weights."""
    space = RecipeSpace([Param("x", "float", 0.0, 1.0)], [Simplex("mix", ["mix.a", "mix.b", "mix.c"])])
    prop = TPEProposer(space)
    got = prop._suggest(optuna.trial.FixedTrial({"x": 0.5, "mix.a": 0.1, "mix.b": 0.2, "mix.c": 0.1}))
    assert got == {"x": 0.5, "mix.a": 0.25, "mix.b": 0.5, "mix.c": 0.25}
    got = prop._suggest(optuna.trial.FixedTrial({"x": 0.5, "mix.a": 0.3, "mix.b": 0.3, "mix.c": 0.9}))
    assert (got["mix.a"], got["mix.c"]) == (0.2, 0.6)
    got = prop._suggest(optuna.trial.FixedTrial({"x": 0.5, "mix.a": 1.0, "mix.b": 1.0, "mix.c": 1.0}))
    assert got["mix.a"] == 0.333333  # round(1/3, 6)
    got = prop._suggest(optuna.trial.FixedTrial({"x": 0.5, "mix.a": 0.0, "mix.b": 0.0, "mix.c": 0.0}))
    assert [got[m] for m in ("mix.a", "mix.b", "mix.c")] == [0.333333] * 3


def test_the_samplers_settings() -> None:
    # Optuna's private attributes (constraints.txt pins optuna 5; a rename there fails here, not silently)
    tpe = TPEProposer.make_sampler(0)
    assert (tpe._multivariate, tpe._group, tpe._constant_liar) == (True, True, True)  # conditional params, workers
    assert NSGA2Proposer.make_sampler(0)._population_size == 10
