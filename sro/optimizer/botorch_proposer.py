"""`BoTorchProposer`: multi-objective Bayesian optimization of recipes, registered as "botorch".

1) Too few finished trials → the next points of the project's scrambled Sobol sequence.
2) Otherwise fit one GP per objective (a batched `SingleTaskGP`, outcomes standardized, minimized
   objectives negated so every objective is maximized) on the complete trials,
3) build a pool of valid candidate recipes — space-filling Sobol points, local moves around
   Pareto-optimal recipes, crossovers between Pareto recipes that are best on different objectives —
   minus every recipe already in the study,
4) pick `n` of them greedily by qLogNEHVI (Ament et al. 2023, "Unexpected Improvements to Expected
   Improvement for Bayesian Optimization", arXiv 2310.20708; the noisy hypervolume criterion of
   Daulton et al. 2021, arXiv 2105.08195), the earlier picks passed as `X_pending`. With a single
   objective the same role is played by qLogNEI from the same paper.

The acquisition is only evaluated on the pool, in chunks and without gradients: recipes are mixed
discrete/continuous, and scoring a few thousand decoded candidates is both faster and safer than
optimizing a relaxation and rounding it.
"""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from botorch.acquisition.logei import qLogNoisyExpectedImprovement
from botorch.acquisition.multi_objective.logei import qLogNoisyExpectedHypervolumeImprovement
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.sampling.normal import SobolQMCNormalSampler
from botorch.utils.multi_objective.pareto import is_non_dominated
from gpytorch.mlls import ExactMarginalLogLikelihood

from sro.ledger import TrialRecord
from sro.optimizer.encoding import RecipeEncoder, sobol_pool
from sro.proposers import PROPOSERS, sobol_recipes
from sro.recipe import Recipe
from sro.space import RecipeSpace

Objective = tuple[str, str]
"""(key, "max" | "min"); key "cost" reads `record.cost["wall_s"]`, any other key `record.scores`."""


def objective_value(record: TrialRecord, key: str) -> float:
    """The raw value of one objective for a trial (nan where the trial lacks it)."""
    return record.value(key)


def reference_point(Y: torch.Tensor, margin: float = 0.1) -> torch.Tensor:
    """(n, m) observed outcomes, maximization frame → (m,) point a margin below the worst value.

    `margin` is a fraction of each objective's observed range (of its magnitude, or 1, when the range
    is zero), so every observed point dominates the reference point and adds hypervolume.
    """
    lo, hi = Y.min(dim=0).values, Y.max(dim=0).values
    span = torch.where(hi > lo, hi - lo, lo.abs().clamp_min(1.0))
    return lo - margin * span


