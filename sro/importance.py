"""Which recipe parameters moved each objective, over a study's complete trials: fANOVA (Hutter, Hoos &
Leyton-Brown 2014), as Optuna's `FanovaImportanceEvaluator` computes it. A random forest is fitted to the trials'
values of one objective and its variance split by parameter; a parameter's importance is the fraction of that
variance its main effect explains (not normalized: what the parameters leave unexplained, interactions and noise,
is the rest). It answers the question a recipe search is run for, whether the pipeline (data, mixture, batch,
rates) or the algorithm mattered, and how sure one can be of it: with few trials the forest is rough, so the
report shows it from `MIN_TRIALS` complete trials on and says how many it used.

The parameters that every complete trial has are assessed over all of them, with a range covering every value
they took (a redesign may have moved it). A conditional one (`proas.lam`, beside GRPO trials) is assessed within
the complete trials where it is active, from `MIN_TRIALS` of them on, beside the parameters those trials share
(`Importances.within`): its share of the variance among ProAS trials, not of the whole study's."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sro.ledger import TrialRecord, counted
from sro.space import RecipeSpace

MIN_TRIALS = 5
"""Complete trials needed before importances are estimated (with fewer, one trial decides the forest)."""
TREES = 32
"""The forest's size: Optuna's default of 64 took ~1.5 s an objective at 40 trials; 32 gives the same ranking
on the test cases (tests/test_importance.py) in half the time."""


@dataclass
class Importances:
    """Per objective, each assessed parameter's fraction of variance explained; and what was left out, why."""

    by_objective: dict[str, dict[str, float]] = field(default_factory=dict)
    trials: int = 0
    left_out: list[str] = field(default_factory=list)
    """Parameters some complete trials lack (conditional ones) or that never varied."""
    within: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per objective, each conditional parameter's fraction within the complete trials where it is active."""
    active_in: dict[str, int] = field(default_factory=dict)
    """How many complete trials each parameter of `within` is active in."""
    note: str = ""
    """Why nothing was estimated, or an objective skipped; empty when all went well."""


def _distribution(name: str, seen: list[Any], space: RecipeSpace | None):
    """An Optuna distribution holding every value `name` took: the space's kind and scale, its range widened to
    the values seen (a trial of an earlier space version may lie outside the current range)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    param = next((p for p in space.params if p.name == name), None) if space is not None else None
    in_simplex = space is not None and any(name in s.members for s in space.simplexes)
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in seen)
    if in_simplex or (param is not None and param.kind in ("float", "int") and numeric) or (param is None and numeric):
        low, high = min(seen), max(seen)
        if param is not None and param.low is not None and param.high is not None:
            low, high = min(low, param.low), max(high, param.high)
        log = bool(param is not None and param.log and low > 0)
        if param is not None and param.kind == "int" and all(float(v).is_integer() for v in seen):
            return IntDistribution(int(low), int(high), log=log)
        return FloatDistribution(float(low), float(high), log=log)
    choices = list(param.choices or []) if param is not None else []
    choices += [v for v in dict.fromkeys(seen) if v not in choices]
    return CategoricalDistribution(choices)


def parameter_importances(records: Sequence[TrialRecord], objectives: Sequence[tuple[str, str]],
                          space: RecipeSpace | None = None, seed: int = 0) -> Importances:
    """fANOVA importances of the searched parameters for each objective (see the module docstring)."""
    done = [r for r in counted(records) if r.state == "complete"
            and all(math.isfinite(r.value(k)) for k, _ in objectives)]
    out = Importances(trials=len(done))
    if len(done) < MIN_TRIALS:
        out.note = f"needs {MIN_TRIALS} complete trials with every objective; the study has {len(done)}"
        return out
    names = sorted({k for r in done for k in r.recipe.values})
    shared = [k for k in names if all(k in r.recipe.values for r in done)]
    varied = [k for k in shared if len({repr(r.recipe.values[k]) for r in done}) > 1]
    out.left_out = [k for k in names if k not in varied]
    if not varied:
        out.note = "no parameter took more than one value across the complete trials"
        return out

    flat = [key for key, _ in objectives if _flat([r.value(key) for r in done])]
    out.by_objective = _fanova(done, varied, objectives, flat, space, seed)
    # a conditional parameter within the trials where it is active, beside what those trials share (until stop 57
    # it was only named as left out: which ProAS knob mattered went unanswered); one fit per set of trials
    groups: dict[tuple[int, ...], list[str]] = {}
    for k in (k for k in names if k not in shared):
        groups.setdefault(tuple(i for i, r in enumerate(done) if k in r.recipe.values), []).append(k)
    for at, conditional in groups.items():
        sub = [done[i] for i in at]
        there = [n for n in names if all(n in r.recipe.values for r in sub)
                 and len({repr(r.recipe.values[n]) for r in sub}) > 1]
        keys = [o for o in objectives if not _flat([r.value(o[0]) for r in sub])]
        if len(sub) < MIN_TRIALS or not keys or not set(conditional) & set(there):
            continue
        for key, shares in _fanova(sub, there, keys, [], space, seed).items():
            out.within.setdefault(key, {}).update({k: shares[k] for k in conditional if k in shares})
        out.active_in.update({k: len(sub) for k in conditional if k in there})
    if flat:
        out.note = f"{', '.join(flat)}: the same value in every complete trial, nothing to explain"
    return out


def _flat(values: list[float]) -> bool:
    """Nothing to explain: every trial scored the same."""
    return max(values) - min(values) <= 1e-12 * max(1.0, abs(max(values)))


def _fanova(done: Sequence[TrialRecord], varied: list[str], objectives: Sequence[tuple[str, str]], flat: list[str],
            space: RecipeSpace | None, seed: int) -> dict[str, dict[str, float]]:
    """fANOVA of `varied` over the trials `done` for each objective not in `flat`."""
    import optuna
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances
    from optuna.trial import create_trial

    dists = {k: _distribution(k, [r.recipe.values[k] for r in done], space) for k in varied}
    study = optuna.create_study(directions=["maximize" if d == "max" else "minimize" for _, d in objectives])
    study.add_trials([create_trial(params={k: r.recipe.values[k] for k in varied}, distributions=dists,
                                   values=[r.value(k) for k, _ in objectives]) for r in done])
    out = {}
    for i, (key, _) in enumerate(objectives):
        if key in flat:
            continue
        with warnings.catch_warnings():  # `normalize=False` is marked experimental in Optuna 5
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            imp = get_param_importances(study, evaluator=FanovaImportanceEvaluator(n_trees=TREES, seed=seed),
                                        target=lambda t, i=i: t.values[i], normalize=False)
        out[key] = {k: float(v) for k, v in imp.items()}
    return out
