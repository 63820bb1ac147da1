"""Trial outcomes in a real (micro) search: a trial whose failure clock fires is recorded as
collapsed with the samples it used, loses no other trial, and an SFT → RL recipe reports its stage."""

from __future__ import annotations

import re

import time
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from sro.budget import Budget
from sro.config import load_project
from sro.search import run_search

SPACE = """\
version: 1
designer: test
fixed: {{algorithm: grpo, max_new_tokens: 4, {fixed}}}
params:
  lr: {{kind: float, low: 0.001, high: 0.003, log: true, why: small}}
  group_size: {{kind: int, low: 4, high: 4, why: fixed}}
  prompts_per_step: {{kind: int, low: 4, high: 6, why: small}}
  steps: {{kind: int, low: 3, high: 4, why: short}}
"""


def _search(micro_project, tmp_path: Path, name: str, fixed: str):
    runs = tmp_path / "runs"
    (runs / name).mkdir(parents=True)
    (runs / name / "space.yaml").write_text(SPACE.format(fixed=fixed))
    project = load_project(micro_project(name))
    return run_search(project, Budget.parse("2trials"), runs, "random", Console(quiet=True))


@pytest.mark.slow
def test_collapsed_trials_are_recorded_with_their_samples(micro_project, tmp_path):
    # a gradient-norm ceiling no update can pass: the failure clock fires on the first step
    summary = _search(micro_project, tmp_path, "collapse", "'collapse.max_grad_norm': 1.0e-12")
    states = [t.state for t in summary.trials]
    assert states == ["collapsed", "collapsed"]
    for t in summary.trials:
        assert "gradient norm exploded" in t.message and t.cost["samples"] > 0
        # stopped at the first step with a gradient (a group without reward spread gives none)
        assert t.curve[-1]["collapsed"] == 1.0 and all(c["grad_norm"] == 0 for c in t.curve[:-1])
    assert summary.stop_reason  # the budget counted them: the search ended normally


@pytest.mark.slow
def test_a_collapse_the_recipe_trains_through_is_scored_and_flagged(micro_project, tmp_path):
    """`stop_on_collapse: false`: the failure clock fires on the first step with a gradient, training goes on
    to its last step, and the trial is scored with the samples at the collapse among its metrics."""
    import sro.executor as ex
    from sro.recipe import Recipe

    ctx = ex.SearchContext.prepare(load_project(micro_project("through")), tmp_path / "cache", log=lambda s: None)
    recipe = Recipe({"lr": 3e-3, "steps": 8, "group_size": 4, "prompts_per_step": 6},
                    {"algorithm": "grpo", "max_new_tokens": 4, "collapse.max_grad_norm": 1.0e-12,
                     "stop_on_collapse": False, "seed": 0})
    out = ex.run_trial(recipe, ctx)
    first = next(c["samples"] for c in out.curve if c.get("collapsed"))
    assert len(out.curve) == 8 and out.metrics["collapsed_at_samples"] == first > 0
    assert set(out.scores) == {"arithmetic/add"}


def test_a_self_distilled_trial_measures_its_generalization_gap(micro_project, tmp_path, monkeypatch):
    """`distill.weight` > 0: the trial records each domain's score on its training stream and the gap, that
    score less the domain's mean held-out score (positive when training items score higher); without
    self-distillation neither."""
    import sro.executor as ex
    from sro.recipe import Recipe

    ctx = ex.SearchContext.prepare(load_project(micro_project("gap")), tmp_path / "cache", log=lambda s: None)
    monkeypatch.setattr(ctx, "score_in_distribution", lambda model, tok: {"arithmetic": 0.9})
    values = {"lr": 1e-3, "steps": 1, "group_size": 4, "prompts_per_step": 2}
    fixed = {"algorithm": "grpo", "max_new_tokens": 4, "seed": 0}
    out = ex.run_trial(Recipe(values, {**fixed, "distill.weight": 0.5}), ctx)
    assert out.metrics["train_score/arithmetic"] == 0.9
    assert out.metrics["gap/arithmetic"] == round(0.9 - out.scores["arithmetic/add"], 4) > 0
    plain = ex.run_trial(Recipe(values, fixed), ctx)
    assert not any(k.startswith(("gap/", "train_score/")) for k in plain.metrics)


def test_a_step_that_failed_on_non_finite_values_is_a_collapse_not_a_crash(micro_project, tmp_path, monkeypatch):
    """The trainer reports a step that failed on NaN/inf with no reward (`trainers/grpo.py`); the
    search's progress callback read `m['reward']`, so before stop 20 the search stopped with a
    KeyError, marked the trial interrupted and hit the same error on every resume."""
    import sro.search as search_mod
    from sro.executor import TrialCollapsed

    def nan_step(recipe, ctx, max_seconds=None, on_step=None, on_checkpoint=None):
        on_step(1, {"step": 1, "collapsed": 1.0, "samples": 16.0})
        raise TrialCollapsed("the step failed on non-finite values: probability tensor contains nan",
                             {"wall_s": 0.1, "samples": 16.0}, [{"step": 1, "collapsed": 1.0, "samples": 16.0}])

    monkeypatch.setattr(search_mod, "run_trial", nan_step)
    summary = _search(micro_project, tmp_path, "nan", "seed: 1")
    assert [t.state for t in summary.trials] == ["collapsed", "collapsed"]
    assert "non-finite values" in summary.trials[0].message


