"""The decisions of the search loop (`sro.search.run_search`'s `while True:`), each pinned by a test that a
change of it fails: the stop that keeps room for a trial's held-out scoring, the wait for other workers'
running trials, a withdrawn claim proposed again, and a claim withdrawn where proposing spent the budget.

Nothing trains and no model is built: the search context, the base model's scoring and `run_trial` are
stand-ins, so each search takes a second or so."""

from __future__ import annotations

import io
import logging
import time
from pathlib import Path

import pytest
import sqlalchemy
from rich.console import Console
from typer.testing import CliRunner

import sro.cli as cli
import sro.ledger as ledger_mod
import sro.search as search_mod
from sro.budget import Budget, Spent
from sro.config import ConfigError, load_project
from sro.executor import SearchContext, TrialOutcome
from sro.ledger import Ledger
from sro.recipe import Recipe
from sro.space import RecipeSpace

from micro import MICRO

PROJECT = MICRO.replace("threads: 2", "threads: 1")  # nothing trains; one thread

SPACE = """\
version: 1
designer: test
fixed: {algorithm: grpo, max_new_tokens: 4, seed: 0}
params:
  lr: {kind: float, low: 0.001, high: 0.003, log: true, why: small}
  group_size: {kind: int, low: 4, high: 4, why: fixed}
  prompts_per_step: {kind: int, low: 4, high: 6, why: small}
  steps: {kind: int, low: 3, high: 4, why: short}
"""


class Runaway(BaseException):
    """A search that would not end (not an `Exception`: the search records those as failed trials and goes on)."""


MAX_TRIALS = 12
"""More trials than any of these searches runs: a search past it would not stop on its budget."""


class _Clock:
    """`sro.search`'s `time` with its own `sleep` (the loop's wait for other workers' trials); the module
    `time` itself, which the heartbeat threads and the storage's retries use, is left as it is."""

    def __init__(self, sleep):
        self.sleep, self.monotonic, self.time = sleep, time.monotonic, time.time


def _no_wait(seconds: float) -> None:
    raise Runaway(f"the search waited ({seconds}s) for other workers' trials where none runs")


class Search:
    """A micro project with its space written, whose search prepares and scores nothing: the base model
    scores 0.3 in no time, its held-out scoring said to take `score_s` seconds; `run_trial` records each
    recipe it is given and returns a complete trial costing `trial_s` seconds. It never waits (the tests of
    the wait give their own `sleep`) and runs at most `MAX_TRIALS` trials."""

    def __init__(self, tmp_path: Path, monkeypatch, name: str, score_s: float = 0.5, trial_s: float = 2.0,
                 step_s: float | None = None):
        self.runs = tmp_path / "runs"
        (self.runs / name).mkdir(parents=True)
        (self.runs / name / "space.yaml").write_text(SPACE)
        path = tmp_path / f"{name}.yaml"
        path.write_text(PROJECT.format(name=name))
        self.project = load_project(path)
        self.run_dir = self.runs / name
        self.ran: list[Recipe] = []
        self.out = io.StringIO()

        def prepare(cls, project, cache_dir, log=print, pretrain_progress=None):
            return cls(project, str(tmp_path / "no-model"), {}, {}, set(), cache_dir=Path(cache_dir))

        def score_base(ctx, warn=print):
            ctx.score_s = score_s
            return {"arithmetic/add": 0.3}

        def run_trial(recipe, ctx, max_seconds=None, on_step=None, on_checkpoint=None):
            self.ran.append(recipe)
            if len(self.ran) > MAX_TRIALS:
                raise Runaway(f"{len(self.ran)} trials: the search does not stop on its budget")
            steps = int(recipe.get("steps"))
            curve = [{"reward": 0.1, **({"wall_s": step_s * (i + 1)} if step_s is not None else {})}
                     for i in range(steps)]
            return TrialOutcome({"arithmetic/add": 0.4}, {"wall_s": trial_s, "train_s": trial_s, "tokens": 64.0},
                                curve, {})

        monkeypatch.setattr(SearchContext, "prepare", classmethod(prepare))
        monkeypatch.setattr(SearchContext, "score_base", score_base)
        monkeypatch.setattr(search_mod, "run_trial", run_trial)
        monkeypatch.setattr(search_mod, "time", _Clock(_no_wait))

    def ledger(self) -> Ledger:
        """Another worker's view of the study (its own `Ledger` on the same storage)."""
        return Ledger(self.project, self.run_dir)

    def recipes(self, n: int) -> list[Recipe]:
        space = RecipeSpace.from_yaml(SPACE)
        return [Recipe(v, dict(space.fixed)) for v in space.sobol(n, seed=7)]

    def __call__(self, budget: str) -> search_mod.SearchSummary:
        return search_mod.run_search(self.project, Budget.parse(budget), self.runs, "random",
                                     Console(file=self.out, width=400), pruning=False)

    @property
    def printed(self) -> str:
        return self.out.getvalue()


