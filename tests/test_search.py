"""End to end: `sro search` in a subprocess on a micro project, resume, edited space, errors."""

from __future__ import annotations

import html
import re
import json
import os
import shutil
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import optuna
import pytest
import yaml
import sqlalchemy.exc
from typer.testing import CliRunner, Result

from sro.cli import app
from sro.config import load_project
from sro.ledger import Ledger, TrialRecord
from sro.recipe import Recipe
from sro.space import Param, RecipeSpace, SpaceError

ROOT = Path(__file__).resolve().parents[1]
SRO = [sys.executable, "-m", "sro.cli"]

SMALL_SPACE = """\
version: 1
designer: test
fixed: {algorithm: grpo, max_new_tokens: 4}
params:
  lr: {kind: float, low: 0.001, high: 0.003, log: true, why: small}
  group_size: {kind: int, low: 4, high: 4, why: fixed}
  prompts_per_step: {kind: int, low: 4, high: 6, why: small}
  steps: {kind: int, low: 2, high: 3, why: short}
"""


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    return subprocess.run([*SRO, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def run_here(*args: str) -> Result:
    """`sro ARGS` in this process (typer's test runner): for the wording of errors that stop before any work,
    where a fresh interpreter would only add its start-up; every verb also has a subprocess test."""
    return CliRunner().invoke(app, list(args))


def _trials(run_dir: Path) -> list[dict]:
    return json.loads((run_dir / "trials.json").read_text())


def _with_small_space(micro_project, tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A micro project and its runs folder, with SMALL_SPACE written as the edited space.yaml."""
    runs = tmp_path / "runs"
    (runs / name).mkdir(parents=True)
    (runs / name / "space.yaml").write_text(SMALL_SPACE)
    return micro_project(name), runs


@pytest.mark.slow
def test_search_runs_resumes_and_never_repeats(micro_project, tmp_path):
    project, runs = _with_small_space(micro_project, tmp_path, "micro")
    plugin = project.parent / "helpers.py"  # a plugin the trials import; edited before the resume below
    plugin.write_text("RULES = 1\n")
    project.write_text(project.read_text() + "plugins: [helpers.py]\n")

    r = run("search", str(project), "--budget", "2trials", "--runs", str(runs), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "using the search space in" in r.stdout  # the edited space is used, and said so
    assert "base model held-out" in r.stdout
    assert "budget 2trials spent (2/2 trials done); rerun with a larger --budget" in " ".join(r.stdout.split())
    # the output is a pipe, as a log file is: the status and each trial's steps are plain lines (rich draws
    # nothing live off a terminal; a review, stop 57)
    assert "scoring the base model on the held-out benchmarks ..." in r.stdout
    assert re.search(r"^trial 1: 1/[23], reward [0-9.]+ \(\d+s\)$", r.stdout, re.M), r.stdout[-3000:]
    first = _trials(runs / "micro")
    assert [t["state"] for t in first] == ["complete", "complete"]
    for t in first:
        assert set(t["scores"]) == {"arithmetic/add"} and t["cost"]["wall_s"] > 0
        assert 2 <= t["recipe"]["values"]["steps"] <= 3  # inside the edited bounds
    report = (runs / "micro" / "report.html").read_text()
    assert "Pareto front" in report and "plotly" in report.lower() and "base model" in report

    # the budget is for the study: a rerun with the same budget does nothing (in this process: a fresh
    # interpreter only adds its start-up; the searches around it are subprocesses)
    r = run_here("search", str(project), "--budget", "2trials", "--runs", str(runs))
    assert r.exit_code == 0 and "already spent" in r.stdout
    assert "changed since" not in r.stdout
    # a bigger budget resumes: old trials kept as they were, one new recipe; the plugin edited since is named, and
    # a base model built anew (its pre-training items changed) too (a review, stop 58: it was scored again, silently)
    Ledger(load_project(project), runs / "micro").put("base_path", str(runs / ".cache" / "tiny-0123456789abcdef"))
    plugin.write_text("RULES = 2\n")
    r = run("search", str(project), "--budget", "3trials", "--runs", str(runs), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resuming" in r.stdout
    said = " ".join(r.stdout.split())
    assert "warning: plugin helpers.py changed since the trials in" in said, r.stdout
    assert "warning: the base model was built anew (tiny-0123456789abcdef → tiny-" in said, r.stdout
    after = _trials(runs / "micro")
    assert after[:2] == first
    keys = [Recipe.from_dict(t["recipe"]).key for t in after]
    assert len(after) == 3 and len(set(keys)) == 3

    # show / export / report on the finished run (their subprocess runs: test_reading_verbs_...)
    r = run_here("show", str(runs / "micro"))
    assert r.exit_code == 0 and "base" in r.stdout and "front (*): trials" in r.stdout
    r = run_here("export", str(runs / "micro"), "--trial", "0")
    assert r.exit_code == 0 and "recipe:" in r.stdout and "state: complete" in r.stdout
    r = run_here("export", str(runs / "micro"), "--trial", "9")
    assert r.exit_code == 2 and "no trial 9" in r.stderr

    # the exported recipe reproduces outside the search
    recipe = tmp_path / "exported" / "recipe.yaml"  # --out creates the folder
    r = run_here("export", str(runs / "micro"), "--trial", "1", "--out", str(recipe))
    assert r.exit_code == 0, r.output[-3000:]
    model_dir = tmp_path / "models" / "trained"  # `--out`: the trained model kept, as a folder that loads
    r = run("train", str(recipe), "--runs", str(runs), "--out", str(model_dir), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "arithmetic/add" in r.stdout and "base" in r.stdout
    assert f"model:{model_dir}" in "".join(r.stdout.split())  # rich folds a long path
    _trained_model_is_kept(model_dir, recipe, runs)
    r = run_here("train", str(recipe), "--runs", str(runs), "--out", str(model_dir))  # not replaced unasked
    assert r.exit_code == 2 and "exists and is not empty; pass --force" in r.stderr
    assert "scoring the base model" not in r.stdout
    r = run_here("train", str(project))  # a project file is not a recipe
    assert r.exit_code == 2 and "not a recipe file" in r.stderr
    # a bad recipe is refused in one line, before the base model is scored (in this process: a refusal's exit
    # status through a fresh interpreter is test_reading_verbs_and_bad_input_do_not_load_torch's)
    doc = yaml.safe_load(recipe.read_text())
    for change, needle in (
            (lambda d: d["recipe"]["values"].update(algorithm="ppo"),
             "bad.yaml: recipe.values.algorithm: unknown algorithm 'ppo'"),
            (lambda d: d.update(recipe=[1, 2]), "recipe: must be a mapping"),
            (lambda d: d["project"].update(sede=1), "project: sede: unknown key"),
            (lambda d: d["recipe"]["values"].update(lrr=1e-4), "reads 'lrr' (did you mean 'lr'?)")):
        bad = yaml.safe_load(yaml.safe_dump(doc))
        change(bad)
        (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
        r = run_here("train", str(tmp_path / "bad.yaml"), "--runs", str(runs))
        assert r.exit_code == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
        assert "scoring the base model" not in r.stdout


@pytest.mark.parametrize("change, needle", [
    ({"steps": 36.5}, "recipe.values.steps=36.5 must be a whole number"),
    ({"algorithm": "ppo"}, "recipe.values.algorithm: unknown algorithm 'ppo'; known: "),
    ({"lr": "fast"}, "recipe.values.lr='fast' must be a number"),
    ({"lr": -1.0}, "recipe.values.lr must be a positive number (got -1.0)"),
    ({"steps": 0}, "recipe.values.steps must be >= 1 (got 0)"),
    ({"sft.steps": 2.5}, "recipe.values.sft.steps=2.5 must be a whole number"),
    ({"seed": 3.7}, "recipe.values.seed=3.7 must be a whole number"),
    ({"seed": "x"}, "recipe.values.seed='x' must be a number"),
    ({"proc.min_len": 3.7}, "recipe.values.proc.min_len=3.7 must be a whole number"),
    ({"proc.dedup": "yes"}, "recipe.values.proc.dedup='yes' must be true or false"),
    ({"proc.difficulty_high": "high"}, "recipe.values.proc.difficulty_high='high' must be a number"),
    # weights that do not sum to 1 were renormalized without a word (start recipes refuse them)
    ({"mix.arithmetic": 0.5}, "recipe: weights {'mix.arithmetic': 0.5} must be numbers >= 0 that sum to 1 "
                              "(they sum to 0.5)"),
    ({"src.arithmetic.0": "x"}, "recipe: weights {'src.arithmetic.0': 'x'} must be numbers >= 0 that sum to 1; "),
    # an agent's settings in a single-turn recipe trained as if absent, and proas as GRPO (a review, stop 57)
    ({"mt.history": 2}, "recipe: no part of a trial reads 'mt.history' (a multi-turn agent project's settings, and "
                        "this project's domains are single-turn: drop them, and algorithm proas, or give the recipe "
                        "to an agent project)"),
    ({"proas.lam": 0.5}, "recipe: no part of a trial reads 'proas.lam'"),
    ({"algorithm": "proas"}, "recipe.values.algorithm: proas is not declared for single-turn domains (it applies to "
                             "multi_turn); use one of "),
])
def test_train_names_the_recipe_file_and_key_of_a_bad_value(tmp_path, change, needle):
    """`sro train` on a recipe whose value the trainer refuses: one line naming the file and the key
    under `recipe.values`, before the base model is loaded or scored (steps: 36.5 used to pass this
    check and crash the trainer with a traceback after the base model was scored)."""
    doc = {"project": {"name": "t", "base_model": "tiny", "seed": 0,
                       "domains": {"arithmetic": {
                           "sources": [{"reasoning_gym": "basic_arithmetic"}],
                           "benchmarks": [{"name": "add", "reasoning_gym": "basic_arithmetic", "size": 8}]}},
                       "objectives": [{"arithmetic/add": "max"}, {"cost": "min"}]},
           "recipe": {"values": {"algorithm": "grpo", "lr": 0.002, "group_size": 4, "prompts_per_step": 4,
                                 "steps": 2, **change},
                      "fixed": {"max_new_tokens": 4}}}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(doc))
    r = run_here("train", str(path), "--runs", str(tmp_path / "runs"))
    assert r.exit_code == 2 and f"error: {path}: {needle}" in " ".join(r.stderr.split()), r.output[-2000:]
    assert "Traceback" not in r.output and "scoring the base model" not in r.stdout
    assert not (tmp_path / "runs").exists()  # nothing loaded or built


def test_a_mixture_given_in_part_is_refused_and_a_whole_one_taken():
    from sro.config import project_from_data
    from sro.executor import weight_problem

    src = {"sources": [{"reasoning_gym": "basic_arithmetic"}, {"reasoning_gym": "basic_arithmetic"}],
           "benchmarks": [{"name": "b", "reasoning_gym": "basic_arithmetic", "size": 4}]}
    project = project_from_data({"name": "two", "domains": {"a": src, "b": src}}, ".", "two.yaml")
    assert weight_problem(Recipe({"mix.a": 0.25, "mix.b": 0.75, "src.b.0": 1.0, "src.b.1": 0.0}, {}), project) is None
    assert weight_problem(Recipe({"lr": 0.1}, {}), project) is None  # none given: equal weights
    assert weight_problem(Recipe({"mix.a": 1.0}, {}), project) == (
        "mix.a given without mix.b; give every weight of the group (summing to 1), or none for equal weights")
    assert "{'src.a.0': -0.5, 'src.a.1': 1.5} must be numbers >= 0" in weight_problem(
        Recipe({"src.a.0": -0.5}, {"src.a.1": 1.5}), project)


CORRIDOR = {"name": "c", "base_model": "tiny", "seed": 0,
            "plugins": [str(ROOT / "search_spaces" / "plugins" / "corridor.py")],
            "domains": {"corridor": {
                "sources": [{"env": "corridor", "config": {"length": 2, "doors": 2, "games": 4, "max_steps": 4}}],
                "benchmarks": [{"name": "held", "env": "corridor",
                                "config": {"length": 2, "doors": 2, "games": 4, "max_steps": 4}}]}}}
"""An agent project (a plugin's environment): its trials train with the multi-turn trainer."""


def _nothing_prepared(monkeypatch) -> None:
    """Fail loudly if the base model would be prepared (the tiny model built, the benchmarks scored)."""
    import sro.executor

    def prepare(*a, **k):
        raise AssertionError("the base model was prepared before the bad value was found")

    monkeypatch.setattr(sro.executor.SearchContext, "prepare", classmethod(prepare))


@pytest.mark.parametrize("values, fixed, needle", [
    ({"algorithm": "proas", "proas.lam": 1.5}, {}, "recipe.values.proas.lam must be in [0, 1] (got 1.5)"),
    ({"proas.n_min": 2.5}, {}, "recipe.values.proas.n_min=2.5 must be a whole number"),
    ({"mt.history": 1.5}, {}, "recipe.values.mt.history=1.5 must be a whole number"),
    ({}, {"mt.confidence": "yes"}, "recipe.fixed.mt.confidence='yes' must be true or false"),
    ({"mt.readout_buffer": 0}, {}, "recipe.values.mt.readout_buffer must be >= 1 (got 0)"),
    ({"algorithm": "proximal_kl"}, {}, "recipe.values.algorithm: proximal_kl is not declared for multi-turn domains"),
])
def test_train_refuses_a_bad_multi_turn_setting_before_the_base_model(tmp_path, monkeypatch, values, fixed, needle):
    """An agent project's recipe with a bad proas.* or mt.* value: `sro train` names the file and the key
    before anything is prepared (it was found when the multi-turn trial started, after the base model had
    been built and scored)."""
    _nothing_prepared(monkeypatch)
    doc = {"project": CORRIDOR, "recipe": {"values": {"lr": 0.002, "steps": 2, **values},
                                           "fixed": {"max_new_tokens": 4, **fixed}}}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(doc))
    r = run_here("train", str(path), "--runs", str(tmp_path / "runs"))
    assert r.exit_code == 2 and f"error: {path}: {needle}" in " ".join(r.stderr.split()), r.output[-2000:]
    assert "Traceback" not in r.output and not (tmp_path / "runs").exists()


def test_train_with_a_cuda_device_and_no_gpu_stops_before_the_base_model(tmp_path, monkeypatch):
    """`runtime.device: cuda` on a CPU machine: `sro train` pre-trained the tiny model first, then failed (a
    review, stop 37). And the default thread count is the process's usable cores, not the machine's."""
    import torch

    from trainers.threads import usable_cores

    _nothing_prepared(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    doc = {"project": {**CORRIDOR, "runtime": {"device": "cuda"}},
           "recipe": {"values": {"lr": 0.002, "steps": 2}, "fixed": {"max_new_tokens": 4}}}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(doc))
    r = run_here("train", str(path), "--runs", str(tmp_path / "runs"))
    assert r.exit_code == 2 and "project.runtime.device: runtime.device is 'cuda' but no CUDA device is visible" \
        in " ".join(r.stderr.split()), r.output[-2000:]
    assert usable_cores() <= len(os.sched_getaffinity(0))


def test_usable_cores_keeps_to_a_cgroup_cpu_quota(tmp_path, monkeypatch):
    """`docker --cpus 1.5` or a Kubernetes limit leaves the CPU affinity whole: torch's threads kept to the
    affinity alone oversubscribed the quota (a review, stop 53). cgroup v2's `cpu.max`, else v1's cfs files."""
    import trainers.threads as threads

    v2, v1 = tmp_path / "v2", tmp_path / "v1"
    v2.mkdir()
    (v1 / "cpu").mkdir(parents=True)
    (v2 / "cpu.max").write_text("150000 100000\n")
    assert threads.cgroup_cpu_quota(v2) == 1.5
    (v2 / "cpu.max").write_text("max 100000\n")
    assert threads.cgroup_cpu_quota(v2) is None
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert threads.cgroup_cpu_quota(v1) is None
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    assert threads.cgroup_cpu_quota(v1) == 3.0 and threads.cgroup_cpu_quota(tmp_path / "none") is None
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: set(range(8)))
    for quota, cores in ((None, 8), (1.5, 2), (0.2, 1), (16.0, 8)):
        monkeypatch.setattr(threads, "cgroup_cpu_quota", lambda q=quota: q)
        assert threads.usable_cores() == cores, quota


@pytest.mark.parametrize("fixed, needle", [
    ({"algorithm": "proas", "proas.lam": 1.5}, "fixed.proas.lam must be in [0, 1] (got 1.5)"),
    ({"mt.history": 1.5}, "fixed.mt.history=1.5 must be a whole number"),
    ({"steps": 36.5}, "fixed.steps=36.5 must be a whole number"),
    ({"algorithm": "proximal_kl"}, "fixed.algorithm: proximal_kl is not declared for multi-turn domains"),
])
def test_search_refuses_a_bad_fixed_setting_of_the_space_before_the_base_model(tmp_path, monkeypatch, fixed, needle):
    """A written space.yaml whose `fixed:` holds a value the trainer refuses: `sro search` names the file and
    the key before the base model is prepared (every trial used to fail on it, after the base model had
    been scored)."""
    _nothing_prepared(monkeypatch)
    project = tmp_path / "c.yaml"
    project.write_text(yaml.safe_dump(CORRIDOR))
    space = tmp_path / "runs" / "c" / "space.yaml"
    space.parent.mkdir(parents=True)
    space.write_text(yaml.safe_dump({"version": 1, "designer": "test", "fixed": {"max_new_tokens": 4, **fixed},
                                     "params": {"lr": {"kind": "float", "low": 0.001, "high": 0.003, "why": "x"}}}))
    r = run_here("search", str(project), "--runs", str(tmp_path / "runs"))
    assert r.exit_code == 2 and f"error: {space}: {needle}" in " ".join(r.stderr.split()), r.output[-2000:]
    assert "Traceback" not in r.output


@pytest.mark.parametrize("fixed", [{"mix.arithmetic": 0.3}, {"mix.arithmetic": -1.0}])
def test_search_refuses_mixture_weights_no_trial_could_train_before_the_base_model(micro_project, tmp_path,
                                                                                    monkeypatch, fixed):
    """Fixed weights were never checked by a search: 0.3 alone trained renormalized, a negative one failed
    every trial after the base model was scored (a review, stop 37)."""
    _nothing_prepared(monkeypatch)
    space = tmp_path / "runs" / "mixw" / "space.yaml"
    space.parent.mkdir(parents=True)
    space.write_text(yaml.safe_dump({"version": 1, "designer": "test", "fixed": {"max_new_tokens": 4, **fixed},
                                     "params": {"lr": {"kind": "float", "low": 0.001, "high": 0.003, "why": "x"}}}))
    r = run_here("search", str(micro_project("mixw")), "--runs", str(tmp_path / "runs"))
    flat = " ".join(r.stderr.split())
    assert r.exit_code == 2 and f"error: {space}: mixture weights" in flat and "must be numbers >= 0 that sum to 1" \
        in flat, r.output[-2000:]


def _trained_model_is_kept(folder: Path, recipe: Path, runs: Path) -> None:
    """`sro train --out`'s folder: a model folder SRO and transformers load, its weights trained away from the
    base model's, the recipe that trained it beside them, and nothing temporary left in its parent."""
    import torch

    from trainers.models import load_policy, not_a_model_folder

    assert not_a_model_folder(folder) is None, sorted(p.name for p in folder.iterdir())
    assert (folder / "sro-recipe.yaml").read_text(encoding="utf-8") == recipe.read_text(encoding="utf-8")
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]
    (base,) = [p for p in (runs / ".cache").glob("tiny-*") if p.is_dir() and not_a_model_folder(p) is None]
    trained, _ = load_policy(str(folder), "cpu")
    start, _ = load_policy(str(base), "cpu")
    moved = [not torch.equal(a, b) for a, b in zip(trained.state_dict().values(), start.state_dict().values())]
    assert len(moved) == len(start.state_dict()) and any(moved)


@pytest.mark.parametrize("space, needle", [
    ({"params": {"lrr": {"kind": "float", "low": 0.001, "high": 0.003}}}, "no part of a trial reads 'lrr' (did you mean 'lr'?)"),
    ({"params": {"lr": {"kind": "float", "low": 0.001, "high": 0.003}}, "fixed": {"proas.lamb": 0.5}},
     "no part of a trial reads 'proas.lamb' (did you mean 'proas.lam'?)"),
    ({"params": {"lr": {"kind": "float", "low": 0.001, "high": 0.003}}, "fixed": {"zzz_unheard": 1}},
     "no part of a trial reads 'zzz_unheard' (known keys: "),
    # TRL's name: every known key was listed, none near (a review, stop 57)
    ({"params": {"lr": {"kind": "float", "low": 0.001, "high": 0.003}}, "fixed": {"kl_coef": 0.1}},
     "no part of a trial reads 'kl_coef' (SRO's name for it is 'beta'); fix or remove it"),
    # a choice no trial can train: every trial that drew it failed, after the set-up (a walkthrough, stop 34)
    ({"params": {"algorithm": {"kind": "categorical", "choices": ["grpo", "ppo"]}}},
     "params.algorithm.choices: unknown algorithm 'ppo'; known: cispo, "),
    ({"params": {"algorithm": {"kind": "categorical", "choices": ["proximal_kl", "proas"]}}},
     "params.algorithm.choices: proximal_kl is not declared for multi-turn domains"),
    # a bound the trainer refuses: every trial that drew near it failed, after the set-up (a review, stop 58)
    ({"params": {"steps": {"kind": "int", "low": 0, "high": 4}}},
     "params.steps.low must be >= 1 (got 0); move low to a value the trainer takes"),
    ({"params": {"proas.lam": {"kind": "float", "low": 0.0, "high": 1.5}}, "fixed": {"algorithm": "proas"}},
     "params.proas.lam.high must be in [0, 1] (got 1.5); move high to a value the trainer takes"),
    # a dimension that does nothing at the space's fixed or default setting (stop 54)
    ({"params": {"batch_switch_at": {"kind": "float", "low": 0.5, "high": 0.9}}},
     "params.batch_switch_at does nothing here: the batch grows only at a batch_multiplier of 2 or more, and the "
     "space leaves it at its default 1; search batch_multiplier too, fix it at 2 or more, or remove batch_switch_at"),
    ({"params": {"lr_alpha": {"kind": "categorical", "choices": [0.0, 0.5]}}, "fixed": {"batch_multiplier": 1}},
     "params.lr_alpha does nothing here: the rate follows the batch only when it grows, at a batch_multiplier of 2 "
     "or more, and the space fixes it at 1"),
])
def test_search_refuses_a_space_key_no_trial_reads_before_the_base_model(tmp_path, monkeypatch, space, needle):
    """A hand-edited space.yaml with a misspelt key: `sro search` names the file, the key and the nearest
    known one before the base model is prepared (a searched `lrr` used to be a dimension that changed
    nothing, and a fixed `proas.lamb` was silently ignored)."""
    _nothing_prepared(monkeypatch)
    project = tmp_path / "c.yaml"
    project.write_text(yaml.safe_dump(CORRIDOR))
    path = tmp_path / "runs" / "c" / "space.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump({"version": 1, "designer": "test", **space}))
    r = run_here("search", str(project), "--runs", str(tmp_path / "runs"))
    assert r.exit_code == 2 and f"error: {path}: {needle}" in " ".join(r.stderr.split()), r.output[-2000:]
    assert "Traceback" not in r.output


@pytest.mark.parametrize("text, needle", [
    ("version: 1\nparams:\n  lr: {kind: float, low: 0.01, high: 0.001}\n", "needs low <= high (got 0.01, 0.001)"),
    ("version: 1\nparams:\n  lr: {kind: float, low: fast, high: 0.001}\n", "low must be a number (got 'fast')"),
    ("version: 1\nparams:\n  lr: {kind: floaty, low: 0.1, high: 0.2}\n", "kind must be float, int, categorical"),
    ("version: 1\nparams:\n  lr: {kind: float, low: 0.1, high: 0.2\n", "not valid YAML"),
])
def test_a_broken_space_file_is_named_before_the_base_model(tmp_path, monkeypatch, text, needle):
    """A hand edit that leaves space.yaml no space at all was reported only after the benchmarks and the base
    model had been prepared (minutes with a real model; a walkthrough, stop 34)."""
    _nothing_prepared(monkeypatch)
    project = tmp_path / "c.yaml"
    project.write_text(yaml.safe_dump(CORRIDOR))
    path = tmp_path / "runs" / "c" / "space.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    r = run_here("search", str(project), "--runs", str(tmp_path / "runs"))
    assert r.exit_code == 2 and f"error: {path}: " in " ".join(r.stderr.split()), r.output[-2000:]
    assert needle in " ".join(r.stderr.split()) and "Traceback" not in r.output


def test_a_fixed_setting_refused_only_beside_a_searched_value_is_left_to_the_trials(tmp_path):
    """The check of the fixed settings takes one recipe of the space (its centre): a refusal that cites a
    searched parameter too may not hold elsewhere in the space, so it does not stop the search."""
    from sro.config import project_from_data
    from sro.search import _check_fixed

    proj = project_from_data(CORRIDOR, tmp_path, "c.yaml")
    lr = {"lr": Param("lr", "float", 0.001, 0.003)}
    _check_fixed(RecipeSpace(list(lr.values()), fixed={"proas.lam": 0.5}), proj, tmp_path)
    # mt.history is searched: its centre is fine, and a fixed value of a key the space searches is not read
    _check_fixed(RecipeSpace([Param("mt.history", "int", 0, 2)], fixed={"mt.history": -1}), proj, tmp_path)
    with pytest.raises(SpaceError, match=r"space.yaml: fixed.mt.history must be >= 0 \(got -1\)"):
        _check_fixed(RecipeSpace(list(lr.values()), fixed={"mt.history": -1}), proj, tmp_path)
    # what the multi-turn trainer does not support, fixed (review, stop 30: it passed, and every trial failed)
    with pytest.raises(SpaceError, match=r"space.yaml: fixed.dynamic_sampling: the multi-turn trainer plays fresh "
                                         r"episodes for one pass per iteration and does not support them"):
        _check_fixed(RecipeSpace(list(lr.values()), fixed={"dynamic_sampling": True}), proj, tmp_path)
    # the space another worker shared in the storage: the run folder may have no space.yaml, and an older one
    # would not replace it, so the error says which space and how to replace it
    shared = RecipeSpace(list(lr.values()), fixed={"steps": 36.5}, version=3)
    with pytest.raises(SpaceError) as e:
        _check_fixed(shared, proj, tmp_path, shared=True)
    assert str(e.value) == (f"the study's shared space (v3): fixed.steps=36.5 must be a whole number; mend its copy "
                            f"in {tmp_path / 'space.yaml'} and set `version: 4` there: a higher version replaces the "
                            "shared one")


def test_a_joining_worker_gets_the_shared_space_to_mend_before_it_is_refused(tmp_path, monkeypatch):
    """A worker joining a study whose shared space has a bad fixed setting is told to mend its copy in the run
    folder: the copy is written before the check (until stop 30 the folder had none yet)."""
    _nothing_prepared(monkeypatch)
    project = tmp_path / "c.yaml"
    project.write_text(yaml.safe_dump(CORRIDOR))
    run_dir = tmp_path / "runs" / "c"
    bad = RecipeSpace([Param("lr", "float", 0.001, 0.003)], fixed={"max_new_tokens": 4, "steps": 36.5}, version=3)
    Ledger(load_project(project), run_dir).publish_space(bad)
    r = run_here("search", str(project), "--runs", str(tmp_path / "runs"))
    said = " ".join(r.stderr.split())
    assert r.exit_code == 2 and "the study's shared space (v3): fixed.steps=36.5 must be a whole number" in said, said
    assert f"mend its copy in {run_dir / 'space.yaml'} and set `version: 4` there" in said
    copy = RecipeSpace.from_yaml((run_dir / "space.yaml").read_text())
    assert copy.version == 3 and copy.fixed["steps"] == 36.5


def test_a_recipe_seed_is_a_whole_number_named_by_its_key():
    """The recipe's own `seed` is checked as the trainer's other whole-number settings are: 3.0 is 3,
    3.7 is refused (never cut to 3), a text is named by its key (it was 'invalid literal for int()'
    with no key); without one the project's seed trains."""
    from sro.executor import TrialFailed, trainer_config

    assert trainer_config(Recipe({"seed": 3.0}), 0, None).seed == 3
    assert type(trainer_config(Recipe({}, {"seed": 4.0}), 0, None).seed) is int
    assert trainer_config(Recipe({}), 5, None).seed == 5
    for v, needle in ((3.7, "r.yaml: recipe.values.seed=3.7 must be a whole number"),
                      ("x", "r.yaml: recipe.values.seed='x' must be a number")):
        with pytest.raises(TrialFailed) as e:
            trainer_config(Recipe({"seed": v}), 0, None, where="r.yaml")
        assert str(e.value) == needle


def test_a_second_outcome_a_nan_score_and_a_failed_final_write(micro_project, tmp_path, monkeypatch):
    """Ctrl-C just after a trial finished does not add a second record of it (nor count its cost twice);
    a NaN score is a failed trial that says which objective; a final write the storage refuses leaves
    the trial claimed, and `release` then ends it with the result recorded before that write instead of
    leaving it running forever (until stop 52 it marked it interrupted over the result, which `recover`
    would have kept after a kill); a busy storage skips one intermediate record instead of ending the trial."""
    import sqlalchemy.exc

    import sro.ledger as ledger_mod

    project = load_project(micro_project("outcomes"))
    ledger = Ledger(project, tmp_path / "outcomes")
    space = RecipeSpace.from_yaml(SMALL_SPACE)
    recipes = [Recipe(v, dict(space.fixed)) for v in space.sobol(3, seed=0)]
    done = ledger.start(recipes[0], space)
    ledger.finish(done, {"arithmetic/add": 0.5}, {"wall_s": 3.0}, [])
    ledger.interrupt(done, [], {"wall_s": 3.0})  # KeyboardInterrupt while the result was being printed
    ledger.release(done, "its worker stopped")
    assert [(r.number, r.state) for r in ledger.records()] == [(0, "complete")]
    assert ledger.spent().wall_s == 3.0

    nan = ledger.start(recipes[1], space)
    ledger.finish(nan, {"arithmetic/add": float("nan")}, {"wall_s": 2.0}, [])
    rec = ledger.records()[1]
    assert rec.state == "failed" and "objective arithmetic/add is not a finite number" in rec.message

    stuck = ledger.start(recipes[2], space)
    busy = sqlalchemy.exc.OperationalError("UPDATE trials", {}, Exception("database is locked"))

    def refuse(*a, **k):
        raise busy

    monkeypatch.setattr(ledger_mod.time, "sleep", lambda s: None)  # _again's back-off
    with monkeypatch.context() as m:
        m.setattr(ledger.storage, "get_trial", refuse)
        ledger.report_intermediate(stuck, 1 / 3, {"arithmetic/add": 0.1})  # logged, not raised
    with monkeypatch.context() as m:
        m.setattr(ledger.study, "tell", refuse)
        with pytest.raises(sqlalchemy.exc.OperationalError):
            ledger.finish(stuck, {"arithmetic/add": 0.4}, {"wall_s": 1.0}, [])
    assert ledger.records()[2].state == "running" and stuck._trial_id in ledger._beats  # still claimed
    ledger.release(stuck, "its worker stopped during the trial (OperationalError: ...)")
    rec = ledger.records()[2]
    assert (rec.state, rec.scores) == ("complete", {"arithmetic/add": 0.4}) and stuck._trial_id not in ledger._beats


def test_interrupted_trial_is_marked_and_kept_apart(micro_project, tmp_path):
    project = load_project(micro_project("orphan"))
    ledger = Ledger(project, tmp_path / "orphan")
    space = RecipeSpace.from_yaml(SMALL_SPACE)
    rec = Recipe(space.sobol(1, seed=0)[0], dict(space.fixed))
    t = ledger.start(rec, space)
    ledger.finish(t, {"arithmetic/add": 0.5}, {"wall_s": 3.0}, [])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    t2 = ledger.start(Recipe(space.sobol(2, seed=0)[1], dict(space.fixed)), space)
    t2.set_user_attr("pid", dead.pid)  # as if its process had been killed mid-trial
    reopened = Ledger(project, tmp_path / "orphan")
    states = [(r.number, r.state) for r in reopened.records()]
    assert states == [(0, "complete"), (1, "interrupted")]
    assert reopened.records()[0].scores == {"arithmetic/add": 0.5}
    assert reopened.spent().trials == 1


def test_a_trial_without_heartbeats_is_rerun_and_its_late_result_kept(micro_project, tmp_path, monkeypatch,
                                                                      shared_storage):
    """A worker on another machine dies mid-trial: its trial records no more heartbeats, the next worker
    that looks marks it interrupted and gets its recipe to rerun; a live trial beside it is untouched.
    If the 'dead' worker was only suspended and comes back, its result is recorded, not lost."""
    import socket
    import time

    import sro.ledger as ledger_mod

    monkeypatch.setattr(ledger_mod, "STALE_BEATS", 4)  # silent for 4 intervals = dead
    project = load_project(micro_project("beat", f"heartbeat_s: 1\nstorage: {shared_storage}\n"))
    space = RecipeSpace.from_yaml(SMALL_SPACE)
    recipes = [Recipe(v, dict(space.fixed)) for v in space.sobol(2, seed=0)]
    a = Ledger(project, tmp_path / "beat")
    live, lost = a.start(recipes[0], space), a.start(recipes[1], space)
    a.progress(lost, [{"reward": 0.1}], {"wall_s": 4.0, "tokens": 9.0, "gpu_h": 0.0})  # its last record
    a._beats.pop(lost._trial_id).stop()  # its machine went away
    lost.set_user_attr("host", "elsewhere")  # so the dead-pid check of this host does not apply
    time.sleep(6.5)  # the storage's clock counts whole seconds: 6-7 s of silence, the live trial's at most 2
    seen = Ledger(project, tmp_path / "look", create=False).records()  # `sro show`: shown so, left running
    assert [r.state for r in seen] == ["running", "interrupted"] and "no heartbeat from elsewhere" in seen[1].message
    assert [t.state for t in a.study.get_trials()] == [optuna.trial.TrialState.RUNNING] * 2
    assert [r.key for r in a.recover()] == [recipes[1].key]  # a worker looking before it proposes: a retry
    b = Ledger(project, tmp_path / "beat")  # another worker opening the study later
    assert b.recover() == []  # already marked: nothing new, and the live trial is untouched
    assert [(r.number, r.state) for r in b.records()] == [(0, "running"), (1, "interrupted")]
    assert b.records()[0].worker == f"{socket.gethostname()}:{os.getpid()}"  # `sro show` prints it
    assert "no heartbeat from elsewhere" in b.records()[1].message
    assert b.records()[1].cost == {"wall_s": 4.0, "tokens": 9.0, "gpu_h": 0.0}  # what it used stays spent
    assert b.spent().wall_s == 4.0 and b.spent().tokens == 9.0
    assert b.spent().running == 1
    a.progress(lost, [{"reward": 0.5}], {"tokens": 10.0})  # the suspended worker wakes up mid-training:
    a.report_intermediate(lost, 0.5, {"arithmetic/add": 0.2})  # it trains on (no error, nothing written)
    assert b.records()[1].curve == [{"reward": 0.1}]  # its record from before, not overwritten
    a.finish(lost, {"arithmetic/add": 0.25}, {"wall_s": 2.0}, [])  # and records its result
    a.finish(live, {"arithmetic/add": 0.5}, {"wall_s": 3.0}, [])
    recs = b.records()
    assert [(r.number, r.state) for r in recs] == [(0, "complete"), (1, "interrupted"), (2, "complete")]
    assert recs[2].recipe.key == recipes[1].key and recs[2].scores == {"arithmetic/add": 0.25}
    assert b.study.trials[2].user_attrs["late_of"] == 1 and recs[2].late_of == 1
    assert recs[2].intermediate == {"0.500": {"arithmetic/add": 0.2}}  # measured after the mark: kept (stop 38)
    # the late result's cost is its whole training: the interrupted record's 4 s are in it, not added
    assert b.spent().wall_s == 2.0 + 3.0 and b.spent().tokens == 0.0


def test_a_trial_killed_before_its_first_progress_record_leaves_its_beats_cost_spent(micro_project, tmp_path):
    """A process killed while it loads its model or in its final scoring, between two progress records,
    left the cost of its last progress record spent (nothing, before the first): the budget did not count
    minutes of wall time. Its heartbeats now record the cost so far too (`Ledger.meter`)."""
    import time

    project = load_project(micro_project("metered", "heartbeat_s: 1\n"))
    ledger = Ledger(project, tmp_path / "metered")
    space = RecipeSpace.from_yaml(SMALL_SPACE)
    t = ledger.start(Recipe(space.sobol(1, seed=0)[0], dict(space.fixed)), space)
    t0 = time.monotonic()
    ledger.meter(t, lambda: {"wall_s": round(time.monotonic() - t0, 2), "tokens": 0.0, "gpu_h": 0.0})
    time.sleep(2.5)  # two beats, no progress record
    ledger._stop_heartbeat(t)  # the kill
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    t.set_user_attr("pid", dead.pid)
    rec = Ledger(project, tmp_path / "metered").records()[0]
    assert rec.state == "interrupted" and 1.0 <= rec.cost["wall_s"] <= 2.6, rec.cost
    assert Ledger(project, tmp_path / "metered").spent().wall_s == rec.cost["wall_s"]


def test_recover_racing_the_owner_leaves_the_owners_outcome(micro_project, tmp_path, monkeypatch):
    """`recover` takes a live worker's trials for dead (as after a suspension) and the owner records
    their outcomes at that very moment: whoever ends a trial first owns its outcome. The owner's failure
    stays failed (read as interrupted, it would be run again) and its result carries no interruption
    message; a trial ended by a `recover` whose note was never written still reads as interrupted."""
    import sro.ledger as ledger_mod

    project = load_project(micro_project("race"))
    space = RecipeSpace.from_yaml(SMALL_SPACE)
    recipes = [Recipe(v, dict(space.fixed)) for v in space.sobol(3, seed=0)]
    owner = Ledger(project, tmp_path / "race")
    failing, finishing, lost = (owner.start(r, space) for r in recipes)
    for t in (failing, finishing, lost):
        owner.progress(t, [{"reward": 0.1}], {"wall_s": 4.0, "tokens": 9.0, "gpu_h": 0.0})
    other = Ledger(project, tmp_path / "race")
    monkeypatch.setattr(ledger_mod, "_alive", lambda pid, started=None: False)  # the owner looks dead to `recover`
    ending = other.storage.set_trial_state_values

    def owner_ends_it_first(trial_id, state, values=None):  # the owner's outcome lands just before
        if trial_id == failing._trial_id:
            owner.fail(failing, "ValueError: the recipe's own error", {"wall_s": 5.0}, [])
        elif trial_id == finishing._trial_id:
            owner.finish(finishing, {"arithmetic/add": 0.5}, {"wall_s": 6.0}, [])
        return ending(trial_id, state, values)

    monkeypatch.setattr(other.storage, "set_trial_state_values", owner_ends_it_first)
    assert [r.key for r in other.recover()] == [recipes[2].key]  # only the trial it ended is a retry
    recs = other.records()
    assert [(r.number, r.state) for r in recs] == [(0, "failed"), (1, "complete"), (2, "interrupted")]
    assert recs[0].message == "ValueError: the recipe's own error" and recs[0].cost == {"wall_s": 5.0}
    assert recs[1].message == "" and recs[1].cost == {"wall_s": 6.0}
    assert recs[2].message == "interrupted: its process died" and recs[2].cost["wall_s"] == 4.0
    other.study.set_user_attr(f"{ledger_mod.RECOVERED}2", None)  # as if `recover` died before its note
    assert (other.records()[2].state, other.records()[2].cost) == ("interrupted", {"wall_s": 4.0, "tokens": 9.0,
                                                                                 "gpu_h": 0.0})
    adding, busy = owner.study.add_trial, iter([True])

    def add_when_free(trial):  # the storage is away for a moment just as the late result comes: the write
        if next(busy, False):  # lands, but its answer is lost (PostgreSQL: a connection dropped after the commit)
            adding(trial)
            raise sqlalchemy.exc.OperationalError("INSERT INTO trials", {}, Exception("server closed the connection"))
        return adding(trial)

    monkeypatch.setattr(owner.study, "add_trial", add_when_free)
    monkeypatch.setattr(ledger_mod.time, "sleep", lambda s: None)
    owner.finish(lost, {"arithmetic/add": 0.25}, {"wall_s": 7.0}, [])  # the owner wakes: its result is kept,
    assert [(r.state, r.late_of) for r in other.records()][2:] == [("interrupted", None), ("complete", 2)]  # once


def test_workers_share_the_later_of_the_study_space_and_their_own(micro_project, tmp_path, shared_storage):
    """load_space with a ledger: the run folder's space.yaml is published to the storage; a worker whose
    folder has none, or an earlier version, takes (and writes) the study's; a later local version wins."""
    from rich.console import Console

    from sro.search import load_space

    project = load_project(micro_project("sp", f"storage: {shared_storage}\n"))
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    (a_dir / "space.yaml").write_text(SMALL_SPACE)
    ledger = Ledger(project, a_dir)
    assert ledger.shared_space() is None
    mine = load_space(project, a_dir, Console(record=True), ledger=ledger)
    assert ledger.shared_space().to_yaml() == mine.to_yaml()  # published
    console = Console(record=True)
    theirs = load_space(project, b_dir, console, ledger=ledger)  # a second machine, no space.yaml
    assert theirs.to_yaml() == mine.to_yaml() and (b_dir / "space.yaml").is_file()
    assert "using the study's search space (v1" in console.export_text()
    v2 = SMALL_SPACE.replace("version: 1", "version: 2").replace("high: 6", "high: 8")
    (b_dir / "space.yaml").write_text(v2)  # a redesign or a person's edit, a later version
    assert load_space(project, b_dir, Console(), ledger=ledger).version == 2
    assert ledger.shared_space().version == 2
    again = load_space(project, a_dir, Console(), ledger=ledger)  # a's folder still holds v1: v2 wins
    assert again.version == 2 and RecipeSpace.from_yaml((a_dir / "space.yaml").read_text()).version == 2


def test_a_retry_must_fit_the_current_space():
    """An interrupted or budget-stopped recipe is run again first, unless a redesign has since left it
    outside the space (training it would fail on Optuna's distributions, on every resume)."""
    from sro.ledger import TrialRecord
    from sro.search import _retry

    space = RecipeSpace.from_yaml(SMALL_SPACE)
    narrowed = RecipeSpace.from_yaml(SMALL_SPACE.replace("high: 0.003", "high: 0.0015").replace("version: 1", "version: 2"))
    inside, outside = (Recipe({**v, "lr": lr}, dict(space.fixed)) for v, lr in zip(space.sobol(2, seed=0), (0.0012, 0.0025)))
    recs = [TrialRecord(0, "stopped", outside), TrialRecord(1, "interrupted", inside)]
    assert _retry(recs, space).key == outside.key  # the oldest first
    assert _retry(recs, narrowed).key == inside.key
    assert _retry(recs[:1], narrowed) is None
    # a mixture weight the old space fixed and this one searches: the retry holds it among its values
    # (same key), and its claim's distributions are built without a KeyError (on every resume, before)
    from sro.ledger import distributions

    fixed_mix = Recipe(dict(inside.values), {**space.fixed, "mix.arithmetic": 1.0})
    mixed = RecipeSpace.from_yaml(SMALL_SPACE.replace("version: 1", "version: 2")
                                  + "simplexes: {mix: {members: [mix.arithmetic], why: one domain}}\n")
    again = _retry([TrialRecord(0, "stopped", fixed_mix)], mixed)
    assert again.key == fixed_mix.key and again.values["mix.arithmetic"] == 1.0
    assert set(distributions(mixed, again.values)) == set(again.values)


def test_a_claim_beyond_the_trial_budget_is_withdrawn(micro_project, tmp_path, shared_storage):
    project = load_project(micro_project("cap", f"storage: {shared_storage}\n"))
    space = RecipeSpace.from_yaml(SMALL_SPACE)
    recipes = [Recipe(v, dict(space.fixed)) for v in space.sobol(3, seed=0)]
    ledger = Ledger(project, tmp_path / "cap")
    first = ledger.start(recipes[0], space, max_trials=2)
    ledger.finish(first, {"arithmetic/add": 0.5}, {"wall_s": 3.0}, [])
    running = ledger.start(recipes[1], space, max_trials=2)  # another worker's, still training
    assert ledger.start(recipes[2], space, max_trials=2) is None
    assert "trial budget (2) is taken" in ledger.withdrawal
    assert [r.number for r in ledger.records()] == [0, 1]
    assert ledger.spent().trials == 1 and ledger.spent().running == 1
    # an exception no path recorded: the search's `finally` releases the trial as interrupted (a retry),
    # what it had used by its last progress record spent
    ledger.progress(running, [{"step": 1.0}], {"wall_s": 4.0, "tokens": 96.0})
    ledger.release(running, "its worker stopped during the trial (KeyError: 'x')")
    released = ledger.records()[1]
    assert (released.state, released.message) == (
        "interrupted", "interrupted: its worker stopped during the trial (KeyError: 'x')")
    assert released.cost == {"wall_s": 4.0, "tokens": 96.0} and ledger.spent().total("wall_s") >= 3.0 + 4.0
    assert not ledger._beats
    ledger.release(first, "nothing to do")  # a trial already recorded is left as it is
    assert ledger.records()[0].state == "complete"


def test_a_stopped_trial_takes_no_slot_of_a_trial_budget(micro_project, tmp_path):
    """A trial the budget cut (`stopped`) is run again by a search with more budget; the claim and `spent` leave
    it out of a trial budget, its cost spent (until stop 53 it and its rerun took two slots)."""
    from sro.budget import Budget

    space = RecipeSpace.from_yaml(SMALL_SPACE)
    recipes = [Recipe(v, dict(space.fixed)) for v in space.sobol(2, seed=0)]
    ledger = Ledger(load_project(micro_project("slot")), tmp_path / "slot")
    ledger.end_early(ledger.start(recipes[0], space, max_trials=1), "stopped", {"arithmetic/add": 0.3},
                     {"wall_s": 30.0}, [], "stopped by the wall-clock budget at step 2 of 4")
    spent = ledger.spent()
    assert (spent.trials, spent.wall_s) == (0, 30.0) and Budget.parse("1trials").exhausted(spent) is None
    rerun = ledger.start(recipes[0], space, max_trials=1)
    assert rerun is not None, ledger.withdrawal
    assert ledger.start(recipes[1], space, max_trials=1) is None  # the rerun holds the one slot
    ledger.finish(rerun, {"arithmetic/add": 0.5}, {"wall_s": 60.0}, [])
    assert [r.state for r in ledger.records()] == ["stopped", "complete"]
    spent = ledger.spent()
    assert (spent.trials, spent.wall_s) == (1, 90.0) and Budget.parse("1trials").exhausted(spent)


def test_a_cost_budget_counts_what_running_trials_have_used(micro_project, tmp_path, shared_storage):
    """Two workers share a wall-clock (or GPU-hour, or token) budget: what another worker's trial has
    used so far counts as spent, both when a worker decides whether to start a trial and while its own
    trial trains (the check after each step stops it where the study's finished and running trials
    fill the budget)."""
    import time

    from sro.budget import Budget
    from sro.search import _budget_spent

    project = load_project(micro_project("clock", f"storage: {shared_storage}\n"))
    space = RecipeSpace.from_yaml(SMALL_SPACE)
    recipes = [Recipe(v, dict(space.fixed)) for v in space.sobol(3, seed=0)]
    ledger = Ledger(project, tmp_path / "clock")
    done = ledger.start(recipes[0], space)
    ledger.finish(done, {"arithmetic/add": 0.5}, {"wall_s": 30.0, "tokens": 1000.0, "gpu_h": 0.25}, [])
    theirs = ledger.start(recipes[1], space)  # another worker's, training for 50 s so far
    theirs.set_user_attr("started", time.time() - 50)
    ledger.progress(theirs, [], {"tokens": 400.0, "gpu_h": 0.5})
    spent = ledger.spent()
    assert (spent.wall_s, spent.tokens, spent.gpu_h, spent.running) == (30.0, 1000.0, 0.25, 1)
    assert 50 <= spent.running_wall_s < 55 and (spent.running_tokens, spent.running_gpu_h) == (400.0, 0.5)
    # the running trial's seconds are read when `spent` is taken: 50 s, or a few more on a loaded machine
    assert re.search(r"\(5[0-4]s of it by 1 trial\(s\) still training\)", Budget.parse("70s").exhausted(spent))
    assert Budget.parse("1200tok").exhausted(spent) == "1400 of 1200 training tokens spent (400 of it by 1 trial(s) still training)"
    assert Budget.parse("0.5gpu-h").exhausted(spent) == "0.75 of 0.50 GPU-hours spent (0.50 of it by 1 trial(s) still training)"
    assert Budget.parse("2000tok,1gpu-h").exhausted(spent) is None
    assert Budget.parse("100s").remaining_wall_s(spent) == pytest.approx(20, abs=5)
    mine = ledger.start(recipes[2], space)  # this worker's trial, 10 s in
    mine.set_user_attr("started", time.time() - 10)
    assert "wall time spent" in _budget_spent(ledger, Budget.parse("85s"), every=0)()  # 30 + 50 + 10 > 85
    assert _budget_spent(ledger, Budget.parse("200s"), every=0)() is None
    assert _budget_spent(ledger, Budget.parse("5trials"), every=0)() is None  # no cost to watch
    assert "training tokens" in _budget_spent(ledger, Budget.parse("1300tok"), every=0)()
    # each running trial still scores after it stops: 2 × 10 s of scoring are spent already (stop 38: two
    # workers overspent a 180 s budget by half)
    assert _budget_spent(ledger, Budget.parse("100s"), every=0)() is None  # 30 + 50 + 10 < 100
    assert "20s of it the running trials' held-out scoring" in _budget_spent(ledger, Budget.parse("100s"), every=0,
                                                                            score_s=10.0)()
    assert _budget_spent(ledger, Budget.parse("120s"), every=0, score_s=10.0)() is None  # 110 < 120
    assert "GPU-hours" in _budget_spent(ledger, Budget.parse("0.76gpu-h"), every=0, score_s=36.0, on_gpu=True)()
    later = _budget_spent(ledger, Budget.parse("85s"), every=60)
    assert later() is None  # the storage is read at most once a minute here
    for t in (theirs, mine):
        ledger.release(t, "test over")


@pytest.mark.slow
def test_a_trial_stops_where_a_token_budget_runs_out(micro_project, tmp_path, monkeypatch):
    """A lone worker's trial checks the budget while it trains: a token budget stops it mid-training,
    recorded as `stopped` with its partial scores, and the search ends there."""
    import sro.search as search_mod
    from rich.console import Console

    from sro.budget import Budget

    monkeypatch.setattr(search_mod, "SHARED_CHECK_S", 0.0)  # check after every step
    project, runs = _with_small_space(micro_project, tmp_path, "tok")
    (runs / "tok" / "space.yaml").write_text(SMALL_SPACE.replace("low: 2, high: 3", "low: 8, high: 9"))
    summary = search_mod.run_search(load_project(project), Budget.parse("600tok"), runs, optimizer="random",
                                    console=Console(record=True, width=200))
    [trial] = summary.trials
    assert trial.state == "stopped" and len(trial.curve) < trial.recipe.values["steps"], trial
    assert "stopped by the budget (" in trial.message and "training tokens spent" in trial.message
    assert 600 <= trial.cost["tokens"] < 600 + trial.curve[0]["tokens"]  # the step that crossed it, no more
    assert "training tokens spent" in summary.stop_reason


@pytest.mark.parametrize("mutate,needle", [
    (lambda t: t.replace("seed: 0", "seed: [0"), "malformed YAML"),
    (lambda t: t.replace("- reasoning_gym: basic_arithmetic", "- reasoning_gym: basic_arithmetc", 1),
     "unknown reasoning-gym generator"),
])
def test_cli_config_errors_one_line_exit_2(micro_project, tmp_path, mutate, needle):
    p = micro_project("bad")
    p.write_text(mutate(p.read_text()))
    r = run("search", str(p), "--runs", str(tmp_path / "runs"), cwd=tmp_path)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr


def test_cli_bad_budget_exit_2(micro_project, tmp_path):
    r = run("search", str(micro_project("b")), "--budget", "10 parsecs", "--runs", str(tmp_path), cwd=tmp_path)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "cannot parse budget" in lines[0]


def test_a_gpu_hour_budget_on_a_cpu_worker_is_refused_alone_and_flagged_beside_another(micro_project, tmp_path):
    """On the CPU no trial spends GPU-hours: `8gpu-h` alone would search forever (until stop 25 it did)."""
    from rich.console import Console

    from sro.budget import Budget
    from sro.search import _check_gpu_budget

    project = micro_project("g")
    project.write_text(project.read_text().replace("runtime: {", "runtime: {device: cpu, "))  # a GPU machine too
    r = run("search", str(project), "--budget", "1gpu-h", "--runs", str(tmp_path / "runs"), cwd=tmp_path)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "never end" in lines[0] and "1gpu-h,2h" in lines[0], r.stderr
    assert not (tmp_path / "runs" / "g").exists()  # refused before the study is made
    console = Console(record=True, width=300)
    _check_gpu_budget(Budget.parse("1gpu-h,3trials"), load_project(project), console)
    assert "spend no GPU-hours" in console.export_text()


def test_cli_missing_run_dir(tmp_path):
    r = run("report", str(tmp_path / "nope"), cwd=tmp_path)
    assert r.returncode == 2 and "nope: no such folder; pass a run folder" in r.stderr


def test_runs_that_is_a_file_is_one_line(micro_project, tmp_path, monkeypatch):
    """`--runs FILE` (or a path under a file) was a NotADirectoryError traceback in search, design and train,
    and `sro export --out FILE/x.yaml` said "File exists" (a walkthrough, stop 34)."""
    _nothing_prepared(monkeypatch)
    afile = tmp_path / "afile"
    afile.write_text("x")
    doc = {"project": CORRIDOR, "recipe": {"values": {"lr": 0.002, "steps": 2}, "fixed": {"max_new_tokens": 4}}}
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(doc))
    for args in (("search", str(micro_project())), ("design", str(micro_project())),
                 ("train", str(tmp_path / "recipe.yaml"))):
        for runs in (afile, afile / "under"):
            r = run_here(*args, "--runs", str(runs))
            assert r.exit_code == 2 and f"--runs {runs}: {afile} is a file; pass a folder" in " ".join(
                r.stderr.split()) and "Traceback" not in r.output, (args, r.output[-2000:])
    run_dir = tmp_path / "runs" / "light"
    _run_with_one_trial(load_project(micro_project("light")), run_dir)
    r = run_here("export", str(run_dir), "--trial", "0", "--out", str(afile / "x.yaml"))
    assert r.exit_code == 2 and f"{afile} is a file, not a folder; pass --out a writable file path" in " ".join(
        r.stderr.split()), r.output[-2000:]


