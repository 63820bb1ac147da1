"""Your own environment: a project's plugin registers an adapter, and `env:` sources play its games
(evaluators/adapters.py, evaluators/games.py, sro/plugins.py). The adapter is the example project's,
`search_spaces/plugins/corridor.py`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaluators.envs import ENVIRONMENTS, TextEnv, play
from evaluators.games import GameGenerationError
from evaluators.sources import SourceSpec, SourceSpecError, check_source_spec, derive_seed, make_task
from sro.config import ConfigError, load_project
from sro.plugins import load_plugins

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "search_spaces" / "plugins" / "corridor.py"


@pytest.fixture(scope="module", autouse=True)
def corridor():
    load_plugins([str(PLUGIN)], ROOT)
    load_plugins(["search_spaces/plugins/corridor.py"], ROOT)  # the same file again: imported once
    assert "corridor" in ENVIRONMENTS


def _task(seed: int = 5, **config):
    return make_task(SourceSpec("env", "corridor", {"length": 2, "doors": 3, "games": 4, "max_steps": 4, **config}),
                     seed)


def test_an_env_source_plays_the_adapters_games_with_sros_rules():
    task = _task()
    assert task.multi_turn and task.n_games == 4
    env = task.make_env(1)
    assert isinstance(env, TextEnv) and env.settings.max_steps == 4
    wins = play(env, lambda obs, st: st.walkthrough[0])
    assert wins.success and wins.steps == 3 and wins.invalid == 0 and wins.reason == "won"
    # the adapter never truncates: SRO's guard ends the episode at the step limit
    stuck = play(task.make_env(1), lambda obs, st: "look")
    assert not stuck.success and stuck.steps == 4 and stuck.reason == "step limit"
    # the policy's text is resolved to a command as for TextWorld: a number picks that choice, case is folded
    env = task.make_env(1)
    _, info = env.reset()
    st = info["step"]
    k = st.admissible.index(st.walkthrough[0]) + 1
    _, _, _, _, info = env.step(f"{k}\nthen more")
    assert info["step"].valid and info["step"].state_key == "hall1"
    _, _, _, _, info = env.step("  " + info["step"].walkthrough[0].upper() + ".")
    assert info["step"].state_key == "hall2"
    _, reward, term, trunc, info = env.step("take coin")
    assert reward == 1.0 and term and not trunc and info["step"].won


def test_an_env_sources_items_are_steps_of_sibling_games_and_its_games_avoid_the_held_out_ones():
    task = _task(teacher_noise=0.0)
    items = task.items(24)
    assert all(task.score(it, it.answer) == 1.0 for it in items)  # no noise: every answer is the walkthrough's
    assert any("vault" in it.question for it in items) and any("hall 2" in it.question for it in items)
    assert task.score(items[0], "nonsense") == 0.0
    # 9 games (3 doors, 2 halls): the training games replace the ones a player could not tell from held-out ones
    held = _task(derive_seed(0, "heldout", "c", "b"))
    train = _task(derive_seed(0, "train", "c", 0), games=4)
    before = train.signatures()
    train.keep_out(held.signatures())
    assert before & held.signatures() and not train.signatures() & held.signatures() and train.replaced
    # every game held out: the game space is too small, said in one line
    tight = _task(derive_seed(0, "train", "c", 0), length=1, doors=2)
    tight.keep_out(_task(derive_seed(0, "heldout", "c", "b"), length=1, doors=2, games=8).signatures())
    with pytest.raises(GameGenerationError, match="too small to keep training and held-out games apart"):
        tight.signatures()


@pytest.mark.parametrize("spec, needle", [
    (SourceSpec("env", "corridr", {}), "no environment 'corridr' is registered; did you mean 'corridor'?"),
    (SourceSpec("env", "alfworld", {}), "registered: corridor"),
    (SourceSpec("env", "corridor", {"doors": 9}), "environment 'corridor' refuses config {'doors': 9}: ValueError: "
                                                  "length must be an integer >= 1 and doors one of 2-4"),
    (SourceSpec("env", "corridor", {"colour": "red"}), "refuses config {'colour': 'red'}: TypeError"),
    (SourceSpec("env", "corridor", {"max_steps": 0}), "max_steps must be an integer >= 1 (got 0)"),
])
def test_a_bad_env_source_is_one_line_naming_the_fix(spec, needle):
    with pytest.raises(SourceSpecError) as e:
        check_source_spec(spec)
    assert needle in str(e.value)


def test_an_adapter_that_breaks_the_interface_is_named():
    class Wrong(TextEnv):
        def reset(self, *, seed=None, options=None):
            return "hello", {"admissible": ["go"]}  # no StepInfo

    ENVIRONMENTS.add("wrong_info", lambda seed, settings: Wrong(settings))
    ENVIRONMENTS.add("not_an_env", lambda seed, settings: object())
    with pytest.raises(SourceSpecError, match="environment 'wrong_info' at reset: returned \\(str, info with "
                                              "NoneType\\); it must return the observation text and info"):
        check_source_spec(SourceSpec("env", "wrong_info", {}))
    with pytest.raises(SourceSpecError, match="its factory returned a object, not an evaluators.envs.TextEnv"):
        check_source_spec(SourceSpec("env", "not_an_env", {}))
    # in a trial, an adapter's crash ends the episode as a failure, never the trial (as for TextWorld)
    result = play(make_task(SourceSpec("env", "wrong_info", {}), 0).make_env(0), lambda obs, st: "go")
    assert not result.success and result.reason.startswith("env error at reset: TypeError: environment 'wrong_info'")


PROJECT = """\
name: {name}
base_model: tiny
plugins: [{plugin}]
domains:
  corridor:
    sources:
      - env: corridor
        config: {{length: 1, doors: 3, games: 2, max_steps: 3}}
    benchmarks:
      - name: held
        env: corridor
        config: {{length: 1, doors: 3, games: 2, max_steps: 3}}