# --- 1. no trial starts where the wall time left could not even hold its held-out scoring --------------

def test_no_trial_starts_when_the_wall_time_left_is_shorter_than_the_held_out_scoring(tmp_path, monkeypatch):
    """The base model's scoring took 10 000 s and the budget is an hour: a trial started now could not even
    score its model, so none starts, and the search says why."""
    search = Search(tmp_path, monkeypatch, "short", score_s=1e4)
    summary = search("1h")
    assert search.ran == [] and summary.trials == []
    assert "less than a trial's held-out scoring (10000s)" in summary.stop_reason
    assert summary.stop_reason.endswith("of the wall-clock budget left, less than a trial's held-out scoring "
                                        "(10000s)")
    assert "less than a trial's held-out scoring" in search.printed


def test_too_little_time_for_the_scoring_does_not_wait_for_other_workers_running_trials(tmp_path, monkeypatch):
    """Another worker's trial is running when the time left is shorter than a trial's scoring: this worker stops
    at once (until stop 42 it waited for that trial, though one whose worker dies leaves no time to run it
    again)."""
    search = Search(tmp_path, monkeypatch, "short-other", score_s=1e4)
    (recipe,) = search.recipes(1)
    search.ledger().start(recipe, RecipeSpace.from_yaml(SPACE))
    monkeypatch.setattr(search_mod, "time", _Clock(_no_wait))
    summary = search("1h")
    assert search.ran == [] and "less than a trial's held-out scoring" in summary.stop_reason
    assert "waiting for" not in search.printed


def test_a_trial_starts_while_the_wall_time_left_holds_its_scoring_and_the_trial_budget_says_why_it_ends(
        tmp_path, monkeypatch):
    """Scoring takes 1000 s, an hour is left: the trial starts. It costs 3000 s, so afterwards less than
    the scoring is left, but the trial budget ran out first: that is the reason given, not the wall time."""
    search = Search(tmp_path, monkeypatch, "room", score_s=1000.0, trial_s=3000.0)
    summary = search("1h,1trials")
    assert len(search.ran) == 1 and [t.state for t in summary.trials] == ["complete"]
    assert summary.stop_reason == "1/1 trials done"


@pytest.mark.parametrize("step_s, trials", [(400.0, 2), (100.0, 3)])
def test_no_recipe_starts_that_the_wall_time_left_would_stop_before_half_its_training(tmp_path, monkeypatch,
                                                                                      step_s, trials):
    """Each trial costs 1500 s of an hour and trains 3 or 4 steps of `step_s` seconds; scoring takes 100 s.
    After two trials about 600 s are left: at 400 s a step a third recipe would train 1 of its steps, so the
    search ends and says why (until stop 43 it started it, and recorded it as stopped); at 100 s a step half
    its training fits, so it starts (and the budget then ends the search)."""
    search = Search(tmp_path, monkeypatch, f"pace-{trials}", score_s=100.0, trial_s=1500.0, step_s=step_s)
    summary = search("1h")
    assert len(search.ran) == trials and [t.state for t in summary.trials] == ["complete"] * trials
    if trials == 2:
        assert "of the wall-clock budget left: the next recipe's" in summary.stop_reason
        assert "(~400.0s each at this study's pace)" in summary.stop_reason
        assert summary.stop_reason.endswith("would stop before 50% of its training")
        assert "would stop before 50% of its training" in search.printed
    else:
        assert "would stop before" not in summary.stop_reason


