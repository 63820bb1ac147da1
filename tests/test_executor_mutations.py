"""Edges of `sro/executor.py` that a mutation sweep (stop 48) found unpinned: each change named in a test's
docstring passed every test that runs the changed line (the whole suite, traced per test). No model is built."""

from __future__ import annotations

import pytest
import torch

from sro.executor import HeldOutNotes, TrialCollapsed, cut_by_limit
from trainers.grpo import GRPOConfig


def test_a_curve_is_cut_by_the_limit_from_the_last_step_at_the_limit_less_a_millisecond():
    """The last step's `wall_s` at exactly the limit less 1 ms is a cut (`>` there was not); a step record without
    `wall_s` counts as 0 s, not as a cut under a half-second limit (a default of 0.5 was)."""
    cfg = GRPOConfig(steps=3, max_seconds=10.0)
    assert cut_by_limit([{"wall_s": 10.0 - 1e-3}], cfg)
    assert not cut_by_limit([{"wall_s": 9.998}], cfg)
    assert not cut_by_limit([{"loss": 0.1}], GRPOConfig(steps=3, max_seconds=0.5))


def test_a_benchmark_gets_the_cut_off_note_from_a_tenth_of_its_answers():
    """Exactly 10% of cut-off wrong answers is noted, 9.99% is not (`>` or a threshold of 0.15 dropped the first)."""
    lines = HeldOutNotes(cut_off={"a/b": 0.1, "a/c": 0.0999}).lines(8)
    assert len(lines) == 1 and lines[0].startswith("a/b: 10% of the held-out answers were cut off at max_new_tokens=8")


def test_a_collapse_names_the_samples_it_came_after():
    """The message counts the samples trained on before the collapse, 0 when the cost has none (a default of 1
    claimed a sample)."""
    assert str(TrialCollapsed("the loss is NaN", {}, [])) == "collapsed after 0 samples: the loss is NaN"
    assert str(TrialCollapsed("x", {"samples": 12.0}, [])) == "collapsed after 12 samples: x"


def test_the_in_distribution_score_is_the_mean_over_a_domains_sources_of_their_first_trained_items(monkeypatch):
    """Each source of a domain is scored on its first `size // sources` items that training may draw (held-out
    questions skipped), and the domain's score is the mean over its sources; a domain none of whose first items
    may train is left out. Without this test nothing ran `score_in_distribution` (every test replaced it): it
    could return None, or score 50 draws instead of the first items, with the suite passing."""
    from types import SimpleNamespace

    import sro.executor as ex
    from evaluators.sources import Item, SourceSpec, Task, normalize

    def stream(prefix):
        class Stream(Task):
            spec = SourceSpec("jsonl", prefix)

            def item(self, idx: int) -> Item:
                return Item(f"{prefix}{idx}", str(idx), prefix)

        return Stream()

    scored = {}

    def evaluate(model, tok, bench, max_new_tokens, batch_size):
        scored[bench.items[0].source] = [it.question for it in bench.items]
        return SimpleNamespace(score={"a": 0.2, "b": 0.6}[bench.items[0].source])

    monkeypatch.setattr(ex, "evaluate", evaluate)
    project = SimpleNamespace(runtime=SimpleNamespace(max_new_tokens=4, eval_batch_size=8))
    held = {normalize(q) for q in ["a0", "a3"] + [f"z{i}" for i in range(200)]}
    ctx = ex.SearchContext(project, "base", {}, {"d": [stream("a"), stream("b")], "e": [stream("z")]}, held)
    assert ctx.score_in_distribution(None, None, size=4) == {"d": 0.4}
    assert scored == {"a": ["a1", "a2"], "b": ["b0", "b1"]}


def test_prepare_says_when_a_benchmarks_questions_also_occur_in_training(micro_project, tmp_path):
    """The micro project's one-digit additions repeat across seeds: its benchmark's questions also occur in the
    training stream, and preparing the search says so with the fix (`decontaminate: true`). No test read the
    note: without it (`if-body -> pass`) the suite passed."""
    from micro import changed_micro
    from sro.config import load_project
    from sro.executor import SearchContext

    said: list[str] = []
    ctx = SearchContext.prepare(load_project(micro_project("overlap")), tmp_path / "cache", log=said.append)
    share = ctx.overlap["arithmetic/add"]
    assert share > 0
    assert f"arithmetic/add: {share:.0%} of its questions also occur in training streams (disjoint seeds, small " \
           "problem space); `decontaminate: true` excludes them from training" in said
    # 24 one-digit additions repeat some questions, which is said; 24 three-digit ones do not, and nothing is said
    # (`<=` said it of every benchmark)
    assert len(ctx.benchmarks["arithmetic/add"].questions()) < 24
    assert any("arithmetic/add: 24 items but" in line and "distinct questions" in line for line in said)
    wide = changed_micro(micro_project, lambda d: d["domains"]["arithmetic"]["benchmarks"][0]["config"].update(
        max_digits=3))
    said.clear()
    ctx = SearchContext.prepare(load_project(wide), tmp_path / "cache", log=said.append)
    assert len(ctx.benchmarks["arithmetic/add"].questions()) == 24
    assert not any("distinct questions" in line for line in said), said


