"""A source whose items are games: what every multi-turn environment's source shares.

A `GameTask` is a set of games addressed by seed: training games from training seeds, benchmark games
from held-out seeds (`derive_seed`). Disjoint seeds are not disjoint games — a small game space gives
the same game to several seeds — so a training task told the held-out games' signatures (`keep_out`)
replaces any game a player could not tell from a held-out one by the game of another seed. Its `item`s
are single steps — (observation, the walkthrough's next command, or a random admissible one) from
random walks in *sibling* games with the same settings — which is what the embedded model pre-trains
on; the multi-turn trainer plays whole episodes on the source's own games (`make_env`).

Subclasses say how to open the game of a seed (`open_game`); TextWorld (`evaluators.textworld_env`)
also caches games and walks on disk, and an adapter's environment (`evaluators.adapters`) is opened
through the `ENVIRONMENTS` registry.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

from evaluators.calibration import confidence_question, parse_confidence
from evaluators.envs import EnvSettings, StepInfo, TextEnv, close_quietly, resolve_action
from evaluators.files import write_whole
from evaluators.sources import Item, SourceSpec, SourceSpecError, Task

PLAY_KEYS = {"games": 8, "max_steps": 12, "obs_mode": "compact", "teacher_noise": 0.3, "confidence": False}
"""Keys of a game source's `config` that are SRO's (how games are played), not the environment's."""
CONFIDENCE_EVERY = 4
"""With `confidence: true`, every 4th item asks for the stated chance of success (a random digit: the
base model learns the format, not the calibration)."""
ITEMS_PER_GAME = 48
"""Single-step items drawn per game for pre-training (random walks along and off the walkthrough)."""
REPLACE_STRIDE = 1009
"""Seed step from a game that must be replaced (it is a held-out game) to the next one tried."""
MAX_REPLACE = 32
"""Games tried for one seed before the game space counts as too small to keep training and held-out apart."""
SIGNATURE_SETTINGS = EnvSettings()
"""How a game is shown for its signature, whatever the task's own `obs_mode` and `max_steps`: a source and a
benchmark that differ there compare the same screens (until stop 53 each rendered with its own, so an adapter
that shows full mode otherwise matched no held-out game and trained on them: a review)."""


class GameGenerationError(RuntimeError):
    """No game could be built (or none kept apart from the held-out games) for these settings."""


def number_setting(values: dict[str, Any], key: str, kind: type, low: float, high: float | None = None) -> Any:
    """`values[key]` as an int or float inside [low, high], or a `SourceSpecError` naming `config.<key>`."""
    v = values[key]
    ok = (not isinstance(v, bool) and isinstance(v, (int, float)) and v == v
          and (kind is float or float(v).is_integer()))  # v == v: not NaN
    if not ok or v < low or (high is not None and v > high):
        where = f"in [{low:g}, {high:g}]" if high is not None else f">= {low:g}"
        raise SourceSpecError(f"{key} must be {'an integer' if kind is int else 'a number'} {where} (got {v!r})",
                              f"config.{key}")
    return kind(v)