def test_an_error_of_the_recipe_fails_it_and_a_storage_error_interrupts_it(micro_project, tmp_path, monkeypatch):
    """An exception of the training itself (here the MemoryError of a batch too large for the machine)
    is the recipe's failure: recorded as failed with its message and never retried. Before stop 23 any
    exception other than ValueError / RuntimeError left the trial interrupted, so every resume retried
    the same recipe first and stopped the same way. A storage error is not the recipe's: the trial is
    interrupted (run again) and the search stops."""
    import sqlalchemy.exc

    import sro.search as search_mod

    def too_big(recipe, ctx, max_seconds=None, on_step=None, on_checkpoint=None):
        raise MemoryError("cannot allocate 4096 x 32 rollouts")

    monkeypatch.setattr(search_mod, "run_trial", too_big)
    summary = _search(micro_project, tmp_path, "oom", "seed: 1")
    assert [t.state for t in summary.trials] == ["failed", "failed"] and summary.stop_reason
    assert "MemoryError: cannot allocate" in summary.trials[0].message
    space = search_mod._written_space(tmp_path / "runs" / "oom")
    assert search_mod._retry(summary.trials, space) is None

    def storage_away(recipe, ctx, max_seconds=None, on_step=None, on_checkpoint=None):
        raise sqlalchemy.exc.OperationalError("SELECT", {}, Exception("server closed the connection"))

    monkeypatch.setattr(search_mod, "run_trial", storage_away)
    with pytest.raises(sqlalchemy.exc.OperationalError):
        _search(micro_project, tmp_path, "away", "seed: 2")
    from sro.ledger import Ledger

    [rec] = Ledger(load_project(micro_project("away")), tmp_path / "runs" / "away").records()
    assert rec.state == "interrupted" and "OperationalError" in rec.message


@pytest.mark.slow
def test_sft_then_rl_recipe_reports_its_stage(micro_project, tmp_path):
    summary = _search(micro_project, tmp_path, "sft", "'sft.steps': 3, 'sft.batch_size': 4")
    done = [t for t in summary.trials if t.state == "complete"]
    assert len(done) == 2
    for t in done:
        assert t.metrics["sft_steps"] == 3 and t.metrics["sft_samples"] == 12


@pytest.mark.slow
def test_trial_cut_by_the_wall_clock_budget_is_kept_apart(micro_project, tmp_path, monkeypatch):
    """A trial whose training the wall-clock budget cut short is not a result of its recipe: it is
    recorded as "stopped" with its partial scores, off the front, and the search ends."""
    import sro.search
    from sro.executor import TrialOutcome

    def short_run(recipe, ctx, max_seconds=None, **kw):  # training stopped by max_seconds after 1 step
        assert max_seconds is not None and max_seconds > 0
        return TrialOutcome({"arithmetic/add": 0.5}, {"wall_s": 3600.0}, [{"reward": 0.1, "loss": 0.0}], {},
                            time_limited=True)

    monkeypatch.setattr(sro.search, "run_trial", short_run)
    runs = tmp_path / "runs"
    (runs / "cut").mkdir(parents=True)
    (runs / "cut" / "space.yaml").write_text(SPACE.format(fixed="seed: 0"))
    summary = run_search(load_project(micro_project("cut")), Budget.parse("1h"), runs, "random", Console(quiet=True))
    (t,) = summary.trials
    assert t.state == "stopped" and t.scores == {"arithmetic/add": 0.5}
    assert "stopped by the wall-clock budget at step 1 of" in t.message
    assert not t.beats({"arithmetic/add": 0.0})  # never on the front, however good its partial scores

    # a budget that leaves it no more time than it had (3600 s) does not run it again first: it would stop
    # sooner still (a review, stop 38: run again in a budget's last seconds, it stopped at step 5 of 31)
    def full_run(recipe, ctx, max_seconds=None, **kw):
        return TrialOutcome({"arithmetic/add": 0.6}, {"wall_s": 60.0}, [{"reward": 0.1}] * int(recipe.get("steps")), {})

    monkeypatch.setattr(sro.search, "run_trial", full_run)
    # A stopped trial takes no slot of a trial budget (until stop 53 it did, and so did its rerun)
    summary = run_search(load_project(micro_project("cut")), Budget.parse("2h,2trials"), runs, "random", Console(quiet=True))
    assert [r.state for r in summary.trials] == ["stopped", "complete", "complete"]
    assert t.recipe.key not in {r.recipe.key for r in summary.trials[1:]}
    # a bigger budget runs the stopped recipe again first, to the end this time, as the budget's third trial
    summary = run_search(load_project(micro_project("cut")), Budget.parse("3h,3trials"), runs, "random", Console(quiet=True))
    assert [r.state for r in summary.trials] == ["stopped", "complete", "complete", "complete"]
    assert summary.trials[3].recipe.key == t.recipe.key and summary.trials[3].scores == {"arithmetic/add": 0.6}
    assert summary.stop_reason.startswith("3/3 trials done")