def test_a_calibration_benchmarks_figures_reach_the_trials_notes(monkeypatch):
    """`SearchContext.score` keeps the §5 figures `episode_score` fills for a game benchmark in `notes.calibration`
    (the trial's `calib/...` metrics) and none for a benchmark that filled none (`if-body -> pass` dropped them)."""
    from types import SimpleNamespace

    import sro.executor as ex

    def episode_score(model, tok, b, max_new_tokens, history, crashed, name, calibration):
        if name == "agent/calib":
            calibration.update({"calib_auroc": 0.8, "selective_success": 0.5})
        return 0.25

    monkeypatch.setattr(ex, "episode_score", episode_score)
    games = SimpleNamespace(task=SimpleNamespace(multi_turn=True))
    project = SimpleNamespace(runtime=SimpleNamespace(max_new_tokens=4, eval_batch_size=8))
    ctx = ex.SearchContext(project, "base", {"agent/calib": games, "agent/coin": games}, {}, set())
    notes = ex.HeldOutNotes()
    assert ctx.score(None, None, notes=notes) == {"agent/calib": 0.25, "agent/coin": 0.25}
    assert notes.calibration == {"agent/calib": {"calib_auroc": 0.8, "selective_success": 0.5}}
    assert notes.metrics(multi_turn=True) == {"heldout_env_errors": 0.0, "calib/agent/calib/auroc": 0.8,
                                              "calib/agent/calib/selective_success": 0.5}


def test_a_trainer_config_error_that_names_no_recipe_key_is_said_with_the_recipe_file(monkeypatch):
    """Every check of today names the key it refuses; an error that names none (a trainer's own, in the future)
    is still said as one line starting with the recipe's file, not by the recipe's hash key (the branch was
    unpinned: `if-body -> pass` and `or -> and` passed the suite)."""
    import sro.executor as ex
    from sro.recipe import Recipe

    def refuse(recipe, seed, multi_turn=False, **runtime):
        raise ValueError("the trainer refuses this")

    monkeypatch.setattr(ex, "check_recipe", refuse)
    with pytest.raises(ex.TrialFailed) as e:
        ex.trainer_config(Recipe({"lr": 0.1}, {}), 0, None, where="r.yaml")
    assert str(e.value) == "r.yaml: recipe: not a valid trainer config: the trainer refuses this"
    with pytest.raises(ex.TrialFailed, match=r"^recipe \S+ is not a valid trainer config: the trainer refuses this$"):
        ex.trainer_config(Recipe({"lr": 0.1}, {}), 0, None)


# ------------------------------------------------------------------------------------------------------------
# run_trial's generalization gap under self-distillation (sro/executor.py:511-516) (a coverage review, stop 54)
# ------------------------------------------------------------------------------------------------------------

def _stub_trial(monkeypatch, held_scores, train_scores):
    """run_trial with nothing loaded or trained: a one-weight model, a trainer whose `train` does one step."""
    from types import SimpleNamespace

    import sro.executor as ex

    class Trainer:
        def __init__(self, model, tok, cfg, mixture):
            self.samples, self.tokens, self.collapse = 8, 0, None

        def train(self, on_step):
            on_step(1, {"reward": 0.5, "wall_s": 0.1})

    monkeypatch.setattr(ex, "load_policy", lambda *a, **k: (torch.nn.Linear(1, 1), None))
    monkeypatch.setattr(ex, "Mixture", lambda *a, **k: SimpleNamespace(exhausted={}))
    monkeypatch.setattr(ex, "sft", lambda *a, **k: {})
    monkeypatch.setattr(ex, "GRPOTrainer", Trainer)
    runtime = SimpleNamespace(rollout_backend="hf", device="cpu", max_new_tokens=4, eval_batch_size=8)
    project = SimpleNamespace(seed=0, multi_turn=False, runtime=runtime, domains={"a": None, "b": None})
    ctx = ex.SearchContext(project, "base", {}, {"a": [object()], "b": [object()]}, set())
    ctx.score = lambda model, tok, notes=None, history=0: dict(held_scores)
    ctx.score_in_distribution = lambda model, tok, size=100: dict(train_scores)
    return ex, ctx