def test_runs_that_is_a_broken_link_or_not_writable_is_one_line(micro_project, tmp_path, monkeypatch):
    """A dangling symlink as --runs was a FileExistsError traceback, and a parent that cannot be read or
    written a PermissionError one (a review, stop 35). Root may write anywhere, so the permission cases
    are made by patching what the check asks of the system."""
    _nothing_prepared(monkeypatch)
    link = tmp_path / "gone"
    link.symlink_to(tmp_path / "nowhere")
    project = str(micro_project())
    for runs in (link, link / "under"):
        r = run_here("search", project, "--runs", str(runs))
        assert r.exit_code == 2 and f"{link} is a link to {tmp_path / 'nowhere'}, which does not exist" in " ".join(
            r.stderr.split()) and "Traceback" not in r.output, r.output[-2000:]
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == locked else real_access(p, mode, **kw))
    r = run_here("design", project, "--runs", str(locked / "runs"))
    assert r.exit_code == 2 and f"{locked} is not writable by this user" in " ".join(r.stderr.split()), r.output[-2000:]
    real_exists = Path.exists

    def exists(self, *a, **kw):
        if self == locked / "runs":
            raise PermissionError(13, "Permission denied", str(self))
        return real_exists(self, *a, **kw)

    monkeypatch.setattr(Path, "exists", exists)
    r = run_here("search", project, "--runs", str(locked / "runs"))
    assert r.exit_code == 2 and f"{locked / 'runs'} cannot be read (permission denied)" in " ".join(
        r.stderr.split()) and "Traceback" not in r.output, r.output[-2000:]