@pytest.mark.slow
def test_a_wall_clock_budget_counts_the_workers_own_time(micro_project, tmp_path, monkeypatch):
    """Trials that fail at once cost almost nothing themselves: the worker's own time (set-up,
    proposing, recording) counts against the wall-clock budget, so the search still ends on time
    (before stop 20 it ran on, hundreds of trials past a 20 s budget)."""
    import time

    import sro.search as search_mod
    from sro.executor import TrialFailed
    from sro.ledger import WORKER_TIME, Ledger

    def refused(recipe, ctx, max_seconds=None, on_step=None, on_checkpoint=None):
        # a recipe the trainer refuses at once (until stop 29 a fixed `algorithm: ppo` did it; the search now
        # refuses such a space before it starts)
        raise TrialFailed(f"recipe {recipe.key} is not a valid trainer config")

    monkeypatch.setattr(search_mod, "run_trial", refused)
    runs = tmp_path / "runs"
    (runs / "fast").mkdir(parents=True)
    (runs / "fast" / "space.yaml").write_text(SPACE.format(fixed="seed: 1"))
    project = load_project(micro_project("fast"))
    t0 = time.monotonic()
    summary = run_search(project, Budget.parse("12s"), runs, "random", Console(quiet=True))
    # spent, or so nearly that a trial could not even score its model (stop 38)
    assert ("wall time spent" in summary.stop_reason or "of the wall-clock budget left, less than a trial's held-out "
            "scoring" in summary.stop_reason) and time.monotonic() - t0 < 60
    assert summary.trials and all(t.state == "failed" for t in summary.trials)
    ledger = Ledger(project, runs / "fast")
    own = [float(v) for k, v in ledger.study.user_attrs.items() if k.startswith(WORKER_TIME)]
    assert len(own) == 1 and own[0] > sum(t.cost["wall_s"] for t in summary.trials)
    # the last claim may be withdrawn once claiming reached the budget: its few milliseconds in training
    # counted then, and are no trial's afterwards
    # (or it stopped with less left than one held-out scoring, which no trial could use; stop 38)
    assert 12 - 0.1 - float(ledger.get("score_s", 0.0)) <= ledger.spent().wall_s < 12 + 5
    ledger.add_worker_time(2.0)  # the same process searching again adds to its total, never resets it
    assert Ledger(project, runs / "fast").spent().wall_s == pytest.approx(ledger.spent().wall_s)
    assert float(ledger.get(next(k for k in ledger.study.user_attrs if k.startswith(WORKER_TIME)))) == \
        pytest.approx(own[0] + 2.0, abs=0.01)


def test_proposing_counts_before_the_trial_it_proposes(micro_project, tmp_path, monkeypatch):
    """A trial's wall-clock limit is what the budget has left once its recipe was proposed: the proposal's
    seconds are counted before training starts (before stop 23 they were counted only at the next loop,
    so each trial could overshoot a wall budget by its own proposal's time)."""
    import sro.search as search_mod
    from sro.executor import TrialFailed
    from sro.ledger import WORKER_TIME, Ledger
    from sro.proposers import SobolProposer

    project = load_project(micro_project("prop"))

    def counted() -> float:  # the worker's own time as the storage has it now
        attrs = Ledger(project, tmp_path / "runs" / "prop").study.user_attrs
        return sum(float(v) for k, v in attrs.items() if k.startswith(WORKER_TIME))

    events: list[tuple[str, float]] = []
    propose = SobolProposer.propose

    def slow_propose(self, history, n):
        events.append(("proposing", counted()))
        time.sleep(1.5)  # an LLM-assisted or cold BoTorch proposal takes seconds
        return propose(self, history, n)

    def fake_trial(recipe, ctx, max_seconds=None, on_step=None, on_checkpoint=None):
        events.append(("training", counted()))
        raise TrialFailed("stops at once")

    monkeypatch.setattr(SobolProposer, "propose", slow_propose)
    monkeypatch.setattr(search_mod, "run_trial", fake_trial)
    runs = tmp_path / "runs"
    (runs / "prop").mkdir(parents=True)
    (runs / "prop" / "space.yaml").write_text(SPACE.format(fixed="seed: 1"))
    run_search(project, Budget.parse("2trials,10m"), runs, "random", Console(quiet=True))
    assert [what for what, _ in events] == ["proposing", "training"] * 2
    for (_, before), (_, at_training) in zip(events[::2], events[1::2]):
        assert at_training - before >= 1.5  # each proposal's seconds counted before its trial trains


@pytest.mark.slow
def test_a_trials_time_limit_leaves_room_for_its_set_up_and_its_scoring(micro_project, tmp_path, monkeypatch):
    """The trainer's own time limit is what is left of the trial's `max_seconds` after loading the model
    and the SFT stage, less the last held-out scoring's seconds, so a trial cut by a wall-clock budget
    ends (scored) near the budget instead of overrunning it by its set-up and scoring."""
    import sro.executor as ex
    from sro.recipe import Recipe

    ctx = ex.SearchContext.prepare(load_project(micro_project("limit")), tmp_path / "cache", log=lambda s: None)
    assert ctx.score_s == 0.0
    ctx.score_base()
    assert ctx.score_s > 0
    ctx.score_s = scoring_s = 500.0  # far longer than the load and SFT: a limit that skipped it could not pass
    limits: list[float | None] = []
    real = ex.GRPOTrainer

    def trainer(model, tok, cfg, mixture):
        limits.append(cfg.max_seconds)
        return real(model, tok, cfg, mixture)

    monkeypatch.setattr(ex, "GRPOTrainer", trainer)
    recipe = Recipe({"lr": 1e-3, "steps": 2, "group_size": 4, "prompts_per_step": 4},
                    {"algorithm": "grpo", "max_new_tokens": 4, "sft.steps": 3, "sft.batch_size": 4})
    t0 = time.monotonic()
    out = ex.run_trial(recipe, ctx, max_seconds=1000.0)
    whole = time.monotonic() - t0
    assert 1000.0 - whole - scoring_s <= limits[0] < 1000.0 - scoring_s  # the load and SFT seconds are gone
    assert len(out.curve) == 2 and out.metrics["sft_steps"] == 3
    assert ex.training_limit(ex.trainer_config(recipe, 0, None), t0, 5.0).max_seconds is None  # no limit, none


