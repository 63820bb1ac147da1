"""The study ledger: every trial of a search in an Optuna study (SQLite in `runs/<name>/study.db` by
default, any SQLAlchemy URL otherwise), so a crash or a kill never loses a finished trial.

Each trial keeps its recipe (user attr `recipe`), per-objective values, the learning curve, the cost
and, on failure, the reason. Trials left RUNNING by a process that died are marked FAIL (`interrupted`)
and their recipes are run again first: at once on the next open when the process was on this host,
and on any host once the trial has recorded no heartbeat (Optuna's, in the storage's clock) for
`STALE_BEATS` heartbeat intervals. The read-only commands (`sro report`, `show`, `export`) write nothing to
the study but the rollback of a killed search's half-written change (a hot journal, as any SQLite reader
does): they show such trials as that marking would record them.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import math
import os
import socket
import sqlite3
import threading
import time
import urllib.parse
import warnings
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy.exc
from optuna.exceptions import ExperimentalWarning, StorageInternalError, UpdateFinishedTrialError
from optuna.distributions import (BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution,
                                  check_distribution_compatibility)
from optuna.trial import FrozenTrial, TrialState

from sro.budget import Spent
from sro.config import ConfigError, ProjectConfig
from sro.recipe import Recipe
from sro.space import RecipeSpace

optuna.logging.set_verbosity(optuna.logging.WARNING)
_log = logging.getLogger(__name__)


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
    worker: str = ""
    """host:pid of the process that ran (or runs) the trial."""
    started: float = 0.0
    """When the trial was claimed (Unix time on its worker's clock; 0 for trials older than this field)."""
    so_far: dict[str, float] = field(default_factory=dict)
    """A running trial's cost until its last progress record (`Ledger.progress`): wall_s, gpu_h,
    tokens; an interrupted trial's recorded cost is this."""
    late_of: int | None = None
    """For the late result of a trial another worker had marked interrupted: that trial's number."""

    @property
    def finished(self) -> bool:
        """Ended: never run again, but for a `stopped` one, which a search with more budget runs again
        (`search._retry`). Only "complete" trials are on the Pareto front."""
        return self.state in ("complete", "failed", *END_EARLY)

    @property
    def settled(self) -> bool:
        """Finished as its recipe's own outcome: every finished state but `stopped`, whose training the budget
        cut (its recipe waits to be run again). What a trial budget counts: until stop 53 a stopped trial took a
        slot and so did its rerun, and `3h,3trials` after a cut gave two recipes' results."""
        return self.finished and self.state != "stopped"

    def value(self, key: str) -> float:
        """One objective's raw value: `cost` is wall seconds, any other key a benchmark score (nan if absent)."""
        v = self.cost.get("wall_s") if key == "cost" else self.scores.get(key)
        return float("nan") if v is None else float(v)

    def beats(self, base: dict[str, float], lower: Collection[str] = ()) -> bool:
        """Complete, and better than the base model on every benchmark (`lower`: the keys where
        better is lower, `ProjectConfig.lower_is_better`)."""
        return self.state == "complete" and beats_base(self.scores, base, lower)


RECOVERED = "recovered/"
"""Study attribute prefix of the note `Ledger.recover` leaves on a trial it marked interrupted (message
and cost): it ends the trial first and writes the note after, since attributes written before could
land on a trial its owner ends at the same moment (a failed trial would then read as interrupted and
be run again)."""

REQUEUED = "requeued/"
"""Study attribute prefix of the note `Ledger.requeue` leaves on a failed trial whose error was the
environment's (the same error in several trials in a row): the trial reads as interrupted, to be run again."""

WORKER_TIME = "worker_s/"
"""Study attribute prefix of each worker's own time outside training (`Ledger.add_worker_time`); studies
from before stop 20 kept the set-up time alone, in `setup_wall_s`."""

STALE_BEATS = 10
"""A running trial whose process has recorded no heartbeat for this many intervals is taken for dead."""

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
            if m in values:
                out[m] = FloatDistribution(0.0, 1.0)
    return out


class NoStudyError(ConfigError):
    """A read-only command pointed at a run folder or storage that holds no study."""


def scored_on(project: ProjectConfig) -> dict[str, Any]:
    """What a trial's scores depend on besides its recipe: the base model, the seed, every domain's sources
    and benchmarks, the completion length and the tiny model's pre-training. A study keeps it, and a project
    that differs there is refused: its trials would be compared with others measured on something else.
    Files are named by their contents, not their paths (workers on machines whose checkouts lie elsewhere,
    a project folder renamed), and a local base model by its folder's name and its weights' fingerprint
    (`weights_fingerprint`; a study older than it, by the name alone); benchmarks by their names, in any order."""
    data = project.portable_dump(unset=True)  # every key, set or not: only a version of SRO adds or drops one

    def entry(item: dict[str, Any]) -> dict[str, Any]:
        for kind in ("jsonl", "dataset"):  # a local file by its contents (a hub id stays as it is)
            path = Path(item[kind]) if item.get(kind) else None
            if path is not None and (kind == "jsonl" or path.is_file()):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else "missing"
                item = {**item, kind: f"{path.name} (sha256 {digest})"}
        return item

    domains = {name: {"sources": [entry(s) for s in dom["sources"]],
                      "benchmarks": {b["name"]: entry({k: v for k, v in b.items() if k != "name"})
                                     for b in dom["benchmarks"]},
                      **{k: v for k, v in dom.items() if k not in ("description", "sources", "benchmarks")}}
               for name, dom in data["domains"].items()}
    base = str(data.get("base_model"))
    from trainers.models import looks_like_path

    local = Path(base) if looks_like_path(base) else None
    return {"base_model": local.name if local is not None else base, "seed": data.get("seed"),
            "domains": domains, "max_new_tokens": project.runtime.max_new_tokens,
            "tiny_pretrain_steps": project.runtime.tiny_pretrain_steps,
            **({"base_weights": weights_fingerprint(local)} if local is not None and local.is_dir() else {})}


WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth")
SAMPLES, SAMPLE_BYTES = 64, 1 << 16


def weights_fingerprint(folder: Path) -> str:
    """A local model folder's weights, named by a digest of each weight file's size and `SAMPLES` evenly spaced
    pieces of it (4 MiB a file at most: a 15 GB model is not read whole at each resume), and of its config.json:
    a folder's name was all a study kept, so `sro train --out model --force` over a project's base model went
    unnoticed and its new trials were compared with the old ones (a review, stop 57). Copies of one model on
    several machines have one fingerprint."""
    h = hashlib.sha256()
    for f in sorted({f for pattern in (*WEIGHT_FILES, "config.json") for f in folder.glob(pattern) if f.is_file()}):
        size = f.stat().st_size
        h.update(f"{f.name}:{size}".encode())
        with f.open("rb") as fh:
            if size <= SAMPLES * SAMPLE_BYTES:  # small: whole
                h.update(fh.read())
                continue
            for i in range(SAMPLES):
                fh.seek(i * (size - SAMPLE_BYTES) // (SAMPLES - 1))
                h.update(fh.read(SAMPLE_BYTES))
    return h.hexdigest()[:16]


def _differences(old: Any, new: Any, at: str = "") -> list[str]:
    """Key paths where two plain-data trees differ, with the two values (`benchmarks[0].size: 200 → 50`).
    Below a domain, a key only one side has is a setting that a version of SRO added or removed, not an
    edit: skipped, so that an upgrade does not lock a study out (a domain added or removed counts)."""
    if isinstance(old, dict) and isinstance(new, dict):
        every = at in ("", "domains") or at.endswith(".benchmarks") or ".config" in at  # free-form: every key
        keys = [*old, *(k for k in new if k not in old)] if every else [k for k in old if k in new]
        return [d for k in keys for d in _differences(old.get(k), new.get(k), f"{at}.{k}" if at else str(k))]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in _differences(a, b, f"{at}[{i}]")]
    return [] if old == new else [f"{at}: {json.dumps(old)} → {json.dumps(new)}"]


def _listed(run_dir: Path) -> str:
    """A note for a read-only command that finds no study where the run folder's trials.json lists trials: the
    study was lost or emptied, not never run (the message said "no trial has been recorded there yet" beside a
    trials.json of 6 trials; a review, stop 38). Empty when trials.json lists none."""
    try:
        n = len(json.loads((run_dir / "trials.json").read_text()))
    except (OSError, ValueError, TypeError):
        return ""
    return (f", though its trials.json lists {n} trial(s) from the last report: the study was lost or emptied "
            "(a deleted or 0-byte study.db, a partial copy); restore it from a backup (trials.json and report.html "
            "are the last copies of its results)") if n else ""


class Ledger:
    def __init__(self, project: ProjectConfig, run_dir: str | Path, create: bool = True) -> None:
        """`create=False` (the read-only commands): nothing is written to the storage but the rollback of a
        killed search's hot journal (`_roll_back_a_killed_write`; a SQLite file is then opened read-only, `recover` is not run: `records` shows the trials it would end as it would record
        them), and a missing study is `NoStudyError`."""
        self.project = project
        self.run_dir = Path(run_dir)
        self.read_only = not create
        self.url = url = study_url(project, self.run_dir)
        opened, file = url, _sqlite_file(url)
        if not create and file is not None:
            if file.is_dir():
                raise NoStudyError(f"storage {_shown(url)}: {file} is a folder, not a study file{_listed(self.run_dir)}")
            if not file.is_file():
                lost = _listed(self.run_dir)
                raise NoStudyError(f"{self.run_dir} has no study.db{lost}" if lost and project.storage is None else
                                   f"{self.run_dir} has no study.db: no trial has been recorded there yet (run "
                                   "`sro search` on its project first)" if project.storage is None else
                                   f"storage {_shown(url)}: no such file (run `sro search` on its project first)"
                                   f"{lost}")
            opened = _read_only_url(file)
            _roll_back_a_killed_write(file)
        if create:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            if file is not None:  # `storage: sqlite:///studies/x.db`: SQLite makes the file, not its folder
                file.parent.mkdir(parents=True, exist_ok=True)
        self.objectives = project.objective_directions()
        directions = ["maximize" if d == "max" else "minimize" for _, d in self.objectives]
        self.heartbeat_s = int(project.heartbeat_s)
        self._worker_s: float | None = None
        self._beats: dict[int, _Heartbeat] = {}
        self._closed: set[int] = set()
        """Trial ids whose outcome this worker recorded (a second outcome of one of them is ignored)."""
        self._intermediate: dict[int, dict[str, dict[str, float]]] = {}
        """Per trial id, the intermediate results this worker measured, also those the storage refused once
        another worker had marked the trial interrupted: its late result keeps them (until stop 38 it kept
        only those written before the mark)."""
        self.withdrawal = ""
        """Why the last `start` returned None."""
        self.changed: list[str] = []
        """How the project differs from the one a study that holds no score was made with (taken)."""
        self.plugins_changed: list[str] = []
        """The plugins whose code differs from the one the study's scored trials ran with (a warning)."""
        for attempt in range(5):
            try:
                if not create and not _has_tables(opened):  # Optuna's open would create them
                    raise NoStudyError(f"storage {_shown(url)} has no study {project.name!r}" + (
                        _listed(self.run_dir) or " (run `sro search` on its project first)"))
                with warnings.catch_warnings():  # heartbeats are an experimental argument in Optuna 5
                    warnings.simplefilter("ignore", ExperimentalWarning)
                    self.storage = optuna.storages.RDBStorage(opened, heartbeat_interval=self.heartbeat_s,
                                                              grace_period=STALE_BEATS * self.heartbeat_s,
                                                              skip_table_creation=not create)
                if create:
                    self.study = optuna.create_study(study_name=project.name, storage=self.storage,
                                                     directions=directions, load_if_exists=True)
                else:
                    self.study = optuna.load_study(study_name=project.name, storage=self.storage)
                break
            except KeyError:  # load_study: no such study in the storage
                raise NoStudyError(f"storage {_shown(url)} has no study {project.name!r} (run `sro search` on its "
                                   "project first)") from None
            except STORAGE_ERRORS as e:  # Optuna wraps some of SQLAlchemy's in its StorageInternalError
                if file is not None and storage_failure(e, url).startswith(f"{file} is damaged"):
                    raise ConfigError(storage_failure(e, url)) from None  # was a traceback (a review, stop 37)
                readonly = file is not None and "readonly database" in str(e) + cause(e)
                if create and readonly:  # was 7 s of retries, then "check `storage:`" for a project without one
                    raise ConfigError(  # (a review, stop 58)
                        f"{file}: the study cannot be written here (SQLite: attempt to write a readonly database): "
                        "the file, or its folder, where SQLite writes its journal, is read-only; make both writable, "
                        "or copy the run folder somewhere writable and search there (`sro show` and `sro report` "
                        "read it as it is)") from None
                if not create and readonly and _journal(file.resolve()).is_file():
                    raise ConfigError(
                        f"{file}: a search killed while writing left a half-written change in "
                        f"{_journal(file.resolve()).name}, and a read-only open cannot roll it back (the study or "
                        "its folder is not writable here); copy the run folder, journal included, somewhere "
                        "writable (`cp -r` then `chmod -R u+w` on the copy) and run this command on the copy "
                        "(its first open rolls the change back)") from None
                # workers started together race to create the storage's tables or the study (a
                # unique-constraint or "database is locked" error); the loser finds them made
                if attempt == 4:
                    raise ConfigError(f"storage {_shown(url)}: cannot open the study ({cause(e)}); check `storage:` "
                                      "(the server is up, the database exists, the URL is right)") from None
                time.sleep(0.5 * (attempt + 1))
        if list(self.study.directions) != [optuna.study.StudyDirection[d.upper()] for d in directions]:
            raise ConfigError(f"storage {_shown(url)}: study {project.name!r} has other objectives than "
                              f"{[k for k, _ in self.objectives]} (its trials were scored on others); use a new "
                              "project name, or put the objectives back")
        if create:  # a search: the read-only commands read the study as it is (its files may have changed since)
            self.study.set_user_attr("objectives", [k for k, _ in self.objectives])
            self._check_scored_on(project)
            self._check_plugin_code(project)
            self.recover()

    def _check_scored_on(self, project: ProjectConfig) -> None:
        """Refuse `project` where a trial's scores depend on it otherwise than the study's (`scored_on`)."""
        kept, now = self.get("scored_on"), scored_on(project)
        if kept is not None and "base_weights" not in kept:  # a study started before stop 57 kept the name alone
            now.pop("base_weights", None)
        if kept is None:  # a new study, or one older than this check
            self.put("scored_on", now)
        elif (differ := _differences(kept, now)) and not any(
                t.state != TrialState.FAIL or "scores" in t.user_attrs or "intermediate" in t.user_attrs
                for t in self.study.get_trials(deepcopy=False)):
            # nothing scored (a first search stopped by a bad base model, or whose trials all failed): there is
            # nothing to compare, so the study takes the mended project, its base model scored again
            self.put("scored_on", now)
            self.put("base_scores", None)
            self.changed = differ
        elif differ:
            more = f" (and {len(differ) - 3} more)" if len(differ) > 3 else ""
            raise ConfigError(f"study {project.name!r} in {self.run_dir} was scored with another project: "
                              f"{'; '.join(differ[:3])}{more}; its trials would be compared with trials measured "
                              "otherwise: use a new `name:` for the changed project, or put those settings back")

    def _check_plugin_code(self, project: ProjectConfig) -> None:
        """Name in `plugins_changed` each plugin whose code differs from the one the study's scored trials ran
        with, then keep the new code's digests (`plugin_digests`): a warning, not a refusal like `scored_on`'s,
        since most edits of a plugin (a fix elsewhere, a comment, a new environment) move no score."""
        from sro.plugins import plugin_digests

        kept, now = self.get("plugin_code"), plugin_digests(project.plugins)
        if kept is not None and any("scores" in t.user_attrs for t in self.study.get_trials(deepcopy=False)):
            self.plugins_changed = [name for name in now if name in kept and kept[name] != now[name]]
        if kept != now:
            self.put("plugin_code", now)

    # --- study-level facts --------------------------------------------------------------------
    def get(self, key: str, default: Any = None) -> Any:
        return _again(lambda: self.study.user_attrs).get(key, default)

    def put(self, key: str, value: Any) -> None:
        _again(lambda: self.study.set_user_attr(key, value))

    def shared_space(self) -> RecipeSpace | None:
        """The search space the study's workers share: published by the first worker to design or load
        one and by every redesign, so workers on other machines search the same space."""
        text = self.get("space")
        return None if text is None else RecipeSpace.from_yaml(text)

    def publish_space(self, space: RecipeSpace) -> None:
        self.put("space", space.to_yaml())

    def add_worker_time(self, seconds: float) -> None:
        """Count `seconds` of this process's own time (set-up, proposing, recording: everything but
        training) against the study's wall-clock budget. Each worker keeps its own total under its own
        key, so workers never overwrite each other's."""
        key = f"{WORKER_TIME}{socket.gethostname()}:{os.getpid()}"
        if self._worker_s is None:  # this process may have searched this study before (the Python API)
            self._worker_s = float(self.get(key, 0.0))
        self._worker_s += max(0.0, float(seconds))
        self.put(key, round(self._worker_s, 3))

    # --- trials -------------------------------------------------------------------------------
    def recover(self) -> list[Recipe]:
        """Mark the running trials whose process died (`_dead`) `interrupted` (their recipes are run again,
        by whichever worker gets there first) and return their recipes; one whose outcome was recorded
        before its process died ends with that outcome instead."""
        out = []
        running = _again(lambda: self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))
        for t, note in self._dead(running):
            outcome = t.user_attrs.get("outcome")
            if outcome is not None:  # its process died after recording how it ended, before saying it ended
                self._end_as_recorded(t._trial_id, outcome)
                continue
            try:  # the state first: whoever ends a trial first owns its outcome (its owner, or this)
                _again(lambda t=t: self.storage.set_trial_state_values(t._trial_id, TrialState.FAIL))
            except UpdateFinishedTrialError:  # another worker marked it, or its owner ended it, a moment ago
                continue
            # a finished trial's attributes are read-only, so the note is the study's
            _again(lambda t=t, note=note: self.study.set_user_attr(f"{RECOVERED}{t.number}", note))
            if "recipe" in t.user_attrs:
                out.append(Recipe.from_dict(t.user_attrs["recipe"]))
        return out

    def _dead(self, running: list[FrozenTrial]) -> list[tuple[FrozenTrial, dict[str, Any]]]:
        """Those of the `running` trials whose process died, each with the note `recover` leaves on it
        (why, and the cost it used until its last progress record, which stays spent): a process of this
        host that is gone, or a trial on any host with no heartbeat for `STALE_BEATS` intervals. Reads only."""
        if not running:
            return []
        host, me, out = socket.gethostname(), _host_id(), []
        # retried like every other storage call: a busy storage here ended the search (a review, stop 52)
        stale = set(_again(lambda: self.storage._get_stale_trial_ids(self.study._study_id)))  # Optuna's heartbeats
        grace = STALE_BEATS * self.heartbeat_s
        silent = _again(lambda: _never_beat(self.storage, [t._trial_id for t in running]))
        for t in running:
            pid, thost = t.user_attrs.get("pid"), t.user_attrs.get("host")
            # a gone process of this host first: the surest reason, and the same however long ago it died
            # (read a moment later, its trial would also have missed its heartbeats)
            # "this host" by the name and by the pid namespace: containers that share a hostname (docker
            # --network host, --hostname, k8s hostNetwork) do not see each other's pids (a review, stop 37)
            here = thost == host and t.user_attrs.get("host_id", me) == me
            if here and pid is not None and not _alive(int(pid), t.user_attrs.get("pid_started")):
                why = "interrupted: its process died"
            elif t._trial_id in silent and time.time() - float(t.user_attrs.get("started", time.time())) > grace:
                # killed between its claim and its first heartbeat, which Optuna never takes for dead
                why = f"interrupted: no heartbeat from {thost} (pid {pid}) since its claim over {grace}s ago"
            elif t._trial_id in stale:
                why = (f"interrupted: no heartbeat from {thost} (pid {pid}) for over "
                       f"{STALE_BEATS * self.heartbeat_s}s")
            else:
                continue
            out.append((t, {"message": why, "cost": dict(t.user_attrs.get("so_far", {}))}))
        return out

    def _as_recovered(self, trials: list[FrozenTrial]) -> tuple[list[FrozenTrial], dict[str, Any] | None]:
        """`trials` and the study's attributes as `recover` would leave them, in memory (the read-only
        commands write nothing): each dead trial ended with its recorded outcome, or failed with its note.
        The attributes are None where no trial is dead (`records` reads them only when it needs them)."""
        dead = self._dead([t for t in trials if t.state == TrialState.RUNNING])
        if not dead:
            return trials, None
        notes, ended = dict(self.study.user_attrs), {}
        for t, note in dead:
            outcome = t.user_attrs.get("outcome")
            ended[t._trial_id] = t = copy.copy(t)  # the storage's trial is left as it is
            if outcome is None:
                t.state, notes[f"{RECOVERED}{t.number}"] = TrialState.FAIL, note
            else:
                t.state = _recorded_end(outcome)[0]
        return [ended.get(t._trial_id, t) for t in trials], notes

    def start(self, recipe: Recipe, space: RecipeSpace, max_trials: int | None = None) -> optuna.Trial | None:
        """A RUNNING trial of `recipe`, or None when the claim is withdrawn (the reason in `withdrawal`):
        another worker sharing the storage claimed the same recipe first (then propose again), or
        `max_trials` (the trial budget) are already finished or running among the earlier trials.

        The trial is created in one storage call, not with `enqueue_trial` + `ask`: `ask` pops the
        oldest waiting trial, which with several workers can be another worker's recipe, and the
        scores would be recorded against the wrong recipe. The storage numbers trials in order, so
        of two workers that claim at once (both saw the same history) the later one is withdrawn:
        marked failed with `withdrawn`, which `records` skips. While the trial runs, a thread records
        its heartbeat (`Ledger.recover`).
        """
        dists = self._columns(distributions(space, recipe.values), recipe.values)
        frozen = optuna.trial.create_trial(
            state=TrialState.RUNNING, params={k: recipe.values[k] for k in dists}, distributions=dists,
            user_attrs={"recipe": recipe.to_dict(), "key": recipe.key, "pid": os.getpid(),
                        "pid_started": _process_started(os.getpid()),
                        "host": socket.gethostname(), "host_id": _host_id(), "space_version": space.version,
                        "started": time.time()})
        trial = optuna.Trial(self.study, _again(lambda: self.storage.create_new_trial(self.study._study_id,
                                                                                    template_trial=frozen)))
        # the first beat at once: a trial without any heartbeat is never taken for dead by Optuna
        _again(lambda: self.storage.record_heartbeat(trial._trial_id))
        earlier = [r for r in self.records() if r.number < trial.number]
        # an interrupted or budget-stopped record of the recipe is what a retry reruns: not a claim
        rival = next((r.number for r in earlier if r.recipe.key == recipe.key
                      and r.state not in ("interrupted", "stopped")), None)
        taken = sum(r.settled or r.state == "running" for r in counted(earlier))
        if rival is not None:
            self.withdrawal = f"trial {rival} already has this recipe (another worker)"
        elif max_trials is not None and taken >= max_trials:
            self.withdrawal = f"the trial budget ({max_trials}) is taken by earlier trials (other workers')"
        else:
            self._beats[trial._trial_id] = _Heartbeat(self.storage, trial._trial_id, self.heartbeat_s)
            return trial
        self.withdraw(trial, self.withdrawal)
        return None

    def _columns(self, dists: dict[str, BaseDistribution], values: dict[str, Any]) -> dict[str, BaseDistribution]:
        """The distributions a trial's param columns are recorded under. Optuna's storage refuses a parameter
        whose distribution differs from the one the study first recorded for its name in kind, in log scale
        or (a categorical) in its choices: after a space edit (a choice added, a scale changed) such a value
        is recorded under the study's first distribution where that holds it, and left out of the columns
        where it does not. The columns are for Optuna's own tools; the search reads the recipe, kept whole."""
        first: dict[str, BaseDistribution] = {}
        for t in self.study.get_trials(deepcopy=False):
            for k, d in t.distributions.items():
                first.setdefault(k, d)
        out: dict[str, BaseDistribution] = {}
        for k, d in dists.items():
            was = first.get(k)
            try:
                if was is not None:
                    check_distribution_compatibility(was, d)
                out[k] = d
            except ValueError:
                try:
                    if was is not None and was._contains(was.to_internal_repr(values[k])):
                        out[k] = was
                except (ValueError, TypeError):
                    pass
        return out

    def withdraw(self, trial: optuna.Trial, why: str) -> None:
        """Take back a claim that trained nothing: recorded FAIL with `withdrawn` (which `records` skips)."""
        self.withdrawal = why
        # retried like every other write (until stop 52 one "database is locked" here ended the worker)
        _again(lambda: trial.set_user_attr("withdrawn", True))
        _again(lambda: trial.set_user_attr("message", f"withdrawn: {why}"))
        try:
            _again(lambda: self.study.tell(trial, state=TrialState.FAIL))
        except (UpdateFinishedTrialError, ValueError):  # a retried tell whose first answer was lost had landed
            pass
        self._closed.add(trial._trial_id)
        self._stop_heartbeat(trial)

    def meter(self, trial: optuna.Trial, cost: Callable[[], dict[str, float]]) -> None:
        """Record `cost()` as the running `trial`'s cost so far at each of its heartbeats too, so that a
        process killed between two progress records (while loading the model, or in its final scoring)
        leaves what it used until its last beat spent, not its last progress record's."""
        beat = self._beats.get(trial._trial_id)
        if beat is not None:
            beat.cost = cost

    def progress(self, trial: optuna.Trial, curve: list[dict[str, float]],
                 so_far: dict[str, float] | None = None) -> None:
        """A running trial's learning curve and its cost so far (what the budget counts while it runs).
        A trial that another worker has meanwhile marked interrupted (this worker was suspended past
        the heartbeat grace) keeps training: its result is recorded as a new trial (`_close`)."""
        try:
            trial.set_user_attr("curve", curve)
            if so_far is not None:
                trial.set_user_attr("so_far", so_far)
        except UpdateFinishedTrialError:
            pass
        except STORAGE_BUSY as e:  # the next progress record comes in seconds; the trial goes on
            _log.warning("progress of trial %s not recorded: %s", trial.number, e)

    def finish(self, trial: optuna.Trial, scores: dict[str, float], cost: dict[str, float],
               curve: list[dict[str, float]], metrics: dict[str, float] | None = None) -> None:
        """`metrics`: what is measured beside the objectives (e.g. the train/held-out gap)."""
        values = [float(cost["wall_s"]) if k == "cost" else float(scores[k]) for k, _ in self.objectives]
        bad = [k for (k, _), v in zip(self.objectives, values) if not math.isfinite(v)]
        if bad:  # Optuna would record FAIL without a word: say which objective
            self.fail(trial, f"objective {', '.join(bad)} is not a finite number ({scores})", cost, curve)
            return
        self._close(trial, TrialState.COMPLETE, {**({"metrics": metrics} if metrics else {}), "scores": scores,
                                                 "cost": cost, "curve": curve}, values)

    def fail(self, trial: optuna.Trial, message: str, cost: dict[str, float],
             curve: list[dict[str, float]]) -> None:
        self._close(trial, TrialState.FAIL, {"message": message[:2000], "cost": cost, "curve": curve})

    def report_intermediate(self, trial: optuna.Trial, fraction: float, values: dict[str, float]) -> None:
        """Results measured at `fraction` of the trial's steps (benchmark subsets, cost so far)."""
        self._intermediate.setdefault(trial._trial_id, {})[f"{fraction:.3f}"] = values
        try:
            inter = dict(_again(lambda: self.storage.get_trial(trial._trial_id)).user_attrs.get("intermediate", {}))
            inter[f"{fraction:.3f}"] = values
            _again(lambda: trial.set_user_attr("intermediate", inter))
        except UpdateFinishedTrialError:  # marked interrupted meanwhile (see `progress`): train on
            pass
        except STORAGE_BUSY as e:  # still busy after the retries: this point is missing, the trial goes on
            _log.warning("intermediate results of trial %s not recorded: %s", trial.number, e)

    def end_early(self, trial: optuna.Trial, state: str, scores: dict[str, float], cost: dict[str, float],
                  curve: list[dict[str, float]], message: str = "") -> None:
        """A trial stopped before the end of its training, as `state` in `END_EARLY` ("pruned": dominated
        at an intermediate evaluation; "collapsed": training collapsed; "stopped": the wall-clock budget
        ran out during its training). Its partial `scores` and `cost`
        are kept; it counts as finished and is not on the Pareto front (Optuna state PRUNED). A pruned or
        collapsed trial is never run again; a stopped one is, once a search has more budget (`search._retry`),
        and takes no slot of a trial budget (`TrialRecord.settled`)."""
        if state not in END_EARLY:
            raise ValueError(f"end_early: state must be one of {END_EARLY}, got {state!r}")
        self._close(trial, TrialState.PRUNED, {"end_state": state, "scores": scores, "cost": cost, "curve": curve,
                                               "message": message[:2000]})

    def interrupt(self, trial: optuna.Trial, curve: list[dict[str, float]],
                  cost: dict[str, float] | None = None, by: str = "the user") -> None:
        """A trial stopped by the user (or `by` a signal): recorded as interrupted so the next search runs it
        again; the `cost` it used until then stays spent."""
        try:  # Ctrl-C between a result and its end (`_close`): the result stands
            now = self.storage.get_trial(trial._trial_id)
            outcome = None if now.state.is_finished() else now.user_attrs.get("outcome")
        except STORAGE_BUSY:
            outcome = None
        if outcome is not None:
            self._end_as_recorded(trial._trial_id, outcome)
            self._closed.add(trial._trial_id)
            self._stop_heartbeat(trial)
            return
        self._close(trial, TrialState.FAIL, {"message": f"interrupted by {by}", "interrupted": True,
                                             "curve": curve, "cost": cost or {}})

    def _end_as_recorded(self, trial_id: int, outcome: dict[str, Any]) -> None:
        """End a trial with the `outcome` `_close` recorded before its `tell` (as `tell` would have: values
        that are not all finite fail it); nothing if it has ended meanwhile."""
        state, values = _recorded_end(outcome)
        try:
            _again(lambda: self.storage.set_trial_state_values(trial_id, state, values))
        except UpdateFinishedTrialError:
            pass

    def requeue(self, numbers: Collection[int], why: str) -> None:
        """Turn failed trials into interrupted ones (`why` their message; their cost stays spent): their
        recipes are run again, as a dead worker's are. For failures that were not the recipe's doing."""
        for n in numbers:
            _again(lambda n=n: self.study.set_user_attr(f"{REQUEUED}{n}", f"interrupted: {why}"[:2000]))

    def release(self, trial: optuna.Trial, why: str) -> None:
        """After a trial, whatever happened: stop its heartbeat and, if no path above recorded how it
        ended (an unexpected exception), mark it interrupted so that it is run again."""
        if trial._trial_id in self._beats:  # still claimed here: read it only then (not after every trial)
            try:
                now = _again(lambda: self.storage.get_trial(trial._trial_id))
                if not now.state.is_finished():
                    outcome = now.user_attrs.get("outcome")
                    if outcome is not None:
                        # its result was recorded before the exception that ended it (a Ctrl-C inside `end_early`'s
                        # `tell`): it stands, as `recover` would end it (until stop 52 it became interrupted)
                        self._end_as_recorded(trial._trial_id, outcome)
                        self._closed.add(trial._trial_id)
                    else:
                        self._close(trial, TrialState.FAIL, {"message": f"interrupted: {why}"[:2000],
                                                             "interrupted": True,
                                                             "cost": dict(now.user_attrs.get("so_far", {}))})
            except STORAGE_BUSY as e:  # the storage is away: with its heartbeat stopped, the trial is
                # marked interrupted by the next worker that looks (`recover`), after STALE_BEATS beats
                _log.warning("trial %s could not be released: %s", trial.number, e)
        self._stop_heartbeat(trial)

    def _stop_heartbeat(self, trial: optuna.Trial) -> None:
        self._intermediate.pop(trial._trial_id, None)  # the trial is closed: nothing more to keep for it
        beat = self._beats.pop(trial._trial_id, None)
        if beat is not None:
            beat.stop()

    def _close(self, trial: optuna.Trial, state: TrialState, attrs: dict[str, Any],
               values: list[float] | None = None) -> None:
        """Record how the trial ended, then stop its heartbeat (a write that fails leaves it claimed, for
        `release`). A trial another worker has meanwhile marked interrupted (its heartbeats stalled,
        e.g. the machine was suspended) is recorded as a new trial of the same recipe, so its result is
        not lost; one recorded already otherwise (by this worker: a second outcome, e.g. Ctrl-C just
        after it finished) is left as it is."""
        try:
            for k, v in attrs.items():
                _again(lambda k=k, v=v: trial.set_user_attr(k, v))
            # written last: a kill between here and the `tell` leaves the outcome whole, and `recover` ends
            # the trial with it (until stop 28 a finished trial killed there was rerun as interrupted)
            _again(lambda: trial.set_user_attr("outcome", {"state": state.name, "values": values}))
            # values given: Optuna decides (COMPLETE, or FAIL with a warning for nan values)
            _again(lambda: self.study.tell(trial, values, state=None if values is not None else state))
            self._closed.add(trial._trial_id)
        except (UpdateFinishedTrialError, ValueError):
            old = _again(lambda: self.storage.get_trial(trial._trial_id))
            if not old.state.is_finished():
                raise
            # ended as its recorded outcome says: by this worker's own write (a Ctrl-C after it, or a retry of a
            # `tell` whose answer was lost) or by a recovery that read it; only an owner writes an outcome, so
            # the result stands (until stop 52 a late copy was added: interrupted, or the result twice)
            recorded = old.user_attrs.get("outcome")
            own = recorded is not None and _recorded_end(recorded)[0] == old.state
            if trial._trial_id not in self._closed and not own:  # ended by another worker while this one trained on
                kept = {k: v for k, v in old.user_attrs.items() if k not in ("message", "interrupted")}
                if trial._trial_id in self._intermediate:  # those measured after the mark too
                    kept["intermediate"] = {**kept.get("intermediate", {}), **self._intermediate[trial._trial_id]}
                late = optuna.trial.create_trial(state=state, values=values, params=old.params,
                                                 distributions=old.distributions,
                                                 user_attrs={**kept, "late_of": old.number, **attrs})
                # retried like the other writes (the result of a whole training was lost to one "database is
                # locked" until stop 29), but added once: a write whose answer was lost may have landed
                def add_once() -> None:
                    if not any(t.user_attrs.get("late_of") == old.number for t in self.study.get_trials(deepcopy=False)):
                        self.study.add_trial(late)

                _again(add_once)
                self._closed.add(trial._trial_id)
        self._stop_heartbeat(trial)

    def records(self) -> list[TrialRecord]:
        out = []
        trials, notes = _again(lambda: self.study.get_trials(deepcopy=False)), None
        if self.read_only:  # the trials `recover` would end, as it would record them
            trials, notes = self._as_recovered(trials)
        for t in trials:
            if "recipe" not in t.user_attrs or t.user_attrs.get("withdrawn"):
                continue
            a = t.user_attrs
            state = {TrialState.COMPLETE: "complete", TrialState.RUNNING: "running"}.get(t.state, "failed")
            if t.state == TrialState.FAIL and "interrupted" not in a:
                # ended by `recover`: its note is a study attribute (studies from before stop 24 have it on
                # the trial). A trial its owner ended always has a message: one without lost its note
                notes = self.study.user_attrs if notes is None else notes
                note = notes.get(f"{RECOVERED}{t.number}")
                if note is not None or "message" not in a:
                    note = note or {"message": "interrupted: marked by another worker (its note is missing)",
                                    "cost": a.get("so_far", {})}
                    a = {**a, **note, "interrupted": True}
                elif f"{REQUEUED}{t.number}" in notes:  # `requeue`: failed by the environment, run again
                    a = {**a, "message": notes[f"{REQUEUED}{t.number}"], "interrupted": True}
            if a.get("interrupted") and t.state == TrialState.FAIL:
                state = "interrupted"
            elif t.state == TrialState.PRUNED:
                state = str(a.get("end_state", "pruned"))
            out.append(TrialRecord(t.number, state, Recipe.from_dict(a["recipe"]), dict(a.get("scores", {})),
                                   dict(a.get("cost", {})), list(a.get("curve", [])), str(a.get("message", "")),
                                   dict(a.get("metrics", {})), dict(a.get("intermediate", {})),
                                   f"{a.get('host', '?')}:{a.get('pid', '?')}", float(a.get("started", 0.0)),
                                   dict(a.get("so_far", {})), a.get("late_of")))
        return out

    def spent(self, records: list[TrialRecord] | None = None) -> Spent:
        """What the study has used (from `records` when given, else read now), and apart from it what
        the trials in training now (other workers', or this worker's own during its trial) have
        used: seconds since their claim, GPU-hours and tokens as they last recorded them."""
        all_recs = self.records() if records is None else records
        recs = [r for r in counted(all_recs) if r.state != "running"]
        running = [r for r in all_recs if r.state == "running"]
        attrs = self.study.user_attrs
        setup = float(attrs.get("setup_wall_s", 0.0)) + sum(float(v) for k, v in attrs.items() if k.startswith(WORKER_TIME))
        now = time.time()
        return Spent(wall_s=setup + sum(r.cost.get("wall_s", 0.0) for r in recs),
                     trials=sum(r.settled for r in recs),
                     gpu_h=sum(r.cost.get("gpu_h", 0.0) for r in recs),
                     tokens=sum(r.cost.get("tokens", 0.0) for r in recs),
                     running=len(running), running_wall_s=sum(max(0.0, now - r.started) for r in running if r.started),
                     running_gpu_h=sum(r.so_far.get("gpu_h", 0.0) for r in running),
                     running_tokens=sum(r.so_far.get("tokens", 0.0) for r in running))


