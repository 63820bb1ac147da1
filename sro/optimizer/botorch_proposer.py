"""`BoTorchProposer`: multi-objective Bayesian optimization of recipes, registered as "botorch".

1) Too few finished trials → the next points of the project's scrambled Sobol sequence.
2) Otherwise fit one GP per objective (a batched `SingleTaskGP`, outcomes standardized, minimized
   objectives negated so every objective is maximized; with `outcome_warp` and two objectives or
   more, on the outcomes' monotone warp, `warp.OutcomeWarp`; a Matérn-5/2 ARD kernel whose Gamma
   lengthscale prior grows with the square root of the encoded dimension, see `kernel`) on the
   complete trials,
3) build a pool of valid candidate recipes — space-filling Sobol points, local moves around
   Pareto-optimal recipes, crossovers between Pareto recipes that are best on different objectives,
   and the recipes of a pluggable `extra` source (e.g. an LLM designer) that are valid in the space —
   minus every recipe already in the study,
4) pre-screen the pool to its `screen` most promising candidates — those that the fewest others
   dominate under the optimistic posterior (mean + std per objective; no sampling),
5) refine the best of them, and the Pareto-optimal recipes, by gradient ascent of the acquisition on
   their active numeric columns (L-BFGS-B; categoricals and mixture weights held: SLSQP on the
   weights' simplex was measured worse, bench/optimizer.py recipe problem median HV 0.35 against
   0.42; the local search from Pareto points that continuous BO does, e.g. Optuna's GPSampler) and
   add the decoded results,
6) pick `n` of them greedily by qLogNEHVI (Ament et al. 2023, "Unexpected Improvements to Expected
   Improvement for Bayesian Optimization", arXiv 2310.20708; the noisy hypervolume criterion of
   Daulton et al. 2021, arXiv 2105.08195), the earlier picks and the study's running trials (other
   workers' on a shared storage, `max_running`) passed as `X_pending`, the reference
   point inferred from the data (`hypervolume.study_reference_point(front=True)`: 10% of the observed
   Pareto front's range below its nadir; for the cost, 10% of its observed range above the dearest
   trial) unless the project states the worst acceptable values (`ref_point`); inferred or stated
   in raw units, and mapped through the outcomes' warp if there is one. With a single
   objective the same role is played by qLogNEI.

The acquisition is only evaluated on decoded recipes: the screened pool in chunks without gradients,
and the refined points after decoding (an int is rounded, an inactive parameter dropped), so it never
ranks a relaxation that is not a recipe. Gradients only move the active floats and ints, where a
recipe is a point of a continuous space; the pool's Sobol points, moves and crossovers search the
discrete choices. Batch picks after the first keep the baseline's box decompositions and
score each candidate jointly with the pending picks (`max_iep`), instead of re-partitioning per pick;
beyond `MAX_JOINT_PENDING` pending points (other workers' running trials and the earlier picks) the
rest are merged into the baseline's decompositions instead, since a joint q-batch costs 2^q subsets.
"""

from __future__ import annotations

import json
import math
import warnings
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from botorch.acquisition.logei import qLogNoisyExpectedImprovement
from botorch.acquisition.multi_objective.logei import qLogNoisyExpectedHypervolumeImprovement
from botorch.fit import fit_gpytorch_mll
from botorch.generation.gen import gen_candidates_scipy
from botorch.models import SingleTaskGP
from botorch.sampling.normal import SobolQMCNormalSampler
from botorch.utils.multi_objective.pareto import is_non_dominated
from gpytorch.kernels import MaternKernel, ScaleKernel
from gpytorch.mlls import ExactMarginalLogLikelihood
from gpytorch.priors import GammaPrior

from sro.ledger import TrialRecord
from sro.optimizer.encoding import RecipeEncoder, sobol_pool
from sro.optimizer.hypervolume import study_reference_point
from sro.optimizer.warp import OutcomeWarp
from sro.proposers import PROPOSERS, sobol_recipes
from sro.recipe import Recipe
from sro.space import RecipeSpace, SpaceError
from trainers.threads import torch_threads

Objective = tuple[str, str]
"""(key, "max" | "min"); key "cost" reads `record.cost["wall_s"]`, any other key `record.scores`."""

ExtraSource = Callable[[Sequence[TrialRecord]], "Sequence[Recipe | dict[str, Any]]"]
"""Extra candidates given the study so far (e.g. an LLM designer's proposals): recipes or values dicts."""