class BoTorchProposer:
    """Multi-objective BO over a `RecipeSpace` (see the module docstring for the steps).

    Args:
        space: the recipe space; candidates are always valid points of it.
        seed: seeds the Sobol sequence, the candidate pool and the MC sampler.
        objectives: (key, "max"|"min") pairs. None: every score key of the complete trials, maximized.
        n_init: complete trials needed before the GP is used; default max(4, 2 × #objectives).
        pool_size: candidates scored by the acquisition per proposal.
        mc_samples: quasi-MC samples of the GP posterior in the acquisition.
        chunk: candidates scored per acquisition call (bounds memory).
        fit_iters: L-BFGS steps per GP fit (warm-started from the previous proposal).
        shortlist: candidates re-scored for the 2nd … nth pick of a batch.
        threads: torch intra-op threads while proposing (restored after); None keeps torch's setting.
            The matrices are small, so extra threads mostly wait on each other: on a 2-core machine
            shared with a training job, 2 threads made one proposal ~7× slower than 1.
    """

    def __init__(self, space: RecipeSpace, seed: int = 0, objectives: list[Objective] | None = None,
                 n_init: int | None = None, pool_size: int = 2000, mc_samples: int = 32,
                 chunk: int = 500, fit_iters: int = 60, shortlist: int = 128,
                 threads: int | None = 1) -> None:
        for key, d in objectives or []:
            if d not in ("max", "min"):
                raise ValueError(f"objective {key!r}: direction must be 'max' or 'min', got {d!r}")
        self.space = space
        self.seed = seed
        self.objectives = list(objectives) if objectives is not None else None
        self.n_init = n_init
        self.pool_size = pool_size
        self.mc_samples = mc_samples
        self.chunk = chunk
        self.fit_iters = fit_iters
        self.shortlist = shortlist
        self.threads = threads
        self._warm: dict[str, Any] | None = None  # last fit's hyperparameters
        self.encoder = RecipeEncoder(space)

    # --- the protocol -----------------------------------------------------------------------------
    def propose(self, history: Sequence[TrialRecord], n: int = 1) -> list[Recipe]:
        """Up to `n` new recipes, none with the `Recipe.key` of a trial in `history` (any state)."""
        if n <= 0:
            return []
        objectives = self.objectives or self._default_objectives(history)
        done, Y = self._targets(history, objectives)
        n_init = self.n_init if self.n_init is not None else max(4, 2 * len(objectives))
        seen = {r.recipe.key for r in history}
        if len(done) < max(n_init, 2):
            return self._sobol(len(history), n, seen)
        with _torch_threads(self.threads):
            X = self.encoder.encode_many([r.recipe.values for r in done])  # (N, D)
            pool = self._pool(X, Y, seen, len(history))
            if not pool:  # the space is exhausted near everything we know; fall back to fresh points
                return self._sobol(len(history), n, seen)
            model = self._fit(X, Y)
            X_pool = self.encoder.encode_many(pool)  # (P, D), canonical encodings of decoded recipes
            picks = self._select(model, X, Y, X_pool, min(n, len(pool)))
        out = [Recipe(pool[i], dict(self.space.fixed)) for i in picks]
        if len(out) < n:
            out += self._sobol(len(history), n - len(out), seen | {r.key for r in out})
        return out

    # --- 1) data ----------------------------------------------------------------------------------
    @staticmethod
    def _default_objectives(history: Sequence[TrialRecord]) -> list[Objective]:
        keys = sorted({k for r in history if r.state == "complete" for k in r.scores})
        if not keys:
            raise ValueError("BoTorchProposer: no objectives given and no complete trial has scores; "
                             "pass objectives=[('domain/bench', 'max'), ('cost', 'min')]")
        return [(k, "max") for k in keys]

    def _targets(self, history: Sequence[TrialRecord],
                 objectives: list[Objective]) -> tuple[list[TrialRecord], torch.Tensor]:
        """Complete trials with every objective finite, and their (N, m) outcomes, all maximized."""
        done, rows = [], []
        for r in history:
            if r.state != "complete":
                continue  # failed/interrupted: not modelled, but their keys stay in `seen`
            y = [objective_value(r, k) * (1.0 if d == "max" else -1.0) for k, d in objectives]
            if all(v == v and abs(v) != float("inf") for v in y):
                done.append(r)
                rows.append(y)
        return done, torch.tensor(rows, dtype=torch.float64).reshape(len(rows), len(objectives))

    def _sobol(self, position: int, n: int, seen: set[str]) -> list[Recipe]:
        """Like `SobolProposer`: continue the project's sequence from `position`."""
        return sobol_recipes(self.space, self.seed, position, n, seen)

    # --- 2) model ---------------------------------------------------------------------------------
    def _fit(self, X: torch.Tensor, Y: torch.Tensor) -> SingleTaskGP:
        """A GP per objective (batched), fitted by marginal likelihood. X: (N, D), Y: (N, m).

        L-BFGS is capped at `fit_iters` steps, and at half of that when the previous proposal's
        hyperparameters are the starting point: one more trial moves the optimum little, and a full
        cold fit of 100 points costs seconds on a loaded CPU.
        """
        model = SingleTaskGP(X, Y)  # default: Standardize(m) outcome transform, RBF + dim-scaled prior
        iters = self.fit_iters
        if self._warm is not None and self._warm["shape"] == (X.shape[1], Y.shape[1]):
            model.load_state_dict(self._warm["hypers"], strict=False)
            iters = max(self.fit_iters // 2, 10)
        try:
            fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model),
                             optimizer_kwargs={"options": {"maxiter": iters}})
        except Exception as e:  # a failed fit keeps the prior hyperparameters; still a usable model
            warnings.warn(f"BoTorchProposer: GP fit failed ({e}); using prior hyperparameters", stacklevel=2)
        hypers = {k: v for k, v in model.state_dict().items() if "outcome_transform" not in k and "train" not in k}
        self._warm = {"shape": (X.shape[1], Y.shape[1]), "hypers": hypers}
        return model

    # --- 3) candidates ----------------------------------------------------------------------------
    def _pool(self, X: torch.Tensor, Y: torch.Tensor, seen: set[str], position: int) -> list[dict[str, Any]]:
        """Distinct valid candidate values dicts not in `seen`. X: (N, D) complete trials, Y: (N, m)."""
        gen = torch.Generator().manual_seed(zlib.crc32(f"{self.seed}/{position}".encode()))
        front = X[is_non_dominated(Y)] if Y.shape[1] > 1 else X[Y[:, 0].argsort(descending=True)[:5]]
        specialists = X[Y.argmax(dim=0)]  # (m, D): best recipe on each objective
        n_local, n_cross = int(0.4 * self.pool_size), int(0.15 * self.pool_size)
        moves = []
        for i in range(n_local):
            sigma = (0.03, 0.1, 0.25)[i % 3]
            moves.append(self.encoder.perturb(front[i % len(front)], sigma, 0.2, gen))
        parents = specialists if len(specialists) > 1 and not torch.equal(specialists[0], specialists[1]) else front
        for i in range(n_cross if len(parents) > 1 else 0):
            a, b = torch.randperm(len(parents), generator=gen)[:2]
            if i % 2 and len(front) > 1:  # half of them between any two Pareto recipes
                a, b = torch.randperm(len(front), generator=gen)[:2]
                moves.append(self.encoder.crossover(front[a], front[b], gen))
            else:
                moves.append(self.encoder.crossover(parents[a], parents[b], gen))
        rows = [self.encoder.decode(x) for x in moves]
        rows += sobol_pool(self.space, self.pool_size - len(rows), seed=int(gen.initial_seed() % 2**31))
        out, keys = [], set(seen)
        for values in rows:  # decoded and Sobol rows are valid by construction (tests/test_optimizer.py)
            key = Recipe(values, dict(self.space.fixed)).key
            if key not in keys:
                keys.add(key)
                out.append(values)
        return out

    # --- 4) selection -----------------------------------------------------------------------------
    def _acquisition(self, model: SingleTaskGP, X: torch.Tensor, Y: torch.Tensor,
                     X_pending: torch.Tensor | None) -> torch.nn.Module:
        """qLogNEHVI (m ≥ 2) or qLogNEI (m = 1) with baseline X (N, D) and observed Y (N, m)."""
        sampler = SobolQMCNormalSampler(sample_shape=torch.Size([self.mc_samples]), seed=self.seed)
        base = _baseline(model, X, Y, cap=32 if Y.shape[1] <= 2 else 16)  # box counts grow ~ cap^(m-1)
        if Y.shape[1] == 1:
            return qLogNoisyExpectedImprovement(model, X_baseline=base, sampler=sampler, X_pending=X_pending,
                                                prune_baseline=False)
        return qLogNoisyExpectedHypervolumeImprovement(model, ref_point=reference_point(Y), X_baseline=base,
                                                       sampler=sampler, X_pending=X_pending,
                                                       prune_baseline=False)

    def _select(self, model: SingleTaskGP, X: torch.Tensor, Y: torch.Tensor, X_pool: torch.Tensor,
                n: int) -> list[int]:
        """Greedy batch: n rows of X_pool (P, D), each maximizing the acquisition given the earlier ones.

        Pending points only lower a candidate's hypervolume improvement, so after the first pass over
        the whole pool the later picks re-score only its `shortlist` best candidates.
        """
        with torch.no_grad():
            acqf = self._acquisition(model, X, Y, None)
            vals = self._score(acqf, X_pool)  # (P,)
            short = vals.argsort(descending=True)[: max(self.shortlist, 2 * n)]
            picks = [int(short[0])]
            for _ in range(n - 1):
                if Y.shape[1] > 1:  # qLogNEHVI updates its box decomposition in place
                    acqf.set_X_pending(X_pool[picks])
                else:
                    acqf = self._acquisition(model, X, Y, X_pool[picks])
                sv = self._score(acqf, X_pool[short])
                sv[torch.isin(short, torch.tensor(picks))] = -float("inf")
                picks.append(int(short[sv.argmax()]))
        return picks

    def _score(self, acqf: torch.nn.Module, X_pool: torch.Tensor) -> torch.Tensor:
        """Acquisition value of each candidate alone (q = 1): (P, D) → (P,), in chunks."""
        return torch.cat([acqf(X_pool[i : i + self.chunk].unsqueeze(1))  # (chunk, 1, D) → (chunk,)
                          for i in range(0, len(X_pool), self.chunk)])


@contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _baseline(model: SingleTaskGP, X: torch.Tensor, Y: torch.Tensor, cap: int = 32) -> torch.Tensor:
    """The rows of X (N, D) that can plausibly be Pareto-optimal: non-dominated under the observed Y
    (N, m) or under the posterior mean, at most `cap` of them (best posterior-mean rank first).

    NEHVI integrates over the front of the in-sample points; points dominated both in the data and in
    the model's mean contribute almost nothing, and dropping them up front replaces botorch's
    sampling-based `prune_baseline` (thousands of joint posterior draws) at a fraction of its cost.
    """
    with torch.no_grad():
        mean = model.posterior(X).mean  # (N, m)
    keep = is_non_dominated(Y, deduplicate=False) | is_non_dominated(mean, deduplicate=False)
    idx = keep.nonzero().squeeze(-1)
    if len(idx) > cap:
        idx = idx[mean[idx].sum(dim=-1).argsort(descending=True)[:cap]]
    return X[idx]


PROPOSERS.add("botorch", BoTorchProposer)