@pytest.mark.slow
def test_the_sft_stage_counts_its_tokens_and_stops_at_the_trials_time_limit(micro_project, tmp_path):
    """SFT tokens are training tokens (the trial's cost and the running count a token budget reads), and an
    SFT stage longer than the trial's time limit stops there, the trial cut (until stop 25 neither)."""
    import sro.executor as ex
    from sro.recipe import Recipe

    ctx = ex.SearchContext.prepare(load_project(micro_project("sftcost")), tmp_path / "cache", log=lambda s: None)
    fixed = {"algorithm": "grpo", "max_new_tokens": 4, "sft.batch_size": 4}
    rl = Recipe({"lr": 1e-3, "steps": 2, "group_size": 4, "prompts_per_step": 4}, {**fixed, "sft.steps": 0})
    both = Recipe(rl.values, {**fixed, "sft.steps": 3})
    plain, staged = ex.run_trial(rl, ctx), ex.run_trial(both, ctx)
    sft_tokens = staged.metrics["sft_tokens"]
    assert sft_tokens > 3 * 4 * 2  # three steps of four (question, answer) pairs, prompts included
    assert staged.curve[0]["tokens"] - sft_tokens == plain.curve[0]["tokens"]  # the same rollouts on top
    assert staged.cost["tokens"] == staged.curve[-1]["tokens"] and not staged.time_limited
    # one RL step: the trainer's own limit does not cut it (it takes at least one step), the SFT cut does
    long_sft = Recipe({**rl.values, "steps": 1}, {**fixed, "sft.steps": 500})
    out = ex.run_trial(long_sft, ctx, max_seconds=ctx.score_s + 1.0)  # a second for loading and SFT
    assert out.metrics["sft_cut"] == 1.0 and out.metrics["sft_steps"] < 500 and out.time_limited
    assert len(out.curve) <= 1  # the RL stage had no time left either


@pytest.mark.slow
def test_a_single_objective_project_searches_and_reports(micro_project, tmp_path):
    """One objective (no cost): the hypervolume after each trial is the best score above the reference
    point (BoTorch's box partitioning needs two objectives: the search used to stop with an IndexError
    after its first trial), and the report and `sro show` read it."""
    from typer.testing import CliRunner

    from sro.cli import app

    path = micro_project("single")
    path.write_text(path.read_text().replace("  - cost: min\n", ""))
    runs = tmp_path / "runs"
    (runs / "single").mkdir(parents=True)
    (runs / "single" / "space.yaml").write_text(SPACE.format(fixed="seed: 0"))
    project = load_project(path)
    assert project.objective_directions() == [("arithmetic/add", "max")]
    summary = run_search(project, Budget.parse("2trials"), runs, "random", Console(quiet=True))
    assert [t.state for t in summary.trials] == ["complete", "complete"]
    from sro.ledger import Ledger

    hv = Ledger(project, runs / "single").get("hypervolume")
    best = max(t.scores["arithmetic/add"] for t in summary.trials)
    assert hv["hypervolume"][-1] == pytest.approx(best - hv["ref_point"][0]) and hv["hypervolume"][-1] > 0
    assert (runs / "single" / "report.html").is_file()
    r = CliRunner().invoke(app, ["show", str(runs / "single")])
    assert r.exit_code == 0 and "front (*)" in r.output


def test_a_jsonl_file_that_is_source_and_benchmark_is_split_not_trained_on(micro_project, tmp_path):
    """A held-out seed only shuffles a file, so a jsonl benchmark's questions are kept out of training:
    the same file as source and benchmark becomes a split (they were all trained on). A benchmark as
    large as the file leaves nothing to train on: a one-line config error, not a traceback mid-trial."""
    import json

    import sro.executor as ex
    from evaluators.sources import normalize
    from sro.config import ConfigError

    qa = tmp_path / "qa.jsonl"
    qa.write_text("\n".join(json.dumps({"question": f"{i} plus {i}?", "answer": str(2 * i)}) for i in range(40)))
    path = micro_project("split")
    text = path.read_text()
    src = text[text.index("    sources:"):text.index("    benchmarks:")]
    bench = text[text.index("      - name: add"):text.index("        size: 24")]  # a jsonl takes no config (stop 58)
    path.write_text(text.replace(src, f"    sources:\n      - jsonl: {qa}\n").replace(
        bench, f"      - name: add\n        jsonl: {qa}\n").replace("        size: 24\n", "        size: 10\n"))
    ctx = ex.SearchContext.prepare(load_project(path), tmp_path / "cache", log=lambda s: None)
    held = ctx.benchmarks["arithmetic/add"].questions()
    from trainers.mixture import Mixture

    drawn = {normalize(it.question) for _, it in Mixture(ctx.tasks, seed=0, exclude_questions=ctx.exclude).sample(200)}
    assert len(held) == 10 and drawn and not drawn & held and len(drawn) == 30
    path.write_text(path.read_text().replace("        size: 10\n", "        size: 40\n"))
    with pytest.raises(ConfigError, match=rf"^{path}: domains.arithmetic.sources\[0\].jsonl: every question of qa.jsonl"):
        ex.SearchContext.prepare(load_project(path), tmp_path / "cache", log=lambda s: None)