def objective_value(record: TrialRecord, key: str) -> float:
    """The raw value of one objective for a trial (nan where the trial lacks it)."""
    return record.value(key)


MAX_JOINT_PENDING = 3
"""Pending points scored jointly with each candidate (qLogNEHVI's `max_iep`); the candidate and these
form a q-batch whose hypervolume improvement sums over 2^q − 1 subsets, so 12 running trials of other
workers took 35 s and 1.2 GB per proposal (16, the `max_running` default, hung). The rest are merged into
the baseline's box decompositions (linear in their number). Batches of up to 4 are unchanged."""


class BoTorchProposer:
    """Multi-objective BO over a `RecipeSpace` (see the module docstring for the steps).

    Args:
        space: the recipe space; candidates are always valid points of it.
        seed: seeds the Sobol sequence, the candidate pool and the MC sampler.
        objectives: (key, "max"|"min") pairs. None: every score key of the complete trials, maximized.
        n_init: complete trials needed before the GP is used; default max(4, 2 × #objectives).
        pool_size: candidates built per proposal (before the pre-screen).
        screen: candidates kept by the optimistic-posterior pre-screen and scored by the acquisition.
        mc_samples: quasi-MC samples of the GP posterior in the acquisition; a quarter of them (at
            least 8) with three or more objectives, where each sample's box decomposition of the
            baseline front is a separate ~30 ms computation (two objectives: one batched one).
        chunk: candidates scored per acquisition call (bounds memory).
        fit_iters: L-BFGS steps of a cold GP fit; a quarter of them when warm-started from the last fit
            (each step costs ~10-50 ms of Python overhead whatever the data size).
        refit_growth: the hyperparameters are re-optimized only once the number of modelled trials
            has grown by more than this fraction since the last fit (every proposal while the study
            is small, every ~10 trials at 100); in between, the GP is conditioned on the new data with
            the last fit's hyperparameters.
        shortlist: candidates re-scored for the 2nd … nth pick of a batch.
        refine: start points of the gradient refinement: the `refine` best screened candidates by
            acquisition value plus up to `refine` Pareto-optimal recipes. 0 switches it off.
        refine_iters: L-BFGS-B iterations of the refinement (all start points in one problem).
        threads: torch intra-op threads while proposing (restored after); None keeps torch's setting.
            The matrices are small, so extra threads mostly wait on each other: on a 2-core machine
            shared with a training job, 2 threads made one proposal ~7× slower than 1.
        ref_point: the worst acceptable value of some objectives, in their own units and directions
            (e.g. {"math/acc": 0.3, "cost": 3600}): the acquisition counts hypervolume only above it.
            Objectives it does not name get the reference point inferred from the data (10% of the
            observed Pareto front's range below its nadir; the cost 10% above the dearest trial).
            Needs `objectives`.
        extra: an extra candidate source (`ExtraSource`), called once per model-based proposal. Its
            recipes join the pool (and always pass the pre-screen) if `space.validate` accepts them and
            the study has not run them; invalid ones are skipped with a warning, and so is a source
            that raises. None: no extra candidates.
        max_running: at most this many of the history's running trials (the latest) are pending points
            of the acquisition: trials that other workers sharing the study's storage are training now,
            so this proposal does not go where they already went. A trial left "running" by a worker
            that died stays pending until the ledger marks it interrupted (`Ledger.recover`: at once on
            its own host, after 10 silent heartbeat intervals from any other).
        max_ended: at most this many of the history's trials that ended without a modelled result
            (pruned, failed, collapsed, stopped; the latest) join the acquisition's baseline. Its own
            cap: until stop 42 `max_running` capped these too, so `max_running=0` (no pending points)
            also dropped every ended trial from the baseline.
        outcome_warp: with two objectives or more, fit the GP on `warp.OutcomeWarp`'s monotone warp of
            the outcomes (standardized, then bilog) and map the reference point through it. Off by
            default: measured at stop 50 (docs/optimizer.md), it helped DTLZ2 and cost BraninCurrin and
            the recipe problem.
    """

    def __init__(self, space: RecipeSpace, seed: int = 0, objectives: list[Objective] | None = None,
                 n_init: int | None = None, pool_size: int = 2000, screen: int = 256, mc_samples: int = 32,
                 chunk: int = 256, fit_iters: int = 60, refit_growth: float = 0.1, shortlist: int = 64,
                 refine: int = 4, refine_iters: int = 30, threads: int | None = 1,
                 extra: ExtraSource | None = None, ref_point: Mapping[str, float] | None = None,
                 max_running: int = 16, screen_mean: float = 0.0, max_ended: int = 16,
                 outcome_warp: bool = False) -> None:
        for name, cap in (("max_running", max_running), ("max_ended", max_ended)):
            if cap < 0:
                raise ValueError(f"BoTorchProposer: {name} must be >= 0 (got {cap}); 0 leaves those trials out")
        for key, d in objectives or []:
            if d not in ("max", "min"):
                raise ValueError(f"objective {key!r}: direction must be 'max' or 'min', got {d!r}")
        if ref_point:
            names = [k for k, _ in objectives or []]
            unknown = sorted(set(ref_point) - set(names))
            if unknown:
                raise ValueError(f"ref_point names {unknown}, which are not objectives (objectives: {names}); "
                                 "give the worst acceptable value of objectives only")
        self.ref_point = dict(ref_point or {})
        self.space = space
        self.seed = seed
        self.objectives = list(objectives) if objectives is not None else None
        self.n_init = n_init
        self.pool_size = pool_size
        self.screen = screen
        self.extra = extra
        self.mc_samples = mc_samples
        self.chunk = chunk
        self.fit_iters = fit_iters
        self.refit_growth = refit_growth
        self.shortlist = shortlist
        self.refine = refine
        self.refine_iters = refine_iters
        self.threads = threads
        self.max_running = max_running
        self.max_ended = max_ended
        self.screen_mean = screen_mean
        self.outcome_warp = outcome_warp
        self._warm: dict[str, Any] | None = None  # last fit's hyperparameters
        self.encoder = RecipeEncoder(space)
        self._names = {p.name for p in space.params} | {m for s in space.simplexes for m in s.members}

    # --- the GP's hyperparameters across restarts ---------------------------------------------------
    def _fingerprint(self) -> str:
        """What the saved hyperparameters belong to: the space's parameters, the objectives, and the outcomes'
        warp where there is one (a GP fitted on warped outcomes has their scale; the key is left out without it,
        so the states saved before it existed still load)."""
        d = self.space.to_dict()
        warp = {"outcome_warp": True} if self.outcome_warp else {}
        return json.dumps({"params": d.get("params"), "simplexes": d.get("simplexes"),
                           "objectives": self.objectives, **warp}, sort_keys=True, default=str)

    def warm_state(self) -> dict[str, Any] | None:
        """The last GP fit's hyperparameters as JSON-able data (None before the first fit), for a
        resumed search to start warm (`load_warm_state`) instead of refitting from the prior."""
        if self._warm is None:
            return None
        return {"fingerprint": self._fingerprint(), "n": self._warm["n"], "shape": list(self._warm["shape"]),
                "hypers": {k: v.tolist() for k, v in self._warm["hypers"].items()}}

    def load_warm_state(self, state: dict[str, Any] | None) -> bool:
        """Start from hyperparameters saved by `warm_state`; False (state ignored) when they belong to
        another space or objectives, or cannot be read."""
        if not state or state.get("fingerprint") != self._fingerprint():
            return False
        try:
            hypers = {k: torch.tensor(v, dtype=torch.float64) for k, v in state["hypers"].items()}
            self._warm = {"shape": tuple(state["shape"]), "hypers": hypers, "n": int(state["n"])}
        except (KeyError, TypeError, ValueError):
            return False
        return True

    # --- the protocol -----------------------------------------------------------------------------
    def propose(self, history: Sequence[TrialRecord], n: int = 1) -> list[Recipe]:
        """Up to `n` new recipes, none with the `Recipe.key` of a trial in `history` (any state)."""
        if n <= 0:
            return []
        if not self.objectives and not any(r.state == "complete" and r.scores for r in history):
            # nothing to model yet, nor a word of what to model: the initial design (until stop 53 a proposer
            # built without objectives raised on its first call; a review)
            return self._sobol(len(history), n, {r.recipe.key for r in history})
        objectives = self.objectives or self._default_objectives(history)
        done, Y = self._targets(history, objectives)
        n_init = self.n_init if self.n_init is not None else max(4, 2 * len(objectives))
        seen = {r.recipe.key for r in history}
        if len(done) < max(n_init, 2):
            return self._sobol(len(history), n, seen)
        with _torch_threads(self.threads):
            X = self.encoder.encode_many([r.recipe.values for r in done])  # (N, D)
            extra = self._extra(history, seen)
            known: set[str] = set()  # the study's keys and the pool's
            pool = extra + self._pool(X, Y, seen | {Recipe(v, dict(self.space.fixed)).key for v in extra},
                                      len(history), known)
            if not pool:  # the space is exhausted near everything we know; fall back to fresh points
                return self._sobol(len(history), n, seen)
            warp = OutcomeWarp.fit(Y) if self.outcome_warp and Y.shape[1] > 1 else None
            model = self._fit(X, Y if warp is None else warp(Y))
            X_pool = self.encoder.encode_many(pool)  # (P, D), canonical encodings of decoded recipes
            keep = self._prescreen(model, X_pool, keep_first=len(extra))  # (S,) indices into the pool
            cands = [pool[int(i)] for i in keep]
            # trials other workers are running on a shared storage: pending, like the batch's own picks
            X_run = self._encode_latest([r for r in history if r.state == "running"], self.max_running)
            # trials that ended without a modelled result (pruned, failed, collapsed, stopped): in the baseline,
            # at the model's belief, so a candidate next to one adds little; without them the acquisition's
            # optimum stayed where it was, and the next proposal was the same recipe but for a digit past the
            # key's six (4 of 5 proposals after a pruned one, until stop 25)
            modelled = {r.number for r in done}
            X_end = self._encode_latest([r for r in history if r.number not in modelled and r.state != "running"],
                                       self.max_ended)
            picks = self._select(model, X, Y, X_pool[keep], cands, known, min(n, len(keep)), X_run, X_end, warp)
        out = [Recipe(cands[i], dict(self.space.fixed)) for i in picks]
        if len(out) < n:
            out += self._sobol(len(history), n - len(out), seen | {r.key for r in out})
        return out

    def _encode_latest(self, records: Sequence[TrialRecord], cap: int) -> torch.Tensor | None:
        """The latest `cap` of `records` whose recipes fit the space, encoded (R, D); None if none."""
        values = [r.recipe.values for r in records if self._fits(r.recipe.values)]
        values = values[max(0, len(values) - cap):]
        return self.encoder.encode_many(values) if values else None

    # --- 1) data ----------------------------------------------------------------------------------
    @staticmethod
    def _default_objectives(history: Sequence[TrialRecord]) -> list[Objective]:
        """Without objectives given: every score of the complete trials, maximized (`propose` asks only once
        one has scores)."""
        return [(k, "max") for k in sorted({k for r in history if r.state == "complete" for k in r.scores})]

    def _targets(self, history: Sequence[TrialRecord],
                 objectives: list[Objective]) -> tuple[list[TrialRecord], torch.Tensor]:
        """Complete trials with every objective finite, and their (N, m) outcomes, all maximized. A value
        beyond ±1e150 counts as infinite (a penalty such as 1e155): its square overflows float64 in the
        outcome standardization, and the acquisition then failed on an ill-conditioned covariance."""
        done, rows = [], []
        for r in history:
            if r.state != "complete":
                continue  # failed/interrupted: not modelled, but their keys stay in `seen`
            y = [objective_value(r, k) * (1.0 if d == "max" else -1.0) for k, d in objectives]
            if all(v == v and abs(v) <= _HUGE for v in y):
                done.append(r)
                rows.append(y)
        return done, torch.tensor(rows, dtype=torch.float64).reshape(len(rows), len(objectives))

    def _sobol(self, position: int, n: int, seen: set[str]) -> list[Recipe]:
        """Like `SobolProposer`: continue the project's sequence from `position`."""
        return sobol_recipes(self.space, self.seed, position, n, seen)

    # --- 2) model ---------------------------------------------------------------------------------
    def _fit(self, X: torch.Tensor, Y: torch.Tensor) -> SingleTaskGP:
        """A GP per objective (batched), fitted by marginal likelihood. X: (N, D), Y: (N, m).

        L-BFGS is capped at `fit_iters` steps, and at a quarter of that when the previous fit's
        hyperparameters are the starting point; while the data grew by at most `refit_growth` since
        that fit, its hyperparameters are kept as they are: one more trial moves the optimum little,
        and a fit of 100 points costs about a second on a loaded CPU.
        """
        def prior_model() -> SingleTaskGP:  # Standardize(m) outcome transform by default
            return SingleTaskGP(X, Y, covar_module=kernel(
                X.shape[-1], batch_shape=torch.Size([Y.shape[-1]]) if Y.shape[-1] > 1 else None))

        model = prior_model()
        iters = self.fit_iters
        if self._warm is not None and self._warm["shape"] == (X.shape[1], Y.shape[1]):
            try:
                model.load_state_dict(self._warm["hypers"], strict=False)
            except RuntimeError:  # saved hyperparameters of another shape (a loaded state): from the prior
                self._warm = None
                model = prior_model()
            else:
                if len(X) <= self._warm["n"] * (1 + self.refit_growth):
                    return model.eval()
                iters = max(self.fit_iters // 4, 5)
        try:
            fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model),
                             optimizer_kwargs={"options": {"maxiter": iters}})
        except Exception as e:  # a failed fit keeps the prior hyperparameters; still a usable model
            warnings.warn(f"BoTorchProposer: GP fit failed ({e}); using prior hyperparameters", stacklevel=2)
        hypers = {k: v for k, v in model.state_dict().items() if "outcome_transform" not in k and "train" not in k}
        self._warm = {"shape": (X.shape[1], Y.shape[1]), "hypers": hypers, "n": len(X)}
        return model

    # --- 3) candidates ----------------------------------------------------------------------------
    def _pool(self, X: torch.Tensor, Y: torch.Tensor, seen: set[str], position: int,
              known: set[str] | None = None) -> list[dict[str, Any]]:
        """Distinct valid candidate values dicts not in `seen`. X: (N, D) complete trials, Y: (N, m).
        `known`, if given, receives the keys of `seen` and of the candidates."""
        gen = torch.Generator().manual_seed(zlib.crc32(f"{self.seed}/{position}".encode()))
        front = X[is_non_dominated(Y)] if Y.shape[1] > 1 else X[Y[:, 0].argsort(descending=True)[:5]]
        specialists = X[Y.argmax(dim=0)]  # (m, D): best recipe on each objective
        n_local, n_cross = int(0.4 * self.pool_size), int(0.15 * self.pool_size)
        i = torch.arange(n_local)
        sigma = torch.tensor([0.03, 0.1, 0.25], dtype=X.dtype)[i % 3]  # three step sizes in turn
        moves = [self.encoder.perturb(front[i % len(front)], sigma, 0.2, gen)]
        parents = specialists if len(specialists) > 1 and not torch.equal(specialists[0], specialists[1]) else front
        if n_cross and len(parents) > 1:
            # half between the specialists (best on different objectives), half between any two Pareto recipes
            n_front = n_cross // 2 if len(front) > 1 else 0
            for src, k in ((parents, n_cross - n_front), (front, n_front)):
                if k:
                    a, b = torch.stack([torch.randperm(len(src), generator=gen)[:2] for _ in range(k)]).T
                    moves.append(self.encoder.crossover(src[a], src[b], gen))
        rows = self.encoder.decode_many(torch.cat(moves))
        rows += sobol_pool(self.space, self.pool_size - len(rows), seed=int(gen.initial_seed() % 2**31))
        out, keys = [], known if known is not None else set()
        keys |= seen
        for values in rows:  # decoded and Sobol rows are valid by construction (tests/test_optimizer.py)
            key = Recipe(values, dict(self.space.fixed)).key
            if key not in keys:
                keys.add(key)
                out.append(values)
        return out

    def _fits(self, values: dict[str, Any]) -> bool:
        """Whether `values` is a recipe of this space (an Optuna trial still being sampled is not)."""
        return self.space.admits(values) and set(values) <= self._names

    def _extra(self, history: Sequence[TrialRecord], seen: set[str]) -> list[dict[str, Any]]:
        """The valid, new, distinct recipes of the `extra` source, as values dicts."""
        if self.extra is None:
            return []
        try:
            proposed = list(self.extra(history))
        except Exception as e:  # an unreachable endpoint or a bad answer must not stop the search
            warnings.warn(f"BoTorchProposer: extra candidate source failed ({type(e).__name__}: {e}); "
                          "continuing without its candidates", stacklevel=3)
            return []
        out, keys = [], set(seen)
        for i, item in enumerate(proposed):
            values = dict(item.values if isinstance(item, Recipe) else item)
            try:  # only the active parameters, each of its own type: the same recipe has the same key
                values = self.space.canonical(values)
                self.encoder.encode(values)
            except (SpaceError, TypeError, ValueError) as e:
                warnings.warn(f"BoTorchProposer: extra candidate {i} skipped: {e}", stacklevel=3)
                continue
            key = Recipe(values, dict(self.space.fixed)).key
            if key not in keys:
                keys.add(key)
                out.append(values)
        return out

    # --- 4) pre-screen ----------------------------------------------------------------------------
    def _prescreen(self, model: SingleTaskGP, X_pool: torch.Tensor, keep_first: int = 0) -> torch.Tensor:
        """Indices (S,) of the at most `screen` pool rows (P, D) worth scoring by the acquisition.

        Each candidate's optimistic outcome is its posterior mean plus one posterior std per objective
        (one batched, marginal posterior: no joint sampling). Candidates are ranked by how many others
        dominate that optimistic vector (0 = optimistically non-dominated; the domination count of
        SPEA2, Zitzler et al. 2001, a one-pass stand-in for non-dominated sorting), ties broken by the
        standardized optimistic sum, and the best `screen` are kept: a candidate that many others beat
        even optimistically can hardly add the most hypervolume. The first `keep_first` rows (extra
        candidates) are always kept. With `screen_mean` > 0 that share of the screen is ranked by the
        posterior mean alone and goes first (the optimistic ranking puts high-variance candidates ahead
        of those predicted good near good trials); 0 by default: 0.5 was tried at stop 19 and made
        DTLZ2 slower on the bench's seeds (docs/optimizer.md).
        """
        P = len(X_pool)
        if P <= self.screen:
            return torch.arange(P)
        with torch.no_grad():
            # in chunks: one posterior over all P points would build the (m, P, P) test covariance
            posts = [model.posterior(X_pool[i : i + self.chunk]) for i in range(0, P, self.chunk)]
            mean = torch.cat([p.mean for p in posts])  # (P, m)
            ucb = mean + torch.cat([p.variance for p in posts]).clamp_min(0).sqrt()
            order = _domination_order(ucb, keep_first)
            if self.screen_mean > 0:  # a share of the screen by the posterior mean alone (exploitation)
                k = int(self.screen_mean * self.screen)
                by_mean = _domination_order(mean, keep_first)[:k]
                order = torch.cat([by_mean, order[~torch.isin(order, by_mean)]])
        return order[: max(self.screen, keep_first)]

    # --- 5) selection -----------------------------------------------------------------------------
    def _acquisition(self, model: SingleTaskGP, X: torch.Tensor, Y: torch.Tensor,
                     X_pending: torch.Tensor | None, max_pending: int = 0,
                     X_ended: torch.Tensor | None = None, warp: OutcomeWarp | None = None) -> torch.nn.Module:
        """qLogNEHVI (m ≥ 2) or qLogNEI (m = 1) with baseline X (N, D) and observed Y (N, m).
        `warp`: the warp the model's outcomes went through; the reference point, inferred from Y or stated in
        raw units, is mapped through it.

        Up to `max_pending` pending points are appended to each scored candidate (joint posterior)
        rather than merged into the baseline's per-sample box decompositions, which are then computed
        once per proposal. `X_ended` (E, D), recipes that ran without a modelled result, join the baseline.
        """
        mc = self.mc_samples if Y.shape[1] <= 2 else max(8, self.mc_samples // 4)
        sampler = SobolQMCNormalSampler(sample_shape=torch.Size([mc]), seed=self.seed)
        base = _baseline(model, X, Y, cap=32 if Y.shape[1] <= 2 else 16)  # box counts grow ~ cap^(m-1)
        if X_ended is not None:
            base = torch.cat([base, X_ended])
        if Y.shape[1] == 1:
            return qLogNoisyExpectedImprovement(model, X_baseline=base, sampler=sampler, X_pending=X_pending,
                                                prune_baseline=False)
        ref = study_reference_point(Y, self.objectives or [], self.ref_point, front=True)
        if warp is not None:
            ref = warp(ref)
        return qLogNoisyExpectedHypervolumeImprovement(model, ref_point=ref, X_baseline=base,
                                                       sampler=sampler, X_pending=X_pending,
                                                       prune_baseline=False, max_iep=max_pending)

    def _select(self, model: SingleTaskGP, X: torch.Tensor, Y: torch.Tensor, X_pool: torch.Tensor,
                cands: list[dict[str, Any]], known: set[str], n: int,
                X_run: torch.Tensor | None = None, X_end: torch.Tensor | None = None,
                warp: OutcomeWarp | None = None) -> list[int]:
        """Greedy batch: n indices into `cands` (values dicts; X_pool (P, D) their encodings), each
        maximizing the acquisition given the earlier ones and the running trials `X_run` (R, D). The
        refined recipes (`_refine`) are appended to `cands` first, so an index may point past the
        original pool.

        Pending points only lower a candidate's hypervolume improvement, so after the first pass over
        the whole pool the later picks re-score only its `shortlist` best candidates.
        """
        R = 0 if X_run is None else len(X_run)

        def pending(picks: list[int]) -> torch.Tensor | None:
            parts = ([X_run] if R else []) + ([X_pool[picks]] if picks else [])
            return torch.cat(parts) if parts else None

        with torch.no_grad():
            acqf = self._acquisition(model, X, Y, X_run, max_pending=min(R + n - 1, MAX_JOINT_PENDING), X_ended=X_end,
                                     warp=warp)
            vals = self._score(acqf, X_pool)  # (P,)
        starts = [X_pool[vals.argsort(descending=True)[: self.refine]]]
        if self.refine:
            with torch.no_grad():
                front = X[is_non_dominated(model.posterior(X).mean)] if Y.shape[1] > 1 else X[Y[:, 0].argmax()][None]
            starts.append(front[: self.refine])
        new = self._refine(acqf, torch.cat(starts), known)
        if new:
            X_new = self.encoder.encode_many(new)
            cands.extend(new)
            X_pool = torch.cat([X_pool, X_new])
            with torch.no_grad():
                vals = torch.cat([vals, self._score(acqf, X_new)])
        with torch.no_grad():
            short = vals.argsort(descending=True)[: max(self.shortlist, 2 * n)]
            picks = [int(short[0])]
            for _ in range(n - 1):
                if Y.shape[1] > 1:  # appended per candidate up to MAX_JOINT_PENDING, the rest re-partitioned
                    acqf.set_X_pending(pending(picks))
                else:
                    acqf = self._acquisition(model, X, Y, pending(picks), X_ended=X_end, warp=warp)
                sv = self._score(acqf, X_pool[short])
                sv = torch.where(torch.isfinite(sv), sv, torch.full_like(sv, -1e300))  # NaN ranks last, above a pick
                sv[torch.isin(short, torch.tensor(picks))] = -float("inf")
                picks.append(int(short[sv.argmax()]))
        return picks

    def _refine(self, acqf: torch.nn.Module, starts: torch.Tensor, known: set[str]) -> list[dict[str, Any]]:
        """Local optima of the acquisition from encoded start points (B, D): L-BFGS-B on each start's
        active float/int columns, the other columns held at their values (lower = upper bound). Returns
        the decoded results that are new (not in `known`, which is extended), as values dicts."""
        if self.refine <= 0 or len(starts) == 0:
            return []
        free = torch.stack([self._free_columns(x) for x in starts])  # (B, D) bool
        if not free.any():
            return []
        lower = torch.where(free, torch.zeros_like(starts), starts).unsqueeze(1)
        upper = torch.where(free, torch.ones_like(starts), starts).unsqueeze(1)
        try:
            # recorded and dropped: botorch re-raises scipy's line-search stops (status ABNORMAL) with
            # filter "always"; the point reached is still a valid start, and it is scored like any other
            with warnings.catch_warnings(record=True):
                X_opt, _ = gen_candidates_scipy(starts.unsqueeze(1).clone(), acqf, lower_bounds=lower,
                                                upper_bounds=upper, options={"maxiter": self.refine_iters},
                                                use_parallel_mode=False)  # per-start bounds
        except Exception as e:  # a failed refinement leaves the pool as it was
            warnings.warn(f"BoTorchProposer: acquisition refinement failed ({e}); using the pool only",
                          stacklevel=3)
            return []
        out = []
        for x in X_opt.detach().squeeze(1):
            values = self.encoder.decode(x.clamp(0.0, 1.0))
            key = Recipe(values, dict(self.space.fixed)).key
            if key not in known:
                known.add(key)
                out.append(values)
        return out

    def _free_columns(self, x: torch.Tensor) -> torch.Tensor:
        """(D,) bool: the columns of encoded recipe x that are an active float or int parameter."""
        values = self.encoder.decode(x)
        free = torch.zeros(self.encoder.dim, dtype=torch.bool)
        for b in self.encoder.blocks:
            if b.param is not None and not b.one_hot and b.name in values:
                free[b.start] = True
        return free

    def _score(self, acqf: torch.nn.Module, X_pool: torch.Tensor) -> torch.Tensor:
        """Acquisition value of each candidate alone (q = 1): (P, D) → (P,), in chunks. A NaN value
        (a numerical failure on one candidate) counts as the worst: a descending sort puts NaN first."""
        vals = torch.cat([acqf(X_pool[i : i + self.chunk].unsqueeze(1))  # (chunk, 1, D) → (chunk,)
                          for i in range(0, len(X_pool), self.chunk)])
        return torch.nan_to_num(vals, nan=-float("inf"))


_HUGE = 1e150  # larger outcomes are not modelled (see `_targets`)


def kernel(dim: int, batch_shape: torch.Size | None = None) -> ScaleKernel:
    """The GP's covariance over `dim` encoded columns: a scaled Matérn-5/2 ARD kernel, outputscale prior
    Gamma(2, 0.15), lengthscale prior Gamma(3, 6 / √(max(dim, 2) / 2)).

    That is BoTorch's pre-0.12 default kernel (Gamma(3, 6), mode ≈ 0.33 of the unit cube) in two
    dimensions, where it was tuned, with the lengthscale growing like √dim above (the scaling argument
    of Hvarfner et al. 2024, "Vanilla Bayesian Optimization Performs Great in High Dimensions": the
    distance between points of the cube grows like √dim). A mode of 0.33 whatever the dimension left
    the 6-D model uninformed a cube's width away from each trial: the fitted lengthscales stayed at
    the prior's mode, and every proposal was refined to the cube's bounds, where the variance is
    largest (bench/optimizer.py, DTLZ2). BoTorch's current default, a LogNormal prior with median
    ≈ 4·√dim, went to the corners instead by extrapolating trends (docs/optimizer.md).
    """
    rate = 6.0 / math.sqrt(max(dim, 2) / 2)
    return ScaleKernel(MaternKernel(nu=2.5, ard_num_dims=dim, batch_shape=batch_shape,
                                    lengthscale_prior=GammaPrior(3.0, rate)),
                       batch_shape=batch_shape, outputscale_prior=GammaPrior(2.0, 0.15))


def _domination_order(Y: torch.Tensor, keep_first: int = 0) -> torch.Tensor:
    """Row indices of Y (P, m), maximized, by how many other rows dominate each (fewest first; SPEA2's
    domination count), ties by the standardized sum (larger first); the first `keep_first` rows first."""
    P = len(Y)
    count = torch.zeros(P)
    for i in range(0, P, 256):  # (256, P, m) comparisons at a time
        u = Y[i : i + 256].unsqueeze(1)
        dominated_by = ((Y.unsqueeze(0) >= u).all(-1) & (Y.unsqueeze(0) > u).any(-1))  # (c, P)
        count[i : i + 256] = dominated_by.sum(-1).double().float()
    z = ((Y - Y.mean(0)) / Y.std(0).clamp_min(1e-9)).sum(-1)  # (P,)
    rank = count - torch.sigmoid(z).float()  # count first; within a count, larger z first
    rank[:keep_first] = -float("inf")
    return rank.argsort()


@contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    """Torch intra-op threads set to n while proposing (None: unchanged); also hides linear_operator's
    notice that torch's sparse-tensor invariant checks are off, which its box decompositions trigger
    on every search and which says nothing to a user, and its "A not p.d., added jitter" (NumericalWarning),
    printed into the search's output after almost every proposal (a review, stop 38): the jitter is the
    remedy, and a fit that fails beyond it is said (`GP fit failed`)."""
    from linear_operator.utils.warnings import NumericalWarning

    with torch_threads(n), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly disabled")
        warnings.filterwarnings("ignore", category=NumericalWarning)
        yield


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
