"""Your own environment: a project's plugin registers an adapter, and `env:` sources play its games
(evaluators/adapters.py, evaluators/games.py, sro/plugins.py). The adapter is the example project's,
`search_spaces/plugins/corridor.py`."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evaluators.envs import ENVIRONMENTS, EnvSettings, EpisodeResult, StepInfo, TextEnv, play, resolve_action
from evaluators.games import GameGenerationError
from evaluators.sources import SourceSpec, SourceSpecError, check_source_spec, derive_seed, make_task
from sro.config import ConfigError, load_project
from sro.plugins import PluginError, load_plugins

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "search_spaces" / "plugins" / "corridor.py"


@pytest.fixture(scope="module", autouse=True)
def own_cache(tmp_path_factory):
    """Walk caches in a folder of this run's, not the checkout's `runs/.cache` (a cache left by an earlier run
    would be read back, and a test of the walks would pass on code that no longer makes them)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SRO_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="module", autouse=True)
def corridor():
    load_plugins([str(PLUGIN)], ROOT)
    load_plugins(["search_spaces/plugins/corridor.py"], ROOT)  # the same file again: imported once
    assert "corridor" in ENVIRONMENTS


@pytest.fixture(scope="module")
def policy_model(micro_model):
    """Any policy: the micro project's tiny model (it knows arithmetic, not corridors)."""
    from trainers.models import load_policy

    return load_policy(micro_model, "cpu")


def _task(seed: int = 5, **config):
    return make_task(SourceSpec("env", "corridor", {"length": 2, "doors": 3, "games": 4, "max_steps": 4, **config}),
                     seed)


@pytest.mark.parametrize("field,value,says", [
    ("score", None, "StepInfo.score must be a finite number (got None)"),
    ("score", float("nan"), "StepInfo.score must be a finite number (got nan)"),
    ("max_score", 0.0, "StepInfo.max_score must be > 0 (got 0.0)"),
    ("won", "yes", "StepInfo.won must be True or False (got 'yes')"),
    ("state_key", 3, "StepInfo.state_key must be a str (got 3)"),
])
def test_a_malformed_step_info_ends_the_episode_naming_the_adapter(field, value, says):
    """A score of None was a TypeError out of the trial, past the episode's guard, and a max_score of 0 made
    scores of 1e9 (a review, stop 37): each is an env error naming the adapter and the field."""
    from dataclasses import replace

    from evaluators.adapters import Guarded
    from evaluators.envs import EnvSettings, StepInfo

    class Bad(TextEnv):
        def reset(self, *, seed=None, options=None):
            return "start", {"step": StepInfo(["look"], "s0")}

        def step(self, action):
            return "end", 0.0, True, False, {"step": replace(StepInfo(["look"], "s1", won=True, score=1.0),
                                                             **{field: value})}

    env = Guarded(lambda: Bad(EnvSettings(max_steps=3)), "bad", 0, EnvSettings(max_steps=3))
    res = play(env, lambda obs, st: "look")
    assert not res.success and res.reason.startswith("env error: TypeError: environment 'bad' at step: ") \
        and says in res.reason, res.reason
    import numpy as np

    good = Guarded(lambda: Bad(EnvSettings(max_steps=3)), "ok", 0, EnvSettings(max_steps=3))
    _, info = good.reset()
    assert info["step"].score == 0.0
    Bad.step = lambda self, a: ("end", 0.0, True, False, {"step": StepInfo(["look"], "s1", won=np.bool_(True),
                                                                           score=np.float32(1.0))})
    assert play(good, lambda obs, st: "look").success  # numpy's bool and float are taken


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
    assert info["step"].valid and info["step"].state_key == "corridor-6:hall1"  # game 1 of seed 5
    _, _, _, _, info = env.step("  " + info["step"].walkthrough[0].upper() + ".")
    assert info["step"].state_key == "corridor-6:hall2"
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


