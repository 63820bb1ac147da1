"""A gymnasium-style interface for multi-turn text environments, and a registry of adapters.

Every environment (TextWorld here; ALFWorld or WebShop later) is a `gymnasium.Env` whose actions are
command strings and whose observations are text. What credit assignment needs beyond the text —
the admissible commands, a state key, whether the last command was admissible, the reference
solution, the score — travels in `info` (`StepInfo`), as gymnasium intends for side information.

An adapter registers a factory `(game_path_or_id, EnvSettings) -> TextEnv` in `ENVIRONMENTS`.
"""

from __future__ import annotations

import logging
import string
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from evaluators.registry import Registry

ENVIRONMENTS: Registry = Registry("environment")
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
