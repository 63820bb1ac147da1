"""The search loop: prepare the shared context once, score the base model once, then propose → train →
record until the budget is spent. Everything lands in the ledger as it happens, so a rerun resumes."""

from __future__ import annotations

import json
import logging
import re
import signal
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import optuna
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress

from evaluators.files import write_whole
from sro.budget import COSTS, Budget, BudgetError, Spent
from sro.config import ProjectConfig
from sro.default_space import default_space
from sro.designer.redesign import in_space, maybe_redesign
from sro.executor import SearchContext, TrialCollapsed, check_recipe, run_trial, unread_keys, weight_problem
from sro.ledger import STORAGE_BUSY, STORAGE_ERRORS, Ledger, TrialRecord, beats_base
import sro.optimizer  # noqa: F401  (registers the botorch proposer)
from sro.optimizer.hypervolume import hypervolume_history
from sro.progress import progress_for, status_for
from sro.proposers import PROPOSERS
from sro.pruning import Pruner, TrialPruned, pruned_cost, training_seconds
from sro.recipe import Recipe
from sro.space import RecipeSpace, SpaceError
from sro.start_recipes import StartRecipeError, is_exported, next_start, start_recipes
from sro import yaml_strict
from trainers.algorithms import ACTS_WHEN, RecipeValueError, idle_setting
from trainers.grpo import GRPOConfig
from trainers.models import pick_device

_log = logging.getLogger(__name__)


@dataclass
class SearchSummary:
    run_dir: Path
    base_scores: dict[str, float]
    trials: list[TrialRecord]
    stop_reason: str
    report: Path | None = None


def load_space(project: ProjectConfig, run_dir: Path, console: Console, ctx: SearchContext | None = None,
               budget: Budget | None = None, ledger: Ledger | None = None) -> RecipeSpace:
    """The study's space: the one its workers share in the storage (`ledger`) when that is a later
    version than the run folder's `space.yaml`, or the same version with other contents while the file is
    SRO's own (not edited by hand since it was written: a stale copy of another worker's edit); else that file
    (written by `sro design`, a redesign or a person), published to the storage; else a space designed now by
    the project's designer (rules by default), saved there for review and published."""
    from sro.designer.design import hand_edited, write_space

    path = run_dir / "space.yaml"
    local = _written_space(run_dir)
    shared = ledger.shared_space() if ledger is not None else None
    # a restarted worker's unedited copy of an older space must not undo a same-version edit that another worker
    # published (until stop 42 it did, and the running workers then adopted the old space back; a review)
    stale = (local is not None and shared is not None and shared.version == local.version
             and shared.to_yaml() != local.to_yaml() and not hand_edited(run_dir))
    if shared is not None and (local is None or shared.version > local.version or stale):
        write_space(run_dir, shared)
        console.print(f"using the study's search space (v{shared.version}, shared by the workers on its "
                      f"storage): {path}")
        return shared
    if local is not None:
        console.print(f"using the search space in {path}")
        if ledger is not None and (shared is None or shared.to_yaml() != local.to_yaml()):
            ledger.publish_space(local)
        return local
    if ctx is None:  # no base model at hand: the generic default, saved for review
        from sro.designer.design import write_space

        space = default_space(project)
        path = write_space(run_dir, space, log=console.print)  # with its versioned copy, as any space
    else:
        from sro.designer.design import design_space

        space, path = design_space(project, run_dir, budget, ctx, log=console.print)
        console.print(f"designed the search space with the {space.designer} designer: {path} "
                      f"({len(space.params)} parameters, each with its rationale)")
    if ledger is not None:
        shared = ledger.shared_space()
        if shared is not None:  # another worker published one while this one designed: one space for all
            write_space(run_dir, shared)
            console.print(f"another worker published the study's space first; using it: {path}")
            return shared
        ledger.publish_space(space)
    return space


def make_proposer(optimizer: str, space: RecipeSpace, project: ProjectConfig, run_dir: Path):
    """The named proposer over `space`; with an LLM designer endpoint, the BoTorch proposer also
    scores the endpoint's suggested recipes among its candidates (audited under designer/)."""
    kwargs: dict = {"ref_point": project.reference_point} if optimizer == "botorch" and project.reference_point else {}
    if optimizer == "botorch" and project.designer.kind == "llm":
        from sro.designer.candidates import llm_candidates

        kwargs["extra"] = llm_candidates(project, space, run_dir / "designer")
    return PROPOSERS.get(optimizer)(space, seed=project.seed, objectives=project.objective_directions(), **kwargs)


def _fmt_scores(scores: dict[str, float]) -> str:
    return "  ".join(f"{k}={v:.3f}" for k, v in scores.items())


def _written_space(run_dir: Path) -> RecipeSpace | None:
    """The run folder's `space.yaml` (written by `sro design`, a redesign or a person), or None if there
    is none; `SpaceError` naming the file if it is not a space."""
    path = run_dir / "space.yaml"
    if not path.is_file():
        return None
    try:
        return RecipeSpace.from_yaml(yaml_strict.read(path))
    except (SpaceError, yaml_strict.NotUtf8) as e:  # not UTF-8, not YAML, or not a space
        raise SpaceError(f"{path}: {e}") from None