class _Heartbeat:
    """Records a running trial's heartbeat in the storage every `every` seconds from a daemon thread, so
    the other workers can tell a live trial from one whose process or machine died (`Ledger.recover`)."""

    def __init__(self, storage: optuna.storages.RDBStorage, trial_id: int, every: float) -> None:
        self.cost: Callable[[], dict[str, float]] | None = None
        """What the trial has used until now, recorded with each beat as `so_far` (`Ledger.meter`)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(storage, trial_id, every), daemon=True,
                                        name=f"sro-heartbeat-{trial_id}")
        self._thread.start()

    def _run(self, storage: optuna.storages.RDBStorage, trial_id: int, every: float) -> None:
        while not self._stop.wait(every):
            try:
                storage.record_heartbeat(trial_id)
                if self.cost is not None:
                    storage.set_trial_user_attr(trial_id, "so_far", self.cost())
            except UpdateFinishedTrialError:  # ended (by its owner, or marked interrupted by another worker)
                pass
            except STORAGE_ERRORS as e:  # busy or away: beat again later
                _log.warning("heartbeat of trial id %s not recorded: %s", trial_id, e)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


STORAGE_BUSY = (StorageInternalError, sqlalchemy.exc.OperationalError)
"""What a storage under contention raises for a moment (SQLite's "database is locked", a dropped
PostgreSQL connection): written again, not a trial's failure."""
STORAGE_ERRORS = (StorageInternalError, sqlalchemy.exc.SQLAlchemyError)
"""Anything the storage raises: never a recipe's failure (a trial it ends is interrupted, run again)."""


