"""`SROSampler`: the BoTorch recipe proposer as an Optuna sampler, for users' own single- or
multi-objective studies.

The relative search space (the intersection of every finished trial's distributions) becomes a
`RecipeSpace`; the study's trials become `TrialRecord`s with one score per study value; the next point
is what `BoTorchProposer` picks (qLogNEHVI for several objectives, qLogNEI for one: Ament et al. 2023,
"Unexpected Improvements to Expected Improvement for Bayesian Optimization", arXiv 2310.20708; NEHVI:
Daulton et al. 2021, arXiv 2105.08195). Parameters outside that space go to `RandomSampler`.

Stepped distributions are searched as an integer index k (value = low + k × step), so every proposed
value lies on the distribution's grid.
"""

from __future__ import annotations

import json
import secrets
import threading
import warnings
from collections.abc import Sequence
from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.search_space import IntersectionSearchSpace
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

from sro.ledger import TrialRecord
from sro.optimizer.botorch_proposer import BoTorchProposer
from sro.recipe import Recipe
from sro.space import Param, RecipeSpace


def to_param(name: str, d: BaseDistribution) -> Param:
    """The `Param` that searches Optuna distribution `d` (stepped ones as a grid index)."""
    if isinstance(d, CategoricalDistribution):
        return Param(name, "categorical", choices=list(d.choices))
    if isinstance(d, (FloatDistribution, IntDistribution)):
        step = d.step if d.step not in (None, 1) or isinstance(d, FloatDistribution) else None
        if step is None:
            return Param(name, "float" if isinstance(d, FloatDistribution) else "int", d.low, d.high, log=d.log)
        return Param(name, "int", 0, round((d.high - d.low) / step))
    raise TypeError(f"SROSampler: parameter {name!r} has distribution {type(d).__name__}; expected "
                    "FloatDistribution, IntDistribution or CategoricalDistribution")


def _stepped(d: BaseDistribution) -> float | None:
    if isinstance(d, FloatDistribution):
        return d.step
    if isinstance(d, IntDistribution) and d.step != 1:
        return d.step
    return None


def to_recipe_value(d: BaseDistribution, v: Any) -> Any:
    step = _stepped(d)
    return v if step is None else int(round((v - d.low) / step))  # type: ignore[union-attr]


def to_optuna_value(d: BaseDistribution, v: Any) -> Any:
    step = _stepped(d)
    if isinstance(d, CategoricalDistribution):
        return v
    if step is not None:
        v = min(d.low + v * step, d.high)  # type: ignore[union-attr]
    return float(v) if isinstance(d, FloatDistribution) else int(round(v))