def _check_fixed(space: RecipeSpace, project: ProjectConfig, run_dir: Path, shared: bool = False,
                 redesigned: bool = False) -> None:
    """The space's keys and fixed settings as its trials read them, checked before anything trains: a key
    no part of a trial reads (a hand edit's `lrr`) is a `SpaceError` with the nearest known key; a recipe of
    the space (its centre) with them must be one the trainer takes. A value it refuses that is a fixed
    setting (`steps: 36.5`, `proas.lam: 1.5`, `mt.history: -1` under `fixed:`) is a `SpaceError` naming
    space.yaml and the key; it used to fail every trial, after the base model had been scored. A refusal
    that also cites a searched value is left to the trials (another point of the space may train).
    `shared`: the space is the one the study's workers share (published in its storage by another
    worker), which a run folder's space.yaml replaces only with a higher `version:`; the error says so.
    `redesigned`: a redesign's new version, not written anywhere yet (the search drops it and goes on)."""
    path = run_dir / "space.yaml"
    where = (f"the study's shared space (v{space.version})" if shared else
             f"the redesigned space (v{space.version})" if redesigned else str(path))
    mend = (f"mend its copy in {path} and set `version: {space.version + 1}` there: a higher version replaces "
            "the shared one")
    unknown, hints = unread_keys([p.name for p in space.params] + [m for x in space.simplexes for m in x.members]
                                 + list(space.fixed), project)
    if unknown:  # `lrr: {kind: float, ...}` was a searched dimension that changed nothing, silently
        raise SpaceError(f"{where}: no part of a trial reads {hints}; fix or remove "
                         f"{'it' if len(unknown) == 1 else 'them'} (under params:, fixed: or a simplex's members"
                         + ")" + (f"; {mend}" if shared else ""))
    searched = {p.name for p in space.params}
    for p in space.params:  # `batch_switch_at` at a multiplier of 1: a dimension that moved nothing, searched
        if (idle := idle_setting(p.name, space.fixed)) is not None and idle[0] not in searched:
            (setting, value), (_, least, why) = idle, ACTS_WHEN[p.name]
            given = "fixes it at" if setting in space.fixed else "leaves it at its default"
            raise SpaceError(f"{where}: params.{p.name} does nothing here: {why}, and the space {given} {value!r}; "
                             f"search {setting} too, fix it at {least} or more, or remove {p.name}"
                             + (f"; {mend}" if shared else ""))
    values = space.from_unit(np.full(space.dim, 0.5))
    try:
        check_recipe(Recipe(values, dict(space.fixed)), project.seed, multi_turn=project.multi_turn)
    except RecipeValueError as e:
        if e.keys and set(e.keys) <= set(space.fixed) - set(values):
            hint = ("" if redesigned else "; " + (mend if shared else "edit it under `fixed:` there, or remove it "
                                                   "for the trainer's default"))
            raise SpaceError(f"{where}: " + e.located({k: f"fixed.{k}" for k in e.keys}) + hint) from None
    except (KeyError, ValueError, TypeError):
        pass  # not a value's fault alone (an unknown setting's name, ...): the trials say it
    # the mixture weights as every trial reads them (a simplex's draw with the fixed ones): `fixed: {mix.a: 0.3}`
    # alone trained at 0.23 / 0.77, a simplex of one domain's weight drew 1.0 and trained 50 / 50, and negative
    # fixed weights failed every trial (a review, stop 37)
    if (problem := weight_problem(Recipe(values, dict(space.fixed)), project)) is not None:
        raise SpaceError(f"{where}: mixture weights (fixed: and the simplexes' members together): {problem}"
                         + (f"; {mend}" if shared else ""))
    # each choice of a categorical knob, and each bound of a numeric one, at the centre of the rest: a value
    # refused whatever else is drawn (an unknown algorithm `ppo`, proximal_kl in an agent project, `steps` from
    # 0) failed every trial that drew it (a bound: a review, stop 58)
    for i, p in enumerate(space.params):
        if p.kind == "categorical":  # (the point in the unit cube, the key to name, the fix)
            ends = [(p.to_unit(c), f"params.{p.name}.choices", f"; remove {c!r} from that list") for c in p.choices or []]
        else:  # a bool's two values are the trainer's to take
            ends = [(u, f"params.{p.name}.{side}", f"; move {side} to a value the trainer takes")
                    for u, side in ((0.0, "low"), (1.0, "high"))] if p.kind in ("float", "int") else []
        for at, key, fix in ends:
            u = np.full(space.dim, 0.5)
            u[i] = at
            try:
                check_recipe(Recipe(space.from_unit(u), dict(space.fixed)), project.seed, multi_turn=project.multi_turn)
            except RecipeValueError as e:
                if e.keys == (p.name,):
                    raise SpaceError(f"{where}: " + e.located({p.name: key}) + fix
                                     + (f"; {mend}" if shared else "")) from None
            except (KeyError, ValueError, TypeError):
                pass


MAX_CRASHES = 3
"""A recipe whose trial was found dead this many times (`Ledger.recover`: its process died, out of memory,
a segfault, a kill -9; not Ctrl-C, SIGTERM, a storage error or a put-back trial) is not run again:
retried first on every resume, it would take down every worker that picks it up, for ever."""