def test_without_a_wall_clock_limit_the_held_out_scoring_reserves_nothing(tmp_path, monkeypatch):
    """A trial budget alone: however long the scoring, there is no wall time to keep for it."""
    search = Search(tmp_path, monkeypatch, "count", score_s=1e4)
    summary = search("2trials")
    assert len(search.ran) == 2 and [t.state for t in summary.trials] == ["complete"] * 2
    assert summary.stop_reason == "2/2 trials done"


# --- 2. the budget full only with other workers' running trials: wait for them ------------------------

@pytest.mark.parametrize("ending", ["finishes", "dies"])
def test_the_search_waits_for_another_workers_running_trial_that_fills_the_budget(tmp_path, monkeypatch, ending):
    """Another worker's trial is running and it alone fills the trial budget: this worker waits for it
    (it may die, and must then be run again) instead of stopping. When it finishes the budget is spent
    and the search stops; when its worker dies, this worker runs its recipe again."""
    search = Search(tmp_path, monkeypatch, f"wait-{ending}")
    other = search.ledger()
    (recipe,) = search.recipes(1)
    theirs = other.start(recipe, RecipeSpace.from_yaml(SPACE))
    naps: list[float] = []

    def sleep(seconds: float) -> None:  # the other worker's trial ends while this one waits
        naps.append(seconds)
        assert len(naps) == 1, "waited on after the other worker's trial ended"
        if ending == "finishes":
            other.finish(theirs, {"arithmetic/add": 0.5}, {"wall_s": 3.0}, [{"reward": 0.2}])
        else:
            other.release(theirs, "its worker stopped during the trial (killed)")

    monkeypatch.setattr(search_mod, "time", _Clock(sleep))
    summary = search("1trials")
    assert "waiting for 1 trial(s) running in other workers to finish" in search.printed
    assert len(naps) == 1 and 0 < naps[0] <= 5.0
    assert summary.stop_reason == "1/1 trials done"
    if ending == "finishes":
        assert search.ran == [] and [t.state for t in summary.trials] == ["complete"]
    else:
        assert [r.key for r in search.ran] == [recipe.key]
        assert [t.state for t in summary.trials] == ["interrupted", "complete"]


def test_the_search_does_not_wait_where_its_finished_trials_alone_fill_the_budget(tmp_path, monkeypatch):
    """The study's finished trials fill the trial budget by themselves (another worker finished one while
    this worker scored the base model) and yet another runs: nothing it can do changes the outcome, so
    the search stops at once rather than waiting for it."""
    search = Search(tmp_path, monkeypatch, "full")
    other = search.ledger()
    first, second = search.recipes(2)
    space = RecipeSpace.from_yaml(SPACE)
    claimed = []
    score = SearchContext.score_base

    def score_base(ctx, warn=print):  # meanwhile the other worker finishes a trial and starts the next
        done = other.start(first, space)
        other.finish(done, {"arithmetic/add": 0.5}, {"wall_s": 3.0}, [{"reward": 0.2}])
        claimed.append(other.start(second, space))
        return score(ctx, warn)

    naps: list[float] = []

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        other.release(claimed[0], "test over")  # lets a search that waits go on

    monkeypatch.setattr(SearchContext, "score_base", score_base)
    monkeypatch.setattr(search_mod, "time", _Clock(sleep))
    try:
        summary = search("1trials")
    finally:
        other.release(claimed[0], "test over")
    assert naps == [] and "waiting for" not in search.printed
    assert summary.stop_reason == "1/1 trials done and 1 running in other workers"
    assert search.ran == []


# --- 3. a claim withdrawn (another worker took the recipe first): propose again ----------------------

def test_a_withdrawn_claim_is_said_and_the_search_proposes_again(tmp_path, monkeypatch):
    """The first claim is withdrawn (another worker claimed the same recipe a moment before): the search
    says so and proposes again, rather than ending or training the withdrawn trial."""
    search = Search(tmp_path, monkeypatch, "rival")
    claim = Ledger.start
    tries: list[Recipe] = []

    def rival_first(self, recipe, space, max_trials=None):
        tries.append(recipe)
        trial = claim(self, recipe, space, max_trials)
        if len(tries) == 1:
            self.withdraw(trial, "trial 7 already has this recipe (another worker)")
            return None
        return trial

    monkeypatch.setattr(Ledger, "start", rival_first)
    summary = search("2trials")
    assert (f"claim of recipe {tries[0].key} withdrawn: trial 7 already has this recipe (another worker)"
            in search.printed)
    assert len(tries) == 3 and len(search.ran) == 2 and [r.key for r in search.ran] == [r.key for r in tries[1:]]
    assert [t.state for t in summary.trials] == ["complete"] * 2
    assert summary.stop_reason == "2/2 trials done"