def test_held_out_games_are_kept_out_whatever_the_obs_mode_and_step_limit(register):
    """A game's signature is its first screen under fixed settings (`SIGNATURE_SETTINGS`), so a source and a
    benchmark that differ in `obs_mode` and `max_steps` keep apart the games of an adapter that renders full mode
    otherwise (until stop 53 each rendered with its own: no held-out game matched, and training played them: a
    review)."""
    corridor = ENVIRONMENTS.get("corridor")

    class Verbose(corridor):
        def _render(self, valid, won=False):
            obs, info = super()._render(valid, won)
            return (f"[full] {obs}" if self.settings.obs_mode == "full" else obs), info

    register("verbose_corridor", Verbose)
    def spec(**play):
        return SourceSpec("env", "verbose_corridor", {"length": 2, "doors": 3, "games": 4, **play})

    held = make_task(spec(obs_mode="full", max_steps=3), derive_seed(0, "heldout", "c", "b"))
    train = make_task(spec(max_steps=6), derive_seed(0, "train", "c", 0))
    assert held.make_env(0).reset()[0].startswith("[full] You are in hall 1")
    assert held.signature(7) == train.signature(7)
    route = lambda t, g: tuple(corridor(t.played_seed(g), EnvSettings(), length=2, doors=3).right)  # noqa: E731
    held_routes = {route(held, g) for g in range(4)}
    assert {route(train, g) for g in range(4)} & held_routes  # a held-out game among the training seeds' games
    train.keep_out(held.signatures())
    assert not {route(train, g) for g in range(4)} & held_routes and train.replaced


def test_with_confidence_every_fourth_item_asks_for_the_chance_of_success():
    """`confidence: true`: items 3, 7, 11, ... (`CONFIDENCE_EVERY`) ask for a 0-9 chance of success at a step
    1 to max_steps, any digit the answer (the format, not the calibration), scored 1 for a stated digit; the
    other items are the plain steps (no test pinned the cadence, the digits or that score before stop 49)."""
    plain, asked = _task(teacher_noise=0.0), _task(teacher_noise=0.0, confidence=True)
    items, steps = asked.items(400), plain.items(400)
    conf = [i for i, it in enumerate(items) if it.entry["best"] is None]
    assert conf == list(range(3, 400, 4))
    assert [(it.question, it.answer) for i, it in enumerate(items) if i not in conf] == \
        [(it.question, it.answer) for i, it in enumerate(steps) if i not in conf]
    assert {items[i].answer for i in conf} == set("0123456789")
    shown = {int(m.group(1)) for i in conf for m in [re.search(r"step (\d+) of 4", items[i].question)] if m}
    assert shown == {1, 2, 3, 4}
    assert asked.score(items[3], "7") == 1.0 and asked.score(items[3], "likely") == 0.0
    assert asked.score(items[0], items[0].answer) == 1.0
    assert _task(confidence=0).confidence is False and _task(confidence=1).confidence is True  # 0/1 as false/true


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


@pytest.fixture
def register():
    """Register test environments for one test, and forget them after it."""
    names = []

    def add(name, factory):
        ENVIRONMENTS.add(name, factory)
        names.append(name)

    yield add
    for name in names:
        ENVIRONMENTS.remove(name)


def test_an_adapter_that_breaks_the_interface_is_named(register):
    class Wrong(TextEnv):
        def reset(self, *, seed=None, options=None):
            return "hello", {"admissible": ["go"]}  # no StepInfo

    register("wrong_info", lambda seed, settings: Wrong(settings))
    register("not_an_env", lambda seed, settings: object())
    with pytest.raises(SourceSpecError, match="environment 'wrong_info' at reset: returned \\(str, info with "
                                              "NoneType\\); it must return the observation text and info"):
        check_source_spec(SourceSpec("env", "wrong_info", {}))
    with pytest.raises(SourceSpecError, match="its factory returned a object, not an evaluators.envs.TextEnv; its "
                                              "factory .* must return an instance of a TextEnv subclass") as e:
        check_source_spec(SourceSpec("env", "not_an_env", {}))
    assert "refuses config" not in str(e.value)  # the config was not at fault (a review, stop 57)
    # in a trial, an adapter's crash ends the episode as a failure, never the trial (as for TextWorld)
    result = play(make_task(SourceSpec("env", "wrong_info", {}), 0).make_env(0), lambda obs, st: "go")
    assert not result.success and result.reason.startswith("env error at reset: TypeError: environment 'wrong_info'")


