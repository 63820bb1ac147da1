"""Optuna's samplers as SRO proposers, for comparison: "tpe" (TPESampler) and "nsga2" (NSGAIISampler).

Each proposal builds an in-memory Optuna study with the project's objective directions, seeds it with
the study's trials (complete ones with their objective values, running ones as running, which TPE's
constant liar treats as pending, the others as failed, so the sampler sees every recipe already run),
and asks the sampler for new trials. The recipe space is sampled
define-by-run: a conditional parameter is suggested only when its condition holds, and a simplex is
sampled as one uniform weight per member, normalized to sum 1 (the usual way to put a mixture into
Optuna, which has no simplex distribution). A sampled recipe that the study has already run is
discarded and asked again; after a bounded number of tries the project's Sobol sequence fills in.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.samplers import BaseSampler, NSGAIISampler, TPESampler
from optuna.samplers._ga._base import BaseGASampler
from optuna.trial import TrialState, create_trial

from sro.ledger import TrialRecord, distributions
from sro.proposers import PROPOSERS, sobol_recipes
from sro.recipe import Recipe
from sro.space import RecipeSpace

NSGA2_POPULATION = 10
"""NSGA-II's population: Optuna's default of 50 would leave a search of a few dozen trials all random."""


class OptunaProposer:
    """A proposer that asks an Optuna sampler (see the module docstring). Subclasses set `make_sampler`."""

    make_sampler: Callable[[int], BaseSampler]

    def __init__(self, space: RecipeSpace, seed: int = 0, objectives: list[tuple[str, str]] | None = None) -> None:
        self.space = space
        self.seed = seed
        self.objectives = list(objectives) if objectives is not None else None

    def propose(self, history: Sequence[TrialRecord], n: int = 1) -> list[Recipe]:
        if n <= 0:
            return []
        with warnings.catch_warnings():  # TPE's multivariate/group and constant_liar are "experimental"
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return self._propose(history, n)

    def _propose(self, history: Sequence[TrialRecord], n: int) -> list[Recipe]:
        objectives = self.objectives or [(k, "max") for k in sorted(
            {k for r in history if r.state == "complete" for k in r.scores})] or [("score", "max")]
        sampler = type(self).make_sampler(self.seed + len(history))  # a resumed search asks afresh
        study = optuna.create_study(directions=["maximize" if d == "max" else "minimize" for _, d in objectives],
                                    sampler=sampler)
        self._seed_study(study, sampler, history, objectives)
        seen = {r.recipe.key for r in history}
        out: list[Recipe] = []
        for _ in range(20 * n):
            if len(out) >= n:
                break
            trial = study.ask()
            rec = Recipe(self._suggest(trial), dict(self.space.fixed))
            if rec.key in seen:
                study.tell(trial, state=TrialState.FAIL)
                continue
            seen.add(rec.key)
            out.append(rec)
        if len(out) < n:
            out += sobol_recipes(self.space, self.seed, len(history), n - len(out), seen)
        return out

    def _seed_study(self, study: optuna.Study, sampler: BaseSampler, history: Sequence[TrialRecord],
                    objectives: list[tuple[str, str]]) -> None:
        generation_key = sampler._get_generation_key() if isinstance(sampler, BaseGASampler) else None
        pop = getattr(sampler, "_population_size", None) or 1
        n_complete = 0
        for r in history:
            values = [r.value(k) for k, _ in objectives]
            complete = r.state == "complete" and all(v == v and abs(v) != float("inf") for v in values)
            attrs = {generation_key: n_complete // pop} if generation_key and complete else {}
            # other workers' running trials stay running: TPE's constant liar steers away from them
            state = TrialState.COMPLETE if complete else TrialState.RUNNING if r.state == "running" else TrialState.FAIL
            try:
                dists = distributions(self.space, r.recipe.values)
                study.add_trial(create_trial(
                    params={k: r.recipe.values[k] for k in dists}, distributions=dists,
                    values=values if complete else None, state=state, system_attrs=attrs))
            except (KeyError, ValueError):  # a recipe of another space version: not evidence for this one
                continue
            n_complete += complete

    def _suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for p in self.space.params:  # parents precede children
            if not self.space.is_active(p, values):
                continue
            if p.kind == "float":
                values[p.name] = trial.suggest_float(p.name, float(p.low), float(p.high), log=p.log)  # type: ignore[arg-type]
            elif p.kind == "int":
                values[p.name] = trial.suggest_int(p.name, int(p.low), int(p.high), log=p.log)  # type: ignore[arg-type]
            else:
                values[p.name] = trial.suggest_categorical(p.name, list(p.choices or []))
        for s in self.space.simplexes:
            raw = [trial.suggest_float(m, 0.0, 1.0) for m in s.members]
            total = sum(raw)
            w = [x / total for x in raw] if total > 0 else [1.0 / len(raw)] * len(raw)
            values.update({m: round(x, 6) for m, x in zip(s.members, w)})
        return values


@PROPOSERS.register("tpe")
class TPEProposer(OptunaProposer):
    """Optuna's TPESampler (multivariate, grouped for the conditional parameters)."""

    @staticmethod
    def make_sampler(seed: int) -> BaseSampler:
        return TPESampler(seed=seed, multivariate=True, group=True, constant_liar=True)


@PROPOSERS.register("nsga2")
class NSGA2Proposer(OptunaProposer):
    """Optuna's NSGAIISampler with a population of `NSGA2_POPULATION`."""

    @staticmethod
    def make_sampler(seed: int) -> BaseSampler:
        return NSGAIISampler(seed=seed, population_size=NSGA2_POPULATION)
