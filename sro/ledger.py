"""The study ledger: every trial of a search in an Optuna study (SQLite in `runs/<name>/study.db` by
default, any SQLAlchemy URL otherwise), so a crash or a kill never loses a finished trial.

Each trial keeps its recipe (user attr `recipe`), per-objective values, the learning curve, the cost
and, on failure, the reason. Trials left RUNNING by a process of this host that died are marked FAIL
(`interrupted`) on the next open, and their recipes are run again first.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy.exc
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from sro.budget import Spent
from sro.config import ProjectConfig
from sro.recipe import Recipe
from sro.space import RecipeSpace

optuna.logging.set_verbosity(optuna.logging.WARNING)


@dataclass
class TrialRecord:
    """A trial as the report and the proposers see it."""

    number: int
    state: str  # complete | failed | interrupted | running | pruned | collapsed | stopped (the last three: `END_EARLY`)
    recipe: Recipe
    scores: dict[str, float] = field(default_factory=dict)
    cost: dict[str, float] = field(default_factory=dict)
    curve: list[dict[str, float]] = field(default_factory=list)
    message: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    """Measured beside the objectives: in-distribution scores and the train/held-out gap."""
    intermediate: dict[str, dict[str, float]] = field(default_factory=dict)
    """Results on benchmark subsets during training, by step fraction ("0.333" → {objective: value})."""

    @property
    def finished(self) -> bool:
        """Ended for good (never run again); only "complete" trials are on the Pareto front."""
        return self.state in ("complete", "failed", *END_EARLY)

    def value(self, key: str) -> float:
        """One objective's raw value: `cost` is wall seconds, any other key a benchmark score (nan if absent)."""
        v = self.cost.get("wall_s") if key == "cost" else self.scores.get(key)
        return float("nan") if v is None else float(v)

    def beats(self, base: dict[str, float], lower: Collection[str] = ()) -> bool:
        """Complete, and better than the base model on every benchmark (`lower`: the keys where
        better is lower, `ProjectConfig.lower_is_better`)."""
        return self.state == "complete" and beats_base(self.scores, base, lower)


END_EARLY = ("pruned", "collapsed", "stopped")
"""States of a trial stopped before the end of its training (`Ledger.end_early`), its partial results kept."""


def beats_base(scores: dict[str, float], base: dict[str, float], lower: Collection[str] = ()) -> bool:
    """True when `scores` are better than the base model's on every benchmark it was scored on: above
    it, or below it for the keys in `lower` (metrics such as ECE)."""
    def better(k: str, v: float) -> bool:
        s = scores.get(k, float("nan"))
        return s < v if k in lower else s > v

    return bool(base) and all(better(k, v) for k, v in base.items())


def distributions(space: RecipeSpace, values: dict[str, Any]) -> dict[str, BaseDistribution]:
    """Optuna distributions of the parameters active in `values` (for the study's param columns)."""
    out: dict[str, BaseDistribution] = {}
    for p in space.params:
        if p.name not in values:
            continue
        if p.kind == "float":
            out[p.name] = FloatDistribution(float(p.low), float(p.high), log=p.log)  # type: ignore[arg-type]
        elif p.kind == "int":
            out[p.name] = IntDistribution(int(p.low), int(p.high), log=p.log)  # type: ignore[arg-type]
        else:
            out[p.name] = CategoricalDistribution(list(p.choices or []))
    for s in space.simplexes:
        for m in s.members:
            out[m] = FloatDistribution(0.0, 1.0)
    return out