def test_a_factory_that_fails_ends_that_episode_not_the_benchmark_nor_the_trial(register, policy_model):
    """A simulator that cannot be reached for some games (its factory raises when the env is made): those
    episodes are env errors, the others are played, and every env that was opened is closed."""
    from evaluators.envs import EnvSettings
    from trainers.multiturn import evaluate_episodes

    corridor = ENVIRONMENTS.get("corridor")
    opened, closed = [], []

    def flaky(seed, settings, **kw):
        if seed % 3 == 2:
            raise ConnectionError(f"simulator for seed {seed} unavailable")
        env = corridor(seed, settings, **kw)
        opened.append(seed)
        real = env.close
        env.close = lambda: (closed.append(seed), real())[1]
        return env

    register("flaky", flaky)
    task = make_task(SourceSpec("env", "flaky", {"length": 1, "games": 6, "max_steps": 2}), 0)
    model, tok = policy_model
    failures: list[str] = []
    out = evaluate_episodes(model, tok, task, 6, max_new_tokens=4, failures=failures)
    assert len(failures) == 2 and all("ConnectionError: simulator for seed" in f for f in failures), failures
    assert 0.0 <= out["success"] <= 4 / 6 and sorted(opened) == sorted(closed) and len(opened) == 4
    assert isinstance(task.make_env(0).settings, EnvSettings)


def test_an_adapters_walks_are_cached_on_disk_and_read_back_without_opening_a_game(register, tmp_path):
    corridor = ENVIRONMENTS.get("corridor")
    opened: list[int] = []

    def counted(seed, settings, **kw):
        opened.append(seed)
        return corridor(seed, settings, **kw)

    register("counted", counted)
    spec = SourceSpec("env", "counted", {"length": 2, "games": 2, "max_steps": 4})
    first = make_task(spec, 3, tmp_path).items(10)
    assert sorted(set(opened)) == [5, 6]  # the two sibling games (seed + games + g) were walked
    files = sorted((tmp_path / "env" / "counted").glob("*.items.json"))
    assert len(files) == 2
    opened.clear()
    assert make_task(spec, 3, tmp_path).items(10) == first and opened == []  # read back: no game opened
    make_task(SourceSpec("env", "counted", {"length": 3, "games": 2, "max_steps": 4}), 3, tmp_path).items(2)
    assert len(list((tmp_path / "env" / "counted").glob("*.items.json"))) == 4  # other settings, other walks