def _run_with_one_trial(project, run_dir: Path) -> Ledger:
    """A run folder as `sro search` leaves it (its project.yaml and study), with one complete trial."""
    ledger = Ledger(project, run_dir)
    (run_dir / "project.yaml").write_text(yaml.safe_dump(project.portable_dump(), sort_keys=False))
    space = RecipeSpace.from_yaml(SMALL_SPACE)
    trial = ledger.start(Recipe(space.sobol(1, seed=0)[0], dict(space.fixed)), space)
    ledger.finish(trial, {"arithmetic/add": 0.5}, {"wall_s": 3.0}, [])
    from sro.optimizer.hypervolume import hypervolume_history

    ledger.put("hypervolume", hypervolume_history(ledger.records(), project.objective_directions()))
    return ledger


def test_show_says_when_no_trial_beats_the_stated_reference_point(micro_project, tmp_path):
    """A stated reference point worse than every trial made the hypervolume 0 with no word why, and a stall
    redesign came every `redesign_on_stall` trials (a review, stop 52)."""
    from sro.optimizer.hypervolume import hypervolume_history

    for name, ref, says in (("strict", 0.9, True), ("loose", 0.1, False)):
        project = load_project(micro_project(name, f"reference_point: {{arithmetic/add: {ref}}}\n"))
        run_dir = tmp_path / "runs" / name
        ledger = _run_with_one_trial(project, run_dir)  # its trial scores 0.5
        ledger.put("hypervolume", hypervolume_history(ledger.records(), project.objective_directions(),
                                                      project.reference_point))
        shown = CliRunner().invoke(app, ["show", str(run_dir)], env={"COLUMNS": "200"})
        assert shown.exit_code == 0, shown.output
        said = " ".join(shown.output.split())  # rich wraps at the terminal's width, whatever COLUMNS says
        assert ("the hypervolume is 0: no complete trial is better than the project's reference_point "
                "{'arithmetic/add': 0.9} on every objective" in said) is says, shown.output
        assert "reference point [" in said and "; for cost inferred from the trials, so it moves as they come" in said


