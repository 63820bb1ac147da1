"""A gymnasium-style interface for multi-turn text environments, and a registry of adapters.

Every environment (TextWorld here; ALFWorld or WebShop later) is a `gymnasium.Env` whose actions are
command strings and whose observations are text. What credit assignment needs beyond the text —
the admissible commands, a state key, whether the last command was admissible, the reference
solution, the score — travels in `info` (`StepInfo`), as gymnasium intends for side information.

An adapter registers a factory `(seed, EnvSettings, **settings) -> TextEnv` in `ENVIRONMENTS`: the game of
`seed` (a procedurally generated one, or the seed-th of a fixed list) with the source's own settings.
A project then plays it as an `env:` source (`evaluators.adapters`, README "Your own environment").
TextWorld has its own source kind, `textworld:` (`evaluators.textworld_env`).
"""

from __future__ import annotations

import logging
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from evaluators.registry import Registry
from evaluators.sources import extract_answer

ENVIRONMENTS: Registry = Registry("environment", check=lambda factory: None if callable(factory) else (
    f"a factory must be callable, (seed, settings, **kw) -> TextEnv; got a {type(factory).__name__}"))
"""Environment factories by name. `ENVIRONMENTS.add("x", 42)` was accepted and failed at the first game as
"refuses config ...: 'int' object is not callable" (a review, stop 57)."""
_log = logging.getLogger(__name__)

MAX_TEXT = 8192


@dataclass(frozen=True)
class EnvSettings:
    """How an episode is played and shown to the policy."""

    max_steps: int = 12
    """Step limit: an episode that reaches it ends as a failure (truncated)."""
    obs_mode: str = "compact"
    """compact (room, exits, objects, choice list: sized for a small model) or full (the game's text)."""

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1 (got {self.max_steps})")
        if self.obs_mode not in ("compact", "full"):
            raise ValueError(f"obs_mode must be 'compact' or 'full' (got {self.obs_mode!r})")


@dataclass
class StepInfo:
    """Side information of one observation (gymnasium's `info`)."""

    admissible: list[str]
    """Commands the environment's rules accept in this state."""
    state_key: str
    """φ(s): a normalized key of the state (room, inventory, visible objects) for the reference graph."""
    valid: bool = True
    """Whether the command that led here was admissible (True after reset)."""
    won: bool = False
    lost: bool = False
    score: float = 0.0
    max_score: float = 1.0
    walkthrough: list[str] = field(default_factory=list)
    """The reference solution from this state (TextWorld's policy commands), when the game gives one."""
    full_text: str = ""
    """The game's own text of this observation."""


class TextEnv(gym.Env):
    """A text game: `reset() -> (obs, info)`, `step(cmd) -> (obs, reward, terminated, truncated, info)`.

    `reward` is the change in game score; `terminated` when won or lost; `truncated` at the step limit.
    `info["step"]` is the `StepInfo` of the new observation.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, settings: EnvSettings | None = None) -> None:
        self.settings = settings or EnvSettings()
        # printable text, spaces and newlines included (gymnasium's default charset is letters and digits,
        # which held no command and no observation: `check_env` failed on the first reset until stop 25)
        self.action_space = spaces.Text(max_length=256, charset=string.printable)
        self.observation_space = spaces.Text(max_length=MAX_TEXT, charset=string.printable)
        self.steps = 0


def normalize_command(cmd: str) -> str:
    """κ(a): the normalized command (lower case, single spaces, no trailing punctuation)."""
    return " ".join(cmd.strip().lower().rstrip(".!").split())


def close_quietly(env: Any) -> None:
    """Close an env whose episode has ended: an engine that crashed may fail on close too, which must not
    end the other episodes of a batch or the trial (until stop 25 it ended them all)."""
    try:
        env.close()
    except Exception as e:
        _log.warning("closing an environment failed: %s: %s", type(e).__name__, e)


def resolve_action(text: str, admissible: list[str]) -> str:
    """The command a completion names: its first line (normalized), or the k-th choice when it is a number k
    that is not itself a choice."""
    cmd = normalize_command(extract_answer(text))
    if cmd in admissible:  # a command that is a number ("7" in a guessing game) is that command
        return cmd
    if cmd.isdecimal() and cmd.isascii() and 1 <= int(cmd) <= len(admissible):  # not "²": isdigit, no int
        return admissible[int(cmd) - 1]
    return cmd


@dataclass
class EpisodeResult:
    """What one played episode measured."""

    success: bool
    score: float
    """Final score / max score."""
    steps: int
    invalid: int
    """Steps whose command was not admissible."""
    reason: str
    """won | lost | step limit | ended | env error: ..."""

    @property
    def crashed(self) -> bool:
        """Whether the environment ended the episode by an exception (at reset or at a step): a failure of the
        environment, not a play of the policy."""
        return self.reason.startswith("env error")


def episode_metrics(results: list[EpisodeResult]) -> dict[str, float]:
    """success, score, steps and invalid-action rate over episodes."""
    n = max(1, len(results))
    steps = sum(r.steps for r in results)
    return {"success": sum(r.success for r in results) / n, "score": sum(r.score for r in results) / n,
            "steps": steps / n, "invalid_rate": sum(r.invalid for r in results) / max(1, steps)}


def end_reason(st: StepInfo, truncated: bool) -> str:
    """Why an episode ended: won, lost, the step limit (truncated), or `ended` (the environment ended it
    neither won nor lost, which read as "step limit" until stop 37)."""
    return "won" if st.won else "lost" if st.lost else "step limit" if truncated else "ended"


def play(env: TextEnv, act: Callable[[str, StepInfo], str]) -> EpisodeResult:
    """Play one episode with `act(obs, info) -> command`. An exception of the environment (at reset or
    at a step) ends the episode as a failure, the exception in its `reason`; one raised by `act` (the
    policy) is the caller's and propagates."""
    invalid = steps = 0
    try:
        try:
            obs, info = env.reset()
        except Exception as e:  # any crash of the game engine: a failed episode, never a failed trial
            return EpisodeResult(False, 0.0, 0, 0, f"env error at reset: {type(e).__name__}: {e}")
        st: StepInfo = info["step"]
        while True:
            command = act(obs, st)
            steps += 1
            try:
                obs, _, term, trunc, info = env.step(command)
            except Exception as e:
                return EpisodeResult(False, st.score / max(st.max_score, 1e-9), steps, invalid,
                                     f"env error: {type(e).__name__}: {e}")
            st = info["step"]
            invalid += not st.valid
            if term or trunc:
                return EpisodeResult(st.won, st.score / max(st.max_score, 1e-9), steps, invalid, end_reason(st, trunc))
    finally:
        close_quietly(env)