def test_commands_in_the_adapters_spelling_game_scoped_state_keys_and_number_commands(register):
    from evaluators.envs import StepInfo

    class Shop(TextEnv):
        """Capitalized commands, a number command, the same state key in every game."""

        def __init__(self, seed, settings):
            super().__init__(settings)
            self.got: list[str] = []

        def _info(self, won=False):
            return {"step": StepInfo(["Search[Red Shoes]", "7", "Buy Now!"], "page", won=won,
                                     walkthrough=[] if won else ["Search[Red Shoes]", "7"])}

        def reset(self, *, seed=None, options=None):
            self.got = []
            return "Shop front. Choices: Search[Red Shoes], 7, Buy Now!", self._info()

        def step(self, action):
            self.got.append(action)
            return "ok", 0.0, False, False, self._info(won=self.got == ["Search[Red Shoes]", "7"])

    register("shop", Shop)
    task = make_task(SourceSpec("env", "shop", {"games": 2, "max_steps": 3, "teacher_noise": 0.0}), 11)
    env = task.make_env(0)
    _, info = env.reset()
    st = info["step"]
    assert st.admissible == ["search[red shoes]", "7", "buy now"] and st.walkthrough == ["search[red shoes]", "7"]
    assert st.state_key == "shop-11:page" and task.make_env(1).reset()[1]["step"].state_key == "shop-12:page"
    env.step("Search[red  SHOES]")
    _, _, term, _, info = env.step("7")  # a command that is a number is that command, not the 7th choice
    assert env.inner.got == ["Search[Red Shoes]", "7"] and term and info["step"].won
    # the walkthrough's own answer scores 1: the verifier and the env read commands alike
    item = task.item(0)
    assert item.answer == "search[red shoes]" and task.score(item, "Search[Red Shoes]") == 1.0
    # free text (no choice matches) reaches the adapter as the policy wrote its first line
    env = task.make_env(0)
    env.reset()
    env.step("Find Blue Hat\nmore")
    assert env.inner.got == ["Find Blue Hat"]


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
    # an exported recipe's plugin, moved since: the fix is its entry, not the project's folder (a review, stop 57)
    ("/nonexistent-sro/plugins/moved.py", "plugins[0]: /nonexistent-sro/plugins/moved.py: no such file "
                                          "(/nonexistent-sro/plugins/moved.py; an absolute path, as a run's project.yaml "
                                          "and `sro export` keep a plugin: the file has moved or is on another machine; "
                                          "edit this entry under plugins: to where it is now)"),
    ("no_such_module_here", "plugins[0]: no_such_module_here: no module 'no_such_module_here' on the Python path"),
    ("broken.py", "plugins[0]: broken.py: importing it failed (broken.py, line 2): ZeroDivisionError"),
    # a module the plugin imports is missing, not the plugin: say which
    ("needs.py", "plugins[0]: needs.py: importing it failed (needs.py, line 1): ModuleNotFoundError: No module "
                 "named 'needs_a_missing_dependency'"),
    ("shop_dep_adapter", "plugins[0]: shop_dep_adapter: importing it failed (shop_dep_adapter.py, line 1): "
                         "ModuleNotFoundError: No module named 'shop_dep'"),  # not "no module 'shop_dep_adapter'"
    # accepted, it failed at the first game as "refuses config ...: 'int' object is not callable" (a review, stop 57)
    ("not_a_factory.py", "plugins[0]: not_a_factory.py: importing it failed (not_a_factory.py, line 2): TypeError: "
                         "environment 'sro_test_42': a factory must be callable, (seed, settings, **kw) -> TextEnv; "
                         "got a int"),
])
def test_a_plugin_that_cannot_be_imported_is_a_config_error(tmp_path, monkeypatch, plugin, needle):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "not_a_factory.py").write_text("from evaluators.envs import ENVIRONMENTS\n"
                                               "ENVIRONMENTS.add('sro_test_42', 42)\n")
    (tmp_path / "broken.py").write_text("x = 1\ny = x / 0\n")
    (tmp_path / "needs.py").write_text("import needs_a_missing_dependency\n")
    (tmp_path / "shop_dep_adapter.py").write_text("import shop_dep\n")
    path = tmp_path / "p.yaml"
    path.write_text(PROJECT.format(name="p", plugin=plugin))
    with pytest.raises(ConfigError) as e:
        load_project(path)
    assert str(e.value).startswith(str(path)) and needle in str(e.value)


def _env_plugin(path: Path, env: str) -> None:
    """A plugin file at `path` that registers environment `env` (its class: `E`)."""
    path.write_text(f"from evaluators.envs import ENVIRONMENTS\nclass E:\n    pass\nENVIRONMENTS.add({env!r}, E)\n")