SAME_FAILURES = 3
"""Trials in a row of one worker that fail with the same error (numbers aside) stop the search: a model
file that no longer loads, a full disk or a missing library fails every recipe, and would spend the whole
budget on failed trials."""


RECIPES_OWN = ("OutOfMemoryError", "MemoryError", "TrialFailed")
"""Failures that are the recipe's own even when several come in a row (a search exploring large batches
runs out of memory on each): they never stop the search. On a CPU torch says so in a RuntimeError
("DefaultCPUAllocator: can't allocate memory"), told by its text (`_recipes_own`)."""


def _recipes_own(message: str) -> bool:
    first = message.split("\n", 1)[0].lower()
    return message.startswith(RECIPES_OWN) or "can't allocate memory" in first or "out of memory" in first


REQUEUED_NOTE = "failed with an error that"


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`, `docker stop`, a scheduler's preemption), handled as Ctrl-C is: the running trial is
    recorded interrupted at once, rather than left running until its heartbeat goes stale (10 minutes by
    default) on another machine."""


def on_sigterm() -> None:
    """Make SIGTERM end the search as Ctrl-C does (`Terminated`); from the main thread only."""
    def stop(signum: int, frame: object) -> None:
        raise Terminated("SIGTERM (a kill, docker stop or a scheduler)")

    signal.signal(signal.SIGTERM, stop)


class RepeatedFailure(RuntimeError):
    """The search stopped because its last trials all failed the same way (`SAME_FAILURES`)."""


def _signature(message: str) -> str:
    """A failure's error without its numbers (an allocation's size, a trial's step): what repeats."""
    return re.sub(r"\d+(\.\d+)?", "#", message.strip().split("\n")[0])


def _stop_if_repeating(ledger: Ledger, failures: list[TrialRecord], records: list[TrialRecord]) -> None:
    """`RepeatedFailure` when the last `SAME_FAILURES` of this worker's `failures` in a row had one error; those
    trials are put back (`Ledger.requeue`) unless their recipe was put back once already."""
    last = failures[-SAME_FAILURES:]
    if len(last) < SAME_FAILURES or len({_signature(r.message) for r in last}) > 1:
        return
    back = {r.recipe.key for r in records if r.state == "interrupted" and REQUEUED_NOTE in r.message}
    again = [r.number for r in last if r.recipe.key not in back]
    ledger.requeue(again, f"{REQUEUED_NOTE} {SAME_FAILURES} trials in a row had (the environment's, not the recipe's)")
    raise RepeatedFailure(
        f"trials {', '.join(str(r.number) for r in last)} failed in a row with the same error: "
        f"{last[-1].message.splitlines()[0]}; that is most likely the environment (the model's files, the disk, "
        "a library), not the recipes. Fix it and rerun the same command" + (
            f": trial(s) {', '.join(map(str, again))} run again first" if again else
            " (these recipes stay failed: each was run again once already)"))


def crashed(records: list[TrialRecord]) -> dict[str, int]:
    """Recipes (by key) found dead `MAX_CRASHES` times or more (`MAX_CRASHES`), with the count."""
    counts = Counter(r.recipe.key for r in records if r.state == "interrupted"  # as `Ledger.recover` says it
                     and r.message.startswith(("interrupted: its process died", "interrupted: no heartbeat")))
    return {k: n for k, n in counts.items() if n >= MAX_CRASHES}


def _spent_note(budget: Budget, reason: str, when: str = "") -> str:
    """What the search prints when its budget ends it (`when`: " while proposing")."""
    return (f"budget {budget} spent{when} ({escape(reason)}); rerun with a larger --budget to search further "
            "(finished trials are kept)")


def _retry(records: list[TrialRecord], space: RecipeSpace, left_s: float | None = None) -> Recipe | None:
    """The oldest recipe to run again before proposing: one whose worker died mid-trial (`interrupted`)
    or whose training the budget cut short (`stopped`), unless the study has finished or is running the
    same recipe (another worker took it up), the search space has since been redesigned without it, or it
    has crashed its process `MAX_CRASHES` times. A `stopped` one waits while the wall time left (`left_s`) is
    no longer than the time it had: run again at once, it was cut shorter still (a review, stop 38: a recipe
    stopped at step 13 of 31 ran again in the budget's last seconds, and stopped at step 5)."""
    taken = {r.recipe.key for r in records if r.settled or r.state == "running"}
    taken |= set(crashed(records))
    if left_s is not None:
        taken |= {r.recipe.key for r in records if r.state == "stopped" and r.cost.get("wall_s", 0.0) >= left_s}
    # as this space holds it (`in_space`: same key), so a setting an earlier version fixed and this one
    # searches is among its values (claiming the raw recipe raised KeyError on every resume)
    return next((r.recipe for r in in_space(space, [r for r in records if r.state in ("interrupted", "stopped")])
                 if r.recipe.key not in taken), None)


def _start_recipes(project: ProjectConfig, space: RecipeSpace, run_dir: Path, records: list[TrialRecord],
                   log: Callable[[str], None], notes: bool = True) -> list[Recipe]:
    """The project's start recipes in `space`. One that does not fit stops a new study (`StartRecipeError`:
    nothing has been trained yet, so the fix costs nothing); in a study with trials (resumed, or after
    a redesign that moved a bound past it) it is skipped with a note, and the search goes on. In a new study a
    recipe file's fixed setting that this space fixes otherwise is noted (`notes`)."""
    return start_recipes(project.start_recipes, space, f"the search space v{space.version} of {run_dir}",
                         skip=(lambda e: log(f"[yellow]skipped[/]: {escape(str(e))}")) if records else None,
                         note=(lambda m: log(f"[yellow]note[/]: {escape(m)}")) if notes and not records else None,
                         source=project._source)


def _check_start_keys(project: ProjectConfig) -> None:
    """Before a space is designed: every start recipe's keys are read by some part of a trial (`lrr` was named
    only after the benchmarks, the base model's pre-training and scoring and the design; a review, stop 57).
    Whether a recipe fits the space is checked once the space is designed."""
    for i, entry in enumerate(project.start_recipes):
        unknown, hints = unread_keys(entry["values"] if is_exported(entry) else entry, project)
        if unknown:
            raise StartRecipeError(f"{project._source}: start_recipes[{i}]: no part of a trial reads {hints}; fix or "
                                   f"remove {'it' if len(unknown) == 1 else 'them'}")


CUT_SHORT = 0.5
"""A recipe is not started when the wall time left, less its held-out scoring, would stop its training before
this fraction of its steps at the study's pace (`_cut_short`): its scores would be a shorter recipe's, kept apart
from the model's evidence (until stop 43 the agent demo's last trial started with time for 1 of its 47 steps)."""


def _pace_s(records: list[TrialRecord]) -> float | None:
    """Median seconds per training step of the study's complete trials (the last step's `wall_s`, counted from
    the trainer's start, over the steps); None before any complete trial has a timed step."""
    paces = [float(r.curve[-1]["wall_s"]) / len(r.curve) for r in records
             if r.state == "complete" and r.curve and "wall_s" in r.curve[-1]]
    return float(np.median(paces)) if paces else None


def _cut_short(recipe: Recipe, records: list[TrialRecord], left_s: float | None, score_s: float) -> str | None:
    """Why `recipe` should not start with `left_s` seconds of wall-clock budget left (None: it may): at the
    study's median pace its training would stop before `CUT_SHORT` of its steps."""
    pace = _pace_s(records)
    if left_s is None or pace is None:
        return None
    steps = int(recipe.get("steps", GRPOConfig.steps))
    if left_s - score_s >= CUT_SHORT * steps * pace:
        return None
    return (f"{left_s:.0f}s of the wall-clock budget left: the next recipe's {steps} steps (~{pace:.1f}s each at "
            f"this study's pace) and its held-out scoring ({score_s:.0f}s) would stop before "
            f"{CUT_SHORT:.0%} of its training")


SHARED_CHECK_S = 10.0
"""How often a training trial records its cost so far and re-reads the study's (`_budget_spent`)."""


def _budget_spent(ledger: Ledger, budget: Budget, every: float | None = None, score_s: float = 0.0,
                  on_gpu: bool = False) -> Callable[[], str | None]:
    """For a wall-time, GPU-hour or token budget: a check, run after each training step, that gives the
    reason once the study's finished trials and its running ones (this trial's included) fill the
    budget. A trial's own `max_seconds` is fixed when it starts; with other workers training at the
    same time the budget runs out sooner, and each of them stops here instead of overshooting by a
    trial (and a lone worker's trial stops where a GPU-hour or token budget runs out). Every running trial
    still scores on the held-out benchmarks after it stops: `score_s` seconds each (GPU-hours too `on_gpu`)
    are counted as spent already, as a lone trial's own time limit leaves room for its scoring (until stop 38
    they were not, and two workers overspent a 180 s budget by half). Reads the storage at most every `every`
    seconds (default `SHARED_CHECK_S`)."""
    if all(getattr(budget, c) is None for c in COSTS):
        return lambda: None
    every = SHARED_CHECK_S if every is None else every
    last = time.monotonic()

    def spent() -> str | None:
        nonlocal last
        if time.monotonic() - last < every:
            return None
        last = time.monotonic()
        try:
            now = ledger.spent()
        except STORAGE_BUSY as e:  # read again at the next check; the trial goes on
            _log.warning("budget check skipped, storage busy: %s", e)
            return None
        held = max(1, now.running) * score_s  # this trial is running, whatever the last read says
        why = budget.over_cost(replace(now, running_wall_s=now.running_wall_s + held,
                                       running_gpu_h=now.running_gpu_h + (held / 3600 if on_gpu else 0.0)))
        return f"{why}, {held:.0f}s of it the running trials' held-out scoring" if why and held >= 0.5 else why

    return spent


def _train_and_record(trial: optuna.Trial, recipe: Recipe, ctx: SearchContext, ledger: Ledger, budget: Budget,
                      spent: Spent, pruner: Pruner | None, progress: Progress, base: dict[str, float],
                      lower: Collection[str]) -> None:
    """Train `recipe` as the claimed `trial` and record how it ended: complete, stopped by the budget,
    pruned, collapsed or failed (any exception of the training itself). Whatever happens — Ctrl-C, a
    storage that stays away — the trial ends recorded (then as interrupted, to be run again) and its
    heartbeat stops."""
    step_task = None
    try:
        steps = int(recipe.get("steps", GRPOConfig.steps))  # the trainer's default when the recipe has none
        step_task = progress.add_task(f"trial {trial.number}", total=steps, info="")
        curve: list[dict[str, float]] = []

        on_gpu = pick_device(ctx.project.runtime.device).type == "cuda"  # the device the trainer uses
        budget_spent, stop = _budget_spent(ledger, budget, score_s=ctx.score_s, on_gpu=on_gpu), ""
        t_start = last_write = time.monotonic()

        def cost_so_far() -> dict[str, float]:
            """What the trial has used until now (a pruned or failed trial's recorded cost too)."""
            wall = time.monotonic() - t_start
            tokens = next((float(m["tokens"]) for m in reversed(curve) if "tokens" in m), 0.0)
            return {"wall_s": round(wall, 2), "tokens": tokens, "gpu_h": wall / 3600 if on_gpu else 0.0}

        ledger.meter(trial, cost_so_far)

        def on_step(step: int, m: dict[str, float]) -> bool:
            nonlocal last_write, stop
            curve.append(m)
            progress.update(step_task, completed=step, info=f"reward {m.get('reward', float('nan')):.3f}")
            now = time.monotonic()
            if step % 5 == 0 or now - last_write >= SHARED_CHECK_S:
                ledger.progress(trial, curve, cost_so_far())
                last_write = now
            stop = budget_spent() or ""
            return bool(stop)

        remaining = budget.remaining_wall_s(spent)
        hook = pruner.hook(ctx, steps, [r for r in ledger.records() if r.number != trial.number],
                           lambda f, v, t=trial: ledger.report_intermediate(t, f, v),
                           turns=int(recipe.get("mt.history", 0)), recipe_key=recipe.key) if pruner else None
        try:
            out = run_trial(recipe, ctx, max_seconds=remaining, on_step=on_step, on_checkpoint=hook)
            if (stop or out.time_limited) and len(out.curve) < steps:
                # the budget ran out mid-training: these are the scores of a shorter recipe, kept
                # apart from the complete trials (not on the front, not a model's training point)
                why = f"the budget ({stop})" if stop else "the wall-clock budget"
                msg = f"stopped by {why} at step {len(out.curve)} of {steps}; its scores are those of the partial training"
                ledger.end_early(trial, "stopped", out.scores, out.cost, out.curve, msg)
                progress.console.print(f"[yellow]trial {trial.number} {escape(msg)}[/]: {_fmt_scores(out.scores)}")
            else:
                ledger.finish(trial, out.scores, out.cost, out.curve, out.metrics)
                mark = "[green]beats base on every benchmark[/]" if beats_base(out.scores, base, lower) else ""
                progress.console.print(f"trial {trial.number}: {_fmt_scores(out.scores)}  "
                                       f"({out.cost['wall_s']:.0f}s) {mark}")
            for note in out.notes:
                progress.console.print(f"[yellow]trial {trial.number}: {escape(note)}[/]", highlight=False)
        except KeyboardInterrupt as e:
            ledger.interrupt(trial, curve, cost_so_far(), by=str(e) if isinstance(e, Terminated) else "the user")
            progress.console.print(f"[yellow]interrupted during trial {trial.number}[/]; finished trials are "
                                   "kept, rerun the same command to resume")
            raise
        except TrialPruned as e:  # dominated at an intermediate evaluation: partial results kept
            cost = pruned_cost({**cost_so_far(), "samples": float(curve[-1].get("samples", 0)) if curve else 0.0},
                               e.step, steps, train_s=training_seconds(curve, e.eval_s), scoring_s=ctx.score_s,
                               limit_s=remaining)
            ledger.end_early(trial, "pruned", {k: v for k, v in e.values.items() if k != "cost"}, cost, curve,
                             str(e))
            progress.console.print(f"[yellow]trial {trial.number} {escape(str(e))}[/]; saved {cost['saved_steps']:.0f} "
                                   f"steps (~{cost['saved_s']:.0f}s)")
        except TrialCollapsed as e:  # the failure clock fired: stopped early, the samples it used kept
            ledger.end_early(trial, "collapsed", {}, e.cost, e.curve, str(e))
            progress.console.print(f"[yellow]trial {trial.number} collapsed[/]: {escape(str(e))}")
        except STORAGE_ERRORS:
            raise  # the storage, not the recipe: released below as interrupted, and run again
        except Exception as e:  # the recipe's own failure (diverged, out of memory, an error it triggers):
            # recorded as failed, never run again; left `interrupted`, it would be retried first on every
            # resume and stop every worker the same way
            msg = f"{type(e).__name__}: {e}"
            ledger.fail(trial, msg + "\n" + traceback.format_exc(limit=3), cost_so_far(), curve)
            progress.console.print(f"[red]trial {trial.number} failed[/]: {escape(msg)}", highlight=False)
    finally:
        exc = sys.exc_info()[1]
        ledger.release(trial, "its worker stopped during the trial" + (f" ({type(exc).__name__}: {exc})"
                                                                         if exc else ""))
        if step_task is not None:
            progress.remove_task(step_task)


def _check_gpu_budget(budget: Budget, project: ProjectConfig, console: Console) -> None:
    """A GPU-hour limit counts only the time of trials trained on a GPU: on a CPU worker it never
    fills, so alone it would let the search run forever; beside another limit it is said to be idle."""
    device = pick_device(project.runtime.device).type
    if budget.gpu_h is None or device == "cuda":
        return
    if all(getattr(budget, c) is None for c in ("wall_s", "trials", "tokens")):
        raise BudgetError(f"budget {budget}: this worker trains on the {device} (runtime.device: "
                          f"{project.runtime.device}), which spends no GPU-hours, so the search would never "
                          f"end; add a wall-time, trial or token limit (e.g. {budget},2h) or run it on a GPU")
    console.print(f"[yellow]budget {budget}: this worker trains on the {device}, so its trials spend no "
                  "GPU-hours; the other limits end the search[/]", highlight=False)


def _refuse_a_lost_study(ledger: Ledger, run_dir: Path) -> None:
    """A study with no trial in a run folder whose trials.json lists some: its study.db was emptied or lost
    (a 0-byte file after a full disk, a partial copy). The search started over and overwrote trials.json and
    report.html, the last copies of its results (a review, stop 37)."""
    listed = run_dir / "trials.json"
    if not listed.is_file() or ledger.study.get_trials(deepcopy=False):
        return
    try:
        n = len(json.loads(listed.read_text()))
    except (OSError, ValueError, TypeError):
        return
    if n:
        from sro.config import ConfigError
        from sro.ledger import _shown

        raise ConfigError(f"storage {_shown(ledger.url)}: the study holds no trial, but {listed} lists {n} from its last "
                          "report (the study was emptied or lost: a 0-byte study.db, a partial copy); restore the "
                          f"study from a backup, or move {run_dir} aside to start over (its trials.json and "
                          "report.html would be overwritten)")


def run_search(project: ProjectConfig, budget: Budget, runs_root: str | Path = "runs",
               optimizer: str = "botorch", console: Console | None = None,
               pruning: bool | None = None) -> SearchSummary:
    """`pruning`: stop dominated trials early (`sro.pruning`); None: the project's `pruning.enabled`."""
    console = console or Console()
    runs_root = Path(runs_root)
    _check_gpu_budget(budget, project, console)
    run_dir = runs_root / project.name
    ledger = Ledger(project, run_dir)
    _refuse_a_lost_study(ledger, run_dir)
    if ledger.changed:
        more = f" (and {len(ledger.changed) - 3} more)" if len(ledger.changed) > 3 else ""
        console.print(f"the project changed since {run_dir} was started ({escape('; '.join(ledger.changed[:3]))}"
                      f"{more}); no trial there holds a score, so the study takes it as it is now",
                      highlight=False)
    if ledger.plugins_changed:
        console.print(f"[yellow]warning[/]: plugin {escape(', '.join(ledger.plugins_changed))} changed since the "
                      f"trials in {escape(str(run_dir))} were scored: they are kept and compared with the new "
                      "ones; if the change moves scores (a reward, an environment's rules), search under a new "
                      "`name:` instead", highlight=False, soft_wrap=True)
    # atomic: a kill while it is written must not leave the run's project unreadable
    write_whole(run_dir / "project.yaml", yaml_strict.safe_dump(project.portable_dump(), sort_keys=False))
    history = ledger.records()
    done = [r for r in history if r.finished]
    reason = budget.exhausted(ledger.spent().finished_only())  # others' running trials: the loop waits on them
    if done:  # with the budget spent, nothing is run again (it said "run again first", then ran nothing)
        again = {r.recipe.key for r in history if r.state in ("interrupted", "stopped")} - {
            r.recipe.key for r in history if r.settled} - set(crashed(history))
        console.print(f"resuming {run_dir}: {len(done)} finished trial(s) kept, none will be repeated"
                      + (f"; {len(again)} interrupted or stopped trial(s) run again first" if again and not reason
                         else ""))
    if reason:
        console.print(f"budget {budget} already spent ({reason}); raise --budget to search further")
        from sro.report import write_report

        summary = SearchSummary(run_dir, ledger.get("base_scores", {}), history, reason)
        summary.report = write_report(run_dir)  # a kill after the last trial may have left it a trial short
        return summary

    # a written space (or the study's shared one): a bad fixed setting, and in a new study a start recipe
    # outside it, fail now, not after the base model's preparation and scoring (minutes with a real model);
    # a designed space is checked once designed
    written = _written_space(run_dir)  # a broken hand edit (bad YAML, low > high) is named now, not after the set-up
    shared = ledger.shared_space()
    at_hand = shared if shared is not None and (written is None or shared.version > written.version) else written
    if at_hand is not None:
        try:
            _check_fixed(at_hand, project, run_dir, shared=at_hand is shared)
        except SpaceError:
            if at_hand is shared:  # copied, so the error's "mend its copy" has the file to mend (a joining
                from sro.designer.design import write_space  # worker's folder had none until `load_space`)

                write_space(run_dir, shared)
            raise
    if project.start_recipes and not history and shared is None and written is not None:
        _start_recipes(project, written, run_dir, history, console.print, notes=False)  # noted below
    elif project.start_recipes and not history and shared is None:
        _check_start_keys(project)  # the space is designed after the set-up; a key no trial reads is a typo now

    t0 = time.monotonic()
    console.print("preparing benchmarks, data streams and the base model ...")
    pp = progress_for(console)  # started by the first pre-training step: a cached model draws no (empty) bar
    pre = pp.add_task("pre-training tiny", total=project.runtime.tiny_pretrain_steps, info="")

    def pretrain_progress(step: int, loss: float) -> None:
        if not pp.live.is_started:
            pp.start()
        pp.update(pre, completed=step, info=f"loss {loss:.3f}")

    try:
        ctx = SearchContext.prepare(project, runs_root / ".cache", log=pp.console.print,
                                    pretrain_progress=pretrain_progress)
    finally:
        if pp.live.is_started:
            pp.stop()
    base = ledger.get("base_scores")
    # the model's folder resolved: `--runs runs` and `--runs /abs/runs` name one model (scored again otherwise)
    where = str(Path(ctx.base_path).resolve()) if Path(ctx.base_path).exists() else ctx.base_path
    kept = ledger.get("base_path")
    before = Path(str(kept or "")).name
    if project.base_model == "tiny" and before.startswith("tiny-") and before != Path(where).name and any(
            r.scores for r in history):  # an env plugin's games changed: rebuilt, silently (stop 58)
        console.print(f"[yellow]warning[/]: the base model was built anew ({before} → {Path(where).name}: its "
                      "pre-training items changed, e.g. an environment plugin's games, or SRO's pre-training); the "
                      "study's earlier trials were trained from the other one and are kept beside the new ones: "
                      "search under a new `name:` to compare like with like", highlight=False, soft_wrap=True)
    if base is None or kept != where:
        with status_for(console)("scoring the base model on the held-out benchmarks ..."):
            base = ctx.score_base(warn=lambda m: console.print(f"[yellow]{escape(m)}[/]", highlight=False))
        ledger.put("base_scores", base)
        ledger.put("base_path", where)
    ledger.put("overlap", ctx.overlap)
    # the last held-out scoring's seconds, which a trial's time limit keeps for its own scoring: kept in the
    # study, so a resumed worker (the base model's scores cached, nothing scored yet) keeps them too
    ctx.score_s = ctx.score_s or float(ledger.get("score_s", 0.0))
    ledger.add_worker_time(time.monotonic() - t0)  # the set-up counts against a wall-clock budget
    mark, training_s = time.monotonic(), 0.0  # and so does the rest of this worker's time but training
    console.print(f"base model held-out: {_fmt_scores(base)}")
    lower = project.lower_is_better()  # benchmarks where beating the base model means scoring below it
    space = load_space(project, run_dir, console, ctx, budget, ledger)
    _check_fixed(space, project, run_dir)  # a designed one's (what an LLM fixed)
    starts = _start_recipes(project, space, run_dir, ledger.records(), console.print)
    proposer = make_proposer(optimizer, space, project, run_dir)
    if hasattr(proposer, "load_warm_state"):  # a resumed search starts from the last GP fit
        proposer.load_warm_state(ledger.get("proposer_warm"))

    objectives = project.objective_directions()
    if optimizer == "botorch" and len(objectives) > 1:  # qLogNEHVI's kernel, compiled once per machine
        from sro.optimizer.fused_kernel import load_fused_kernel

        load_fused_kernel(status_for(console))
    pc = project.pruning
    pruner = Pruner(objectives, tuple(pc.at), pc.items, pc.min_dominating, pc.min_steps) if (
        pc.enabled if pruning is None else pruning) else None

    progress = progress_for(console)
    waiting = False
    given_up: set[str] = set()
    failures: list[TrialRecord] = []  # this worker's trials in a row that failed
    with progress:
        bar = progress.add_task("search", total=1.0, info=str(budget))
        while True:
            now = time.monotonic()
            if not waiting:  # designing, proposing, recording since the last pass (a wait spends nothing)
                ledger.add_worker_time(now - mark - training_s)
            mark, training_s = now, 0.0
            ledger.recover()  # trials whose worker died (here, or silent on another machine) become retries
            records = ledger.records()
            spent = ledger.spent(records)
            reason = budget.exhausted(spent)
            left = budget.remaining_wall_s(spent)
            progress.update(bar, completed=budget.fraction_used(spent),
                            info=f"{spent.trials} trials and {spent.total('wall_s'):.0f}s spent of budget {budget}")
            if reason and spent.running and budget.exhausted(spent.finished_only()) is None:
                # the budget is full only with other workers' running trials: wait for them, since one
                # whose worker dies must be run again
                if not waiting:
                    progress.console.print(f"[dim]waiting for {spent.running} trial(s) running in other "
                                           "workers to finish[/]")
                waiting = True
                time.sleep(min(5.0, ledger.heartbeat_s))
                continue
            waiting = False
            if reason is None and left is not None and 0 < ctx.score_s and left < ctx.score_s:
                # a trial started now could not even score its model (it trained a few steps in the budget's
                # last seconds and was recorded as stopped; a review, stop 38). Not a reason to wait for other
                # workers' running trials: one whose worker dies leaves no more time to run it again
                reason = (f"{left:.0f}s of the wall-clock budget left, less than a trial's held-out scoring "
                          f"({ctx.score_s:.0f}s)")
            if reason:  # said: a set-up that used the whole budget ended with 0 trials, exit 0, no word (stop 38)
                progress.console.print(_spent_note(budget, reason))
                break
            for key, n in crashed(records).items():
                if key not in given_up:
                    given_up.add(key)
                    progress.console.print(f"[yellow]recipe {key} was interrupted {n} times by its process ending "
                                           "(out of memory? a crash?); it is not run again[/]")
            recipe: Recipe | None = _retry(records, space, budget.remaining_wall_s(spent))
            was = [r for r in records if recipe is not None and r.recipe.key == recipe.key
                   and r.state in ("interrupted", "stopped")]
            if was:  # a resume ran an interrupted trial's recipe again without a word (a walkthrough)
                progress.console.print(f"running again the recipe of trial {was[-1].number} ({was[-1].state}: "
                                       + ("its worker stopped before it finished" if was[-1].state == "interrupted"
                                          else "the budget cut its training") + ")", highlight=False)
            if recipe is None and (recipe := next_start(starts, {r.recipe.key for r in records})) is not None:
                progress.console.print(f"start recipe {starts.index(recipe) + 1} of {len(starts)} "
                                       "(the project's start_recipes)")
            if recipe is None:
                # trials of earlier space versions stay in the evidence when they fit this one
                proposed = proposer.propose(in_space(space, records), 1)
                warm = proposer.warm_state() if hasattr(proposer, "warm_state") else None
                if warm is not None:
                    ledger.put("proposer_warm", warm)
                if not proposed:  # said: the search stopped short of its budget without a word (a review, stop 37)
                    reason = "the search space has no recipe left that the study has not run"
                    progress.console.print(f"[yellow]stopping before the budget {budget} is spent: {reason} "
                                           "(widen a range or add a choice in space.yaml to search further)[/]")
                    break
                recipe = proposed[0]
            if (short := _cut_short(recipe, records, budget.remaining_wall_s(ledger.spent()), ctx.score_s)):
                reason = short
                progress.console.print(_spent_note(budget, reason))
                break
            trial = ledger.start(recipe, space, budget.trials)
            if trial is None:  # another worker on this storage claimed the recipe, or the last trial, first
                progress.console.print(f"[dim]claim of recipe {recipe.key} withdrawn: {escape(ledger.withdrawal)}[/]")
                continue
            t_train = time.monotonic()
            try:  # from here on, whatever stops the worker releases the claim (`_train_and_record` below does)
                # proposing and claiming count before the trial starts: its wall-clock limit leaves them out
                ledger.add_worker_time(t_train - mark)
                mark, spent = t_train, ledger.spent()
                if (over := budget.over_cost(spent)) is not None:  # proposing and claiming spent the rest
                    ledger.withdraw(trial, "the budget ran out while proposing")
                    # read again without the withdrawn claim, which `spent` counted as a trial still training
                    reason = budget.over_cost(ledger.spent()) or over
                    progress.console.print(_spent_note(budget, reason, " while proposing"))
                    break
            except BaseException as exc:
                # a Ctrl-C here left the claim running, its heartbeat beating, for as long as the process lived
                # (a Python session), and every other worker waited on it (a review, stop 52)
                ledger.release(trial, f"its worker stopped before the trial started ({type(exc).__name__}: {exc})")
                raise
            _train_and_record(trial, recipe, ctx, ledger, budget, spent, pruner, progress, base, lower)
            training_s = time.monotonic() - t_train  # the trial's own cost covers this
            records = ledger.records()  # read once after the trial: the failure streak and the hypervolume
            ended = next((r for r in records if r.number == trial.number), None)
            failures = ([*failures, ended] if ended is not None and ended.state == "failed"
                        and not _recipes_own(ended.message) else [])
            _stop_if_repeating(ledger, failures, records)
            ledger.put("hypervolume", hypervolume_history(records, objectives, project.reference_point))
            ledger.put("score_s", round(ctx.score_s, 2))
            shared = ledger.shared_space()
            if shared is not None and shared.version >= space.version and shared.to_yaml() != space.to_yaml():
                # another worker's redesign, or a person's edit published by a restarted worker
                from sro.designer.design import write_space

                write_space(run_dir, shared)
                progress.console.print(f"adopted the study's search space v{shared.version} (from another worker)")
                space = shared
                starts = _start_recipes(project, space, run_dir, ledger.records(), progress.console.print)
                proposer = make_proposer(optimizer, space, project, run_dir)
            redesigned = maybe_redesign(project, ledger, space, ctx, run_dir, budget, log=progress.console.print,
                                        check=lambda new: _check_fixed(new, project, run_dir, redesigned=True))
            if redesigned is not None:
                shared = ledger.shared_space()
                if shared is None or redesigned.version > shared.version:  # never over a later worker's
                    ledger.publish_space(redesigned)
                space = redesigned
                starts = _start_recipes(project, space, run_dir, ledger.records(), progress.console.print)
                proposer = make_proposer(optimizer, space, project, run_dir)

    records = ledger.records()
    summary = SearchSummary(run_dir, base, records, reason or "")
    from sro.report import write_report

    try:
        summary.report = write_report(run_dir)
    finally:  # the report's seconds count too (a review, stop 58); its own figures were read before them
        ledger.add_worker_time(time.monotonic() - mark - training_s)
    return summary