def test_show_says_why_a_trial_failed_and_train_notes_a_failed_trials_recipe(micro_project, tmp_path, monkeypatch):
    """`sro show` listed a failed trial as `failed` with no reason (it was in the report only), and `sro train`
    on a failed trial's exported recipe gave no word that it had failed."""
    import sro.executor
    from sro.config import ConfigError

    project = load_project(micro_project("light"))
    run_dir = tmp_path / "runs" / "light"
    ledger = _run_with_one_trial(project, run_dir)
    space = RecipeSpace.from_yaml(SMALL_SPACE)
    trial = ledger.start(Recipe(space.sobol(2, seed=0)[1], dict(space.fixed)), space)
    ledger.fail(trial, "CUDA out of memory at step 3 [/dev/x]\nTraceback ...", {"wall_s": 1.0}, [])
    r = run_here("show", str(run_dir))
    # (exception text printed as text: '[/dev/x]' was rich markup, a MarkupError traceback)
    assert r.exit_code == 0 and "trial 1 failed: CUDA out of memory at step 3 [/dev/x]" in r.stdout, r.output[-2000:]
    assert "Traceback" not in r.stdout
    out = tmp_path / "failed.yaml"
    r = run_here("export", str(run_dir), "--trial", "1", "--out", str(out))
    assert r.exit_code == 0 and "note: trial 1 is not complete (failed): the file holds its recipe and no scores" in r.stderr
    assert "note:" not in run_here("export", str(run_dir), "--trial", "0").stderr  # a complete one: nothing to say

    def prepare(*a, **k):  # stop where the base model would be built
        raise ConfigError("stopped before the base model")

    monkeypatch.setattr(sro.executor.SearchContext, "prepare", classmethod(prepare))
    r = run_here("train", str(out), "--runs", str(tmp_path / "runs"))
    said = "".join(r.stdout.split())  # (rich folds a long path mid-word at the terminal's width)
    assert "".join(f"note: {out} is trial 1's recipe (failed in its search: CUDA out of memory at step 3 [/dev/x]); "
                   "training it again".split()) in said, r.stdout
    r = run_here("export", str(run_dir), "--trial", "0", "--out", str(out))  # not over trial 1's file unasked
    assert r.exit_code == 2 and f"{out} exists; pass --force to overwrite it" in " ".join(r.stderr.split()), r.output
    assert yaml.safe_load(out.read_text())["trial"] == 1
    r = run_here("export", str(run_dir), "--trial", "0", "--out", str(tmp_path))
    assert r.exit_code == 2 and "it is a folder; pass --out a file path" in " ".join(r.stderr.split()), r.output
    assert run_here("export", str(run_dir), "--trial", "0", "--out", str(out), "--force").exit_code == 0
    assert "note:" not in run_here("train", str(out), "--runs", str(tmp_path / "runs")).stdout  # a complete one
    # a setting in both values: and fixed: (a hand edit): the one used is said (a review, stop 38)
    doc = yaml.safe_load(out.read_text())
    steps = doc["recipe"]["values"]["steps"]
    doc["recipe"]["fixed"]["steps"] = steps + 7
    out.write_text(yaml.safe_dump(doc))
    said = "".join(run_here("train", str(out), "--runs", str(tmp_path / "runs")).stdout.split())
    assert f"recipe.values.steps={steps}isused,notrecipe.fixed.steps={steps + 7}" in said


