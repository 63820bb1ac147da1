"""TextWorld as a domain: games generated offline with textworld's own generators (coin collector,
treasure hunter, cooking; by level and seed), cached under `runs/.cache/textworld`, played through
the gymnasium-style `TextEnv` of `evaluators.envs`.

A `TextWorldTask` is a source like any other: training games come from training seeds and held-out
games from held-out seeds (`derive_seed`). Disjoint seeds are not disjoint games — a small game space
such as coin collector level 2 gives the same game to several seeds — so a training task told the
held-out games' signatures (`keep_out`, `game_signature`) replaces any game a player could not tell from
a held-out one by a game from another seed; a benchmark game is never a training game. Its `item`s
are single steps — (compact observation, the walkthrough's next command, or a random admissible one)
from sibling games with the same settings — which is what the embedded model pre-trains on; the
multi-turn trainer plays whole episodes on the source's own games (`TextWorldTask.make_env`). Metrics: success, score, steps, invalid-action rate.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluators.calibration import confidence_question, parse_confidence
from evaluators.envs import ENVIRONMENTS, EnvSettings, StepInfo, TextEnv, close_quietly, normalize_command
from evaluators.files import write_whole
from evaluators.registry import Registry
from evaluators.sources import Item, SourceSpec, SourceSpecError, Task, extract_answer

GAME_VERSION = 1  # bump when generation or the item pool changes, so caches rebuild
RENDER_VERSION = 3
"""Of the compact rendering, in the item pools' file names: 2 since stop 25 (a goal for treasure hunters and
cooking games, closed containers' contents hidden; a coin collector's rendering is unchanged), 3 with locked
containers hidden too."""
ITEMS_PER_GAME = 48
"""Single-step items drawn per game for pre-training (random walks along and off the walkthrough)."""
REPLACE_STRIDE = 1009
"""Seed step from a game that must be replaced (it is a held-out game) to the next one tried."""
MAX_REPLACE = 32
"""Games tried for one seed before the game space counts as too small to keep training and held-out apart."""
_REVERSE = {"north": "south", "south": "north", "east": "west", "west": "east", "up": "down", "down": "up"}


def cache_root() -> Path:
    """Where generated games live: `$SRO_CACHE_DIR/textworld`, by default `runs/.cache/textworld`."""
    return Path(os.environ.get("SRO_CACHE_DIR", "runs/.cache")) / "textworld"


@dataclass(frozen=True)
class Family:
    """A game family: its textworld challenge name, default settings and the settings it accepts."""

    challenge: str
    defaults: dict[str, Any]
    summary: str


FAMILIES: Registry = Registry("textworld game family")
FAMILIES.add("coin_collector", Family("tw-coin_collector", {"level": 3},
                                      "a chain of rooms; take the coin at its far end (level = chain length)"))
FAMILIES.add("treasure_hunter", Family("tw-treasure_hunter", {"level": 1},
                                       "find the named object in a maze (levels 1-30)"))
FAMILIES.add("cooking", Family("tw-cooking", {"recipe": 1, "take": 1, "go": 1, "open": False, "cook": False,
                                              "cut": False, "drop": False, "recipe_seed": 0, "split": "train"},
                               "gather and prepare a recipe's ingredients (First TextWorld Problems)"))

# keys of a source's `config` that are SRO's, not the generator's
PLAY_KEYS = {"games": 8, "max_steps": 12, "obs_mode": "compact", "teacher_noise": 0.3, "confidence": False}
CONFIDENCE_EVERY = 4
"""With `confidence: true`, every 4th item asks for the stated chance of success (a random digit: the
base model learns the format, not the calibration)."""


class GameGenerationError(RuntimeError):
    """textworld could not build a game for these settings."""


def game_settings(family: str, config: dict[str, Any]) -> dict[str, Any]:
    """The generator settings of a source config (its non-SRO keys over the family's defaults)."""
    fam: Family = FAMILIES.get(family)
    out = dict(fam.defaults)
    for k, v in config.items():
        if k in PLAY_KEYS:
            continue
        if k not in fam.defaults:
            raise SourceSpecError(f"textworld {family} has no setting {k!r}; its settings: "
                                  f"{', '.join([*fam.defaults, *PLAY_KEYS])}", f"config.{k}")
        out[k] = v
    return out


def ensure_game(family: str, settings: dict[str, Any], seed: int, cache_dir: Path | None = None) -> Path:
    """Generate (once) and cache the game for these settings and seed; return its `.z8` path."""
    fam: Family = FAMILIES.get(family)
    key = hashlib.sha256(json.dumps([GAME_VERSION, family, settings, seed], sort_keys=True).encode()).hexdigest()[:12]
    folder = (cache_dir or cache_root()) / family
    path = folder / f"{key}.z8"
    if path.is_file() and path.with_suffix(".json").is_file():
        return path
    import textworld
    from textworld.challenges import CHALLENGES
    from textworld.generator.game import GameOptions

    folder.mkdir(parents=True, exist_ok=True)
    last: Exception | None = None
    tmp = folder / f"{key}.tmp{os.getpid()}.z8"
    try:
        for attempt in range(5):  # some seeds admit no quest of the asked length; the next seed usually does
            opts = GameOptions()
            opts.seeds = seed + 7919 * attempt
            opts.path = str(tmp)
            opts.force_recompile = True
            try:
                game = CHALLENGES[fam.challenge][1](dict(settings), opts)
                textworld.generator.compile_game(game, opts)
            except Exception as e:  # textworld raises several kinds (QuestGenerationError, assertion, ...)
                last = e
                continue
            os.replace(tmp.with_suffix(".json"), path.with_suffix(".json"))
            os.replace(tmp, path)
            return path
    finally:  # the Inform 7 source and a failed attempt's files (until stop 25 one `.ni` per game was left)
        for f in folder.glob(f"{key}.tmp{os.getpid()}.*"):
            f.unlink(missing_ok=True)
    raise GameGenerationError(f"textworld {family} {settings} seed {seed}: {last}")


def _request_infos(full_text: bool):
    import textworld

    return textworld.EnvInfos(admissible_commands=True, policy_commands=True, won=True, lost=True, score=True,
                              max_score=True, facts=True, description=full_text, inventory=full_text,
                              feedback=full_text, objective=full_text)


def _from_facts(facts) -> tuple[str, list[str], str]:
    """(room, visible objects, carried objects) from the game state's logical facts. What lies inside a
    closed container is not visible (until stop 25 it was, and opening the container left the state key
    unchanged)."""
    at: dict[str, str] = {}
    held, placed = [], []
    closed = set()
    for p in facts or []:
        args = [a.name for a in p.arguments]
        types = [a.type for a in p.arguments]
        if p.name == "at" and len(args) == 2:
            at[args[0]] = args[1]
            if types[0] not in ("P", "r", "d"):
                placed.append((args[0], args[1], "at"))
        elif p.name in ("in", "on") and len(args) == 2:
            if types[1] == "I":
                held.append(args[0])
            else:
                placed.append((args[0], args[1], p.name))
        elif p.name in ("closed", "locked") and args:  # a locked container has no `closed` fact
            closed.add(args[0])
    room = at.get("P", "?")
    reachable = [(o, where) for o, where, how in placed if not (how == "in" and where in closed)]
    here = {room}
    for _ in range(3):  # objects on things that are here, or in open things that are here, are visible too
        here |= {o for o, where in reachable if where in here}
    seen = sorted(o for o, where in reachable if where in here and o not in held)
    return room.lower(), seen, ", ".join(sorted(held)) or "nothing"


def game_goal(json_path: str | Path) -> str | None:
    """What the game asks, in a few words, for the families whose goal differs from game to game (the
    compact rendering shows it; a coin collector's is always the coin): a treasure hunter's object and
    room ("hold pear in playroom": a distractor beside it loses the game), a cooking game's recipe ("eat
    meal of diced fried orange bell pepper, ..."; the cookbook's text is not in the compact rendering).
    None for other games. Until stop 25 the compact rendering had no goal, so these two families could
    only be guessed."""
    import textworld

    game = textworld.Game.load(str(json_path))
    uuid = str(game.metadata.get("uuid", ""))
    if uuid.startswith("tw-cooking"):
        dishes = [" ".join([*(p for p in reversed(ing[1:]) if p), ing[0]]) for ing in game.metadata.get("ingredients", [])]
        return "eat meal of " + ", ".join(dishes) if dishes else None
    if uuid.startswith("tw-treasure_hunter") and game.quests and game.quests[0].win_events:
        name = lambda v: getattr(game.infos.get(v.name), "name", None) or v.name  # noqa: E731
        pre = game.quests[0].win_events[0].condition.preconditions
        obj = next((name(p.arguments[0]) for p in pre if p.name == "in" and p.arguments[1].type == "I"), None)
        room = next((name(p.arguments[1]) for p in pre if p.name == "at" and p.arguments[0].type == "P"), None)
        return f"hold {obj}" + (f" in {room.lower()}" if room else "") if obj else None
    return None


_SIGNATURES: dict[str, str] = {}


def game_signature(path: str | Path) -> str:
    """What a policy can learn about a game before it plays it: the compact first observation (room, way
    back, objects, goal, choices) and the walkthrough, hashed. Two games with one signature are solved by
    the same commands from the same first screen — the same task to a policy even where a later room's name
    differs. Memoized per process (one reset of the game's logic engine, a few ms)."""
    key = str(path)
    if key not in _SIGNATURES:
        env = TextWorldEnv(path, EnvSettings(max_steps=1, obs_mode="compact"))
        try:
            obs, info = env.reset()
        finally:
            close_quietly(env)
        blob = json.dumps([obs, info["step"].walkthrough])
        _SIGNATURES[key] = hashlib.sha256(blob.encode()).hexdigest()[:16]
    return _SIGNATURES[key]


def _room(description: str) -> str:
    m = re.search(r"-=\s*(.+?)\s*=-", description or "")
    return m.group(1).strip().lower() if m else "?"


def _carrying(inventory: str) -> str:
    text = " ".join((inventory or "").split()).lower()
    text = re.sub(r"^you are carrying:?\s*", "", text).rstrip(".")
    return text or "nothing"


def compact_observation(room: str, back: str | None, seen: list[str], hold: str, choices: list[str],
                        goal: str | None = None) -> str:
    """The short rendering a small model reads: room, way back, objects, inventory, the goal where the
    game's family varies it, numbered choices."""
    choice_list = " ".join(f"{i}) {c}" for i, c in enumerate(choices, 1))
    return (f"room: {room} | back: {back or '-'} | see: {', '.join(seen) or '-'} | hold: {hold}"
            f"{f' | goal: {goal}' if goal else ''}\nchoose: {choice_list}")


class TextWorldEnv(TextEnv):
    """One compiled TextWorld game behind the `TextEnv` interface.

    The observation is the compact rendering (`obs_mode: compact`, read from the game state's facts
    by textworld's Python logic engine) or the game's own text (`full`, from the compiled game).
    An inadmissible command is passed to the game (which answers, e.g., "That's not a verb I
    recognise") and costs a step; `StepInfo.valid` is False for it.
    """

    def __init__(self, path: str | Path, settings: EnvSettings | None = None, game_id: str | None = None) -> None:
        super().__init__(settings)
        self.path = str(path)
        self.game_id = game_id or Path(path).stem
        self._env = None
        self._back: str | None = None
        self._last: StepInfo | None = None
        self._goal: str | None = None

    def _render(self, gs, valid: bool) -> tuple[str, StepInfo]:
        choices = sorted(gs.admissible_commands or [])
        compact = self.settings.obs_mode == "compact"
        if compact or gs.facts:  # the state from the game's facts, so a state has one key in both modes (until
            room, seen, hold = _from_facts(gs.facts)  # stop 25 full mode read "knife from table" off the choices)
        else:  # full mode without facts: read off the game's text
            room = _room(gs.description)
            hold = _carrying(gs.inventory)
            seen = sorted({c.split(" ", 1)[1] for c in choices if c.startswith(("take ", "examine "))
                           and c.split(" ", 1)[1] not in hold})
        full = "" if compact else (gs.feedback or "").strip()
        key = f"{self.game_id}:{room}|see:{','.join(seen)}|hold:{hold}"
        info = StepInfo(admissible=choices, state_key=key, valid=valid, won=bool(gs.won), lost=bool(gs.lost),
                        score=float(gs.score or 0), max_score=float(gs.max_score or 1),
                        walkthrough=list(gs.policy_commands or []), full_text=full)
        obs = (compact_observation(room, self._back, seen, hold, choices, self._goal) if compact
               else full + "\n\nAdmissible commands: " + ", ".join(choices))
        return obs, info

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict[str, Any]]:
        import textworld

        super().reset(seed=seed)
        if self._env is None:  # compact: textworld's pure-Python logic engine on the game's .json (fast, no
            # z-machine); full: the compiled .z8 through jericho, for the game's own text
            full = self.settings.obs_mode == "full"
            path = self.path if full else str(Path(self.path).with_suffix(".json"))
            self._env = textworld.start(path, _request_infos(full))
            self._goal = None if full else game_goal(path)  # full text states the objective itself
        gs = self._env.reset()
        self.steps = 0
        self._back = None
        obs, self._last = self._render(gs, True)
        return obs, {"step": self._last}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._env is None or self._last is None:
            raise RuntimeError("call reset() before step()")
        cmd = resolve_action(action, self._last.admissible)
        valid = cmd in self._last.admissible
        before = self._last.score
        gs, _, done = self._env.step(cmd if cmd else "wait")
        self.steps += 1
        if valid and cmd.startswith("go "):
            self._back = _REVERSE.get(cmd[3:].strip())
        obs, self._last = self._render(gs, valid)
        terminated = bool(done or self._last.won or self._last.lost)
        truncated = not terminated and self.steps >= self.settings.max_steps
        return obs, self._last.score - before, terminated, truncated, {"step": self._last, "command": cmd}

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


