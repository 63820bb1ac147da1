"""Edges of the ledger that mutation testing found untested: the base scores a mended project drops, the
claim of a recipe another worker holds, the adoption of a same-version space edit, and ties with the base model."""

from __future__ import annotations

import shutil

from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from sro.config import ConfigError, load_project
from sro.ledger import Ledger, TrialRecord, beats_base
from sro.recipe import Recipe
from sro.space import RecipeSpace

from micro import MICRO

PROJECT = MICRO  # no test here trains it: no model is built

SPACE = """\
version: {version}
designer: test
fixed: {{algorithm: grpo, max_new_tokens: 4}}
params:
  lr: {{kind: float, low: 0.001, high: 0.003, log: true, why: small}}
  group_size: {{kind: int, low: 4, high: 4, why: fixed}}
  prompts_per_step: {{kind: int, low: 4, high: {high}, why: small}}
  steps: {{kind: int, low: 2, high: 3, why: short}}
"""


def _project(tmp_path: Path, name: str) -> Path:
    """A project file that no test here trains: no model is built, only its study is opened."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(PROJECT.format(name=name))
    return path


def _space(version: int = 1, high: int = 6) -> RecipeSpace:
    return RecipeSpace.from_yaml(SPACE.format(version=version, high=high))


def _recipes(space: RecipeSpace, n: int) -> list[Recipe]:
    return [Recipe(v, dict(space.fixed)) for v in space.sobol(n, seed=0)]


# --- 1. `_check_scored_on`: a study that holds no score takes a mended project, its base scores dropped -----

def test_a_mended_project_of_a_study_without_scores_drops_the_stored_base_scores(tmp_path):
    """The base model's scores were measured on the old benchmarks: a study that takes the mended project (its
    benchmark size changed, no trial scored) must drop them, so the search scores the base model again; the
    same project keeps them; the study's `scored_on` is the mended one's after (reopened without a word)."""
    path, run_dir = _project(tmp_path, "mend"), tmp_path / "mend"
    ledger = Ledger(load_project(path), run_dir)
    ledger.put("base_scores", {"arithmetic/add": 0.25})
    space = _space()
    t = ledger.start(_recipes(space, 1)[0], space)
    ledger.fail(t, "CUDA out of memory", {"wall_s": 1.0}, [])  # failed, no score: nothing to compare
    same = Ledger(load_project(path), run_dir)
    assert not same.changed and same.get("base_scores") == {"arithmetic/add": 0.25}  # unchanged: kept
    path.write_text(PROJECT.format(name="mend").replace("size: 24", "size: 12"))
    mended = Ledger(load_project(path), run_dir)
    assert mended.changed and "size: 24 → 12" in mended.changed[0], mended.changed
    assert mended.get("base_scores") is None  # scored on 24 items, not the 12 now asked for
    again = Ledger(load_project(path), run_dir)
    assert not again.changed and again.get("base_scores") is None


def test_a_study_with_a_score_keeps_its_base_scores_and_refuses_the_change(tmp_path):
    """The other side of the rule: once a trial holds a score the change is refused and nothing is reset."""
    path, run_dir = _project(tmp_path, "kept"), tmp_path / "kept"
    ledger = Ledger(load_project(path), run_dir)
    ledger.put("base_scores", {"arithmetic/add": 0.25})
    space = _space()
    t = ledger.start(_recipes(space, 1)[0], space)
    ledger.finish(t, {"arithmetic/add": 0.5}, {"wall_s": 1.0}, [])
    path.write_text(PROJECT.format(name="kept").replace("size: 24", "size: 12"))
    with pytest.raises(ConfigError, match="scored with another project"):
        Ledger(load_project(path), run_dir)
    path.write_text(PROJECT.format(name="kept"))
    assert Ledger(load_project(path), run_dir).get("base_scores") == {"arithmetic/add": 0.25}


def test_a_local_base_model_whose_weights_changed_is_refused_by_a_study_with_a_score(tmp_path):
    """A local base model was kept by its folder's name alone: `sro train --out model --force` over the project's
    base model went unnoticed, the resumed search printed the old base scores and compared its new trials with
    the old ones (a review, stop 57). Its weights' fingerprint is kept too; a copy elsewhere has the same one."""
    from sro.ledger import SAMPLE_BYTES, SAMPLES, scored_on, weights_fingerprint

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "tokenizer.json").write_text("{}")
    weights = bytes(range(256)) * (SAMPLES * SAMPLE_BYTES // 256 * 3)  # large enough to be sampled
    (model / "model.safetensors").write_bytes(weights)
    path, run_dir = _project(tmp_path, "local"), tmp_path / "local"
    path.write_text(path.read_text().replace("base_model: tiny", "base_model: ./model"))
    assert "base_model: ./model" in path.read_text()
    ledger = Ledger(load_project(path), run_dir)
    space = _space()
    t = ledger.start(_recipes(space, 1)[0], space)
    ledger.finish(t, {"arithmetic/add": 0.5}, {"wall_s": 1.0}, [])
    copy = tmp_path / "elsewhere" / "model"
    shutil.copytree(model, copy)
    assert weights_fingerprint(copy) == weights_fingerprint(model)
    changed = bytearray(weights)  # one byte under the 32nd sample (training changes them all; a byte between
    changed[31 * (len(weights) - SAMPLE_BYTES) // (SAMPLES - 1) + 5] ^= 1  # two samples is not seen)
    (model / "model.safetensors").write_bytes(bytes(changed))
    with pytest.raises(ConfigError, match=r"scored with another project: base_weights: \"[0-9a-f]{16}\" → "
                                          r"\"[0-9a-f]{16}\""):
        Ledger(load_project(path), run_dir)
    (model / "model.safetensors").write_bytes(weights)
    assert Ledger(load_project(path), run_dir).records()[0].scores == {"arithmetic/add": 0.5}
    # a study started before the fingerprint was kept: the name alone, as then
    old = Ledger(load_project(path), run_dir)
    old.put("scored_on", {k: v for k, v in scored_on(load_project(path)).items() if k != "base_weights"})
    (model / "model.safetensors").write_bytes(bytes(changed))
    assert Ledger(load_project(path), run_dir).records()[0].state == "complete"


def test_a_plugin_edited_since_the_scored_trials_is_named_once(tmp_path):
    """A plugin's code was no part of what a study kept: a resume after editing the plugin (its environment's
    rules, a reward) kept the old trials without a word (a review, stop 57). The study keeps each plugin's digest
    and names a plugin whose code changed since a trial was scored, once; it refuses nothing."""
    plugin = tmp_path / "myenv.py"
    plugin.write_text("RULES = 1\n")
    path, run_dir = _project(tmp_path, "plug"), tmp_path / "plug"
    path.write_text(path.read_text() + "plugins: [myenv.py]\n")
    ledger = Ledger(load_project(path), run_dir)
    assert ledger.get("plugin_code") == {"myenv.py": __import__("hashlib").sha256(b"RULES = 1\n").hexdigest()[:16]}
    plugin.write_text("RULES = 2\n")  # no trial scored yet: taken without a word
    assert Ledger(load_project(path), run_dir).plugins_changed == []
    space = _space()
    t = ledger.start(_recipes(space, 1)[0], space)
    ledger.finish(t, {"arithmetic/add": 0.5}, {"wall_s": 1.0}, [])
    assert Ledger(load_project(path), run_dir).plugins_changed == []  # the code the trial ran with
    plugin.write_text("RULES = 3\n")
    assert Ledger(load_project(path), run_dir).plugins_changed == ["myenv.py"]
    again = Ledger(load_project(path), run_dir)
    assert again.plugins_changed == [] and again.records()[0].scores == {"arithmetic/add": 0.5}


# --- 2. `Ledger.start`: a rival claim of the same recipe, and rivals in the trial budget ----------------------

def test_a_claim_of_a_recipe_another_worker_is_training_is_withdrawn(tmp_path):
    """Two workers on one storage: the second claim of a recipe the first is still training is withdrawn
    (not trained twice), and the withdrawn claim is no record; another recipe is claimed as usual."""
    project, run_dir = load_project(_project(tmp_path, "rival")), tmp_path / "rival"
    a, b = Ledger(project, run_dir), Ledger(project, run_dir)
    space = _space()
    first, second = _recipes(space, 2)
    mine = a.start(first, space)
    assert mine is not None
    assert b.start(first, space) is None
    assert b.withdrawal == "trial 0 already has this recipe (another worker)"
    assert b.start(first, space, max_trials=5) is None  # the rival is named first, whatever the budget
    assert b.withdrawal == "trial 0 already has this recipe (another worker)"
    theirs = b.start(second, space)
    assert theirs is not None and theirs.number == 3  # numbers 1 and 2 were the withdrawn claims
    assert [(r.number, r.state) for r in a.records()] == [(0, "running"), (3, "running")]
    a.finish(mine, {"arithmetic/add": 0.5}, {"wall_s": 1.0}, [])
    b.fail(theirs, "diverged", {"wall_s": 1.0}, [])
    for recipe, rival in ((first, 0), (second, 3)):  # finished (complete or failed): never run again
        assert a.start(recipe, space) is None and a.withdrawal == f"trial {rival} already has this recipe (another worker)"


@pytest.mark.parametrize("state, retried", [("interrupted", True), ("stopped", True), ("pruned", False),
                                            ("collapsed", False)])
def test_only_an_interrupted_or_budget_stopped_record_may_be_claimed_again(tmp_path, state, retried):
    """An interrupted or budget-stopped record of a recipe is what a retry reruns, not a rival claim; a pruned
    or collapsed one ended for good."""
    project, run_dir = load_project(_project(tmp_path, "retry")), tmp_path / "retry"
    ledger = Ledger(project, run_dir)
    space = _space()
    recipe = _recipes(space, 1)[0]
    t = ledger.start(recipe, space)
    if state == "interrupted":
        ledger.interrupt(t, [], {"wall_s": 1.0})
    else:
        ledger.end_early(t, state, {"arithmetic/add": 0.1}, {"wall_s": 1.0}, [])
    assert ledger.records()[0].state == state
    again = ledger.start(recipe, space)
    if retried:
        assert again is not None, ledger.withdrawal
        ledger.finish(again, {"arithmetic/add": 0.5}, {"wall_s": 1.0}, [])
    else:
        assert again is None and ledger.withdrawal == "trial 0 already has this recipe (another worker)"


def test_the_trial_budget_counts_other_workers_running_trials_but_not_withdrawn_claims(tmp_path):
    project, run_dir = load_project(_project(tmp_path, "cap")), tmp_path / "cap"
    a, b = Ledger(project, run_dir), Ledger(project, run_dir)
    space = _space()
    recipes = _recipes(space, 4)
    running = a.start(recipes[0], space, max_trials=2)  # still training in worker a
    assert b.start(recipes[0], space, max_trials=2) is None  # a withdrawn claim: takes no place in the budget
    second = b.start(recipes[1], space, max_trials=2)
    assert second is not None, b.withdrawal
    assert b.start(recipes[2], space, max_trials=2) is None
    assert b.withdrawal == "the trial budget (2) is taken by earlier trials (other workers')"
    a.interrupt(running, [], {"wall_s": 1.0})  # an interrupted trial is no place either: a third may start
    third = b.start(recipes[3], space, max_trials=2)
    assert third is not None, b.withdrawal
    for t in (second, third):
        b.finish(t, {"arithmetic/add": 0.5}, {"wall_s": 1.0}, [])


# --- 3. the shared space: a same-version edit is adopted, an identical or older one is not ---------------------

def test_a_same_version_edit_in_the_run_folder_wins_over_the_shared_space_and_is_published(tmp_path):
    """`load_space`: the study's space replaces the run folder's only when it is a later version; a person's
    edit of space.yaml that kept `version: 1` is used and published (the other workers adopt it)."""
    from sro.search import load_space

    project, run_dir = load_project(_project(tmp_path, "edit")), tmp_path / "edit"
    ledger = Ledger(project, run_dir)
    ledger.publish_space(_space(1, 6))
    (run_dir / "space.yaml").write_text(SPACE.format(version=1, high=8))
    edited = _space(1, 8)
    assert load_space(project, run_dir, Console(record=True), ledger=ledger).to_yaml() == edited.to_yaml()
    assert ledger.shared_space().to_yaml() == edited.to_yaml()
    assert RecipeSpace.from_yaml((run_dir / "space.yaml").read_text()).to_yaml() == edited.to_yaml()


def test_an_unedited_copy_of_the_space_does_not_undo_another_workers_same_version_edit(tmp_path):
    """A restarted worker whose space.yaml is SRO's own copy (equal to its space.v1.yaml) of the space before
    another worker published a same-version edit takes the study's edit: it neither uses nor publishes the stale
    copy (until stop 42 it did both, and the running workers adopted the old space back)."""
    from sro.designer.design import write_space
    from sro.search import load_space

    project, run_dir = load_project(_project(tmp_path, "stale")), tmp_path / "stale"
    ledger = Ledger(project, run_dir)
    write_space(run_dir, _space(1, 6), log=lambda _: None)  # this worker's copy, as SRO wrote it
    ledger.publish_space(_space(1, 8))  # another worker's hand edit that kept version 1
    edited = _space(1, 8).to_yaml()
    assert load_space(project, run_dir, Console(record=True), ledger=ledger).to_yaml() == edited
    assert ledger.shared_space().to_yaml() == edited
    assert RecipeSpace.from_yaml((run_dir / "space.yaml").read_text()).to_yaml() == edited
    assert not list(run_dir.glob("space.edited-*.yaml"))  # SRO's own copy is no edit to keep aside


def test_a_search_adopts_a_same_version_edit_of_the_shared_space_only(tmp_path, monkeypatch):
    """After each trial the search adopts the study's space when another worker published one of the same or a
    later version with other contents: a same-version edit is adopted (once: the same space published again is
    no new space), an earlier version is not. Training, the base model and the report are faked."""
    import sro.executor
    import sro.report
    import sro.search
    from sro.budget import Budget

    project = load_project(_project(tmp_path, "adopt"))
    runs = tmp_path / "runs"
    run_dir = runs / "adopt"
    run_dir.mkdir(parents=True)
    (run_dir / "space.yaml").write_text(SPACE.format(version=2, high=6))
    edit, stale = _space(2, 8), _space(1, 5)
    ctx = SimpleNamespace(base_path="tiny", overlap={}, score_s=0.0,
                          score_base=lambda warn=None: {"arithmetic/add": 0.1})
    monkeypatch.setattr(sro.executor.SearchContext, "prepare", classmethod(lambda cls, *a, **kw: ctx))
    monkeypatch.setattr(sro.report, "write_report", lambda run_dir: None)
    published = {0: edit, 2: stale}  # by another worker during trials 0 and 2
    trained: list[Recipe] = []

    def train(trial, recipe, ctx, ledger, *rest) -> None:
        trained.append(recipe)
        ledger.finish(trial, {"arithmetic/add": 0.5}, {"wall_s": 1.0}, [])
        if trial.number in published:
            ledger.publish_space(published[trial.number])

    monkeypatch.setattr(sro.search, "_train_and_record", train)
    console = Console(record=True, width=300)
    summary = sro.search.run_search(project, Budget.parse("3trials"), runs, optimizer="random", console=console)
    out = console.export_text()
    assert [r.state for r in summary.trials] == ["complete"] * 3
    assert out.count("adopted the study's search space") == 1, out
    assert "adopted the study's search space v2 (from another worker)" in out
    assert RecipeSpace.from_yaml((run_dir / "space.yaml").read_text()).to_yaml() == edit.to_yaml()
    assert trained[1].values["prompts_per_step"] <= 8 and trained[2].values["prompts_per_step"] <= 8


# --- 4. `beats_base`: a tie with the base model is no win ------------------------------------------------------

def test_a_score_equal_to_the_base_models_does_not_beat_it():
    """Better means strictly above the base model (strictly below for a lower-is-better key): equal is no win."""
    base = {"a/win": 0.5, "a/ece": 0.2}
    assert beats_base({"a/win": 0.5000001, "a/ece": 0.1999999}, base, lower={"a/ece"})
    assert not beats_base({"a/win": 0.5, "a/ece": 0.1}, base, lower={"a/ece"})  # tie on the higher-is-better key
    assert not beats_base({"a/win": 0.6, "a/ece": 0.2}, base, lower={"a/ece"})  # tie on the lower-is-better key
    assert not beats_base(dict(base), base, lower={"a/ece"})
    assert not beats_base({"a/win": 0.5}, {"a/win": 0.5}) and beats_base({"a/win": 0.51}, {"a/win": 0.5})
    assert not beats_base({"a/ece": 0.2}, {"a/ece": 0.2}, lower={"a/ece"})
    assert beats_base({"a/ece": 0.19}, {"a/ece": 0.2}, lower={"a/ece"})
    tie = TrialRecord(0, "complete", Recipe({"lr": 1e-3}), scores={"a/win": 0.5, "a/ece": 0.1})
    assert not tie.beats(base, lower={"a/ece"})
    assert TrialRecord(1, "complete", Recipe({"lr": 1e-3}), scores={"a/win": 0.6, "a/ece": 0.1}).beats(
        base, lower={"a/ece"})


def test_a_study_that_cannot_be_written_says_so_at_once(tmp_path, monkeypatch):
    """A run folder on a read-only mount: the search retried for 7 s, then said to check `storage:` (the server,
    the database, the URL) for a project that sets none (a review, stop 58). Root writes through a chmod, so the
    refusal is SQLite's own, raised where the study is created."""
    import sqlite3

    import optuna
    import sqlalchemy

    path, run_dir = _project(tmp_path, "ro"), tmp_path / "ro"
    tries = []

    def readonly(*a, **kw):
        tries.append(1)
        raise sqlalchemy.exc.OperationalError("INSERT", {}, sqlite3.OperationalError("attempt to write a readonly database"))

    monkeypatch.setattr(optuna, "create_study", readonly)
    with pytest.raises(ConfigError, match=r"study\.db: the study cannot be written here \(SQLite: attempt to write a "
                                          r"readonly database\): the file, or its folder, .* is read-only"):
        Ledger(load_project(path), run_dir)
    assert tries == [1]