def test_reading_verbs_and_bad_input_do_not_load_torch(micro_project, tmp_path):
    """`sro show`, `sro export` and a search refused for its --budget answer in about 2 s, not 5-7:
    torch, transformers and BoTorch are loaded by the verbs that train or propose, not by these."""
    project = load_project(micro_project("light"))
    run_dir = tmp_path / "runs" / "light"
    _run_with_one_trial(project, run_dir)
    probe = ("import sys\nfrom sro.cli import app\ntry:\n    app(sys.argv[1:])\nexcept SystemExit as e:\n"
             "    print('EXIT', e.code)\nprint('LOADED', [m for m in ('torch', 'transformers', 'botorch') "
             "if m in sys.modules])")
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    for args, code, says in ((["show", str(run_dir)], 0, "arithmetic/add"),
                             (["export", str(run_dir), "--trial", "0"], 0, "recipe:"),
                             (["search", str(micro_project("light")), "--budget", "10 parsecs"], 2, "cannot parse")):
        r = subprocess.run([sys.executable, "-c", probe, *args], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=120)
        assert f"EXIT {code}" in r.stdout and says in r.stdout + r.stderr, (args, r.stdout[-2000:], r.stderr[-2000:])
        assert "LOADED []" in r.stdout, (args, r.stdout[-300:])


def test_version_names_sro_and_its_libraries_without_loading_them(tmp_path):
    """`sro --version` prints SRO's release and its libraries' from package metadata, on one line."""
    from importlib.metadata import version

    probe = ("import sys\nfrom sro.cli import app\ntry:\n    app(['--version'])\nexcept SystemExit as e:\n"
             "    print('EXIT', e.code)\nprint('LOADED', [m for m in ('torch', 'transformers', 'botorch') "
             "if m in sys.modules])")
    r = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="40"))
    first = r.stdout.splitlines()[0]
    assert first.startswith(f"sro {version('sro')} (torch {version('torch')}, ") and "botorch" in first, r.stdout
    assert "EXIT 0" in r.stdout and "LOADED []" in r.stdout, r.stdout