def test_a_plugin_imports_its_helpers_and_a_fixed_plugin_registers_afresh(tmp_path):
    # the helper registers the environment; the plugin then fails: both are undone, and the fixed plugin works
    _env_plugin(tmp_path / "shop_helper_env.py", "half")
    half = tmp_path / "half.py"
    half.write_text("import shop_helper_env\nimport evaluators.textworld_env\nraise RuntimeError('config file missing')\n")
    with pytest.raises(Exception, match=r"half.py: importing it failed \(half.py, line 3\): RuntimeError"):
        load_plugins(["half.py"], tmp_path)
    assert "half" not in ENVIRONMENTS and "shop_helper_env" not in sys.modules  # undone
    from evaluators.textworld_env import FAMILIES
    assert "coin_collector" in FAMILIES  # what an SRO module it imported registered stays
    half.write_text("import shop_helper_env\n")
    load_plugins(["half.py"], tmp_path)
    assert "half" in ENVIRONMENTS
    ENVIRONMENTS.remove("half")
    (tmp_path / "typo.py").write_text("x = (1,\n")
    with pytest.raises(Exception, match=r"typo.py: importing it failed \(typo.py, line 1\): SyntaxError"):
        load_plugins(["typo.py"], tmp_path)


def test_one_file_named_as_a_module_and_as_a_path_is_imported_once(tmp_path, monkeypatch):
    # one project lists the file, another the module it is on the Python path: one import, one registration
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    (tmp_path / "mods").mkdir()
    _env_plugin(tmp_path / "mods" / "shop_twice_env.py", "twice")
    _env_plugin(tmp_path / "mods" / "shop_twice_b.py", "twice_b")
    try:
        load_plugins(["mods/shop_twice_env.py"], tmp_path)
        load_plugins(["shop_twice_env"], tmp_path)
        assert sys.modules["shop_twice_env"].E is ENVIRONMENTS.get("twice")
        load_plugins(["shop_twice_b"], tmp_path)  # the other order
        load_plugins(["mods/shop_twice_b.py"], tmp_path)
        assert ENVIRONMENTS.get("twice_b").__module__ == "shop_twice_b"
    finally:
        ENVIRONMENTS.remove("twice")
        ENVIRONMENTS.remove("twice_b")


def test_two_plugin_files_of_one_name_in_two_folders_are_two_plugins(tmp_path, monkeypatch):
    """Two projects' `envs.py` are two files: each is imported and registers (stop 50's mutation sweep of
    sro/plugins.py: "the module already imported from this file" matched another folder's file of that name)."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # a plugin's folder goes on sys.path: put back after
    for folder, env in (("a", "shop_same_a"), ("b", "shop_same_b")):
        (tmp_path / folder).mkdir()
        _env_plugin(tmp_path / folder / "shop_same_envs.py", env)
    try:
        load_plugins(["a/shop_same_envs.py", "b/shop_same_envs.py"], tmp_path)
        assert "shop_same_a" in ENVIRONMENTS and "shop_same_b" in ENVIRONMENTS
    finally:
        for env in ("shop_same_a", "shop_same_b"):
            if env in ENVIRONMENTS:
                ENVIRONMENTS.remove(env)
        for name in [m for m in sys.modules if m.startswith("sro_plugin_shop_same_envs_")]:
            del sys.modules[name]


def test_a_failed_plugin_names_its_own_line_and_undoes_only_its_own_modules(tmp_path, monkeypatch):
    """Stop 50's mutation sweep of sro/plugins.py: the error names the plugin's line that called the failing
    helper, not the helper's; a library the plugin imported stays imported; a module entry's package and its
    modules are undone, so the fixed module registers afresh; a file that is no Python module is refused."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # a plugin's folder goes on sys.path: put back after
    (tmp_path / "shop_boom_helper.py").write_text("def boom():\n    raise ValueError('bad config')\n")
    (tmp_path / "calls.py").write_text("import shop_boom_helper\nshop_boom_helper.boom()\n")
    with pytest.raises(PluginError, match=r"calls.py: importing it failed \(calls.py, line 2\): ValueError: bad config"):
        load_plugins(["calls.py"], tmp_path)
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)  # put back after the test
    (tmp_path / "lib.py").write_text("import colorsys\nraise RuntimeError('half-way')\n")
    with pytest.raises(PluginError, match="RuntimeError: half-way"):
        load_plugins(["lib.py"], tmp_path)
    assert "colorsys" in sys.modules
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    pkg = tmp_path / "mods" / "shop_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    _env_plugin(pkg / "helper.py", "shop_pkg_env")
    (pkg / "envs.py").write_text("from shop_pkg import helper\nraise RuntimeError('half-way')\n")
    with pytest.raises(PluginError, match=r"shop_pkg.envs: importing it failed \(envs.py, line 2\)"):
        load_plugins(["shop_pkg.envs"], tmp_path)
    assert "shop_pkg_env" not in ENVIRONMENTS
    assert not [m for m in sys.modules if m == "shop_pkg" or m.startswith("shop_pkg.")]
    (pkg / "envs.py").write_text("from shop_pkg import helper  # fixed\n")
    try:
        load_plugins(["shop_pkg.envs"], tmp_path)
        assert "shop_pkg_env" in ENVIRONMENTS
    finally:
        if "shop_pkg_env" in ENVIRONMENTS:
            ENVIRONMENTS.remove("shop_pkg_env")
        for name in [m for m in sys.modules if m == "shop_pkg" or m.startswith("shop_pkg.")]:
            del sys.modules[name]
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not code\n")
    with pytest.raises(PluginError, match=r"plugins\[0\]: notes/readme.txt: not a Python module"):
        load_plugins(["notes/readme.txt"], tmp_path)


