"""`env:` sources: the games of an environment an adapter registered in `ENVIRONMENTS` (ALFWorld, WebShop,
a team's own simulator), played like TextWorld's.

An adapter is a module the project names under `plugins:` (README, "Your own environment"). It subclasses
`evaluators.envs.TextEnv` — `reset()` and `step(command)` on text, the admissible commands, a state key
and the walkthrough in `info["step"]` — and registers a factory `(seed, EnvSettings, **settings) -> TextEnv`:

    ENVIRONMENTS.add("corridor", Corridor)

A project then uses it as a source or benchmark, `- env: corridor` with `config:` holding `PLAY_KEYS`
(games, max_steps, ...) and the environment's own settings, passed to the factory. SRO wraps every env it
opens (`Guarded`): the adapter's env is opened at the first reset (a failure is that episode's env error),
commands are shown normalized and sent back in the adapter's spelling, state keys are made distinct per
game, the step limit ends an episode whatever the environment does, and a malformed `info` is an error
that names the adapter.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import inspect
import json
import math
import numbers
import os
import re
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from evaluators.envs import ENVIRONMENTS, EnvSettings, StepInfo, TextEnv, normalize_command, resolve_action
from evaluators.games import ITEMS_PER_GAME, GameGenerationError, GameTask
from evaluators.sources import SourceSpec, SourceSpecError, extract_answer


class Guarded(TextEnv):
    """An adapter's game with SRO's rules around it. The adapter's env is opened at the first `reset()`, so
    a factory that fails (a simulator down) ends that episode as an env error, as a crash at reset does,
    never the trial. The policy sees the admissible and walkthrough commands normalized (`normalize_command`:
    what `resolve_action` makes of a completion) and each state key prefixed by the game (`name-seed:`, so
    ProAS's reference graph never merges two games' states); the command it names is sent in the adapter's
    own spelling. The step limit ends an episode whatever the adapter does, and a malformed `info` is an
    error naming the adapter."""

    def __init__(self, factory: Callable[[], Any], name: str, seed: int, settings: EnvSettings) -> None:
        super().__init__(settings)
        self.factory, self.name, self.game = factory, name, f"{name}-{seed}"
        self.inner: TextEnv | None = None
        self._spelling: dict[str, str] = {}
        self._admissible: list[str] = []

    def _present(self, obs: Any, info: Any, at: str) -> tuple[str, dict[str, Any]]:
        st = info.get("step") if isinstance(info, dict) else None
        if not isinstance(obs, str) or not isinstance(st, StepInfo):
            raise TypeError(f"environment {self.name!r} at {at}: returned ({type(obs).__name__}, info with "
                            f"{type(st).__name__}); it must return the observation text and info['step'], a StepInfo")
        for what in ("admissible", "walkthrough"):
            got = getattr(st, what)
            if not isinstance(got, list) or not all(isinstance(c, str) for c in got):
                raise TypeError(f"environment {self.name!r} at {at}: StepInfo.{what} must be a list of command "
                                f"strings (got {got!r:.80})")
        # the fields SRO computes with: a score of None was a TypeError out of the trial, a max_score of 0 made
        # scores of 1e9 (a review, stop 37); numpy's bools and numbers are taken as Python's
        if not isinstance(st.state_key, str):
            raise TypeError(f"environment {self.name!r} at {at}: StepInfo.state_key must be a str "
                            f"(got {st.state_key!r:.80})")
        flags = {}
        for what in ("valid", "won", "lost"):
            got = getattr(st, what)
            if not isinstance(got, Hashable) or got not in (True, False):
                raise TypeError(f"environment {self.name!r} at {at}: StepInfo.{what} must be True or False "
                                f"(got {got!r:.80})")
            flags[what] = bool(got)
        for what in ("score", "max_score"):
            got = getattr(st, what)
            if not isinstance(got, numbers.Real) or isinstance(got, bool) or not math.isfinite(got):
                raise TypeError(f"environment {self.name!r} at {at}: StepInfo.{what} must be a finite number "
                                f"(got {got!r:.80})")
        if st.max_score <= 0:
            raise TypeError(f"environment {self.name!r} at {at}: StepInfo.max_score must be > 0 (got "
                            f"{st.max_score!r}); an environment without a score leaves it at 1")
        st = dataclasses.replace(st, **flags, score=float(st.score), max_score=float(st.max_score))
        self._admissible = list(dict.fromkeys(normalize_command(c) for c in st.admissible))
        self._spelling = {}  # the adapter's spelling of every command it named, to send back: its first one
        for c in [*st.admissible, *st.walkthrough]:
            self._spelling.setdefault(normalize_command(c), c)
        shown = dataclasses.replace(st, admissible=self._admissible,
                                    walkthrough=[normalize_command(c) for c in st.walkthrough],
                                    state_key=f"{self.game}:{st.state_key}")
        return obs, {**info, "step": shown}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict[str, Any]]:
        if self.inner is None:
            env = self.factory()
            if not isinstance(env, TextEnv):
                raise NotATextEnv(f"environment {self.name!r}: its factory returned a {type(env).__name__}, "
                                  "not an evaluators.envs.TextEnv")
            self.inner = env
        obs, info = self.inner.reset(seed=seed, options=options)
        self.steps = 0
        return self._present(obs, info, "reset")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.inner is None:
            raise RuntimeError("call reset() before step()")
        named = normalize_command(extract_answer(action))  # a command the adapter named (a walkthrough's too) is
        cmd = named if named in self._spelling else resolve_action(action, self._admissible)  # itself, not a number
        # a command in the adapter's own spelling; any other text as the policy wrote its first line
        sent = self._spelling.get(cmd) or extract_answer(action)
        obs, reward, terminated, truncated, info = self.inner.step(sent)
        obs, info = self._present(obs, info, "step")
        st = info["step"]
        self.steps += 1
        terminated = bool(terminated or st.won or st.lost)
        truncated = not terminated and (bool(truncated) or self.steps >= self.settings.max_steps)
        return obs, float(reward), terminated, truncated, info

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()
            self.inner = None


WALK_VERSION = 1
"""Of SRO's side of an adapter's cached walks (`GameTask._pool`, `Guarded`, `normalize_command`): bump it
when they change, so caches rebuild."""


def code_digest(obj: Any) -> str | None:
    """A digest of the adapter's code: every `.py` file in the folder of the file that defines `obj` (its
    factory: a class, a function, a `functools.partial` of one, or a callable instance), so helper modules
    beside it count. None where there is no source file (walks are then not cached)."""
    obj = getattr(obj, "func", obj)  # a partial: its function
    if not (inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismethod(obj)):
        obj = type(obj)  # a callable instance: its class
    try:
        folder = Path(inspect.getsourcefile(obj) or "").resolve().parent
        h = hashlib.sha256()
        for f in sorted(folder.glob("*.py")):
            h.update(f.name.encode() + b"\0" + f.read_bytes())
        return h.hexdigest()[:16]
    except (TypeError, OSError):
        return None


class EnvTask(GameTask):
    """The games of a registered environment (`ENVIRONMENTS`), addressed by seed (`GameTask`). The walks
    the tiny model pre-trains on are cached under `cache_dir` (default `$SRO_CACHE_DIR/env`), keyed on the
    adapter's code (`code_digest`: its folder's `.py` files), `WALK_VERSION`, its settings and the seed. A
    change to a library it uses or to data it reads does not rebuild them: delete the folder then.

    An adapter that fails while SRO prepares the source (a game's signature, the walks) is a
    `GameGenerationError` naming it: one line, before anything trains."""

    def __init__(self, spec: SourceSpec, seed: int, cache_dir: Path | None = None) -> None:
        super().__init__(spec, seed)
        if spec.target not in ENVIRONMENTS:
            known = ENVIRONMENTS.names()
            hint = difflib.get_close_matches(spec.target, known, n=1)
            fix = (f"did you mean {hint[0]!r}?" if hint else
                   f"registered: {', '.join(known) or 'none'}; name the module that registers it under `plugins:`")
            raise SourceSpecError(f"no environment {spec.target!r} is registered; {fix}", "env")
        self.factory = ENVIRONMENTS.get(spec.target)
        self.cache_dir = cache_dir or Path(os.environ.get("SRO_CACHE_DIR", "runs/.cache")) / "env"
        self._code = code_digest(self.factory)
        self._signatures: dict[int, str] = {}

    def open_game(self, seed: int, settings: EnvSettings | None = None) -> TextEnv:
        shown = settings or self.env_settings
        return Guarded(lambda: self.factory(seed, shown, **self.settings), self.spec.target, seed, shown)

    def pool_file(self, seed: int) -> Path | None:
        if self._code is None:  # a factory without a source file (built at run time): walks in memory only
            return None
        key = json.dumps([self._code, WALK_VERSION, self.settings, seed, ITEMS_PER_GAME, self.env_settings.obs_mode,
                          self.env_settings.max_steps], sort_keys=True, default=str)
        folder = self.cache_dir / re.sub(r"[^A-Za-z0-9_.-]", "_", self.spec.target)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:  # an unwritable cache: the walks stay in memory (the cache only saves time)
            return None
        return folder / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.items.json"

    def signature(self, seed: int) -> str:
        if seed not in self._signatures:
            self._signatures[seed] = self._prepared(lambda: super(EnvTask, self).signature(seed), seed)
        return self._signatures[seed]

    def _pool(self, g: int) -> list[dict[str, Any]]:
        return self._prepared(lambda: super(EnvTask, self)._pool(g), self.seed + self.n_games + g)

    def _prepared(self, work: Callable[[], Any], seed: int) -> Any:
        try:
            return work()
        except GameGenerationError:
            raise
        except Exception as e:
            raise GameGenerationError(f"environment {self.spec.target!r} failed on the game of seed {seed} while "
                                      f"SRO prepared its source: {type(e).__name__}: {e}") from e


class NotATextEnv(TypeError):
    """An environment factory returned something else than a `TextEnv`: the plugin's fault, not its config's."""


def check_env_source(spec: SourceSpec) -> None:
    """Raise `SourceSpecError` for an unregistered environment, or settings its factory or its first game
    refuses (the first game is opened and reset once)."""
    task = EnvTask(spec, seed=0)
    env = task.open_game(0)
    try:
        try:
            env.reset()
        finally:
            env.close()
    except SourceSpecError:
        raise
    except NotATextEnv as e:  # was "refuses config {...}: TypeError: ...": the config was not at fault (stop 57)
        raise SourceSpecError(f"{e}; its factory (the plugin's ENVIRONMENTS.add) must return an instance of a "
                              "TextEnv subclass (README, 'Your own environment')", "env") from None
    except Exception as e:  # the adapter's own validation (a TypeError for an unknown keyword, ...)
        raise SourceSpecError(f"environment {spec.target!r} refuses config {task.settings}: {type(e).__name__}: {e}",
                              "config") from None