def first_screen_signature(env: TextEnv) -> str:
    """What a policy can learn about a game before it plays it: the first observation and the walkthrough,
    hashed. Two games with one signature are solved by the same commands from the same first screen."""
    try:
        obs, info = env.reset()
    finally:
        close_quietly(env)
    blob = json.dumps([obs, info["step"].walkthrough])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class GameTask(Task):
    """Games of one environment and settings, addressed by seed; see the module docstring.

    Source config: `PLAY_KEYS` — `games` (how many distinct games; default 8), `max_steps` (the episode
    step limit), `obs_mode` (compact | full), `teacher_noise` (share of pre-training items whose answer is
    a random admissible command instead of the walkthrough's), `confidence` — plus the environment's own
    settings (`settings`).
    """

    multi_turn = True

    def __init__(self, spec: SourceSpec, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        play = {**PLAY_KEYS, **{k: v for k, v in spec.config.items() if k in PLAY_KEYS}}
        self.n_games = number_setting(play, "games", int, 1)
        max_steps = number_setting(play, "max_steps", int, 1)
        try:
            self.env_settings = EnvSettings(max_steps, str(play["obs_mode"]))
        except ValueError as e:  # max_steps is checked above: the obs_mode (until stop 53 named `config`: a review)
            raise SourceSpecError(str(e), "config.obs_mode") from None
        self.teacher_noise = number_setting(play, "teacher_noise", float, 0.0, 1.0)
        conf = play["confidence"]  # true/false or 0/1, as mt.confidence; bool("no") was True (a walkthrough, stop 34)
        if not (isinstance(conf, bool) or (isinstance(conf, (int, float)) and conf in (0, 1))):
            raise SourceSpecError(f"confidence must be true or false (got {conf!r})", "config.confidence")
        self.confidence = bool(conf)
        self.settings: dict[str, Any] = {k: v for k, v in spec.config.items() if k not in PLAY_KEYS}
        """The environment's own settings (the config's keys other than `PLAY_KEYS`)."""
        self.exclude: frozenset[str] = frozenset()
        """Signatures of games this task never plays nor pre-trains on: the held-out games (`keep_out`)."""
        self.replaced: dict[int, int] = {}
        """Seed -> the seed played instead, for games replaced because a held-out game has their signature."""
        self._played: dict[int, int] = {}
        self._pools: dict[int, list[dict[str, Any]]] = {}

    # --- what a subclass says ----------------------------------------------------------------------
    def open_game(self, seed: int, settings: EnvSettings | None = None) -> TextEnv:
        """A fresh environment playing the game of `seed`, shown and limited by `settings` (default: the
        task's `env_settings`)."""
        raise NotImplementedError

    def signature(self, seed: int) -> str:
        """The game's `first_screen_signature` under `SIGNATURE_SETTINGS` (a subclass may cache it)."""
        return first_screen_signature(self.open_game(seed, SIGNATURE_SETTINGS))

    def pool_file(self, seed: int) -> Path | None:
        """Where the walks of the game of `seed` are cached (None: in memory only)."""
        return None

    # --- shared ------------------------------------------------------------------------------------
    def keep_out(self, signatures: set[str] | frozenset[str]) -> None:
        """Never play, nor draw pre-training items from, a game with one of these signatures (the held-out
        games': `signatures`); such a game is replaced by the first of seed + k·REPLACE_STRIDE that is not."""
        self.exclude = frozenset(signatures)
        self.replaced = {}
        self._played.clear()
        self._pools.clear()

    def signatures(self) -> set[str]:
        """The signature of each of this task's games."""
        return {self.signature(self.played_seed(g)) for g in range(self.n_games)}

    def replacement(self, seed: int) -> int:
        """`seed`, or the seed played instead where the game of `seed` is excluded."""
        for k in range(MAX_REPLACE):
            s = seed + k * REPLACE_STRIDE
            if not self.exclude or self.signature(s) not in self.exclude:
                if k:
                    self.replaced[seed] = s
                return s
        # an `env:` source or a cooking game has no level to raise (a review, stop 57)
        grow = ("raise the level" if "level" in str(self.settings) else
                "change the settings so that they make more distinct games")
        raise GameGenerationError(
            f"{self.spec.kind} {self.spec.target} {self.settings}: the {MAX_REPLACE} games tried for seed {seed} "
            f"are all held-out games; the game space of these settings is too small to keep training and held-out "
            f"games apart: {grow}, or give the benchmark fewer games")

    def played_seed(self, g: int) -> int:
        """The seed of the g-th game this source plays."""
        g %= self.n_games
        if g not in self._played:
            self._played[g] = self.replacement(self.seed + g)
        return self._played[g]

    def make_env(self, g: int) -> TextEnv:
        return self.open_game(self.played_seed(g))

    def _pool(self, g: int) -> list[dict[str, Any]]:
        """Single-step items from random walks in the g-th *sibling* game (seed seed + games + g: the
        same settings, not a game episodes are played on — a base model pre-trained on the played
        games' own walkthroughs wins them all, and RL then gets no gradient)."""
        if g in self._pools:
            return self._pools[g]
        sibling = self.replacement(self.seed + self.n_games + g)
        path = self.pool_file(sibling)
        if path is not None:
            try:
                self._pools[g] = json.loads(path.read_text())
                return self._pools[g]
            except (OSError, ValueError):  # not built yet, or a partial file: build it (again)
                pass
        rng = random.Random(f"items-{sibling}")
        env = self.open_game(sibling)
        pool = []
        try:
            for _ in range(ITEMS_PER_GAME):
                obs, info = env.reset()
                st: StepInfo = info["step"]
                for _ in range(rng.randint(0, max(0, len(st.walkthrough) - 1))):
                    cmd = st.walkthrough[0] if rng.random() < 0.7 or not st.admissible else rng.choice(st.admissible)
                    obs, _, term, trunc, info = env.step(cmd)
                    st = info["step"]
                    if term or trunc:
                        obs, info = env.reset()
                        st = info["step"]
                if st.walkthrough:
                    pool.append({"obs": obs, "best": st.walkthrough[0], "admissible": st.admissible})
        finally:
            close_quietly(env)
        if not pool:
            raise GameGenerationError(f"{self.spec.kind} {self.spec.target} seed {sibling}: no state of the game "
                                      "has a walkthrough, so there is nothing to pre-train on; the environment "
                                      "must fill StepInfo.walkthrough")
        if path is not None:
            try:
                write_whole(path, json.dumps(pool))  # a kill never leaves half a pool
            except OSError:  # an unwritable cache: the walks stay in memory (the cache only saves time)
                pass
        self._pools[g] = pool
        return pool

    def item(self, idx: int) -> Item:
        g = idx % self.n_games
        pool = self._pool(g)
        row = pool[(idx // self.n_games) % len(pool)]
        rng = random.Random(f"noise-{self.seed}-{idx}")
        noisy = rng.random() < self.teacher_noise  # drawn first whatever the env (TextWorld's items are unchanged)
        answer = rng.choice(row["admissible"]) if noisy and row["admissible"] else row["best"]
        if self.confidence and idx % CONFIDENCE_EVERY == CONFIDENCE_EVERY - 1:
            digit = str(rng.randrange(10))  # the format, not the calibration: any digit, any step
            q = confidence_question(row["obs"], answer, rng.randint(1, self.env_settings.max_steps),
                                    self.env_settings.max_steps)
            return Item(q, digit, self.spec.key,
                        {"game": g, "best": None, "admissible": row["admissible"]})
        return Item(row["obs"], answer, self.spec.key, {"game": g, "best": row["best"], "admissible": row["admissible"]})

    def score(self, item: Item, completion: str) -> float:
        """Single-step verifier: 1.0 when the completion names the walkthrough's next command (for a
        confidence item: when it states a digit — its calibration is graded only against episodes)."""
        if item.entry["best"] is None:
            return float(parse_confidence(completion) is not None)
        return float(resolve_action(completion, item.entry["admissible"]) == item.entry["best"])