def test_a_number_that_is_a_command_is_that_command():
    assert resolve_action("7", [str(i) for i in range(3, 12)]) == "7"  # not the 7th choice, "9"
    assert resolve_action("2", ["go east", "look"]) == "look"  # a number that is no command: a choice
    assert resolve_action("9", ["go east", "look"]) == "9"  # out of range: the text itself
    assert resolve_action("1", ["go east", "look"]) == "go east"  # the first choice is 1
    assert resolve_action("0", ["go east", "look"]) == "0"


class _Scored(TextEnv):
    """Two steps to the step limit: half the max score after the first, three quarters after the second; `crash`
    raises instead, at reset or at that step."""

    def __init__(self, crash: str | int | None = None, max_score: float = 4.0) -> None:
        super().__init__(EnvSettings(max_steps=2))
        self.crash, self.max_score = crash, max_score

    def reset(self, *, seed=None, options=None):
        if self.crash == "reset":
            raise RuntimeError("no game file")
        self.steps = 0
        return "start", {"step": StepInfo(["go"], "s0", max_score=self.max_score)}

    def step(self, action):
        self.steps += 1
        if self.crash == self.steps:
            raise RuntimeError("engine died")
        st = StepInfo(["go"], f"s{self.steps}", valid=action == "go", score=(1.0 + self.steps) * self.max_score / 4,
                      max_score=self.max_score)
        return "room", 1.0, False, self.steps >= self.settings.max_steps, {"step": st}


def test_play_scores_against_the_games_max_score_also_when_the_engine_crashes():
    """Stop 50's mutation sweep of evaluators/envs.py: an episode's score is the game's score over its max score,
    at the end or at the last step before a crash; a crash at reset is no step and no score."""
    assert play(_Scored(), lambda obs, st: "go") == EpisodeResult(False, 0.75, 2, 0, "step limit")
    assert play(_Scored(), lambda obs, st: "jump") == EpisodeResult(False, 0.75, 2, 2, "step limit")
    assert play(_Scored(crash=2), lambda obs, st: "go") == EpisodeResult(
        False, 0.5, 2, 0, "env error: RuntimeError: engine died")
    for max_score in (0.5, 1e-3):  # a max score under 1 is no floor
        assert play(_Scored(max_score=max_score), lambda obs, st: "go").score == pytest.approx(0.75)
        assert play(_Scored(crash=2, max_score=max_score), lambda obs, st: "go").score == pytest.approx(0.5)
    assert play(_Scored(crash="reset"), lambda obs, st: "go") == EpisodeResult(
        False, 0.0, 0, 0, "env error at reset: RuntimeError: no game file")