def test_a_dataset_file_is_a_source_and_a_benchmark_whose_rows_never_train(micro_project, tmp_path):
    """A `dataset:` parquet file as a domain's source and its benchmark (stop 30): the project loads with the
    path relative to its folder, the benchmark's rows are held out of training as a jsonl benchmark's are,
    and the study's `scored_on` names the file by its contents."""
    import datasets

    import sro.executor as ex
    from evaluators.sources import normalize
    from sro.ledger import scored_on
    from trainers.mixture import Mixture

    datasets.Dataset.from_dict({"q": [f"{i} plus {i}?" for i in range(40)],
                                "a": [str(2 * i) for i in range(40)]}).to_parquet(str(tmp_path / "qa.parquet"))
    path = micro_project("ds")
    data = yaml.safe_load(path.read_text())
    dom = data["domains"]["arithmetic"]
    dom["sources"] = [{"dataset": "qa.parquet", "config": {"question": "q", "answer": "a"}}]
    dom["benchmarks"] = [{"name": "add", "dataset": "qa.parquet", "config": {"question": "q", "answer": "a"}, "size": 10}]
    path.write_text(yaml.safe_dump(data))
    project = load_project(path)
    assert project.domains["arithmetic"].sources[0].spec(project.base_dir).target == str(tmp_path / "qa.parquet")
    ctx = ex.SearchContext.prepare(project, tmp_path / "cache", log=lambda s: None)
    held = ctx.benchmarks["arithmetic/add"].questions()
    drawn = {normalize(it.question) for _, it in Mixture(ctx.tasks, seed=0, exclude_questions=ctx.exclude).sample(200)}
    assert len(held) == 10 and len(drawn) == 30 and not drawn & held
    entry = scored_on(project)["domains"]["arithmetic"]["sources"][0]
    assert entry["dataset"].startswith("qa.parquet (sha256 ")


def test_a_jsonl_source_left_without_questions_names_the_project_file_and_the_benchmark(tmp_path):
    """The split's error named the key path alone ('domains.arithmetic.sources[0] (jsonl:...): ...'), where
    every other config error names the project file first; it names the file, the source's key and the
    benchmark that holds its questions, in `sro search` as in the loader's own errors. It comes before
    the base model is built."""
    import json

    from typer.testing import CliRunner

    import sro.executor as ex
    from sro.cli import app
    from sro.config import ConfigError

    qa = tmp_path / "qa.jsonl"
    qa.write_text("\n".join(json.dumps({"question": f"{i} plus {i}?", "answer": str(2 * i)}) for i in range(12)))
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({
        "name": "p", "base_model": "tiny", "domains": {"arithmetic": {
            "sources": [{"reasoning_gym": "basic_arithmetic"}, {"jsonl": "qa.jsonl"}],
            "benchmarks": [{"name": "add", "reasoning_gym": "basic_arithmetic", "size": 8},
                           {"name": "qa", "jsonl": "qa.jsonl", "size": 12}]}}}))
    needle = (f"{path}: domains.arithmetic.sources[1].jsonl: every question of qa.jsonl is also a question of the "
              "held-out benchmark domains.arithmetic.benchmarks[1] (")
    with pytest.raises(ConfigError) as e:
        ex.SearchContext.prepare(load_project(path), tmp_path / "cache", log=lambda s: None)
    assert str(e.value).startswith(needle) and str(e.value).endswith("or train on another file")
    r = CliRunner().invoke(app, ["search", str(path), "--runs", str(tmp_path / "runs")])
    assert r.exit_code == 2 and f"error: {needle}" in " ".join(r.stderr.split()), r.output[-2000:]
    assert not list((tmp_path / "runs" / ".cache").glob("tiny-*"))  # found before the base model is built


def test_a_decontaminated_benchmark_that_uses_up_a_generator_is_a_config_error(tmp_path):
    """One-digit multiplication has 100 questions; a decontaminated benchmark of 3000 items holds them all, so
    the generator has nothing left to train on: a one-line config error naming the source and the benchmark,
    before the base model is built (until stop 30 it was a RuntimeError traceback from the tiny model's
    pre-training mixture; review)."""
    from typer.testing import CliRunner

    import sro.executor as ex
    from sro.cli import app
    from sro.config import ConfigError

    mult = {"min_terms": 2, "max_terms": 2, "max_digits": 1, "operators": ["*"], "allow_negation": False,
            "allow_parentheses": False}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({
        "name": "p", "base_model": "tiny", "domains": {"mult": {
            "sources": [{"reasoning_gym": "basic_arithmetic", "config": mult}],
            "benchmarks": [{"name": "all", "reasoning_gym": "basic_arithmetic", "config": mult, "size": 3000,
                            "decontaminate": True}]}}}))
    needle = (f"{path}: domains.mult.sources[0].reasoning_gym: each of the first {ex.OVERLAP_PROBE} questions of "
              "basic_arithmetic is a question of the held-out benchmark domains.mult.benchmarks[0]")
    with pytest.raises(ConfigError, match=re.escape(needle)):
        ex.SearchContext.prepare(load_project(path), tmp_path / "cache", log=lambda s: None)
    r = CliRunner().invoke(app, ["search", str(path), "--runs", str(tmp_path / "runs")])
    assert r.exit_code == 2 and f"error: {needle}" in " ".join(r.stderr.split()), r.output[-2000:]
    assert not list((tmp_path / "runs" / ".cache").glob("tiny-*"))


@pytest.mark.slow
def test_training_that_ends_early_by_itself_under_a_wall_budget_is_complete(micro_project, tmp_path, monkeypatch):
    """Under a wall-clock budget, only a trial its time limit cut is `stopped` (and retried later): one
    whose training ended early for its own reasons (a collapse it was told to train through) is a
    result. It used to be taken for a cut, recorded `stopped` and retried at once, again and again."""
    import sro.search
    from sro.executor import TrialOutcome, cut_by_limit
    from trainers.grpo import GRPOConfig

    assert cut_by_limit([{"wall_s": 9.99995}], GRPOConfig(steps=3, max_seconds=10.0))
    assert not cut_by_limit([{"wall_s": 4.0}], GRPOConfig(steps=3, max_seconds=10.0))  # ended by itself
    assert not cut_by_limit([{"wall_s": 12.0}] * 3, GRPOConfig(steps=3, max_seconds=10.0))  # every step ran
    assert not cut_by_limit([{"wall_s": 12.0}], GRPOConfig(steps=3))

    def ends_early(recipe, ctx, max_seconds=None, **kw):
        return TrialOutcome({"arithmetic/add": 0.4}, {"wall_s": 2.0}, [{"reward": 0.1, "loss": 0.0}],
                            {"collapsed_at_samples": 8.0})

    monkeypatch.setattr(sro.search, "run_trial", ends_early)
    runs = tmp_path / "runs"
    (runs / "early").mkdir(parents=True)
    (runs / "early" / "space.yaml").write_text(SPACE.format(fixed="seed: 0"))
    summary = run_search(load_project(micro_project("early")), Budget.parse("1h,3trials"), runs, "random",
                         Console(quiet=True))
    assert [t.state for t in summary.trials] == ["complete"] * 3
    assert len({t.recipe.key for t in summary.trials}) == 3