# --- 4. proposing and claiming spent the rest of the budget: the claim is withdrawn -----------------

def test_a_claim_made_after_proposing_spent_the_budget_is_withdrawn_and_the_search_ends(tmp_path, monkeypatch):
    """Proposing (and claiming) took the budget's last hour: the trial is not trained but withdrawn in the
    storage, saying why, so no running trial is left behind, and the search ends on the budget."""
    search = Search(tmp_path, monkeypatch, "late")
    claim = Ledger.start

    def slow_claim(self, recipe, space, max_trials=None):
        trial = claim(self, recipe, space, max_trials)
        self.add_worker_time(3600.0)
        return trial

    monkeypatch.setattr(Ledger, "start", slow_claim)
    summary = search("1h")
    assert search.ran == [] and summary.trials == []
    # the reason is read without the withdrawn claim (it said "0s of it by 1 trial(s) still training") and printed
    assert "wall time spent" in summary.stop_reason and "still training" not in summary.stop_reason
    assert f"spent while proposing ({summary.stop_reason})" in search.printed
    (trial,) = search.ledger().study.get_trials(deepcopy=False)
    assert trial.state.name == "FAIL" and trial.user_attrs["withdrawn"] is True
    assert trial.user_attrs["message"] == "withdrawn: the budget ran out while proposing"
    assert search.ledger().records() == [] and search.ledger().spent().running == 0


def test_a_ctrl_c_between_the_claim_and_the_training_releases_the_claim(tmp_path, monkeypatch):
    """A Ctrl-C after the claim, before the training (here while the worker's time is recorded): the claim
    ends interrupted and its heartbeat stops, so a Python session that catches the interrupt holds no running
    trial (one did, beating, while the process lived) and the next search runs the recipe first."""
    search = Search(tmp_path, monkeypatch, "ctrl-c")
    claim, record = Ledger.start, Ledger.add_worker_time
    claimed: list[Ledger] = []

    def start(self, recipe, space, max_trials=None):
        claimed.append(self)
        return claim(self, recipe, space, max_trials)

    def add_worker_time(self, seconds):
        if claimed:
            raise KeyboardInterrupt()
        record(self, seconds)

    monkeypatch.setattr(Ledger, "start", start)
    monkeypatch.setattr(Ledger, "add_worker_time", add_worker_time)
    with pytest.raises(KeyboardInterrupt):
        search("2trials")
    assert search.ran == [] and not claimed[0]._beats
    (rec,) = search.ledger().records()
    assert rec.state == "interrupted" and "before the trial started (KeyboardInterrupt" in rec.message
    monkeypatch.setattr(Ledger, "add_worker_time", record)
    claimed.clear()
    summary = search("2trials")
    assert search.ran[0].key == rec.recipe.key and [t.state for t in summary.trials] == ["interrupted", "complete",
                                                                                           "complete"]


# ---- the loop's user-visible paths no test ran (a coverage review, stop 54) -----------------------------------

V2 = SPACE.replace("version: 1", "version: 2").replace("low: 0.001, high: 0.003", "low: 0.0029, high: 0.003")


def _cli(search: Search, name: str, *args: str):
    """`sro search` in this process over the harness's project (its SIGTERM handler left alone)."""
    return CliRunner().invoke(cli.app, ["search", str(search.runs.parent / f"{name}.yaml"), "--runs",
                                        str(search.runs), "--optimizer", "random", "--no-pruning", *args])


# --- 1. search.py:683-689: a mid-search redesign is published and the next trials are drawn from it --------