def test_env_settings_and_step_info_defaults():
    """What an adapter gets when it sets nothing: a step is valid, neither won nor lost, scored out of 1; one step is
    the shortest limit, 12 the default."""
    st = StepInfo(["look"], "k")
    assert (st.valid, st.won, st.lost, st.score, st.max_score, st.walkthrough) == (True, False, False, 0.0, 1.0, [])
    assert EnvSettings().max_steps == 12 and EnvSettings(max_steps=1).max_steps == 1
    with pytest.raises(ValueError, match=r"max_steps must be >= 1 \(got 0\)"):
        EnvSettings(max_steps=0)
    assert _Scored().steps == 0


def test_an_adapter_without_choices_still_gives_items_and_a_bad_list_is_named(register):
    from evaluators.envs import StepInfo

    class Free(TextEnv):
        """Free text (a search box): no admissible list; the walkthrough is the answer."""

        def reset(self, *, seed=None, options=None):
            return "Type the colour of the sky.", {"step": StepInfo([], "q", walkthrough=["Blue"])}

        def step(self, action):
            won = action == "Blue"
            return "done", float(won), True, False, {"step": StepInfo([], "q", won=won)}

    register("free", lambda seed, settings: Free(settings))
    task = make_task(SourceSpec("env", "free", {"games": 1, "teacher_noise": 1.0}), 0)
    assert {it.answer for it in task.items(4)} == {"blue"}  # noise has no admissible command to draw: the best
    assert play(task.make_env(0), lambda obs, st: "Blue").success  # free text reaches the adapter as written

    class Bad(Free):
        def reset(self, *, seed=None, options=None):
            return "?", {"step": StepInfo("go north", "q")}  # a string, not a list of commands

    register("bad_list", lambda seed, settings: Bad(settings))
    with pytest.raises(SourceSpecError, match="environment 'bad_list' at reset: StepInfo.admissible must be a list"):
        check_source_spec(SourceSpec("env", "bad_list", {}))


def test_an_adapter_failing_while_its_source_is_prepared_is_one_line(register):
    corridor = ENVIRONMENTS.get("corridor")

    def down_after_first(seed, settings, **kw):
        if seed > 0:
            raise ConnectionError("simulator unreachable")
        return corridor(seed, settings, **kw)

    register("down", down_after_first)
    check_source_spec(SourceSpec("env", "down", {}))  # game 0 answers
    task = make_task(SourceSpec("env", "down", {"games": 2}), 0)
    with pytest.raises(GameGenerationError, match="environment 'down' failed on the game of seed 2 while SRO "
                                                  "prepared its source: ConnectionError: simulator unreachable"):
        task.items(2)
    with pytest.raises(GameGenerationError, match="seed 1 .*ConnectionError"):
        task.signatures()