@pytest.mark.slow
def test_a_resumed_search_keeps_room_for_the_held_out_scoring(micro_project, tmp_path, monkeypatch):
    """The seconds of the last held-out scoring (what a trial's time limit keeps for its own scoring)
    are kept in the study: a resumed search, whose base-model scores are cached so that nothing is
    scored before its first trial, reads them (it used to reserve nothing for that trial)."""
    import sro.search
    from sro.executor import TrialOutcome

    seen: list[float] = []

    def fake(recipe, ctx, max_seconds=None, **kw):
        seen.append(ctx.score_s)
        return TrialOutcome({"arithmetic/add": 0.4}, {"wall_s": 2.0}, [{"reward": 0.1}] * int(recipe.get("steps")), {})

    monkeypatch.setattr(sro.search, "run_trial", fake)
    runs = tmp_path / "runs"
    (runs / "room").mkdir(parents=True)
    (runs / "room" / "space.yaml").write_text(SPACE.format(fixed="seed: 0"))
    run_search(load_project(micro_project("room")), Budget.parse("1h,1trials"), runs, "random", Console(quiet=True))
    run_search(load_project(micro_project("room")), Budget.parse("1h,2trials"), runs, "random", Console(quiet=True))
    assert len(seen) == 2 and seen[0] > 0 and seen[1] == pytest.approx(seen[0], abs=0.01)


@pytest.mark.slow
def test_no_trial_starts_when_proposing_spent_the_rest_of_the_budget(micro_project, tmp_path, monkeypatch):
    """Proposing and claiming count against a wall-clock budget; if they used up the rest of it the claim
    is withdrawn and the search ends. Before, the trial started with a limit of 0 s (loading the model,
    a step and the whole held-out scoring past the budget) and was recorded `stopped`, to be rerun."""
    import sro.search
    from sro.executor import TrialOutcome
    from sro.ledger import Ledger

    ran: list[float | None] = []

    def fake(recipe, ctx, max_seconds=None, **kw):
        ran.append(max_seconds)
        return TrialOutcome({"arithmetic/add": 0.4}, {"wall_s": 2.0}, [{"reward": 0.1}], {}, time_limited=True)

    claim = Ledger.start

    def slow_claim(self, recipe, space, max_trials=None):  # as if proposing took the budget's last hour
        trial = claim(self, recipe, space, max_trials)
        self.add_worker_time(3600.0)
        return trial

    monkeypatch.setattr(sro.search, "run_trial", fake)
    monkeypatch.setattr(Ledger, "start", slow_claim)
    runs = tmp_path / "runs"
    (runs / "late").mkdir(parents=True)
    (runs / "late" / "space.yaml").write_text(SPACE.format(fixed="seed: 0"))
    summary = run_search(load_project(micro_project("late")), Budget.parse("1h"), runs, "random", Console(quiet=True))
    assert ran == [] and summary.trials == [] and "wall time spent" in summary.stop_reason


def test_a_trials_seconds_count_once_against_the_wall_clock(micro_project, tmp_path, monkeypatch):
    """A trial's wall seconds are its own cost; the worker's time is the rest (set-up, proposing, recording):
    what the study spent is the search's elapsed time, not that plus each trial's seconds a second time."""
    import sro.search as search_mod
    from sro.executor import TrialOutcome
    from sro.ledger import Ledger

    def slow(recipe, ctx, **kw):
        time.sleep(1.5)
        return TrialOutcome({"arithmetic/add": 0.5}, {"wall_s": 1.5, "train_s": 1.5, "samples": 8.0, "tokens": 64.0})

    monkeypatch.setattr(search_mod, "run_trial", slow)
    runs = tmp_path / "runs"
    (runs / "once").mkdir(parents=True)
    (runs / "once" / "space.yaml").write_text(SPACE.format(fixed="seed: 4"))
    project = load_project(micro_project("once"))
    t0 = time.monotonic()
    summary = run_search(project, Budget.parse("3trials"), runs, "random", Console(quiet=True))
    elapsed = time.monotonic() - t0
    assert [t.state for t in summary.trials] == ["complete"] * 3
    spent = Ledger(project, runs / "once").spent().wall_s
    assert 3 * 1.5 < spent <= elapsed + 0.05, (spent, elapsed)