def test_a_redesign_mid_search_is_published_and_the_next_recipe_comes_from_it(tmp_path, monkeypatch):
    search = Search(tmp_path, monkeypatch, "redesign")
    new = RecipeSpace.from_yaml(V2)
    calls: list[int] = []

    def maybe_redesign(project, ledger, space, ctx, run_dir, budget, log=print, check=None):
        calls.append(space.version)
        if space.version == 1:
            check(new)
            return new
        return None

    monkeypatch.setattr(search_mod, "maybe_redesign", maybe_redesign)
    summary = search("3trials")
    assert calls == [1, 2, 2]
    assert search.ledger().shared_space().version == 2  # the other workers adopt it
    assert [r.get("lr") >= 0.0029 for r in search.ran] == [False, True, True]  # trials 1 and 2 from v2
    assert [t.state for t in summary.trials] == ["complete"] * 3


# --- 2. search.py:617-621: a recipe whose process kept dying is said to be given up, once ---------------

def test_a_recipe_that_crashed_its_process_three_times_is_said_given_up_and_not_run(tmp_path, monkeypatch):
    search = Search(tmp_path, monkeypatch, "crashy")
    (bad,) = search.recipes(1)
    space = RecipeSpace.from_yaml(SPACE)
    for _ in range(search_mod.MAX_CRASHES):
        search.ledger().start(bad, space)
        with monkeypatch.context() as m:
            m.setattr(ledger_mod, "_alive", lambda pid, started=None: False)  # its worker reads as dead
            search.ledger().recover()
    summary = search("2trials")
    said = " ".join(search.printed.split())
    assert said.count(f"recipe {bad.key} was interrupted 3 times by its process ending") == 1
    assert "it is not run again" in said
    assert bad.key not in [r.key for r in search.ran] and len(search.ran) == 2
    assert [t.state for t in summary.trials] == ["interrupted"] * 3 + ["complete"] * 2


# --- 3. cli.py:173-175: the same error in three trials in a row: one `error:` line, exit 1 (not 2, no traceback)

def test_sro_search_ending_on_a_repeated_failure_exits_1_with_one_line(tmp_path, monkeypatch):
    search = Search(tmp_path, monkeypatch, "envfail")
    monkeypatch.setattr(search_mod, "on_sigterm", lambda: None)

    def broken(recipe, ctx, max_seconds=None, on_step=None, on_checkpoint=None):
        search.ran.append(recipe)
        raise OSError(f"model.safetensors: header is cut short at byte {len(search.ran)}")

    monkeypatch.setattr(search_mod, "run_trial", broken)
    r = _cli(search, "envfail", "--budget", "6trials")
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output
    flat = " ".join(r.output.split())
    assert "error: trials 0, 1, 2 failed in a row with the same error: OSError: model.safetensors" in flat
    assert "Traceback" not in r.output and len(search.ran) == 3


# --- 4. cli.py:177-181: the closing line of `sro search` names the trials that beat the base model ----------

def test_sro_search_ends_naming_the_trials_that_beat_the_base_model(tmp_path, monkeypatch):
    search = Search(tmp_path, monkeypatch, "winners")
    monkeypatch.setattr(search_mod, "on_sigterm", lambda: None)
    scores = iter([0.4, 0.1, 0.5])  # the base model scores 0.3: trials 0 and 2 beat it
    run = search_mod.run_trial

    def mixed(recipe, ctx, **kw):
        out = run(recipe, ctx, **kw)
        out.scores = {"arithmetic/add": next(scores)}
        return out

    monkeypatch.setattr(search_mod, "run_trial", mixed)
    r = _cli(search, "winners", "--budget", "3trials")
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert "2 trial(s) beat the base model on every held-out benchmark: 0, 2" in flat
    assert f"report:{search.run_dir / 'report.html'}" in "".join(r.output.split())  # rich folds a long path


# --- 5. search.py:348-352: a busy storage at a budget check skips that check; the trial goes on ----------

def test_a_busy_storage_at_a_budget_check_skips_it_and_the_next_check_reads_again(caplog):
    reads: list[int] = []

    class Busy:
        def spent(self):
            reads.append(1)
            if len(reads) == 1:
                raise sqlalchemy.exc.OperationalError("SELECT", {}, Exception("database is locked"))
            return Spent(trials=1, wall_s=7200.0)

    check = search_mod._budget_spent(Busy(), Budget.parse("1h"), every=0)
    with caplog.at_level(logging.WARNING, logger="sro.search"):
        assert check() is None  # not raised: it would end the trial as interrupted, to be run again
    assert "budget check skipped, storage busy" in caplog.text
    assert "wall time spent" in check() and len(reads) == 2