class SROSampler(BaseSampler):
    """Optuna sampler: GP + qLogNEHVI/qLogNEI over a pool of Sobol, local and crossover candidates.

    Args:
        seed: seeds the Sobol sequence, the pool, the MC sampler and the fallback `RandomSampler`.
        n_startup_trials: complete trials before the GP is used; default max(4, 2 × #objectives).
        pool_size: candidates scored per proposal.
        mc_samples: quasi-MC posterior samples in the acquisition.
    """

    def __init__(self, seed: int | None = None, n_startup_trials: int | None = None, pool_size: int = 500,
                 mc_samples: int = 32) -> None:
        self._seed = seed if seed is not None else secrets.randbits(31)
        self._random = RandomSampler(seed=seed)
        self._search_space = IntersectionSearchSpace()
        self._n_startup = n_startup_trials
        self._pool_size = pool_size
        self._mc_samples = mc_samples
        self._proposers: dict[tuple[Any, ...], BoTorchProposer] = {}  # one per study and space: warm GP fits
        self._lock = threading.Lock()
        self._warned: set[tuple[Any, ...]] = set()

    def __getstate__(self) -> dict[str, Any]:
        """Picklable (Ray Tune checkpoints, spawned workers): without its lock and its fitted proposers,
        which a copy rebuilds from the study's trials."""
        state = dict(self.__dict__)
        state["_lock"], state["_proposers"] = None, {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def reseed_rng(self) -> None:
        """Optuna calls this before every trial of `optimize(n_jobs > 1)`. Only the fallback sampler is
        reseeded: a new Sobol seed per trial would scatter the initial design (each point from another
        scrambled sequence) and drop the warm GP state, as Optuna's own QMCSampler also avoids."""
        self._random.reseed_rng()

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        """The parameters every trial shares with more than one value, of the three kinds `to_param`
        searches; any other (a user's own `BaseDistribution`) goes to the fallback `RandomSampler`, as
        a parameter outside the space does (until stop 30 one such parameter made every trial's first
        suggestion raise)."""
        return {name: d for name, d in self._search_space.calculate(study).items() if not d.single()
                and isinstance(d, (FloatDistribution, IntDistribution, CategoricalDistribution))}

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if not search_space:
            return {}
        directions = ["max" if d == StudyDirection.MAXIMIZE else "min" for d in study.directions]
        objectives = [(f"value{i}", d) for i, d in enumerate(directions)]
        # the study in the key: a sampler reused for a second study must not keep the first one's GP fit
        key = (study._study_id, study.study_name, tuple(sorted((n, repr(d)) for n, d in search_space.items())),
               tuple(directions))
        with self._lock:
            # the trials are read under the lock, so that a proposal another thread of optimize(n_jobs > 1)
            # has just made (its trial has no params yet) is a pending point here, not a blank
            trials = study._get_trials(deepcopy=False, use_cache=True)
            history = _records(trials, search_space, len(objectives), exclude=trial.number)
            proposer = self._proposers.get(key)
            if proposer is None:
                space = RecipeSpace([to_param(n, d) for n, d in search_space.items()])
                proposer = BoTorchProposer(space, seed=self._seed, objectives=objectives,
                                           n_init=self._n_startup, pool_size=self._pool_size,
                                           mc_samples=self._mc_samples)
                self._proposers[key] = proposer
            try:
                picked = proposer.propose(history, 1)
            except Exception as e:  # a sampler's failure must not end the user's study: sample at random
                warnings.warn(f"SROSampler: proposing trial {trial.number} failed ({type(e).__name__}: {e}); "
                              "this trial is sampled at random", stacklevel=2)
                return {}
            if not picked:  # every distinct point tried: let the random sampler repeat one
                if key not in self._warned:
                    self._warned.add(key)
                    warnings.warn("SROSampler: no untried point is left in the search space (values are told "
                                  "apart at 6 significant digits, steps and choices exactly); the following "
                                  "trials are sampled at random", stacklevel=2)
                return {}
            values = {n: to_optuna_value(d, picked[0].values[n]) for n, d in search_space.items()}
            # other workers (threads or processes on the same storage) read it as this trial's pending point
            study._storage.set_trial_system_attr(trial._trial_id, PROPOSAL_ATTR, json.dumps(picked[0].values))
        return values

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self._random.sample_independent(study, trial, param_name, param_distribution)


PROPOSAL_ATTR = "sro:proposal"  # a trial's system attribute: the recipe values SROSampler proposed for it


def _records(trials: Sequence[FrozenTrial], search_space: dict[str, BaseDistribution], m: int,
             exclude: int) -> list[TrialRecord]:
    """Trials as `TrialRecord`s over `search_space`; a trial missing a parameter, or with a value the
    current distribution does not contain, is kept (as not complete) only for the Sobol position. A
    running trial whose objective has not suggested its parameters yet is its proposal, as a pending point."""
    out = []
    for t in trials:
        if t.number == exclude:
            continue
        if t.state in (TrialState.RUNNING, TrialState.WAITING) and not all(n in t.params for n in search_space):
            proposed = _proposal(t, search_space)
            if proposed is not None:
                out.append(TrialRecord(t.number, "running", Recipe(proposed), {}))
                continue
        values, fits = {}, True
        for n, d in search_space.items():
            fits = n in t.params and _holds(d, t.params[n])
            if not fits:
                break
            values[n] = to_recipe_value(d, t.params[n])
        complete = fits and t.state == TrialState.COMPLETE and t.values is not None and len(t.values) == m
        state = "complete" if complete else {TrialState.RUNNING: "running", TrialState.WAITING: "running"}.get(
            t.state, "failed")
        scores = {f"value{i}": float(v) for i, v in enumerate(t.values)} if complete else {}
        out.append(TrialRecord(t.number, state, Recipe(values if fits else {"_trial": t.number}), scores))
    return out


def _holds(d: BaseDistribution, value: Any) -> bool:
    """Whether distribution `d` contains `value` (an external value: a categorical one not among the current
    choices is not contained)."""
    try:
        return d._contains(d.to_internal_repr(value))
    except ValueError:
        return False


def _proposal(t: FrozenTrial, search_space: dict[str, BaseDistribution]) -> dict[str, Any] | None:
    """The recipe values SROSampler proposed for running trial `t`, if they are of `search_space`."""
    raw = t.system_attrs.get(PROPOSAL_ATTR)
    if not isinstance(raw, str):
        return None
    try:
        values = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(values, dict) or set(values) != set(search_space):
        return None
    try:
        return values if all(_holds(search_space[n], to_optuna_value(search_space[n], v)) for n, v in values.items()) \
            else None
    except (ValueError, TypeError):  # a value of the wrong kind for its distribution's conversion
        return None
