"""Redesign from evidence: after `designer.redesign_every` finished trials, or when the hypervolume has
not grown for `designer.redesign_on_stall` of them, the space is designed again from what the trials
showed — the Pareto recipes, parameter importances (optuna's importance evaluators, PED-ANOVA by
default), collapses and failures — and saved as the next version (`space.v2.yaml`, ...).

The offline redesign (`redesign_rules`):
1) a numeric or categorical dimension with importance below DROP_BELOW is dropped: fixed at the value
   of the Pareto recipe best on the project's first objective (in its direction);
2) an important numeric dimension is narrowed around the Pareto recipes (a margin of MARGIN of the
   old range, in log space for log parameters) and widened by WIDEN of the range on a side where a
   Pareto recipe sits at the edge, never past the bound the trainer layer declares; the new range
   always holds every Pareto recipe (one from an earlier version, or past a declared bound that a
   person's edit allowed, included);
3) when failed or collapsed trials sit above every Pareto recipe in learning rate, the lr ceiling is
   lowered to the largest lr of a Pareto recipe.
With an LLM designer, the evidence goes to the model with the current space (`llm.design_llm`), and the
rules are the fallback. Trials of earlier versions that fit the new space (`fits`) stay in the
optimizer's evidence.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace
from collections.abc import Callable, Collection
from typing import Any

from sro.config import ProjectConfig
from sro.designer.catalog import Catalog
from sro.ledger import TrialRecord
from sro.recipe import Recipe
from sro.space import Param, RecipeSpace, SpaceError

DROP_BELOW = 0.05
MARGIN = 0.25
WIDEN = 0.5
EDGE = 0.05


@dataclass
class Evidence:
    n_finished: int
    pareto: list[dict[str, Any]]
    """Values and scores of the non-dominated complete trials, the best on the first objective first."""
    importances: dict[str, float]
    """Parameter → importance averaged over the objectives (sums to ~1; empty when too few trials)."""
    failures: list[dict[str, Any]] = field(default_factory=list)
    """Values and the message of failed or collapsed trials."""
    scores_differ: bool = True
    """Whether the complete trials' scores (the objectives other than cost) differ at all: where they do not,
    the front is only the cheapest trial, and no range is narrowed around it."""

    def to_dict(self) -> dict[str, Any]:
        return {"n_finished": self.n_finished, "pareto": self.pareto, "importances": self.importances,
                "failures": self.failures, "scores_differ": self.scores_differ}


def ran_with(space: RecipeSpace, recipe: Recipe, keys: Collection[str] | None = None) -> dict[str, Any]:
    """The settings `recipe` trained with: its fixed and searched values, and for each of `keys` (default: the
    parameters `space` searches) that the recipe does not set, a dimension added since it ran, the value the
    trainer took by default (`trainers.algorithms.default_setting`), where the trainer has one. Until stop 53
    such a trial fitted no space that searched the added dimension: an LLM redesign that added `eps_low` left 1
    of 4 earlier trials in the evidence, though all had run at its default, 0.2 (a review)."""
    from trainers.algorithms import NOT_SET, default_setting  # here: `sro show` reads spaces without torch

    ran = {**recipe.fixed, **recipe.values}
    added = {k: default_setting(k, ran) for k in ([p.name for p in space.params] if keys is None else keys)
             if k not in ran}
    return {**ran, **{k: v for k, v in added.items() if v is not NOT_SET}}


def fits(space: RecipeSpace, recipe: Recipe) -> bool:
    """True when the recipe is a point of `space`: every searched value inside its range, read from the
    settings it ran with (`ran_with`: a setting an earlier version fixed and this one searches counts, and so
    does a trainer default), and no fixed setting it ran with, by its recipe or by default, that the space fixes
    otherwise (values of dropped dimensions are ignored)."""
    ran = ran_with(space, recipe, [*[p.name for p in space.params], *space.fixed])
    return space.admits(ran) and all(ran.get(k, v) == v for k, v in space.fixed.items() if k not in recipe.values)


def in_space(space: RecipeSpace, records: list[TrialRecord]) -> list[TrialRecord]:
    """The records whose recipes fit `space` (`fits`), each with its values as this space's recipes hold
    them (a setting an earlier version fixed, now searched, among them), so the optimizer encodes what
    the trial ran; the settings it ran with, and so its `Recipe.key`, are unchanged, but for a searched
    dimension added since, which its recipe now states at the trainer's default (`ran_with`). Until stop 24 such
    a trial did not fit, so the optimizer could propose its recipe again and the claim was withdrawn
    (another worker's rival) without end."""
    out = []
    for r in records:
        if fits(space, r.recipe):
            ran = ran_with(space, r.recipe)
            values = space.canonical(ran)
            rest = {k: v for k, v in ran.items() if k not in values}  # fixed, or dimensions this space dropped
            out.append(r if values == r.recipe.values else replace(r, recipe=Recipe(values, rest)))
    return out


def _importances(ledger, objectives: list[tuple[str, str]]) -> dict[str, float]:
    import optuna

    total: dict[str, float] = {}
    for i, (_, direction) in enumerate(objectives):
        sign = -1.0 if direction == "max" else 1.0  # PED-ANOVA scores what reaches *low* target values
        try:
            with warnings.catch_warnings():  # its reminder about low target values: handled by `sign`
                warnings.simplefilter("ignore", UserWarning)
                imp = optuna.importance.get_param_importances(ledger.study,
                                                              target=lambda t, i=i, s=sign: s * t.values[i])
        except (RuntimeError, ValueError, ZeroDivisionError):  # too few or too uniform trials
            return {}
        for k, v in imp.items():
            total[k] = total.get(k, 0.0) + v / len(objectives)
    return {k: round(v, 4) for k, v in sorted(total.items(), key=lambda kv: -kv[1])}


def gather_evidence(ledger, records: list[TrialRecord], objectives: list[tuple[str, str]]) -> Evidence:
    from sro.optimizer.hypervolume import outcomes
    from botorch.utils.multi_objective.pareto import is_non_dominated

    nums, Y = outcomes(records, objectives)  # the maximization frame: Y[:, 0] is the first objective, signed
    by_num = {r.number: r for r in records}
    front = sorted(((by_num[n], float(y[0])) for n, y, keep in zip(nums, Y, is_non_dominated(Y).tolist()
                                                                    if len(nums) else []) if keep),
                   key=lambda ry: -ry[1])
    front = [r for r, _ in front]
    pareto = [{"trial": r.number, "values": dict(r.recipe.values), "scores": r.scores,
               "cost_s": r.cost.get("wall_s")} for r in front]
    failures = [{"trial": r.number, "values": dict(r.recipe.values), "message": r.message.splitlines()[0][:200]
                 if r.message else ""} for r in records if r.state in ("failed", "collapsed")]
    score_cols = [i for i, (k, _) in enumerate(objectives) if k != "cost"]
    differ = bool(len(nums)) and any(float(Y[:, i].max() - Y[:, i].min()) > 0 for i in score_cols)
    return Evidence(sum(r.finished for r in records), pareto, _importances(ledger, objectives), failures, differ)


def hypervolume_stalled(records: list[TrialRecord], objectives: list[tuple[str, str]], window: int,
                        ref_point: dict[str, float] | None = None) -> bool:
    """True when the last `window` complete trials added no hypervolume (above the project's
    `reference_point` where it states one)."""
    from sro.optimizer.hypervolume import hypervolume_history

    return _stalled(hypervolume_history(records, objectives, ref_point)["hypervolume"], window)


def _stalled(hv: list[float], window: int) -> bool:
    """Whether the last `window` values of the hypervolume history `hv` added nothing."""
    return window > 0 and len(hv) > window and hv[-1] <= hv[-1 - window] + 1e-12


def due(project: ProjectConfig, records: list[TrialRecord], last_at: int) -> str | None:
    """Why a redesign is due now (None: not due). `last_at`: finished trials at the last (re)design."""
    d = project.designer
    n = sum(r.finished for r in records)
    if d.redesign_every and n - last_at >= d.redesign_every:
        return f"{n - last_at} trials since the last design"
    if d.redesign_on_stall and n - last_at >= d.redesign_on_stall:
        from sro.optimizer.hypervolume import hypervolume_history

        hv = hypervolume_history(records, project.objective_directions(), project.reference_point)["hypervolume"]
        if _stalled(hv, d.redesign_on_stall):
            # at 0 above a stated reference point, only a trial better than it on every objective can end the
            # stall, which the stall alone does not say (a review, stop 52)
            below = project.reference_point and hv[-1] == 0
            return f"the hypervolume has not grown for {d.redesign_on_stall} trials" + (
                " (it is 0: no complete trial is better than the project's reference_point on every objective)"
                if below else "")
    return None


def _to_u(p: Param, v: float) -> float:
    return math.log(v) if p.log else float(v)


def _from_u(p: Param, u: float) -> float:
    return math.exp(u) if p.log else u


def _declared(catalog: Catalog | None, name: str) -> tuple[float, float] | None:
    if catalog is None:
        return None
    for group in (catalog.algorithms, catalog.operators, catalog.stages):
        for a in group:
            for k in a["knobs"]:
                if k["name"] == name and k.get("low") is not None and k.get("high") is not None:
                    return float(k["low"]), float(k["high"])
    return None


def _reshape(p: Param, vals: list[float], catalog: Catalog | None) -> tuple[float, float, str]:
    lo, hi = _to_u(p, p.low), _to_u(p, p.high)  # type: ignore[arg-type]
    span = hi - lo
    if span <= 0:  # a pinned range still holds every Pareto recipe (one of an earlier version may lie outside)
        low, high = min(float(p.low), *vals), max(float(p.high), *vals)  # type: ignore[arg-type]
        if p.kind == "int":
            low, high = int(math.floor(low)), int(math.ceil(high))
        if (low, high) == (p.low, p.high):
            return p.low, p.high, ""  # type: ignore[return-value]
        return low, high, "widened to hold the Pareto recipes"
    us = [_to_u(p, v) for v in vals]
    u_lo, u_hi = min(us), max(us)
    # never past a Pareto recipe: one of an earlier version may lie outside the current range
    new_lo, new_hi = min(u_lo, max(lo, u_lo - MARGIN * span)), max(u_hi, min(hi, u_hi + MARGIN * span))
    how = "narrowed around the Pareto recipes"
    declared = _declared(catalog, p.name)
    d_lo, d_hi = (_to_u(p, declared[0]) if declared and (declared[0] > 0 or not p.log) else lo,
                  _to_u(p, declared[1]) if declared else hi)
    if u_lo <= lo + EDGE * span and d_lo < lo:  # widening only where the declared bound leaves room
        new_lo = min(new_lo, max(d_lo, lo - WIDEN * span))
        how = "widened below: a Pareto recipe sits at the lower edge"
    if u_hi >= hi - EDGE * span and d_hi > hi:
        new_hi = max(new_hi, min(d_hi, hi + WIDEN * span))
        how = "widened above: a Pareto recipe sits at the upper edge"
    # back from the unit scale exactly where a bound is a value we know: exp(log(v)) is not always v, and a
    # Pareto recipe on the edge (or a declared bound) fell outside by one rounding step (review, stop 30)
    exact = {lo: p.low, hi: p.high, u_lo: min(vals), u_hi: max(vals)}
    if declared:
        exact.setdefault(d_lo, declared[0] if d_lo != lo else p.low)
        exact.setdefault(d_hi, declared[1])
    low = min(exact[new_lo] if new_lo in exact else _from_u(p, new_lo), min(vals))
    high = max(exact[new_hi] if new_hi in exact else _from_u(p, new_hi), max(vals))
    if p.kind == "int":  # a rounding error must not move an int bound by one
        low, high = int(math.floor(low + 1e-9)), int(math.ceil(high - 1e-9))
    return low, high, how


def redesign_rules(space: RecipeSpace, evidence: Evidence, catalog: Catalog | None = None) -> RecipeSpace:
    """The next version of `space` from the evidence (see the module docstring)."""
    params: list[Param] = []
    fixed = dict(space.fixed)
    best = evidence.pareto[0]["values"] if evidence.pareto else {}  # the best on the first objective
    has_children = {parent for p in space.params for parent in (p.condition or {})}
    for p in space.params:
        imp = evidence.importances.get(p.name)
        vals = [e["values"][p.name] for e in evidence.pareto if p.name in e["values"]]
        if imp is not None and imp < DROP_BELOW and p.name in best and p.name not in has_children and not p.condition:
            fixed[p.name] = best[p.name]
            continue  # dropped: it barely moved any objective
        q = Param(p.name, p.kind, p.low, p.high, p.log, list(p.choices) if p.choices else None,
                  p.condition, p.rationale)
        # scores that do not differ yet (nothing learned): the front is the cheapest trial, and narrowing around
        # it cut the longer recipes out on no evidence (a review, stop 37)
        if p.kind in ("float", "int") and vals and imp is not None and evidence.scores_differ:
            q.low, q.high, how = _reshape(p, [float(v) for v in vals], catalog)
            q.rationale = f"{p.rationale} | v{space.version + 1}: {how} (importance {imp:.2f})"
        if p.name == "lr" and evidence.failures and vals:
            bad = [f["values"]["lr"] for f in evidence.failures if "lr" in f["values"]]
            # not below the floor (a Pareto lr of an earlier version may lie under it): low > high was written
            if bad and min(bad) > max(vals) and q.high > max(vals) >= q.low:  # type: ignore[operator]
                q.high = max(vals)
                q.rationale += f" | v{space.version + 1}: ceiling lowered, {len(bad)} failure(s) above it"
        params.append(q)
    return RecipeSpace(params, list(space.simplexes), fixed, version=space.version + 1, designer=space.designer)


def redesign(space: RecipeSpace, evidence: Evidence, catalog: Catalog, project: ProjectConfig, run_dir,
             warn=print) -> RecipeSpace:
    """The project's designer applied to the evidence (the LLM with the rules as fallback, or the rules)."""
    if project.designer.kind == "llm":
        from sro.designer.llm import DesignerFailed, design_llm

        try:
            new = design_llm(catalog, project, run_dir / "designer", space=space, evidence=evidence.to_dict())
            new.version = space.version + 1
            return new
        except DesignerFailed as e:
            warn(f"warning: the LLM redesign failed ({e}); redesigning with the rules instead")
    return redesign_rules(space, evidence, catalog)


def maybe_redesign(project: ProjectConfig, ledger, space: RecipeSpace, ctx, run_dir, budget=None,
                   log=print, check: Callable[[RecipeSpace], None] | None = None) -> RecipeSpace | None:
    """Redesign when due (see `due`); write the new version and return it, else None. `check` (the search's
    check of a space's keys and fixed settings) may refuse the new version with a `SpaceError`: it is then
    logged and dropped, and the search goes on in `space` (a redesign that fixed a value no trial can use
    used to fail every later trial)."""
    from sro.designer.catalog import build_catalog
    from sro.designer.design import write_space

    records = ledger.records()
    last_at = int(ledger.get("designed_at_trials", 0))
    why = due(project, records, last_at)
    if why is None:
        return None
    evidence = gather_evidence(ledger, records, project.objective_directions())
    new = redesign(space, evidence, build_catalog(project, budget, ctx), project, run_dir, warn=log)
    ledger.put("designed_at_trials", evidence.n_finished)
    try:
        new = RecipeSpace.from_yaml(new.to_yaml())  # every parameter checked again, as a resume reads it
        if check is not None:
            check(new)
    except SpaceError as e:
        log(f"the redesigned space (version {new.version}) was refused and is not used: {e}; the search goes "
            f"on in version {space.version}")
        return None
    path = write_space(run_dir, new)
    kept = {r.number for r in records if r.state == "complete" and fits(new, r.recipe)}
    front = {e["trial"] for e in evidence.pareto}  # complete trials
    on_front = len(kept & front)
    log(f"redesigned the space ({why}): {path.name} is version {new.version} with {len(new.params)} parameters; "
        f"{len(kept)} earlier trial(s) fit it and stay in the optimizer's evidence"
        + (f", {on_front} of the {len(front)} Pareto recipe(s)" if front else ""))
    if front and not on_front:  # an LLM's version may move every range away from them (a review, stop 53)
        log(f"[yellow]the redesigned space (version {new.version}) holds none of the Pareto recipes: the optimizer "
            f"starts its evidence over from the trials it holds; edit {path.name} to widen a range (space.v"
            f"{space.version}.yaml is the version before)[/]")
    return new