# --- 6. search.py:463-474: a trials.json that is not JSON, or lists none, does not refuse a new study -------

@pytest.mark.parametrize("listed, refused", [("{not json", False), ("[]", False), ('[{"number": 0}]', True)])
def test_only_a_trials_json_that_lists_trials_refuses_an_empty_study(tmp_path, monkeypatch, listed, refused):
    search = Search(tmp_path, monkeypatch, "lost")
    (search.run_dir / "trials.json").write_text(listed)
    if refused:
        with pytest.raises(ConfigError, match="the study holds no trial, but .*trials.json lists 1"):
            search("1trials")
    else:
        assert [t.state for t in search("1trials").trials] == ["complete"]


# --- 7. search.py:92-98: another worker published the study's space while this one designed: use theirs -----

def test_a_space_another_worker_published_during_the_design_wins(tmp_path, monkeypatch):
    import sro.designer.design as design_mod

    search = Search(tmp_path, monkeypatch, "race")
    (search.run_dir / "space.yaml").unlink()
    theirs, mine = RecipeSpace.from_yaml(V2), RecipeSpace.from_yaml(SPACE)
    ledger = search.ledger()

    def design_space(project, run_dir, budget, ctx, log=print, version=1):
        Ledger(project, run_dir).publish_space(theirs)  # the other worker, a moment earlier
        return mine, design_mod.write_space(run_dir, mine)

    monkeypatch.setattr(design_mod, "design_space", design_space)
    console = Console(record=True, width=300)
    got = search_mod.load_space(search.project, search.run_dir, console, ctx=object(), ledger=ledger)
    assert got.to_yaml() == theirs.to_yaml() and ledger.shared_space().to_yaml() == theirs.to_yaml()
    assert RecipeSpace.from_yaml((search.run_dir / "space.yaml").read_text()).version == 2
    assert "another worker published the study's space first; using it" in console.export_text()


def test_a_resume_says_it_runs_an_interrupted_trials_recipe_again(tmp_path, monkeypatch):
    """The resume said "none will be repeated" and then trained the interrupted trial's recipe again without a
    word, so the study seemed to hold the same recipe twice (a walkthrough, stop 54)."""
    search = Search(tmp_path, monkeypatch, "again")
    (first,) = search.recipes(1)
    search.ledger().start(first, RecipeSpace.from_yaml(SPACE))
    with monkeypatch.context() as m:
        m.setattr(ledger_mod, "_alive", lambda pid, started=None: False)  # its worker reads as dead
        search.ledger().recover()
    search("1trials")
    said = " ".join(search.printed.split())
    assert "running again the recipe of trial 0 (interrupted: its worker stopped before it finished)" in said
    assert search.ran[0].key == first.key
    done = search("2trials")
    said = " ".join(search.printed.split())
    assert "1 finished trial(s) kept, none will be repeated" in said and "run again first" not in said, said
    assert [t.state for t in done.trials] == ["interrupted", "complete", "complete"]


def test_a_resume_with_the_budget_spent_does_not_promise_to_run_an_interrupted_trial_again(tmp_path, monkeypatch):
    """With the budget spent the resume said "1 interrupted or stopped trial(s) run again first", then "already
    spent", and ran nothing (a review, stop 57)."""
    search = Search(tmp_path, monkeypatch, "spent")
    search("1trials")
    (second,) = [r for r in search.recipes(3) if r.key != search.ran[0].key][:1]
    search.ledger().start(second, RecipeSpace.from_yaml(SPACE))
    with monkeypatch.context() as m:
        m.setattr(ledger_mod, "_alive", lambda pid, started=None: False)
        search.ledger().recover()
    search.out.seek(0)
    search.out.truncate()
    search("1trials")
    said = " ".join(search.printed.split())
    assert "1 finished trial(s) kept" in said and "budget 1trials already spent" in said, said
    assert "run again first" not in said and len(search.ran) == 1, said