ENVIRONMENTS.add("textworld", TextWorldEnv)


def resolve_action(text: str, admissible: list[str]) -> str:
    """The command a completion names: its first line, or the k-th choice when it is a number k."""
    cmd = normalize_command(extract_answer(text))
    if cmd.isdecimal() and cmd.isascii() and 1 <= int(cmd) <= len(admissible):  # not "²": isdigit, no int
        return admissible[int(cmd) - 1]
    return cmd


class TextWorldTask(Task):
    """A set of TextWorld games from one family, level and seed range.

    Source config: the family's generator settings (`level`, ...) plus `games` (how many distinct
    games; default 8), `max_steps` (the episode step limit), `obs_mode` (compact | full) and
    `teacher_noise` (share of pre-training items whose answer is a random admissible command
    instead of the walkthrough's).
    """

    multi_turn = True

    def __init__(self, spec: SourceSpec, seed: int, cache_dir: Path | None = None) -> None:
        self.spec = spec
        self.seed = seed
        self.settings = game_settings(spec.target, spec.config)
        play = {**PLAY_KEYS, **{k: v for k, v in spec.config.items() if k in PLAY_KEYS}}
        self.n_games = _number(play, "games", int, 1)
        max_steps = _number(play, "max_steps", int, 1)
        try:
            self.env_settings = EnvSettings(max_steps, str(play["obs_mode"]))
        except ValueError as e:
            raise SourceSpecError(str(e), "config") from None
        self.teacher_noise = _number(play, "teacher_noise", float, 0.0, 1.0)
        self.confidence = bool(play["confidence"])
        self.cache_dir = cache_dir
        self.exclude: frozenset[str] = frozenset()
        """Signatures of games this task never plays nor pre-trains on: the held-out games (`keep_out`)."""
        self.replaced: dict[int, int] = {}
        """Seed -> the seed played instead, for games replaced because a held-out game has their signature."""
        self._paths: dict[int, Path] = {}
        self._pools: dict[int, list[dict[str, Any]]] = {}

    def keep_out(self, signatures: set[str] | frozenset[str]) -> None:
        """Never play, nor draw pre-training items from, a game with one of these signatures (the held-out
        games': `signatures`); such a game is replaced by the first of seed + k·REPLACE_STRIDE that is not."""
        self.exclude = frozenset(signatures)
        self.replaced = {}
        self._paths.clear()
        self._pools.clear()

    def signatures(self) -> set[str]:
        """The `game_signature` of each of this task's games (generating any not yet generated)."""
        return {game_signature(self.game_path(g)) for g in range(self.n_games)}

    def _game(self, seed: int) -> tuple[int, Path]:
        """(seed, path) of the game for `seed`, or of its replacement where that game is excluded."""
        for k in range(MAX_REPLACE):
            path = ensure_game(self.spec.target, self.settings, seed + k * REPLACE_STRIDE, self.cache_dir)
            if not self.exclude or game_signature(path) not in self.exclude:
                if k:
                    self.replaced[seed] = seed + k * REPLACE_STRIDE
                return seed + k * REPLACE_STRIDE, path
        raise GameGenerationError(
            f"textworld {self.spec.target} {self.settings}: the {MAX_REPLACE} games tried for seed {seed} are all "
            f"held-out games; the game space of these settings is too small to keep training and held-out games "
            f"apart: raise the level, or give the benchmark fewer games")

    def game_path(self, g: int) -> Path:
        """The g-th game of this source (generated on first use, then cached)."""
        g %= self.n_games
        if g not in self._paths:
            self._paths[g] = self._game(self.seed + g)[1]
        return self._paths[g]

    def make_env(self, g: int) -> TextWorldEnv:
        g %= self.n_games
        path = self.game_path(g)
        return TextWorldEnv(path, self.env_settings,
                            game_id=f"{self.spec.target}-{self.replaced.get(self.seed + g, self.seed + g)}")

    def _pool(self, g: int) -> list[dict[str, Any]]:
        """Single-step items from random walks in the g-th *sibling* game (seed seed + games + g: the
        same settings, not a game episodes are played on — a base model pre-trained on the played
        games' own walkthroughs wins them all, and RL then gets no gradient). Cached beside the game."""
        if g in self._pools:
            return self._pools[g]
        sibling, game = self._game(self.seed + self.n_games + g)
        # keyed on the step limit too: the walks restart where it truncates them (until stop 25 a config with
        # another `max_steps` reused the first one's pool)
        path = game.with_suffix(f".items{ITEMS_PER_GAME}-{self.env_settings.obs_mode}"
                                f"-s{self.env_settings.max_steps}-r{RENDER_VERSION}.json")
        try:
            self._pools[g] = json.loads(path.read_text())
            return self._pools[g]
        except (OSError, ValueError):  # not built yet, or a partial file: build it (again)
            pass
        rng = random.Random(f"items-{sibling}")
        env = TextWorldEnv(game, self.env_settings, game_id=f"{self.spec.target}-{sibling}")
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
            env.close()
        write_whole(path, json.dumps(pool))  # a kill never leaves half a pool
        self._pools[g] = pool
        return pool

    def item(self, idx: int) -> Item:
        g = idx % self.n_games
        pool = self._pool(g)
        row = pool[(idx // self.n_games) % len(pool)]
        rng = random.Random(f"noise-{self.seed}-{idx}")
        answer = rng.choice(row["admissible"]) if rng.random() < self.teacher_noise else row["best"]
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


def _number(values: dict[str, Any], key: str, kind: type, low: float, high: float | None = None) -> Any:
    """`values[key]` as an int or float inside [low, high], or a `SourceSpecError` naming `config.<key>`."""
    v = values[key]
    ok = (not isinstance(v, bool) and isinstance(v, (int, float)) and v == v
          and (kind is float or float(v).is_integer()))  # v == v: not NaN
    if not ok or v < low or (high is not None and v > high):
        where = f"in [{low:g}, {high:g}]" if high is not None else f">= {low:g}"
        raise SourceSpecError(f"{key} must be {'an integer' if kind is int else 'a number'} {where} (got {v!r})",
                              f"config.{key}")
    return kind(v)


SETTINGS_RULES: dict[str, dict[str, Any]] = {
    "coin_collector": {"level": (1, 300)},
    "treasure_hunter": {"level": (1, 30)},
    "cooking": {"recipe": (1, 5), "take": (0, 5), "recipe_seed": (0, None), "go": {1, 6, 9, 12},
                "open": bool, "cook": bool, "cut": bool, "drop": bool, "split": {"train", "valid", "test"}},
}
"""What each family's generator accepts (textworld's own checks, which fail only after seconds of
generation): an integer range, a set of values, or `bool`."""


def check_textworld(spec: SourceSpec) -> None:
    """Raise `SourceSpecError` for an unknown family, an unknown setting or a value the generator would
    refuse, without generating a game (until stop 25 a refused level stopped the search with a
    `GameGenerationError` traceback after five generation attempts)."""
    if spec.target not in FAMILIES:
        import difflib

        hint = difflib.get_close_matches(spec.target, FAMILIES.names(), n=1)
        fix = f"did you mean {hint[0]!r}?" if hint else f"known: {', '.join(FAMILIES.names())}"
        raise SourceSpecError(f"unknown textworld game family {spec.target!r}; {fix}", "textworld")
    settings = game_settings(spec.target, spec.config)
    for key, rule in SETTINGS_RULES.get(spec.target, {}).items():
        v = settings[key]
        if isinstance(rule, tuple):
            _number(settings, key, int, *rule)
        elif rule is bool and not isinstance(v, bool):
            raise SourceSpecError(f"{key} must be true or false (got {v!r})", f"config.{key}")
        elif isinstance(rule, set) and (isinstance(v, bool) or v not in rule):
            shown = sorted(rule) if all(isinstance(x, int) for x in rule) else sorted(rule, key=str)
            raise SourceSpecError(f"{key} must be one of {shown} (got {v!r})", f"config.{key}")
    if spec.target == "cooking" and settings["recipe_seed"] and not settings["take"]:  # textworld's own assert
        raise SourceSpecError("recipe_seed > 0 (a shuffled recipe) needs the take skill: set take >= 1",
                              "config.recipe_seed")
    TextWorldTask(spec, seed=0)


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
    """won | lost | step limit | env error: ..."""


def episode_metrics(results: list[EpisodeResult]) -> dict[str, float]:
    """success, score, steps and invalid-action rate over episodes."""
    n = max(1, len(results))
    steps = sum(r.steps for r in results)
    return {"success": sum(r.success for r in results) / n, "score": sum(r.score for r in results) / n,
            "steps": steps / n, "invalid_rate": sum(r.invalid for r in results) / max(1, steps)}


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
                reason = "won" if st.won else "lost" if st.lost else "step limit"
                return EpisodeResult(st.won, st.score / max(st.max_score, 1e-9), steps, invalid, reason)
    finally:
        close_quietly(env)