runtime: {{tiny_pretrain_steps: 10, threads: 1, max_new_tokens: 6}}
"""


@pytest.mark.parametrize("plugin, needle", [
    ("missing.py", "plugins[0]: missing.py: no such file"),
    ("no_such_module_here", "plugins[0]: no_such_module_here: no module 'no_such_module_here' on the Python path"),
    ("broken.py", "plugins[0]: broken.py: importing it failed (broken.py, line 2): ZeroDivisionError"),
])
def test_a_plugin_that_cannot_be_imported_is_a_config_error(tmp_path, plugin, needle):
    (tmp_path / "broken.py").write_text("x = 1\ny = x / 0\n")
    path = tmp_path / "p.yaml"
    path.write_text(PROJECT.format(name="p", plugin=plugin))
    with pytest.raises(ConfigError) as e:
        load_project(path)
    assert str(e.value).startswith(str(path)) and needle in str(e.value)


def test_the_example_project_reads_and_keeps_its_plugin_path():
    p = load_project(ROOT / "search_spaces" / "corridor.yaml")
    assert p.plugins == [str(PLUGIN)]  # absolute: the study's copy of the project imports the same file
    assert p.portable_dump()["plugins"] == [str(PLUGIN)]
    assert [b.metric for _, b in p.benchmarks()] == ["success"] and p.benchmarks()[0][1].size == 8


@pytest.mark.slow
def test_search_trains_an_agent_on_a_plugins_environment(tmp_path):
    """`sro search` on a project whose only domain is an adapter's environment: the plugin is imported from
    the project's folder, the tiny model pre-trains on its walks, and a trial plays its games."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "corridor.py").write_text(PLUGIN.read_text())
    (tmp_path / "c.yaml").write_text(PROJECT.format(name="c", plugin="plugins/corridor.py"))
    runs = tmp_path / "runs"
    (runs / "c").mkdir(parents=True)
    (runs / "c" / "space.yaml").write_text(
        "version: 1\ndesigner: test\nfixed: {algorithm: proas, max_new_tokens: 6}\nparams:\n"
        "  lr: {kind: float, low: 0.001, high: 0.002, log: true, why: small}\n"
        "  group_size: {kind: int, low: 2, high: 2, why: small}\n"
        "  prompts_per_step: {kind: int, low: 1, high: 1, why: small}\n"
        "  steps: {kind: int, low: 2, high: 2, why: short}\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    r = subprocess.run([sys.executable, "-m", "sro.cli", "search", "c.yaml", "--budget", "1trials", "--runs",
                        str(runs)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "trial 0: corridor/held=" in r.stdout and "base model held-out: corridor/held=" in r.stdout
    (trial,) = json.loads((runs / "c" / "trials.json").read_text())
    assert trial["state"] == "complete" and set(trial["scores"]) == {"corridor/held"}
    assert trial["recipe"]["fixed"]["algorithm"] == "proas"