@pytest.mark.slow
def test_search_with_botorch_optimizer(micro_project, tmp_path):
    """Past its Sobol start (4 trials), `--optimizer botorch` proposes from the GP; no recipe repeats.
    The project's start recipe is the first trial, and counts toward the Sobol start."""
    project, runs = _with_small_space(micro_project, tmp_path, "bo")
    ours = {"lr": 0.002, "group_size": 4, "prompts_per_step": 5, "steps": 2}
    project.write_text(project.read_text() + f"start_recipes:\n  - {json.dumps(ours)}\n")
    r = run("search", str(project), "--budget", "5trials", "--optimizer", "botorch", "--runs", str(runs), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("start recipe 1 of 1 (the project's start_recipes)") == 1
    trials = _trials(runs / "bo")
    assert [t["state"] for t in trials] == ["complete"] * 5
    assert trials[0]["recipe"]["values"] == ours
    assert len({Recipe.from_dict(t["recipe"]).key for t in trials}) == 5
    r = run_here("search", str(project), "--optimizer", "bayes", "--runs", str(runs))  # (exit 2 in a subprocess:
    assert r.exit_code == 2 and "unknown optimizer 'bayes'" in r.stderr  # test_reading_verbs_and_bad_input_...)


def test_a_start_recipe_outside_the_space_stops_a_new_study(micro_project, tmp_path):
    """In a new study, a start recipe that is not a recipe of the space is a one-line error (exit 2)
    before anything trains, and with a written space.yaml before the base model is even prepared."""
    runs = tmp_path / "runs"
    (runs / "badstart").mkdir(parents=True)
    (runs / "badstart" / "space.yaml").write_text(SMALL_SPACE)
    bad = micro_project("badstart", extra="start_recipes:\n  - {lr: 0.002, group_size: 4, steps: 2}\n")
    r = run("search", str(bad), "--budget", "2trials", "--runs", str(runs), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert f"{bad}: start_recipes[0]: recipe lacks 'prompts_per_step'" in r.stderr.replace("\n", "")
    assert "preparing benchmarks" not in r.stdout
    assert not (runs / "badstart" / "trials.json").exists() or _trials(runs / "badstart") == []


def test_a_start_recipe_key_no_trial_reads_stops_a_new_study_before_its_set_up(micro_project, tmp_path, monkeypatch):
    """With no space written yet (it is designed after the set-up), a start recipe's typo (`lrr`) was named only
    after the benchmarks, the base model's preparation and scoring and the design (a review, stop 57)."""
    from sro.executor import SearchContext

    def prepare(*a, **kw):
        raise AssertionError("the set-up started")

    monkeypatch.setattr(SearchContext, "prepare", classmethod(prepare))
    typo = micro_project("typo", extra="start_recipes:\n  - {lrr: 0.002, steps: 2}\n"
                                       "  - {values: {lr: 0.002, stepz: 2}, fixed: {}}\n")
    r = run_here("search", str(typo), "--budget", "2trials", "--runs", str(tmp_path / "runs"))
    assert r.exit_code == 2, r.output[-3000:]
    said = " ".join(r.stderr.split())
    assert f"{typo}: start_recipes[0]: no part of a trial reads 'lrr' (did you mean 'lr'?); fix or remove it" in said
    assert "preparing benchmarks" not in r.stdout
    exported = micro_project("typo2", extra="start_recipes:\n  - {values: {lr: 0.002, stepz: 2}, fixed: {}}\n")
    r = run_here("search", str(exported), "--budget", "2trials", "--runs", str(tmp_path / "runs"))
    assert r.exit_code == 2 and "start_recipes[0]: no part of a trial reads 'stepz' (did you mean 'steps'?)" in \
        " ".join(r.stderr.split()), r.output[-3000:]
    # an agent project's exported recipe: its mt.* got "did you mean 'beta'?" or the known keys (stop 58)
    agent = micro_project("typo3", extra="start_recipes:\n  - {values: {algorithm: proas, lr: 0.002, mt.history: 2, "
                                         "proas.lam: 0.5, stepz: 2}, fixed: {mt.episodes: 4}}\n")
    r = run_here("search", str(agent), "--budget", "2trials", "--runs", str(tmp_path / "runs"))
    assert r.exit_code == 2 and ("start_recipes[0]: no part of a trial reads 'stepz' (did you mean 'steps'?), "
                                 "'mt.history', 'proas.lam' (a multi-turn agent project's settings, and this "
                                 "project's domains are single-turn: drop them, and algorithm proas, or give the "
                                 "recipe to an agent project); fix or remove them") in " ".join(r.stderr.split()), \
        r.output[-3000:]


def test_start_recipes_that_no_longer_fit_a_study_with_trials_are_skipped(micro_project, tmp_path):
    """A study that has trials (a resume, or a redesign that moved a bound past a start recipe) skips a
    start recipe that does not fit, with a note, instead of failing."""
    from sro.search import _start_recipes

    ours = {"lr": 0.002, "group_size": 4, "prompts_per_step": 5, "steps": 2}
    far = {**ours, "lr": 0.5}
    project = load_project(micro_project("skip", extra=f"start_recipes:\n  - {json.dumps(ours)}\n"
                                                        f"  - {json.dumps(far)}\n"))
    space = RecipeSpace.from_yaml(SMALL_SPACE)
    notes: list[str] = []
    with pytest.raises(SpaceError, match=r"start_recipes\[1\]: lr=0.5 is outside"):
        _start_recipes(project, space, tmp_path, [], notes.append)  # a new study: refused
    done = TrialRecord(0, "complete", Recipe(ours, dict(space.fixed)), {"arithmetic/add": 0.5}, {"wall_s": 1.0})
    starts = _start_recipes(project, space, tmp_path, [done], notes.append)
    assert [r.values for r in starts] == [ours]
    assert len(notes) == 1 and "skipped" in notes[0] and "start_recipes[1]: lr=0.5 is outside" in notes[0]


@pytest.mark.slow
def test_two_workers_share_one_study(micro_project, micro_model, tmp_path, shared_storage):
    """Two `sro search` processes on one project, started together as workers on two machines would be:
    each with its own runs folder, one shared storage. They search the study's space (the second
    machine has no space.yaml of its own), share the budget exactly, never run the same recipe, and
    every trial's scores belong to the recipe that trained (each trial is created with its recipe, not
    popped from a queue another worker also fills)."""
    project = micro_project("pair", f"storage: {shared_storage}\n")
    Ledger(load_project(project), tmp_path / "setup").publish_space(RecipeSpace.from_yaml(SMALL_SPACE))
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    runs = [tmp_path / "machine_a", tmp_path / "machine_b"]
    for r in runs:  # each machine's model cache holds the micro model (each would pre-train it, 8 s apiece)
        shutil.copytree(micro_model, r / ".cache" / micro_model.name)
    procs = [subprocess.Popen([*SRO, "search", str(project), "--budget", "6trials", "--runs", str(r)], cwd=tmp_path,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in runs]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        assert "using the study's search space (v1, shared by the workers" in out, out[-2000:]
        assert "pre-training tiny" not in out  # the copied model was found
    for r in runs:
        assert RecipeSpace.from_yaml((r / "pair" / "space.yaml").read_text()).to_yaml() == \
            RecipeSpace.from_yaml(SMALL_SPACE).to_yaml()
    ledger = Ledger(load_project(project), runs[0] / "pair")  # the storage (a worker's trials.json may
    # predate the other's last trial)
    states = [r.state for r in ledger.records()]
    # a claim beyond the budget (finished + running earlier trials) is withdrawn: exactly the budget
    assert len(states) == 6 and "running" not in states and "interrupted" not in states, states
    keys = [r.recipe.key for r in ledger.records()]
    assert len(set(keys)) == len(keys)
    by_pid = {}
    for t in ledger.study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
        rec = Recipe.from_dict(t.user_attrs["recipe"])
        assert t.user_attrs["key"] == rec.key and t.params == {k: rec.values[k] for k in t.params}
        assert set(t.params) <= {p.name for p in RecipeSpace.from_yaml(SMALL_SPACE).params}
        by_pid.setdefault(t.user_attrs["pid"], []).append(t.number)
    assert len(by_pid) == 2, by_pid  # both workers trained


def test_report_front_plot_follows_each_objectives_direction():
    """The report's front plot minimizes a `min` benchmark (ECE) as the table's front does; it used to
    maximize every benchmark and drew a dominated trial on the front."""
    from sro.ledger import TrialRecord
    from sro.pareto import front_numbers
    from sro.report import front_figure

    objs = [("cal/ece", "min"), ("cal/acc", "max")]
    recs = [TrialRecord(0, "complete", Recipe({"lr": 1.0}, {}), {"cal/ece": 0.05, "cal/acc": 0.9}),
            TrialRecord(1, "complete", Recipe({"lr": 2.0}, {}), {"cal/ece": 0.40, "cal/acc": 0.5})]
    line = next(t for t in front_figure(recs, objs, {}).data if t.name == "Pareto front")
    assert front_numbers(recs, objs) == {0} and list(zip(line.x, line.y)) == [(0.05, 0.9)]
    # with cost as a third objective, the ringed trials are the table's front (trial 1 is cheap: on it),
    # though the two drawn axes alone would drop it; one benchmark: the base model is drawn at cost 0
    recs[0].cost["wall_s"], recs[1].cost["wall_s"] = 30.0, 5.0
    fig = front_figure(recs, [*objs, ("cost", "min")], {"cal/ece": 0.5, "cal/acc": 0.2})
    ring = next(t for t in fig.data if t.name == "Pareto front (all objectives)")
    assert sorted(zip(ring.x, ring.y)) == [(0.05, 0.9), (0.40, 0.5)]
    fig = front_figure(recs, [("cal/acc", "max")], {"cal/acc": 0.2})
    assert [(t.x[0], t.y[0]) for t in fig.data if t.name == "base model"] == [(0.2, 0.0)]
    # the staircase turns at corners the front attains: up first where x is maximized (acc against cost:
    # from (0.5, 5 s) up to 30 s, then across to 0.9; "hv" drew (0.9, 5 s), better than every trial), across
    # first where x is minimized
    fig = front_figure(recs, [("cal/acc", "max"), ("cost", "min")], {})
    assert next(t for t in fig.data if t.name == "Pareto front").line.shape == "vh"
    fig = front_figure(recs, [("cal/ece", "min"), ("cost", "min")], {})
    assert next(t for t in fig.data if t.name == "Pareto front").line.shape == "hv"


def test_the_sparkline_keeps_the_latest_value_and_the_report_escapes_what_a_project_names(micro_project, tmp_path):
    """Past 60 values the sparkline sampled every n-th and dropped the latest (the number beside it said 1.0,
    the plot was flat); the report is autoescaped (a base model id or a categorical value from an edited
    space.yaml reached the page as HTML)."""
    from sro.report import sparkline, write_report

    line = sparkline([0.1] * 61 + [1.0])
    assert line[-1] == "█" and set(line[:-1]) == {"▁"} and len(line) <= 62
    space = RecipeSpace([Param("lr", "float", 1e-4, 1e-3, log=True),
                         Param("mode", "categorical", choices=["<b>bold</b>", "plain"])], fixed={"max_new_tokens": 4})
    project = load_project(micro_project("esc"))
    ledger = Ledger(project, tmp_path / "esc")
    (tmp_path / "esc" / "project.yaml").write_text(yaml.safe_dump(project.portable_dump(), sort_keys=False))
    trial = ledger.start(Recipe({"lr": 3e-4, "mode": "<b>bold</b>"}, dict(space.fixed)), space)
    ledger.finish(trial, {"arithmetic/add": 0.5}, {"wall_s": 3.0}, [])
    page = write_report(tmp_path / "esc").read_text()
    assert "&lt;b&gt;bold&lt;/b&gt;" in page and "<td class=\"l\"><b>bold</b>" not in page
    # numbers right-aligned, text left (a formatted float was text, so every score sat left)
    assert "<td>0.5</td>" in page and "<td>0.0003</td>" in page and '<td class="l">&lt;b&gt;' in page
    assert "<div" in page and "Plotly.newPlot" in page  # the figures are still HTML


def test_the_report_shows_a_setting_a_later_space_version_fixed(micro_project, tmp_path):
    """v1 searched lr, v2 fixed it at 0.002: the v2 trial's lr cell was blank, though it trained at 0.002 (a
    review, stop 37). A setting every trial ran at one fixed value gets no column."""
    from sro.report import write_report

    project = load_project(micro_project("fx"))
    ledger = Ledger(project, tmp_path / "fx")
    (tmp_path / "fx" / "project.yaml").write_text(yaml.safe_dump(project.portable_dump(), sort_keys=False))
    v1 = RecipeSpace([Param("lr", "float", 1e-4, 1e-2, log=True), Param("steps", "int", 2, 4)],
                     fixed={"max_new_tokens": 4})
    v2 = RecipeSpace([Param("steps", "int", 2, 4)], fixed={"max_new_tokens": 4, "lr": 0.002}, version=2)
    for recipe, space, score in ((Recipe({"lr": 3e-4, "steps": 2}, dict(v1.fixed)), v1, 0.5),
                                 (Recipe({"steps": 3}, dict(v2.fixed)), v2, 0.6)):
        ledger.finish(ledger.start(recipe, space), {"arithmetic/add": score}, {"wall_s": 3.0}, [])
    page = write_report(tmp_path / "fx").read_text()
    rows = [r for r in page.split("<tr") if "<td>0.6</td>" in r]
    assert len(rows) == 1 and "<td>0.002</td>" in rows[0], rows
    assert "<th>lr</th>" in page and "<th>max_new_tokens</th>" not in page


def test_a_busy_storage_is_written_again_and_progress_never_fails_a_trial(micro_project, tmp_path, monkeypatch):
    """A storage under contention raises for a moment (SQLite's "database is locked"): a trial's result
    is written again after a back-off, and a progress record that fails is skipped (the next comes
    seconds later), so neither ends the trial or the worker."""
    import sro.ledger as ledger_mod
    from optuna.exceptions import StorageInternalError

    monkeypatch.setattr(ledger_mod.time, "sleep", lambda s: None)
    project = load_project(micro_project("busy"))
    space = RecipeSpace.from_yaml(SMALL_SPACE)
    ledger = Ledger(project, tmp_path / "busy")
    trial = ledger.start(Recipe(space.sobol(1, seed=0)[0], dict(space.fixed)), space)
    real, fails = ledger.storage.set_trial_user_attr, {"left": 2}

    def flaky(*args, **kwargs):
        if fails["left"]:
            fails["left"] -= 1
            raise StorageInternalError("database is locked")
        return real(*args, **kwargs)

    monkeypatch.setattr(ledger.storage, "set_trial_user_attr", flaky)
    ledger.progress(trial, [{"reward": 0.5}], {"tokens": 1.0})  # fails once: skipped, no error
    assert fails["left"] == 1
    ledger.finish(trial, {"arithmetic/add": 0.5}, {"wall_s": 3.0}, [])  # fails once more: written again
    [rec] = ledger.records()
    assert rec.state == "complete" and rec.scores == {"arithmetic/add": 0.5} and fails["left"] == 0


def test_a_study_with_other_objectives_or_an_unreachable_storage_is_a_one_line_error(micro_project, tmp_path,
                                                                                   monkeypatch):
    """Editing the objectives and running the search again, or a `storage:` that cannot be reached, are
    the user's to fix: a `ConfigError` (exit 2, one line; they used to be tracebacks), the password masked."""
    import sro.ledger as ledger_mod
    from sro.config import ConfigError

    path = micro_project("edit")
    Ledger(load_project(path), tmp_path / "edit")
    path.write_text(path.read_text().replace("  - cost: min\n", ""))
    with pytest.raises(ConfigError, match=r"study 'edit' has other objectives than \['arithmetic/add'\]"):
        Ledger(load_project(path), tmp_path / "edit")
    monkeypatch.setattr(ledger_mod.time, "sleep", lambda s: None)
    away = load_project(micro_project("away", "storage: postgresql+psycopg://u:secret@127.0.0.1:1/db\n"))
    with pytest.raises(ConfigError, match=r"storage postgresql\+psycopg://u:\*\*\*@127.0.0.1:1/db: cannot open") as e:
        Ledger(away, tmp_path / "away")
    assert "secret" not in str(e.value) and "check `storage:`" in str(e.value)


def test_the_reports_hypervolume_note_names_a_stated_reference_point(micro_project, tmp_path):
    """The report says where the hypervolume's reference point comes from: the project's
    `reference_point` where it states one (it always described the inferred point)."""
    from sro.optimizer.hypervolume import hypervolume_history
    from sro.report import write_report

    project = load_project(micro_project("hvnote", "reference_point: {arithmetic/add: 0.1}\n"))
    run_dir = tmp_path / "runs" / "hvnote"
    ledger = _run_with_one_trial(project, run_dir)
    ledger.put("hypervolume", hypervolume_history(ledger.records(), project.objective_directions(),
                                                  project.reference_point))
    page = html.unescape(write_report(run_dir).read_text())  # the page is autoescaped: project&#39;s
    assert "the project's reference_point for arithmetic/add, 10% of the range below the worst observed " \
           "value for the others" in page
    assert "maximization frame (cost negated)" in page  # every minimized objective named (was: always "cost")


def test_the_report_recomputes_the_hypervolume_when_the_reference_point_changed(micro_project, tmp_path):
    """A rerun with a new `reference_point` (the budget spent: it rewrites project.yaml and the report) showed
    the history computed at the old point under a note naming the new one (a review, stop 38)."""
    from sro.report import _load

    project = load_project(micro_project("hvref"))
    run_dir = tmp_path / "runs" / "hvref"
    _run_with_one_trial(project, run_dir)
    before = _load(run_dir)[2]["hypervolume"]
    assert before["stated"] == {} and before["ref_point"][-1] != -10.0
    moved = load_project(micro_project("hvref", "reference_point: {cost: 10}\n"))
    (run_dir / "project.yaml").write_text(yaml.safe_dump(moved.portable_dump(), sort_keys=False))
    after = _load(run_dir)[2]["hypervolume"]
    assert after["stated"] == {"cost": 10.0} and after["ref_point"][-1] == -10.0  # cost negated: maximization frame
    assert after["hypervolume"] != before["hypervolume"]


def test_read_commands_never_make_a_study_and_the_report_recomputes_the_hypervolume(micro_project, tmp_path):
    """`sro report` on a run folder whose study.db is gone made an empty one and overwrote trials.json and
    report.html with empty ones (a review, stop 28); and the stored hypervolume history, written after each
    trial, is a trial short when a kill came between a trial's result and it."""
    from sro.report import _load

    project = load_project(micro_project("readonly"))
    run = tmp_path / "runs" / "readonly"
    run.mkdir(parents=True)
    (run / "project.yaml").write_text(yaml.safe_dump(project.portable_dump()))
    (run / "trials.json").write_text('[{"number": 0}]')
    for args in (["report", str(run)], ["show", str(run)], ["export", str(run), "--trial", "0"]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2 and "has no study.db" in res.output, args
    assert not (run / "study.db").exists() and (run / "trials.json").read_text() == '[{"number": 0}]'
    ledger = Ledger(project, run)
    space = RecipeSpace.from_yaml(SMALL_SPACE)
    t = ledger.start(Recipe(space.sobol(1, seed=0)[0], dict(space.fixed)), space)
    ledger.finish(t, {"arithmetic/add": 0.5}, {"wall_s": 3.0}, [])  # killed before the history was stored
    assert ledger.get("hypervolume") is None
    assert _load(run)[2]["hypervolume"]["trials"] == [0]
    (run / "project.yaml").write_text("name: readonly\ndomains: {a: [")  # cut short
    res = CliRunner().invoke(app, ["show", str(run)])
    assert res.exit_code == 2 and "is not a readable project" in res.output and "Traceback" not in res.output
    for where, needle in ((tmp_path / "nope", "no such folder"), (tmp_path / "runs", "its run folders: ")):
        res = CliRunner().invoke(app, ["show", str(where)])
        assert res.exit_code == 2 and needle in res.output


def test_read_commands_write_nothing_and_show_dead_trials_as_recover_would(micro_project, tmp_path, monkeypatch):
    """`sro report`, `show` and `export` ran `recover` on open: they wrote to the study (a read-only copy from a
    cluster failed; a report changed a study another machine searches). They now open a SQLite study
    read-only and write nothing to it, and show the trials `recover` would end as it would record them: a
    dead process's trial interrupted, one killed before its first heartbeat too, and one killed after
    its result complete."""
    import hashlib
    import time

    project = load_project(micro_project("look", "heartbeat_s: 1\n"))
    run_dir = tmp_path / "runs" / "look"
    ledger = _run_with_one_trial(project, run_dir)
    space = RecipeSpace.from_yaml(SMALL_SPACE)
    a, b, c = (Recipe(v, dict(space.fixed)) for v in space.sobol(4, seed=0)[1:])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    died = ledger.start(a, space)  # 1: its process died mid-training
    ledger.progress(died, [{"reward": 0.1}], {"wall_s": 4.0})
    ledger._stop_heartbeat(died)
    died.set_user_attr("pid", dead.pid)
    done = ledger.start(b, space)  # 2: killed after its result, before the trial was told finished
    ledger._stop_heartbeat(done)
    with monkeypatch.context() as m:
        m.setattr(ledger.study, "tell", lambda *args, **kw: (_ for _ in ()).throw(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            ledger.finish(done, {"arithmetic/add": 0.75}, {"wall_s": 3.0}, [])
    done.set_user_attr("pid", dead.pid)
    ledger.storage.create_new_trial(ledger.study._study_id, optuna.trial.create_trial(  # 3: no beat since its claim
        state=optuna.trial.TrialState.RUNNING, user_attrs={"recipe": c.to_dict(), "key": c.key, "pid": 1,
                                                           "host": "otherhost", "started": time.time() - 60}))
    db = run_dir / "study.db"
    before = (hashlib.sha256(db.read_bytes()).hexdigest(), db.stat().st_mtime_ns, sorted(os.listdir(run_dir)))

    r = run("report", str(run_dir), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    shown = CliRunner().invoke(app, ["show", str(run_dir)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "running" not in shown.output, shown.output
    assert CliRunner().invoke(app, ["export", str(run_dir), "--trial", "2"]).exit_code == 0
    assert (hashlib.sha256(db.read_bytes()).hexdigest(), db.stat().st_mtime_ns) == before[:2]
    assert sorted(set(os.listdir(run_dir)) - {"report.html", "trials.json"}) == before[2]  # no journal beside it
    trials = _trials(run_dir)
    assert [t["state"] for t in trials] == ["complete", "interrupted", "complete", "interrupted"]
    assert trials[1]["message"] == "interrupted: its process died" and trials[1]["cost"] == {"wall_s": 4.0}
    assert trials[2]["scores"] == {"arithmetic/add": 0.75} and "since its claim" in trials[3]["message"]
    # a search's open (`recover`) records them as the read-only commands showed them
    recorded = [(t.number, t.state, t.message, t.cost) for t in Ledger(project, run_dir).records()]
    assert recorded == [(t["number"], t["state"], t["message"], t["cost"]) for t in trials]
    assert hashlib.sha256(db.read_bytes()).hexdigest() != before[0]

    # the SQLite file is opened read-only (SQLite's mode=ro: refused even for root, unlike a chmod)
    from optuna.exceptions import StorageInternalError

    with pytest.raises(StorageInternalError):
        Ledger(project, run_dir, create=False).put("written", True)
    # a run folder that cannot be written to (a read-only copy): `sro report` says so in one line
    monkeypatch.setattr("sro.report.write_whole", lambda path, text: (_ for _ in ()).throw(
        PermissionError(13, "Permission denied", str(path))))
    res = CliRunner().invoke(app, ["report", str(run_dir)])
    assert res.exit_code == 2 and "cannot write" in res.output and "sro show" in res.output, res.output


def _kill_mid_write(db: Path) -> None:
    """Leave `db` as a search killed in mid-write does: a large change half written, its journal hot."""
    code = (f"import sqlite3, os\nc = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
            "c.execute('PRAGMA cache_size=1'); c.execute('BEGIN'); c.execute('CREATE TABLE junk(x)')\n"
            "for i in range(2000): c.execute('INSERT INTO junk VALUES (randomblob(1000))')\n"
            "c.execute('UPDATE trial_user_attributes SET value_json=value_json')\nos._exit(0)\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    assert db.with_name("study.db-journal").stat().st_size > 0


def test_read_commands_roll_back_a_killed_write_or_say_why_they_cannot(micro_project, tmp_path, monkeypatch):
    """A search killed in mid-write leaves a hot journal, which a read-only open cannot roll back: `sro show`
    retried for 5 s and said to check the storage's URL. A read-only command now rolls it back first (one
    read through a read-write connection, as any SQLite reader would) and reads the study as it was; where
    the folder is not writable it says what is wrong and what to do."""
    import sro.ledger as ledger_mod
    from sro.config import ConfigError

    project = load_project(micro_project("hot"))
    run_dir = tmp_path / "runs" / "hot"
    _run_with_one_trial(project, run_dir).storage.engine.dispose()
    _kill_mid_write(run_dir / "study.db")
    r = subprocess.run([sys.executable, "-m", "sro.cli", "show", str(run_dir)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "complete" in r.stdout, r.stdout[-1000:] + r.stderr[-2000:]
    assert not (run_dir / "study.db-journal").exists()
    import sqlite3

    with closing(sqlite3.connect(run_dir / "study.db")) as db:  # the half-written change is undone
        assert not db.execute("SELECT name FROM sqlite_master WHERE name = 'junk'").fetchall()
    _kill_mid_write(run_dir / "study.db")
    writable = os.access
    monkeypatch.setattr(ledger_mod.os, "access", lambda path, mode: False if mode == os.W_OK else writable(path, mode))
    with pytest.raises(ConfigError, match="a search killed while writing left a half-written change in "
                                          "study.db-journal, and a read-only open cannot roll it back"):
        Ledger(project, run_dir, create=False)


def _scored_once(ledger: Ledger) -> None:
    """A finished trial in `ledger`'s study (of SMALL_SPACE's first Sobol recipe), so it holds a score."""
    space = RecipeSpace.from_yaml(SMALL_SPACE)
    t = ledger.start(Recipe(space.sobol(1, seed=len(ledger.records()))[0], dict(space.fixed)), space)
    assert t is not None, ledger.withdrawal
    ledger.finish(t, dict.fromkeys([k for k, _ in ledger.objectives if k != "cost"], 0.5),
                  {"wall_s": 1.0, "tokens": 0.0, "gpu_h": 0.0}, [])


def test_a_search_stopped_before_any_score_takes_the_mended_project(micro_project, tmp_path, monkeypatch):
    """A first search stopped by a bad base model (an HF id the hub cannot be reached for) made its study,
    and the mended project was then refused as "scored with another project" though nothing had been
    scored (a walkthrough, stop 34): a study that holds no score takes the project as it is now, and says
    so. The hub id is refused in one line naming the file and key, before any benchmark is prepared."""
    import time

    import httpx2
    import huggingface_hub

    from trainers import models

    def unreachable(model_id, **kw):
        raise httpx2.ConnectError("[Errno -2] Name or service not known")

    monkeypatch.setattr(huggingface_hub, "model_info", unreachable)
    monkeypatch.setattr(huggingface_hub.constants, "is_offline_mode", lambda: False)  # (the suite's env sets it)
    models.hub_offline.cache_clear()
    path, runs = micro_project("mended"), tmp_path / "runs"
    text = path.read_text()
    path.write_text(text.replace("base_model: tiny", "base_model: sro-test/nohub"))
    t = time.monotonic()
    r = run_here("search", str(path), "--budget", "1trials", "--runs", str(runs))
    err = " ".join(r.stderr.split())
    assert r.exit_code == 2 and f"error: {path}: base_model: sro-test/nohub: the hub cannot be reached" in err, err
    assert "hf download sro-test/nohub" in err and time.monotonic() - t < 20
    assert (runs / "mended" / "study.db").is_file() and "arithmetic/add" not in r.stdout
    path.write_text(text)  # mended
    _nothing_prepared(monkeypatch)
    r = run_here("search", str(path), "--budget", "1trials", "--runs", str(runs))
    out = " ".join(r.stdout.split())
    assert "the project changed since" in out and 'base_model: "sro-test/nohub" → "tiny"' in out, r.output
    assert isinstance(r.exception, AssertionError) and "prepared" in str(r.exception)  # it went on to the set-up
    ledger = Ledger(load_project(path), runs / "mended")  # the study took it: opened again without a word
    assert not ledger.changed
    _scored_once(ledger)  # once a trial holds a score, a change is refused as before
    path.write_text(text.replace("size: 24", "size: 12"))
    r = run_here("search", str(path), "--budget", "2trials", "--runs", str(runs))
    assert r.exit_code == 2 and "scored with another project" in r.stderr, r.output


def test_a_study_refuses_a_project_changed_where_its_scores_come_from(micro_project, tmp_path):
    """The same name with another benchmark size (or sources, seed, base model) was resumed and its old
    trials compared with the new ones (a review, stop 28); what only steers the search may change."""
    from sro.config import ConfigError

    _scored_once(Ledger(load_project(micro_project("same")), tmp_path / "same"))
    text = micro_project("same").read_text()
    edited = micro_project("same", "heartbeat_s: 30\npruning: {enabled: false}\n")  # steering only: resumes
    Ledger(load_project(edited), tmp_path / "same")
    assert "size: 24" in text
    edited.write_text(text.replace("size: 24", "size: 12"))
    with pytest.raises(ConfigError, match=r"scored with another project: domains\.arithmetic\.benchmarks.*size: "
                                          r"24 → 12; .*use a new `name:`"):
        Ledger(load_project(edited), tmp_path / "same")
    # the same project and data in another folder (another machine's checkout, a renamed folder) resumes;
    # the data edited in place does not
    for where in ("a", "b"):
        (tmp_path / where / "data").mkdir(parents=True)
        (tmp_path / where / "data" / "q.jsonl").write_text('{"question": "1+1", "answer": "2"}\n' * 3)
        (tmp_path / where / "p.yaml").write_text(
            "name: files\ndomains:\n  m:\n    sources: [{jsonl: data/q.jsonl}]\n"
            "    benchmarks: [{name: q, jsonl: data/q.jsonl}]\n")
        _scored_once(Ledger(load_project(tmp_path / where / "p.yaml"), tmp_path / "files"))
    (tmp_path / "b" / "data" / "q.jsonl").write_text('{"question": "1+1", "answer": "3"}\n' * 3)
    with pytest.raises(ConfigError, match=r"domains\.m\.sources\[0\]\.jsonl: \"q\.jsonl \(sha256 "):
        Ledger(load_project(tmp_path / "b" / "p.yaml"), tmp_path / "files")
    # the read-only commands read the study whatever its files have become since
    from sro.report import _load

    (tmp_path / "files" / "project.yaml").write_text(yaml.safe_dump(load_project(tmp_path / "b" / "p.yaml")
                                                                    .portable_dump()))
    assert [r.state for r in _load(tmp_path / "files")[1]] == ["complete", "complete"]
    from sro.ledger import _differences

    old = {"domains": {"a": {"sources": [{"reasoning_gym": "x", "jsonl": None}]}}}
    assert _differences(old, {"domains": {"a": {"sources": [{"reasoning_gym": None, "jsonl": "/d.jsonl"}]}}}) == [
        'domains.a.sources[0].reasoning_gym: "x" → null', 'domains.a.sources[0].jsonl: null → "/d.jsonl"']
    # a setting a later SRO adds to a source is no edit; a domain added is, and so is a generator's setting
    assert _differences({"b": {"q": {"config": {}}}}, {"b": {"q": {"config": {"max_digits": 4}}}}) == [
        "b.q.config.max_digits: null → 4"]
    assert _differences(old, {"domains": {"a": {"sources": [{"reasoning_gym": "x", "jsonl": None, "new": 1}]}}}) == []
    assert _differences(old, {"domains": {**old["domains"], "b": {}}}) == ["domains.b: null → {}"]


def test_a_trial_killed_after_its_result_completes_and_one_killed_before_its_first_beat_is_rerun(
        micro_project, tmp_path, monkeypatch):
    """Kill windows a review found (stop 28): after a trial's result was written but before the trial was
    told finished (it was rerun as interrupted); between a claim and its first heartbeat (a trial Optuna
    never takes for dead: on another machine, workers waited on it for ever); and a dead trial whose pid a
    live process has since taken (it waited out the heartbeat grace, 10 minutes by default)."""
    import time

    project = load_project(micro_project("windows", "heartbeat_s: 1\n"))
    ledger = Ledger(project, tmp_path / "windows")
    space = RecipeSpace.from_yaml(SMALL_SPACE)
    a, b = (Recipe(v, dict(space.fixed)) for v in space.sobol(2, seed=0))
    t = ledger.start(a, space)
    ledger._stop_heartbeat(t)
    monkeypatch.setattr(ledger.study, "tell", lambda *args, **kw: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):  # the kill, just before the tell
        ledger.finish(t, {"arithmetic/add": 0.5}, {"wall_s": 3.0}, [])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    t.set_user_attr("pid", dead.pid)
    u = optuna.Trial(ledger.study, ledger.storage.create_new_trial(ledger.study._study_id, optuna.trial.create_trial(
        state=optuna.trial.TrialState.RUNNING, user_attrs={"recipe": b.to_dict(), "key": b.key, "pid": 1,
                                                           "host": "otherhost", "started": time.time() - 60})))
    # and a trial of this host whose pid now names another process (pids are reused: pid 1 in a container)
    c = ledger.start(Recipe(space.sobol(3, seed=0)[2], dict(space.fixed)), space)
    ledger._stop_heartbeat(c)
    c.set_user_attr("pid", 1)
    c.set_user_attr("pid_started", -1)
    reopened = Ledger(project, tmp_path / "windows")
    recs = reopened.records()
    assert [(r.number, r.state) for r in recs] == [(0, "complete"), (1, "interrupted"), (2, "interrupted")]
    assert recs[0].scores == {"arithmetic/add": 0.5} and "since its claim" in recs[1].message
    assert u.number == 1 and "its process died" in recs[2].message


def test_a_trial_of_another_pid_namespace_with_this_hostname_is_judged_by_its_heartbeat(micro_project, tmp_path):
    """Two containers with one hostname (docker --network host, k8s hostNetwork) do not see each other's
    pids: a live worker's trial there was marked dead by pid, and its recipe trained twice (a review,
    stop 37). A trial's host is its name and its boot/pid namespace; another one waits for heartbeats."""
    from sro.ledger import _host_id

    project = load_project(micro_project("ns"))
    ledger = Ledger(project, tmp_path / "ns")
    space = RecipeSpace.from_yaml(SMALL_SPACE)
    a, b = (Recipe(v, dict(space.fixed)) for v in space.sobol(2, seed=0))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for recipe, host_id in ((a, "another-boot/4026531836"), (b, _host_id())):
        t = ledger.start(recipe, space)
        ledger._stop_heartbeat(t)
        t.set_user_attr("pid", dead.pid)  # the other container's pid, which this one cannot see
        t.set_user_attr("host_id", host_id)
    recs = Ledger(project, tmp_path / "ns").records()
    assert _host_id() is not None  # Linux: /proc has both
    assert [(r.number, r.state) for r in recs] == [(0, "running"), (1, "interrupted")]


def test_a_damaged_study_db_and_a_storage_outage_are_one_line(micro_project, tmp_path, monkeypatch):
    """A study.db with damaged pages was a traceback from every verb (Optuna's StorageInternalError, whose own
    text blames the data of a commit), and an outage longer than the retries outside a trial's writes (while
    the base model was scored) killed the search with one (a review, stop 37)."""
    from optuna.exceptions import StorageInternalError

    project = load_project(micro_project("dmg"))
    run_dir = tmp_path / "runs" / "dmg"
    _run_with_one_trial(project, run_dir)
    db = run_dir / "study.db"
    data = bytearray(db.read_bytes())
    assert len(data) > 3 * 4096
    data[4096:len(data) - 4096] = os.urandom(len(data) - 8192)  # the header kept: "disk image is malformed"
    db.write_bytes(bytes(data))
    for args in (["show", str(run_dir)], ["search", str(micro_project("dmg")), "--runs", str(tmp_path / "runs")]):
        res = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
        flat = " ".join(res.output.split())
        assert res.exit_code == 2 and f"{db} is damaged" in flat and ".recover" in flat, (args, res.output[-800:])
        assert isinstance(res.exception, SystemExit), res.exception  # typer's exit, not an error

    def outage(*args, **kw):
        try:
            raise sqlalchemy.exc.OperationalError("SELECT 1", {}, ConnectionRefusedError("connection refused"))
        except sqlalchemy.exc.OperationalError as e:
            raise StorageInternalError("An exception is raised during the commit.") from e

    monkeypatch.setattr("sro.search.run_search", outage)
    res = CliRunner().invoke(app, ["search", str(micro_project("up")), "--runs", str(tmp_path / "runs2")],
                             env={"COLUMNS": "300"})
    flat = " ".join(res.output.split())
    assert res.exit_code == 1 and "connection refused" in flat and "finished trials are kept" in flat, res.output


def test_a_lost_study_beside_a_report_of_trials_is_refused(micro_project, tmp_path):
    """A 0-byte study.db (a full disk, a partial copy) beside a trials.json of four trials: the search started
    over and overwrote trials.json and report.html, the last copies of the results (a review, stop 37)."""
    project = load_project(micro_project("lost"))
    run_dir = tmp_path / "runs" / "lost"
    _run_with_one_trial(project, run_dir)
    from sro.report import write_report

    write_report(run_dir)
    before = (run_dir / "trials.json").read_text()
    (run_dir / "study.db").write_bytes(b"")
    res = CliRunner().invoke(app, ["search", str(micro_project("lost")), "--runs", str(tmp_path / "runs")],
                             env={"COLUMNS": "300"})
    flat = " ".join(res.output.split())
    assert res.exit_code == 2 and "the study holds no trial, but" in flat and "lists 1 from its last report" in flat, \
        res.output
    assert (run_dir / "trials.json").read_text() == before


def test_a_space_with_every_recipe_run_says_why_it_stops_before_the_budget(micro_project, tmp_path):
    """Two recipes in the space and a budget of four: the search stopped after two without a word, which read
    as a crash or a budget miscount (a review, stop 37)."""
    runs = tmp_path / "runs"
    (runs / "two").mkdir(parents=True)
    (runs / "two" / "space.yaml").write_text(
        "version: 1\ndesigner: test\nfixed: {algorithm: grpo, max_new_tokens: 4, lr: 0.002, group_size: 4, "
        "prompts_per_step: 4}\nparams:\n  steps: {kind: int, low: 1, high: 2, why: two recipes}\n")
    res = CliRunner().invoke(app, ["search", str(micro_project("two")), "--budget", "4trials", "--optimizer", "random",
                                   "--runs", str(runs)], env={"COLUMNS": "300"})
    flat = " ".join(res.output.split())
    assert res.exit_code == 0, res.output[-2000:]
    assert "stopping before the budget 4trials is spent: the search space has no recipe left" in flat, flat[-1500:]
    assert [t["state"] for t in _trials(runs / "two")] == ["complete", "complete"]


def test_a_cached_tiny_model_is_said_to_come_from_the_cache(micro_project, tmp_path):
    """Every run said "pre-training ... for 800 steps", a cached model too, so a build of minutes could not be
    told from a read of a second (a review, stop 28)."""
    from sro.executor import SearchContext

    said: list[str] = []
    SearchContext.prepare(load_project(micro_project("cached")), tmp_path / "runs" / ".cache", log=said.append)
    assert any("tiny (Qwen2 architecture), from the cache: " in s for s in said), said
    assert not any("pre-training on" in s for s in said)


def test_a_generator_benchmark_larger_than_its_problem_space_says_so(micro_project, tmp_path):
    """One-digit addition has about a hundred questions: a benchmark of 300 repeated them, each weighing in its score
    several times, without a word (a review, stop 37)."""
    from sro.executor import SearchContext

    path = micro_project("rep")
    path.write_text(path.read_text().replace("size: 24", "size: 300"))
    said: list[str] = []
    SearchContext.prepare(load_project(path), tmp_path / "runs" / ".cache", log=said.append)
    note = next((s for s in said if "300 items but" in s), None)
    assert note is not None and "distinct questions" in note, said
    assert int(note.split("300 items but ")[1].split()[0]) < 300


def test_sigterm_records_the_running_trial_interrupted_and_runs_is_not_a_run_folder(micro_project, tmp_path):
    """SIGTERM (`kill`, `docker stop`, a scheduler's preemption) killed the search without a word: its trial
    stayed running until its heartbeat went stale, 10 minutes on another machine (a review, stop 28). It now
    ends the search as Ctrl-C does. And `--runs` naming a run folder started a study nested inside it."""
    import signal
    import time

    project, runs = _with_small_space(micro_project, tmp_path, "term")
    text = (runs / "term" / "space.yaml").read_text().replace("low: 2, high: 3, why: short", "low: 400, high: 400, "
                                                                                          "why: long")
    (runs / "term" / "space.yaml").write_text(text)
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    proc = subprocess.Popen([*SRO, "search", str(project), "--budget", "1trials", "--runs", str(runs)], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ledger = None
    for _ in range(240):  # until its trial is training
        time.sleep(0.5)
        if (runs / "term" / "study.db").is_file():
            ledger = ledger or Ledger(load_project(project), runs / "term")
            recs = ledger.records()
            if recs and recs[0].curve:
                break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "stopped by SIGTERM" in err, err[-2000:]
    [rec] = Ledger(load_project(project), runs / "term").records()
    assert rec.state == "interrupted" and rec.message.startswith("interrupted by SIGTERM")
    r = run_here("search", str(project), "--runs", str(runs / "term"))
    assert r.exit_code == 2 and f"pass the folder that holds it: --runs {runs}" in r.output


def test_ctrl_c_between_a_result_and_its_end_keeps_the_result(micro_project, tmp_path, monkeypatch):
    """Ctrl-C (or SIGTERM) after a trial's result was written but before the trial was told finished was
    recorded as interrupted over it, and the finished recipe ran again (a review, stop 28)."""
    project = load_project(micro_project("ctrlc"))
    ledger = Ledger(project, tmp_path / "ctrlc")
    space = RecipeSpace.from_yaml(SMALL_SPACE)
    t = ledger.start(Recipe(space.sobol(1, seed=0)[0], dict(space.fixed)), space)
    with monkeypatch.context() as m:
        m.setattr(ledger.study, "tell", lambda *args, **kw: (_ for _ in ()).throw(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            ledger.finish(t, {"arithmetic/add": 0.5}, {"wall_s": 3.0}, [])
    ledger.interrupt(t, [], {"wall_s": 3.0})  # what the search does on the KeyboardInterrupt
    [rec] = ledger.records()
    assert rec.state == "complete" and rec.scores == {"arithmetic/add": 0.5} and not ledger._beats


def test_a_result_written_before_an_interruption_stands_however_the_worker_stops(micro_project, tmp_path,
                                                                               monkeypatch):
    """A review (stop 52) of the paths around a result's write. (1) Ctrl-C inside `end_early`'s `tell` reaches only
    the search's `finally: release`, which wrote interrupted over the pruned result. (2) Ctrl-C after `finish`'s
    `tell` landed: `interrupt` took the finished trial for another worker's and added an interrupted late copy,
    so `spent` dropped the complete trial. (3) A `tell` that landed but whose answer was lost was retried, and the
    result recorded twice. (4) One busy storage write in `withdraw` ended the worker with its claim running."""
    import sqlalchemy.exc

    from sro.budget import Budget

    project = load_project(micro_project("stands"))
    space = RecipeSpace.from_yaml(SMALL_SPACE)
    recipes = [Recipe(v, dict(space.fixed)) for v in space.sobol(4, seed=0)]

    def interrupted_tell(ledger, after_it: bool):
        real = ledger.study.tell

        def tell(*args, **kw):
            if after_it:
                real(*args, **kw)
            raise KeyboardInterrupt()
        return tell

    ledger = Ledger(project, tmp_path / "one")
    t = ledger.start(recipes[0], space)
    with monkeypatch.context() as m:
        m.setattr(ledger.study, "tell", interrupted_tell(ledger, after_it=False))
        with pytest.raises(KeyboardInterrupt):
            ledger.end_early(t, "pruned", {"arithmetic/add": 0.4}, {"wall_s": 50.0}, [], "pruned at 1/3")
    ledger.release(t, "its worker stopped during the trial (KeyboardInterrupt: )")
    assert [(r.state, r.cost) for r in ledger.records()] == [("pruned", {"wall_s": 50.0})] and not ledger._beats

    ledger = Ledger(project, tmp_path / "two")
    t = ledger.start(recipes[0], space)
    with monkeypatch.context() as m:
        m.setattr(ledger.study, "tell", interrupted_tell(ledger, after_it=True))
        with pytest.raises(KeyboardInterrupt):
            ledger.finish(t, {"arithmetic/add": 0.6}, {"wall_s": 100.0}, [])
    ledger.interrupt(t, [], {"wall_s": 100.0})
    assert [(r.state, r.late_of) for r in ledger.records()] == [("complete", None)]
    assert ledger.spent().trials == 1 and Budget.parse("1trials").exhausted(ledger.spent())

    ledger = Ledger(project, tmp_path / "three")
    t = ledger.start(recipes[0], space)
    real, calls = ledger.study.tell, []

    def lost_answer(*args, **kw):
        real(*args, **kw)
        calls.append(1)
        if len(calls) == 1:
            raise sqlalchemy.exc.OperationalError("COMMIT", {}, Exception("server closed the connection"))
    with monkeypatch.context() as m:
        m.setattr(ledger.study, "tell", lost_answer)
        ledger.finish(t, {"arithmetic/add": 0.6}, {"wall_s": 100.0}, [])
    assert [(r.state, r.late_of) for r in ledger.records()] == [("complete", None)]
    # the budget's two counts agree: a second trial may start, a third is withdrawn
    assert ledger.start(recipes[1], space, 2) is not None and ledger.start(recipes[2], space, 2) is None

    ledger = Ledger(project, tmp_path / "four")
    ledger.finish(ledger.start(recipes[0], space), {"arithmetic/add": 0.6}, {"wall_s": 1.0}, [])
    write, busy = ledger.storage.set_trial_user_attr, []

    def locked_once(trial_id, key, value):
        if key == "withdrawn" and not busy:
            busy.append(1)
            raise sqlalchemy.exc.OperationalError("UPDATE", {}, Exception("database is locked"))
        return write(trial_id, key=key, value=value)
    with monkeypatch.context() as m:
        m.setattr(ledger.storage, "set_trial_user_attr", locked_once)
        assert ledger.start(recipes[1], space, 1) is None  # over the budget: withdrawn, after one retry
    assert [t.state.name for t in ledger.study.get_trials()] == ["COMPLETE", "FAIL"] and busy


def test_recover_retries_a_busy_storage(micro_project, tmp_path, monkeypatch):
    """`recover` runs at every pass of the search loop; one "database is locked" in its heartbeat reads ended the
    search (a review, stop 52)."""
    import sqlalchemy.exc

    import sro.ledger as ledger_mod

    project = load_project(micro_project("busyrec"))
    ledger = Ledger(project, tmp_path / "busyrec")
    space = RecipeSpace.from_yaml(SMALL_SPACE)
    t = ledger.start(Recipe(space.sobol(1, seed=0)[0], dict(space.fixed)), space)
    ledger._stop_heartbeat(t)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    t.set_user_attr("pid", dead.pid)
    read, busy = ledger.storage._get_stale_trial_ids, []

    def locked_once(study_id):
        if not busy:
            busy.append(1)
            raise sqlalchemy.exc.OperationalError("SELECT", {}, Exception("database is locked"))
        return read(study_id)
    monkeypatch.setattr(ledger_mod.time, "sleep", lambda s: None)  # _again's back-off
    monkeypatch.setattr(ledger.storage, "_get_stale_trial_ids", locked_once)
    assert [r.key for r in ledger.recover()] == [Recipe(space.sobol(1, seed=0)[0], dict(space.fixed)).key] and busy
    assert [r.state for r in ledger.records()] == ["interrupted"]


def test_late_results_count_once_in_the_claim_and_in_the_budget():
    """`Ledger.start` and `Ledger.spent` share `counted`: a trial a late result supersedes is left out of both."""
    from sro.ledger import counted

    recs = [TrialRecord(0, "interrupted", Recipe({"lr": 1}), {}, {}), TrialRecord(1, "complete", Recipe({"lr": 2}), {}, {}),
            TrialRecord(2, "complete", Recipe({"lr": 1}), {}, {}, late_of=0)]
    assert [r.number for r in counted(recs)] == [1, 2]


def test_a_space_edited_under_a_study_records_the_next_trials(micro_project, tmp_path):
    """README: edit a choice list (or a scale) in space.yaml and rerun. The next trial's claim crashed with
    Optuna's "CategoricalDistribution does not support dynamic value space" (a walkthrough, stop 34): the
    study's param columns must keep the distribution its first trial recorded. Now a value the old
    distribution holds is recorded under it, one it cannot hold is left out of the columns (the recipe,
    which the search reads, is whole either way)."""
    project = load_project(micro_project())
    ledger = Ledger(project, tmp_path / "edited")
    old = RecipeSpace.from_yaml(SMALL_SPACE.replace("fixed: {algorithm: grpo, max_new_tokens: 4}",
                                                    "fixed: {max_new_tokens: 4}")
                                + "  algorithm: {kind: categorical, choices: [grpo, sft], why: t}\n")
    new = RecipeSpace.from_yaml(old.to_yaml().replace("- grpo\n", "- grpo\n    - proximal_kl\n")
                                .replace("log: true", "log: false").replace("version: 1", "version: 2"))
    assert new.param("algorithm").choices == ["grpo", "proximal_kl", "sft"] and not new.param("lr").log
    first = {"lr": 0.002, "group_size": 4, "prompts_per_step": 4, "steps": 2, "algorithm": "sft"}
    t = ledger.start(Recipe(first, dict(old.fixed)), old)
    ledger.finish(t, {"arithmetic/add": 0.5}, {"wall_s": 1.0, "tokens": 0.0, "gpu_h": 0.0}, [])
    for values in ({**first, "algorithm": "proximal_kl"}, {**first, "algorithm": "grpo", "lr": 0.0025}):
        t = ledger.start(Recipe(values, dict(new.fixed)), new)
        assert t is not None, ledger.withdrawal
        ledger.finish(t, {"arithmetic/add": 0.6}, {"wall_s": 1.0, "tokens": 0.0, "gpu_h": 0.0}, [])
    recs = Ledger(project, tmp_path / "edited").records()
    assert [r.state for r in recs] == ["complete"] * 3
    assert [r.recipe.values["algorithm"] for r in recs] == ["sft", "proximal_kl", "grpo"]
    trials = ledger.study.get_trials()
    assert "algorithm" not in trials[1].params and trials[1].params["lr"] == 0.002  # under the old log scale
    assert trials[2].params["algorithm"] == "grpo" and trials[2].distributions["lr"].log


def test_show_prints_every_benchmark_the_green_mark_reads(monkeypatch):
    """Objectives arithmetic and cost, a second benchmark scored but not an objective: trial 0 (better on the
    objective, cheaper) is not green because of the hidden benchmark, and nothing on screen said why (a review,
    stop 38). The benchmark is shown, marked, and a ✔ column says the same as the colour."""
    import sro.report as report
    from sro.budget import Spent
    from sro.ledger import TrialRecord

    base = {"arithmetic/h": 0.035, "multiplication/h": 0.09}
    records = [TrialRecord(0, "complete", Recipe({"lr": 1e-3}), scores={"arithmetic/h": 0.3, "multiplication/h": 0.05},
                           cost={"wall_s": 10.0}),
               TrialRecord(1, "complete", Recipe({"lr": 2e-3}), scores={"arithmetic/h": 0.2, "multiplication/h": 0.5},
                           cost={"wall_s": 20.0})]
    data = {"name": "two", "objectives": [{"arithmetic/h": "max"}, {"cost": "min"}]}
    info = {"base_scores": base, "spent": Spent(), "overlap": {}, "lower": [], "hypervolume": {}}
    import io

    import rich.console

    import sro.cli as cli

    out = io.StringIO()
    monkeypatch.setattr(cli, "console", rich.console.Console(file=out, width=200))  # wide whatever the worker's
    monkeypatch.setattr(report, "_load", lambda run_dir: (data, records, info))
    r = CliRunner().invoke(app, ["show", "anywhere"])
    assert r.exit_code == 0, r.output
    lines = [" ".join(line.replace("│", " ").split()) for line in out.getvalue().splitlines()]
    assert any("multiplication/h (no objective)" in line for line in lines)
    row = {line.split()[0]: line for line in lines if line.split() and line.split()[0] in ("base", "0", "1")}
    assert row["0"] == "0 complete 0.300 0.050 10 *" and row["1"] == "1 complete 0.200 0.500 20 ✔"
    assert row["base"] == "base 0.035 0.090"
    monkeypatch.setattr(report, "_load", lambda run_dir: (data, [], info))
    assert CliRunner().invoke(app, ["show", "anywhere"]).exit_code == 0 and "no trial yet" in out.getvalue()


def test_read_commands_say_a_study_is_lost_where_trials_json_lists_trials(micro_project, tmp_path):
    """`sro show` where study.db is gone, a folder or 0 bytes beside a trials.json of 2 trials said "no trial has
    been recorded there yet (run sro search first)" (a review, stop 38): the study is lost, and a search would
    refuse to start over it."""
    project = load_project(micro_project("lost"))
    run = tmp_path / "runs" / "lost"
    run.mkdir(parents=True)
    (run / "project.yaml").write_text(yaml.safe_dump(project.portable_dump()))
    (run / "trials.json").write_text('[{"number": 0}, {"number": 1}]')
    for make, needle in ((lambda: None, "has no study.db, though its trials.json lists 2 trial(s)"),
                         (lambda: (run / "study.db").mkdir(), "study.db is a folder, not a study file, though"),
                         (lambda: (run / "study.db").write_bytes(b""), "has no study 'lost', though its trials.json")):
        if (run / "study.db").is_dir():
            (run / "study.db").rmdir()
        make()
        res = CliRunner().invoke(app, ["show", str(run)], env={"COLUMNS": "300"})
        flat = " ".join(res.output.split())
        assert res.exit_code == 2 and needle in flat and "lost or emptied" in flat, flat
        assert "no trial has been recorded there yet" not in flat


def test_the_report_rows_say_why_a_trial_ended_early_and_show_the_base_model(micro_project, tmp_path):
    """Only a failed trial's row said why; a stopped, pruned or interrupted one now does too. The trial table has
    the base model's row (as `sro show`), the page says what cost is and what the front plot draws (a review,
    stop 38)."""
    from sro.report import write_report

    project = load_project(micro_project("rows"))
    run_dir = tmp_path / "runs" / "rows"
    ledger = _run_with_one_trial(project, run_dir)
    ledger.put("base_scores", {"arithmetic/add": 0.125})
    space = RecipeSpace.from_yaml(SMALL_SPACE)
    t = ledger.start(Recipe(space.sobol(2, seed=0)[1], dict(space.fixed)), space)
    ledger.end_early(t, "stopped", {"arithmetic/add": 0.25}, {"wall_s": 2.0}, [],
                     "stopped by the wall-clock budget at step 1 of 3")
    page = html.unescape(write_report(run_dir).read_text())
    cells = [c.strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", page)]
    assert cells[:4] == ["base", "", "", "0.125"]
    assert "stopped: stopped by the wall-clock budget at step 1 of 3" in cells
    assert "cost: a trial's wall seconds, from loading the base model to the end of its held-out scoring" in \
           " ".join(page.split())
    assert "drawn: arithmetic/add against cost" in page