class Ledger:
    def __init__(self, project: ProjectConfig, run_dir: str | Path) -> None:
        self.project = project
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        url = project.storage or f"sqlite:///{self.run_dir / 'study.db'}"
        self.objectives = project.objective_directions()
        directions = ["maximize" if d == "max" else "minimize" for _, d in self.objectives]
        for attempt in range(5):
            try:
                self.storage = optuna.storages.RDBStorage(url)
                self.study = optuna.create_study(study_name=project.name, storage=self.storage,
                                                 directions=directions, load_if_exists=True)
                break
            except sqlalchemy.exc.SQLAlchemyError:
                # workers started together race to create the storage's tables or the study (a
                # unique-constraint or "database is locked" error); the loser finds them made
                if attempt == 4:
                    raise
                time.sleep(0.5 * (attempt + 1))
        if list(self.study.directions) != [optuna.study.StudyDirection[d.upper()] for d in directions]:
            raise ValueError(f"{url}: study {project.name!r} has other objectives; use a new project name")
        self.study.set_user_attr("objectives", [k for k, _ in self.objectives])
        self._recover_orphans()

    # --- study-level facts --------------------------------------------------------------------
    def get(self, key: str, default: Any = None) -> Any:
        return self.study.user_attrs.get(key, default)

    def put(self, key: str, value: Any) -> None:
        self.study.set_user_attr(key, value)

    # --- trials -------------------------------------------------------------------------------
    def _recover_orphans(self) -> None:
        host = socket.gethostname()
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            pid, thost = t.user_attrs.get("pid"), t.user_attrs.get("host")
            if thost == host and pid is not None and not _alive(int(pid)):
                self.storage.set_trial_user_attr(t._trial_id, "message", "interrupted: its process died")
                self.storage.set_trial_user_attr(t._trial_id, "interrupted", True)
                self.storage.set_trial_state_values(t._trial_id, TrialState.FAIL)

    def start(self, recipe: Recipe, space: RecipeSpace) -> optuna.Trial | None:
        """A RUNNING trial of `recipe`, or None when another worker sharing the storage claimed the
        same recipe first (then propose again).

        The trial is created in one storage call, not with `enqueue_trial` + `ask`: `ask` pops the
        oldest waiting trial, which with several workers can be another worker's recipe, and the
        scores would be recorded against the wrong recipe. Two workers that propose the same recipe
        at once (both saw the same history) both create a trial; the storage numbers them in order,
        and the later one is withdrawn: marked failed with `withdrawn`, which `records` skips.
        """
        dists = distributions(space, recipe.values)
        frozen = optuna.trial.create_trial(
            state=TrialState.RUNNING, params={k: recipe.values[k] for k in dists}, distributions=dists,
            user_attrs={"recipe": recipe.to_dict(), "key": recipe.key, "pid": os.getpid(),
                        "host": socket.gethostname(), "space_version": space.version, "started": time.time()})
        study_id = self.storage.get_study_id_from_name(self.study.study_name)
        trial = optuna.Trial(self.study, self.storage.create_new_trial(study_id, template_trial=frozen))
        # an interrupted or budget-stopped record of the recipe is what a retry reruns: not a claim
        rival = next((r.number for r in self.records() if r.number < trial.number and r.recipe.key == recipe.key
                      and r.state not in ("interrupted", "stopped")), None)
        if rival is None:
            return trial
        trial.set_user_attr("withdrawn", True)
        trial.set_user_attr("message", f"withdrawn: trial {rival} already has this recipe (another worker)")
        self.study.tell(trial, state=TrialState.FAIL)
        return None

    def progress(self, trial: optuna.Trial, curve: list[dict[str, float]]) -> None:
        trial.set_user_attr("curve", curve)

    def finish(self, trial: optuna.Trial, scores: dict[str, float], cost: dict[str, float],
               curve: list[dict[str, float]], metrics: dict[str, float] | None = None) -> None:
        """`metrics`: what is measured beside the objectives (e.g. the train/held-out gap)."""
        if metrics:
            trial.set_user_attr("metrics", metrics)
        trial.set_user_attr("scores", scores)
        trial.set_user_attr("cost", cost)
        trial.set_user_attr("curve", curve)
        values = [float(cost["wall_s"]) if k == "cost" else float(scores[k]) for k, _ in self.objectives]
        self.study.tell(trial, values)

    def fail(self, trial: optuna.Trial, message: str, cost: dict[str, float],
             curve: list[dict[str, float]]) -> None:
        trial.set_user_attr("message", message[:2000])
        trial.set_user_attr("cost", cost)
        trial.set_user_attr("curve", curve)
        self.study.tell(trial, state=TrialState.FAIL)

    def report_intermediate(self, trial: optuna.Trial, fraction: float, values: dict[str, float]) -> None:
        """Results measured at `fraction` of the trial's steps (benchmark subsets, cost so far)."""
        inter = dict(self.storage.get_trial(trial._trial_id).user_attrs.get("intermediate", {}))
        inter[f"{fraction:.3f}"] = values
        trial.set_user_attr("intermediate", inter)

    def end_early(self, trial: optuna.Trial, state: str, scores: dict[str, float], cost: dict[str, float],
                  curve: list[dict[str, float]], message: str = "") -> None:
        """A trial stopped before the end of its training, as `state` in `END_EARLY` ("pruned": dominated
        at an intermediate evaluation; "collapsed": training collapsed; "stopped": the wall-clock budget
        ran out during its training). Its partial `scores` and `cost`
        are kept; it counts as finished (never run again) and is not on the Pareto front (Optuna state
        PRUNED)."""
        if state not in END_EARLY:
            raise ValueError(f"end_early: state must be one of {END_EARLY}, got {state!r}")
        trial.set_user_attr("end_state", state)
        trial.set_user_attr("scores", scores)
        trial.set_user_attr("cost", cost)
        trial.set_user_attr("curve", curve)
        trial.set_user_attr("message", message[:2000])
        self.study.tell(trial, state=TrialState.PRUNED)

    def interrupt(self, trial: optuna.Trial, curve: list[dict[str, float]]) -> None:
        """A trial stopped by the user: recorded as interrupted so the next search runs it again."""
        trial.set_user_attr("message", "interrupted by the user")
        trial.set_user_attr("interrupted", True)
        trial.set_user_attr("curve", curve)
        self.study.tell(trial, state=TrialState.FAIL)

    def records(self) -> list[TrialRecord]:
        out = []
        for t in self.study.get_trials(deepcopy=False):
            if "recipe" not in t.user_attrs or t.user_attrs.get("withdrawn"):
                continue
            a = t.user_attrs
            state = {TrialState.COMPLETE: "complete", TrialState.RUNNING: "running"}.get(t.state, "failed")
            if a.get("interrupted"):
                state = "interrupted"
            elif t.state == TrialState.PRUNED:
                state = str(a.get("end_state", "pruned"))
            out.append(TrialRecord(t.number, state, Recipe.from_dict(a["recipe"]), dict(a.get("scores", {})),
                                   dict(a.get("cost", {})), list(a.get("curve", [])), str(a.get("message", "")),
                                   dict(a.get("metrics", {})), dict(a.get("intermediate", {}))))
        return out

    def spent(self) -> Spent:
        recs = [r for r in self.records() if r.state != "running"]
        setup = float(self.get("setup_wall_s", 0.0))
        return Spent(wall_s=setup + sum(r.cost.get("wall_s", 0.0) for r in recs),
                     trials=sum(r.finished for r in recs),
                     gpu_h=sum(r.cost.get("gpu_h", 0.0) for r in recs),
                     tokens=sum(r.cost.get("tokens", 0.0) for r in recs))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