def test_the_same_error_in_trials_in_a_row_stops_the_search_and_runs_them_again_later(micro_project, tmp_path,
                                                                                      monkeypatch):
    """A model file cut short failed every recipe in 3 s and the search burnt its whole budget on failed
    trials that were never run again (a review, stop 28). Three in a row with one error stop the search; they
    read as interrupted, so the fixed environment runs them first. Errors print as text, not markup."""
    import io

    import sro.search as search_mod

    def broken(recipe, ctx, max_seconds=None, on_step=None, on_checkpoint=None):
        raise OSError(f"model.safetensors: header of {len(recipe.key) * 7} bytes is cut short [/tmp/x] 'sro[vllm]'")

    monkeypatch.setattr(search_mod, "run_trial", broken)
    runs = tmp_path / "runs"
    (runs / "env").mkdir(parents=True)
    (runs / "env" / "space.yaml").write_text(SPACE.format(fixed="seed: 1"))
    project = load_project(micro_project("env"))
    out = io.StringIO()
    with pytest.raises(search_mod.RepeatedFailure, match=r"trials 0, 1, 2 failed in a row with the same error: "
                                                         r"OSError: model.safetensors"):
        run_search(project, Budget.parse("6trials"), runs, "random", Console(file=out, width=300))
    assert "'sro[vllm]'" in out.getvalue()  # not eaten as a markup tag
    from sro.ledger import Ledger

    records = Ledger(project, runs / "env").records()
    assert [r.state for r in records] == ["interrupted"] * 3 and "not the recipe's" in records[0].message
    space = search_mod._written_space(runs / "env")
    assert search_mod._retry(records, space) == records[0].recipe
    # the recipe's own failures in a row (out of memory: a search exploring large batches) go on
    monkeypatch.setattr(search_mod, "run_trial", lambda *a, **k: (_ for _ in ()).throw(MemoryError("4096 rollouts")))
    (runs / "oom").mkdir(parents=True)
    (runs / "oom" / "space.yaml").write_text(SPACE.format(fixed="seed: 2"))
    summary = run_search(load_project(micro_project("oom")), Budget.parse("3trials"), runs, "random", Console(quiet=True))
    assert [t.state for t in summary.trials] == ["failed"] * 3
    # an environment that fails every training episode is the environment's failure, not the recipe's: it was a
    # TrialFailed, the recipe's own, and a broken plugin spent the whole budget (a review, stop 58)
    from sro.executor import EnvironmentFailed

    monkeypatch.setattr(search_mod, "run_trial", lambda *a, **k: (_ for _ in ()).throw(EnvironmentFailed(
        f"every training episode ({len(a[0].key)}) ended by an environment error, e.g. game 3: env error: "
        "ConnectionError: game server unreachable; fix the environment")))
    (runs / "game").mkdir(parents=True)
    (runs / "game" / "space.yaml").write_text(SPACE.format(fixed="seed: 4"))
    with pytest.raises(search_mod.RepeatedFailure, match=r"trials 0, 1, 2 failed in a row with the same error: "
                                                         r"EnvironmentFailed: every training episode"):
        run_search(load_project(micro_project("game")), Budget.parse("6trials"), runs, "random", Console(quiet=True))
    # a trial that completes between two failures starts the count again
    from sro.executor import TrialOutcome

    script = iter([OSError("disk full"), None, OSError("disk full"), OSError("disk full"), None])

    def flaky(recipe, ctx, **kw):
        if (e := next(script)) is not None:
            raise e
        return TrialOutcome({"arithmetic/add": 0.5}, {"wall_s": 1.0, "train_s": 1.0, "samples": 8.0, "tokens": 64.0})

    monkeypatch.setattr(search_mod, "run_trial", flaky)
    (runs / "flaky").mkdir(parents=True)
    (runs / "flaky" / "space.yaml").write_text(SPACE.format(fixed="seed: 3"))
    summary = run_search(load_project(micro_project("flaky")), Budget.parse("5trials"), runs, "random",
                         Console(quiet=True))
    assert [t.state for t in summary.trials] == ["failed", "complete", "failed", "failed", "complete"]


def test_a_recipe_whose_process_keeps_dying_is_given_up():
    """A recipe that got its worker killed (out of memory, a segfault) was retried first on every resume, for
    ever, taking down each worker (a review, stop 28): after `MAX_CRASHES` such ends it is not run again. The
    user's Ctrl-C is no such end."""
    import sro.search as search_mod
    from sro.ledger import TrialRecord
    from sro.recipe import Recipe
    from sro.space import RecipeSpace

    space = RecipeSpace.from_yaml(SPACE.format(fixed="seed: 1"))
    a, b = (Recipe(v, dict(space.fixed)) for v in space.sobol(2, seed=0))

    def ends(recipe, message, n):
        return [TrialRecord(i, "interrupted", recipe, message=message) for i in range(n)]

    died = "interrupted: its process died"
    assert search_mod._retry(ends(a, died, 2), space) == a
    assert search_mod.crashed(ends(a, died, 3)) == {a.key: 3}
    assert search_mod._retry(ends(a, died, 3) + ends(b, died, 1), space) == b
    assert search_mod._retry(ends(a, "interrupted by the user", 5), space) == a
    # put back after the environment failed it, or released after a storage error: not the recipe's doing
    assert search_mod._retry(ends(a, "interrupted: failed with an error that 3 trials in a row had", 3), space) == a
    assert search_mod._retry(ends(a, "interrupted: its worker stopped during the trial (OperationalError)", 3),
                             space) == a
    # a worker found silent (its heartbeat stopped) died too; a recipe another worker is running is not retried
    assert search_mod.crashed(ends(a, "interrupted: no heartbeat from elsewhere for 90 s", 3)) == {a.key: 3}
    assert search_mod._retry(ends(a, died, 1) + [TrialRecord(1, "running", a)], space) is None
    assert search_mod._recipes_own("RuntimeError: [enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: "
                                   "can't allocate memory: you tried to allocate 123 bytes")
    assert not search_mod._recipes_own("OSError: model.safetensors: header is cut short")