def test_the_walk_cache_key_covers_the_adapters_folder(tmp_path):
    from evaluators.adapters import code_digest

    (tmp_path / "adapter.py").write_text("def make(seed, settings):\n    pass\n")
    (tmp_path / "core.py").write_text("RIGHT = 'go north'\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import adapter  # noqa: F401 (the module under test, from tmp_path)

        before = code_digest(adapter.make)
        assert before == code_digest(functools.partial(adapter.make, 1))  # a partial: its function's folder
        (tmp_path / "core.py").write_text("RIGHT = 'go south'\n")  # a helper beside it changes
        assert code_digest(adapter.make) != before
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("adapter", None)
    assert code_digest(lambda: None) is not None and code_digest(print) is None  # a builtin has no source


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


# ------------------------------------------------------------------------------------------------------------
# an adapter whose states carry no walkthrough (evaluators/games.py:190-193) (a coverage review, stop 54)
# ------------------------------------------------------------------------------------------------------------


def test_an_adapter_without_walkthroughs_is_one_error_saying_what_to_fill(register, tmp_path, monkeypatch):
    """The tiny model pre-trains on walkthrough steps: an adapter that leaves StepInfo.walkthrough empty gets one
    GameGenerationError naming the fix, not an empty pool (a ZeroDivisionError in `item`, or nothing to train on)."""
    from evaluators.envs import StepInfo, TextEnv
    from evaluators.games import GameGenerationError
    from evaluators.sources import SourceSpec, make_task

    class NoWalk(TextEnv):
        def reset(self, *, seed=None, options=None):
            return "room: hall", {"step": StepInfo(["look"], "s0")}

        def step(self, action):
            return "room: hall", 0.0, False, False, {"step": StepInfo(["look"], "s0")}

    monkeypatch.setenv("SRO_CACHE_DIR", str(tmp_path))
    register("nowalk", lambda seed, settings, **kw: NoWalk(settings))
    task = make_task(SourceSpec("env", "nowalk", {"games": 1, "max_steps": 2}), 3)
    with pytest.raises(GameGenerationError, match=r"env nowalk seed \d+: no state of the game has a walkthrough, so "
                                                  r"there is nothing to pre-train on; the environment must fill "
                                                  r"StepInfo.walkthrough"):
        task.item(0)


def test_a_game_space_too_small_for_its_held_out_games_says_how_to_grow_it(register):
    """Every game tried for a seed is a held-out one: the message said "raise the level" to an `env:` source,
    which has none (a review, stop 57); a TextWorld source with a level is still told to raise it."""
    from evaluators.games import GameGenerationError

    register("tiny_world", ENVIRONMENTS.get("corridor"))
    for spec, grow in ((SourceSpec("env", "tiny_world", {"length": 1, "games": 2}),
                        "change the settings so that they make more distinct games, or give the benchmark fewer games"),
                       (SourceSpec("textworld", "coin_collector", {"level": 1, "games": 2}),
                        "raise the level, or give the benchmark fewer games")):
        task = make_task(spec, 0)
        task.signature = lambda seed: "the one game"  # every game alike, and held out
        task.exclude = frozenset({"the one game"})
        with pytest.raises(GameGenerationError, match=re.escape(grow)) as e:
            task.replacement(0)
        assert "are all held-out games" in str(e.value)


CALIBRATED = f"""\
name: calibrated
base_model: tiny
seed: 0
plugins: [{PLUGIN}]
domains:
  corridor:
    sources:
      - env: corridor
        config: {{length: 2, doors: 3, games: 4, max_steps: 4{{confidence}}}}
    benchmarks:
      - {{name: ece_heldout, env: corridor, config: {{length: 2, doors: 3, games: 2, max_steps: 4}}, metric: ece}}
runtime: {{tiny_pretrain_steps: 2, threads: 1, max_new_tokens: 8}}
"""


@pytest.mark.parametrize("confidence", ["", ", confidence: true"])
def test_a_calibration_benchmark_whose_sources_never_ask_for_confidence_is_noted(tmp_path, confidence):
    """An `ece` benchmark graded a question the tiny model's pre-training never asked, without a word, where no
    source set `confidence: true` (docs/agent.md asks for it; a review, stop 57). The set-up now says so, before
    the base model is built."""
    from sro.executor import SearchContext

    class Built(Exception):
        pass

    said: list[str] = []

    def log(line: str) -> None:
        said.append(line)
        if line.startswith("base model:"):
            raise Built

    p = tmp_path / "calibrated.yaml"
    p.write_text(CALIBRATED.replace("{confidence}", confidence))
    with pytest.raises(Built):
        SearchContext.prepare(load_project(p), tmp_path / "cache", log=log)
    note = [line for line in said if "confidence: true" in line]
    if confidence:
        assert note == [], said
    else:
        assert note == ["corridor/ece_heldout: its ece grades the agent's stated confidence, but no source of corridor "
                        "sets `confidence: true` in its config, so the base model's pre-training never asks the "
                        "question; add it to a source's config (docs/agent.md, \"Calibration as an objective\")"], said