def test_self_distillation_reports_each_domains_train_score_and_its_gap_to_its_own_held_out_mean(monkeypatch):
    """§4: distillation's gains may not generalize, so a distilling trial always reports `train_score/<d>` and
    `gap/<d>` = train score − the mean of that domain's held-out scores (a domain with none: no gap); a trial
    that does not distil reports neither. No test ran these lines: mixing the domains' held-out scores or
    dropping the gap passed the suite."""
    from sro.recipe import Recipe

    ex, ctx = _stub_trial(monkeypatch, {"a/x": 0.2, "a/y": 0.4, "b/z": 0.9}, {"a": 0.5, "c": 0.7})
    out = ex.run_trial(Recipe({"distill.weight": 0.5, "steps": 1}, {}), ctx)
    assert out.metrics["train_score/a"] == 0.5 and out.metrics["gap/a"] == pytest.approx(0.2)
    assert out.metrics["train_score/c"] == 0.7 and "gap/c" not in out.metrics
    assert out.scores == {"a/x": 0.2, "a/y": 0.4, "b/z": 0.9} and len(out.curve) == 1
    plain = ex.run_trial(Recipe({"steps": 1}, {}), ctx)
    assert not any(k.startswith(("train_score/", "gap/")) for k in plain.metrics)



# ------------------------------------------------------------------------------------------------------------
# an HF base_model that cannot load offline is a ConfigError before any data (a coverage review, stop 54)
# is built (sro/executor.py:116-120)
# ------------------------------------------------------------------------------------------------------------

def test_an_hf_base_model_missing_from_the_offline_cache_is_a_config_error_naming_the_key(tmp_path, monkeypatch):
    from micro import MICRO
    from sro.config import ConfigError, load_project
    from sro.executor import SearchContext
    from trainers import models

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True, raising=False)
    models.hub_offline.cache_clear()
    p = tmp_path / "hf.yaml"
    p.write_text(MICRO.format(name="hf").replace("base_model: tiny", "base_model: sro-test/no-such-model"))
    built = []
    monkeypatch.setattr("sro.executor.Benchmark.build", lambda *a, **k: built.append(a))
    with pytest.raises(ConfigError, match=r"hf.yaml: base_model: sro-test/no-such-model: not in the local HF cache"):
        SearchContext.prepare(load_project(p), tmp_path / "cache", log=lambda s: None)
    assert not built  # said before the benchmarks are built
    models.hub_offline.cache_clear()


@pytest.mark.parametrize("crashed", [4, 3])
def test_a_multi_turn_trial_whose_every_training_episode_crashed_fails(monkeypatch, crashed):
    """A plugin whose environment raised at every step: each of the trial's 3570 training episodes was an env
    error, and the trial was recorded complete (scored on crashed held-out episodes, on the front), so a broken
    environment spent the whole budget (a review, stop 57). Every episode crashed: the trial fails, before its
    held-out scoring; some did: it is scored, and says how many."""
    from types import SimpleNamespace

    import sro.executor as ex
    from sro.recipe import Recipe

    class Trainer:
        def __init__(self, model, tok, cfg, tasks):
            self.episodes, self.failures = 4, [f"env error at step 1: RuntimeError: lamp {i} broke" for i in range(crashed)]

        def train(self, callback):
            pass

    scored = []
    monkeypatch.setattr(ex, "MultiTurnTrainer", Trainer)
    monkeypatch.setattr(ex, "_trial_cost", lambda trainer, model, t0: lambda: {"wall_s": 1.0})
    monkeypatch.setattr(ex, "_collapse", lambda *a: {})
    task = SimpleNamespace(multi_turn=True)
    project = SimpleNamespace(runtime=SimpleNamespace(max_new_tokens=4))
    ctx = SimpleNamespace(tasks={"agent": [task]}, score_s=0.0, project=project,
                          score=lambda model, tok, history, notes: scored.append(1) or {"agent/held": 0.0})
    recipe = Recipe({"lr": 1e-3, "steps": 2, "group_size": 2, "prompts_per_step": 2}, {"algorithm": "grpo"})
    run = lambda: ex.run_multi_turn_trial(recipe, ctx, GRPOConfig(lr=1e-3, steps=2, group_size=2, prompts_per_step=2),
                                          None, None, t0=0.0)
    if crashed == 4:
        with pytest.raises(ex.EnvironmentFailed, match=r"every training episode \(4\) ended by an environment error, e.g. "
                                                 r"env error at step 1: RuntimeError: lamp 0 broke; fix the environment"):
            run()
        assert scored == []
    else:
        out = run()
        assert scored == [1] and out.metrics["env_errors"] == 3.0
        assert out.notes[0].startswith("3 training episode(s) ended by an environment error")