def test_a_resume_that_spells_the_runs_folder_otherwise_keeps_the_base_models_scores(micro_project, tmp_path,
                                                                                     monkeypatch):
    """The base model's folder was compared as given: `--runs runs` then `--runs /abs/runs` scored the base
    model again (a review, stop 28)."""
    import sro.search
    from sro.executor import SearchContext, TrialOutcome

    scored: list[str] = []
    real = SearchContext.score_base

    def score_base(self, **kw):
        scored.append(self.base_path)
        return real(self, **kw)

    monkeypatch.setattr(SearchContext, "score_base", score_base)
    monkeypatch.setattr(sro.search, "run_trial", lambda recipe, ctx, max_seconds=None, **kw: TrialOutcome(
        {"arithmetic/add": 0.4}, {"wall_s": 2.0}, [{"reward": 0.1}] * int(recipe.get("steps")), {}))
    (tmp_path / "runs" / "spell").mkdir(parents=True)
    (tmp_path / "runs" / "spell" / "space.yaml").write_text(SPACE.format(fixed="seed: 0"))
    project = load_project(micro_project("spell"))
    monkeypatch.chdir(tmp_path)
    run_search(project, Budget.parse("1trials"), Path("runs"), "random", Console(quiet=True))
    run_search(project, Budget.parse("2trials"), tmp_path / "runs", "random", Console(quiet=True))
    assert len(scored) == 1, scored


def test_a_recipes_seed_orders_its_data_too(micro_project, tmp_path, monkeypatch):
    """The recipe's `seed` seeds the mixture as well as the sampling (an agent's game picks already followed
    it): until stop 38 every seed of a bench trained on the project seed's prompts, in the same order. No
    `seed` in the recipe: the project's, as before."""
    import sro.executor as ex
    from sro.recipe import Recipe

    ctx = ex.SearchContext.prepare(load_project(micro_project("seeds")), tmp_path / "cache", log=lambda s: None)
    seen = []

    class Stop(Exception):
        pass

    def mixture(*args, seed, **kw):
        seen.append(seed)
        raise Stop

    monkeypatch.setattr(ex, "Mixture", mixture)
    base = {"lr": 1e-3, "steps": 2, "group_size": 4, "prompts_per_step": 4}
    for values in (base, {**base, "seed": 3}, {**base, "seed": 4}):
        with pytest.raises(Stop):
            ex.run_trial(Recipe(values, {"algorithm": "grpo", "max_new_tokens": 4}), ctx)
    assert seen == [ctx.project.seed, 3, 4]


@pytest.mark.slow
def test_a_source_the_recipes_filters_empty_is_recorded_and_the_trial_trains_on(micro_project, tmp_path):
    """A domain whose second source the recipe's length band empties trained on its first source and
    says so in the trial's metrics (until stop 39 the whole trial failed after 10,000 draws)."""
    import sro.executor as ex
    from evaluators.sources import Item, SourceSpec, Task
    from sro.recipe import Recipe

    class Wordy(Task):  # every question longer than the band below
        spec = SourceSpec("jsonl", "wordy.jsonl")

        def item(self, idx: int) -> Item:
            return Item("what is " + "one plus " * 40 + f"{idx}?", "0", self.spec.key)

    ctx = ex.SearchContext.prepare(load_project(micro_project()), tmp_path / "cache", log=lambda s: None)
    ctx.tasks["arithmetic"] = [*ctx.tasks["arithmetic"], Wordy()]
    recipe = Recipe({"lr": 1e-3, "steps": 2, "group_size": 2, "prompts_per_step": 4},
                    {"algorithm": "grpo", "max_new_tokens": 4, "proc.max_len": 200})
    with pytest.warns(RuntimeWarning, match=r"source jsonl:wordy.jsonl\S* \(arithmetic\) yields no item"):
        out = ex.run_trial(recipe, ctx)
    # by the source's place, `<domain>.<i>` (since stop 53: by its spec key, the same source in two domains was one)
    place = f"arithmetic.{len(ctx.tasks['arithmetic']) - 1}"
    assert len(out.curve) == 2 and out.metrics[f"source_exhausted/{place}"] >= 0, out.metrics


def test_failures_in_a_row_are_the_same_error_when_only_their_numbers_differ():
    """`_stop_if_repeating` on hand-made records: three failures whose errors differ only in numbers stop the
    search and are put back, except a recipe already put back once; two kinds of error among the last three,
    or fewer than three failures, go on."""
    import sro.search as search_mod
    from sro.ledger import TrialRecord
    from sro.recipe import Recipe
    from sro.space import RecipeSpace

    space = RecipeSpace.from_yaml(SPACE.format(fixed="seed: 1"))
    a, b, c = (Recipe(v, dict(space.fixed)) for v in space.sobol(3, seed=0))

    class Book:
        put_back: list[int] = []

        def requeue(self, numbers, why):
            self.put_back = list(numbers)

    def failed(n, recipe, message):
        return TrialRecord(n, "failed", recipe, message=message)

    oom = [failed(0, a, "OSError: read 12 of 4096 bytes"), failed(1, b, "OSError: read 7 of 2.5 bytes"),
           failed(2, c, "OSError: read 0 of 10 bytes")]
    earlier = [TrialRecord(9, "interrupted", a, message=f"interrupted: {search_mod.REQUEUED_NOTE} 3 trials had"),
               TrialRecord(8, "interrupted", b, message="interrupted: its process died")]
    book = Book()
    with pytest.raises(search_mod.RepeatedFailure, match="trial\\(s\\) 1, 2 run again first"):
        search_mod._stop_if_repeating(book, oom, oom + earlier)
    assert book.put_back == [1, 2]  # a's recipe was put back once already; b's died, which is no put-back
    mixed = [*oom[:2], failed(3, c, "ValueError: bad lr 0.1")]
    assert search_mod._stop_if_repeating(Book(), mixed, mixed) is None
    assert search_mod._stop_if_repeating(Book(), oom[:2], oom[:2]) is None
