"""`env:` sources: the games of an environment an adapter registered in `ENVIRONMENTS` (ALFWorld, WebShop,
a team's own simulator), played like TextWorld's.

An adapter is a module the project names under `plugins:` (README, "Your own environment"). It subclasses
`evaluators.envs.TextEnv` — `reset()` and `step(command)` on text, the admissible commands, a state key
and the walkthrough in `info["step"]` — and registers a factory `(seed, EnvSettings, **settings) -> TextEnv`:

    ENVIRONMENTS.add("corridor", Corridor)

A project then uses it as a source or benchmark, `- env: corridor` with `config:` holding `PLAY_KEYS`
(games, max_steps, ...) and the environment's own settings, passed to the factory. SRO wraps every env it
opens (`Guarded`): the policy's text is resolved to a command first (its first line, lower-cased, or the
k-th choice: admissible and walkthrough commands should be lower case with single spaces, as
`normalize_command` leaves them), the step limit ends an episode whatever the environment does, and a
malformed `info` is an error that names the adapter.
"""

from __future__ import annotations

import difflib
from typing import Any

from evaluators.envs import ENVIRONMENTS, EnvSettings, StepInfo, TextEnv, resolve_action
from evaluators.games import GameTask
from evaluators.sources import SourceSpec, SourceSpecError


class Guarded(TextEnv):
    """An adapter's env with SRO's rules around it: commands resolved, the step limit kept, `info` checked."""

    def __init__(self, inner: TextEnv, name: str, settings: EnvSettings) -> None:
        super().__init__(settings)
        self.inner, self.name = inner, name
        self.action_space, self.observation_space = inner.action_space, inner.observation_space
        self._admissible: list[str] = []

    def _checked(self, obs: Any, info: Any, at: str) -> StepInfo:
        st = info.get("step") if isinstance(info, dict) else None
        if not isinstance(obs, str) or not isinstance(st, StepInfo):
            raise TypeError(f"environment {self.name!r} at {at}: returned ({type(obs).__name__}, info with "
                            f"{type(st).__name__}); it must return the observation text and info['step'], a StepInfo")
        self._admissible = list(st.admissible)
        return st

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict[str, Any]]:
        obs, info = self.inner.reset(seed=seed, options=options)
        self._checked(obs, info, "reset")
        self.steps = 0
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.inner.step(resolve_action(action, self._admissible))
        st = self._checked(obs, info, "step")
        self.steps += 1
        terminated = bool(terminated or st.won or st.lost)
        truncated = not terminated and (bool(truncated) or self.steps >= self.settings.max_steps)
        return obs, float(reward), terminated, truncated, info

    def close(self) -> None:
        self.inner.close()


class EnvTask(GameTask):
    """The games of a registered environment (`ENVIRONMENTS`), addressed by seed (`GameTask`)."""

    def __init__(self, spec: SourceSpec, seed: int) -> None:
        super().__init__(spec, seed)
        if spec.target not in ENVIRONMENTS:
            known = ENVIRONMENTS.names()
            hint = difflib.get_close_matches(spec.target, known, n=1)
            fix = (f"did you mean {hint[0]!r}?" if hint else
                   f"registered: {', '.join(known) or 'none'}; name the module that registers it under `plugins:`")
            raise SourceSpecError(f"no environment {spec.target!r} is registered; {fix}", "env")
        self.factory = ENVIRONMENTS.get(spec.target)
        self._signatures: dict[int, str] = {}

    def open_game(self, seed: int) -> TextEnv:
        env = self.factory(seed, self.env_settings, **self.settings)
        if not isinstance(env, TextEnv):
            raise TypeError(f"environment {self.spec.target!r}: its factory returned a {type(env).__name__}, "
                            "not an evaluators.envs.TextEnv")
        return Guarded(env, self.spec.target, self.env_settings)

    def signature(self, seed: int) -> str:
        if seed not in self._signatures:
            self._signatures[seed] = super().signature(seed)
        return self._signatures[seed]


def check_env_source(spec: SourceSpec) -> None:
    """Raise `SourceSpecError` for an unregistered environment, or settings its factory or its first game
    refuses (the first game is opened and reset once)."""
    task = EnvTask(spec, seed=0)
    try:
        env = task.open_game(0)
        try:
            env.reset()
        finally:
            env.close()
    except SourceSpecError:
        raise
    except Exception as e:  # the adapter's own validation (a TypeError for an unknown keyword, ...)
        raise SourceSpecError(f"environment {spec.target!r} refuses config {task.settings}: {type(e).__name__}: {e}",
                              "config") from None