def _never_beat(storage: optuna.storages.RDBStorage, trial_ids: list[int]) -> set[int]:
    """Those of `trial_ids` that have no heartbeat at all (Optuna's stale check skips them)."""
    if not trial_ids:
        return set()
    from optuna.storages._rdb import models

    with storage.scoped_session() as session:
        beat = {i for (i,) in session.query(models.TrialHeartbeatModel.trial_id)
                .filter(models.TrialHeartbeatModel.trial_id.in_(trial_ids)).all()}
    return set(trial_ids) - beat


def counted(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """The records that count against a budget: all but those a late result supersedes (`late_of`), whose
    training the late trial holds, cost and all. `Ledger.start` and `Ledger.spent` count the same way: until
    stop 52 the claim counted a superseded trial that `spent` left out, so a search whose budget `spent` said
    was not used up had every claim withdrawn, and looped (a review)."""
    superseded = {r.late_of for r in records if r.late_of is not None}
    return [r for r in records if r.number not in superseded]


def _recorded_end(outcome: dict[str, Any]) -> tuple[TrialState, list[float] | None]:
    """The state and values a trial ends with by the `outcome` `Ledger._close` recorded before its `tell`
    (as `tell` would: values that are not all finite fail it)."""
    values = outcome["values"]
    state = (TrialState[outcome["state"]] if values is None
             else TrialState.COMPLETE if all(map(math.isfinite, values)) else TrialState.FAIL)
    return state, values if state == TrialState.COMPLETE else None


def _sqlite_file(url: str) -> Path | None:
    """The file of a plain SQLite URL (`sqlite:///path`); None for other databases, memory and URI forms."""
    try:
        u = sqlalchemy.engine.make_url(url)
    except sqlalchemy.exc.ArgumentError:
        return None
    if u.drivername not in ("sqlite", "sqlite+pysqlite") or u.query or not u.database \
            or u.database == ":memory:" or u.database.startswith("file:"):
        return None
    return Path(u.database)


def _read_only_url(path: Path) -> str:
    """A URL that opens SQLite file `path` read-only (SQLite's own `mode=ro`: any write is refused, even to
    root, and no file is made). The path is quoted twice: SQLAlchemy unquotes the URL once and SQLite the
    URI once more (quoted once, a `#` or `?` in it cut the path, and the `mode=ro` with it)."""
    return f"sqlite:///file:{urllib.parse.quote(urllib.parse.quote(str(path.resolve())))}?mode=ro&uri=true"


def _journal(file: Path) -> Path:
    """SQLite's rollback journal of database `file`."""
    return file.with_name(file.name + "-journal")


def _roll_back_a_killed_write(file: Path) -> None:
    """Roll back the change a search killed in mid-write left in `file`'s journal (a "hot" journal), which a
    read-only open cannot do (it fails with "attempt to write a readonly database"): one read through a
    read-write connection, as SQLite rolls a hot journal back on any such open. The only write of the
    read-only commands, and the one any SQLite reader makes; it restores the study as it was before the
    killed write. Nothing when there is no journal, the folder is not writable, or a live search holds the
    journal (then it is not hot: SQLite leaves it, and the read-only open reads the committed study)."""
    file = file.resolve()  # SQLite keeps the journal beside a symlink's target
    journal = _journal(file)
    try:
        if not journal.stat().st_size or not os.access(file.parent, os.W_OK) or not os.access(file, os.W_OK):
            return
    except OSError:  # no journal, or a live search's commit removed it just now
        return
    try:
        with contextlib.closing(sqlite3.connect(file, timeout=5)) as db:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as e:  # e.g. a live search holds the lock: the read-only open that follows says what is wrong
        _log.debug("could not roll back %s: %s", journal, e)


def _has_tables(url: str) -> bool:
    """Whether the storage at `url` has Optuna's tables (a SQLite file that a kill left empty may not)."""
    engine = sqlalchemy.create_engine(url)
    try:
        return {"studies", "trials", "version_info"} <= set(sqlalchemy.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _shown(url: str) -> str:
    """A storage URL as it may be printed: its password masked."""
    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except sqlalchemy.exc.ArgumentError:
        return url


def study_url(project: ProjectConfig, run_dir: Path) -> str:
    """Where the study of `project` is: its `storage:`, or `study.db` in its run folder."""
    return project.storage or f"sqlite:///{run_dir / 'study.db'}"


def cause(e: BaseException) -> str:
    """The first line of the error underneath `e`: Optuna wraps a storage's own error (SQLite's "database disk
    image is malformed", PostgreSQL's "connection refused") in a StorageInternalError whose text is generic."""
    while (inner := e.__cause__ or e.__context__) is not None and inner is not e:
        e = inner
    text = str(getattr(e, "orig", None) or e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def storage_failure(e: BaseException, url: str) -> str:
    """One line for a storage error that outlived its retries: what failed underneath, and what to do."""
    why = cause(e)
    file = _sqlite_file(url)
    if file is not None and any(s in why for s in ("malformed", "not a database", "disk I/O error")):
        return (f"{file} is damaged ({why}); restore it from a backup, or salvage it with "
                f"`sqlite3 {file} .recover | sqlite3 {file.with_name('recovered.db')}`; the run folder's "
                "trials.json holds the trials of its last report")
    return (f"storage {_shown(url)} failed ({why}); finished trials are kept: rerun the same command to resume "
            "once the storage is reachable")


def _again(write: Callable[[], Any], attempts: int = 5) -> Any:
    """`write()`, retried with back-off (0.5, 1, 2, 4 s) while the storage is busy; the last error is raised."""
    for attempt in range(attempts):
        try:
            return write()
        except STORAGE_BUSY as e:
            if attempt == attempts - 1:
                raise
            _log.warning("storage busy (%s); trying again in %.1fs", cause(e), 0.5 * 2**attempt)
            time.sleep(0.5 * 2**attempt)


def _process_started(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot, from /proc; None where there is no /proc): with
    the pid it names one process, since pids are reused (a container's entrypoint gets the same pid after
    every restart)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _host_id() -> str | None:
    """The boot and the pid namespace this process runs in (Linux; None elsewhere): two processes see each
    other's pids only where both are the same, whatever their hostnames say."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}/{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return None


def _alive(pid: int, started: int | None = None) -> bool:
    """Whether process `pid` runs, and is the one that started at `started` (when both are known)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    now = _process_started(pid) if started is not None else None
    return now is None or now == started

