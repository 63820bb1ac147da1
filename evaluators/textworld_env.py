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
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluators.envs import EnvSettings, StepInfo, TextEnv, resolve_action
from evaluators.files import unique_tag
from evaluators.games import (ITEMS_PER_GAME, PLAY_KEYS, GameGenerationError, GameTask, first_screen_signature,
                              number_setting)
from evaluators.registry import Registry
from evaluators.sources import SourceSpec, SourceSpecError

GAME_VERSION = 1  # bump when generation or the item pool changes, so caches rebuild
RENDER_VERSION = 4
"""Of the renderings, in the item pools' file names: 2 since stop 25 (a goal for treasure hunters and cooking
games, closed containers' contents hidden; a coin collector's rendering is unchanged), 3 with locked containers
hidden too, 4 since stop 53 (the full text without the game's objective, the compact goal instead; the compact
rendering is unchanged)."""
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

def game_settings(family: str, config: dict[str, Any]) -> dict[str, Any]:
    """The generator settings of a source config (its non-SRO keys over the family's defaults), a whole
    number written as a float (`level: 3.0`) as the integer an integer setting takes."""
    fam: Family = FAMILIES.get(family)
    out = dict(fam.defaults)
    for k, v in config.items():
        if k in PLAY_KEYS:
            continue
        if k not in fam.defaults:
            raise SourceSpecError(f"textworld {family} has no setting {k!r}; its settings: "
                                  f"{', '.join([*fam.defaults, *PLAY_KEYS])}", f"config.{k}")
        # 3.0 is 3: it passed the check, then the generator failed five times on the float naming no setting,
        # and it was another cache key than 3 (a review, stop 53); 2.5 is refused by `check_textworld`
        out[k] = int(v) if _takes_integers(SETTINGS_RULES.get(family, {}).get(k)) and _whole_float(v) else v
    return out


def _takes_integers(rule: Any) -> bool:
    """Whether a `SETTINGS_RULES` rule is an integer range or a set of integers."""
    return isinstance(rule, tuple) or isinstance(rule, set) and all(type(x) is int for x in rule)


def _whole_float(v: Any) -> bool:
    return isinstance(v, float) and v.is_integer()


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
    # this writer's own name: with the pid alone, two pid-1 containers sharing a cache deleted each other's
    # files in the `finally` below (a review, stop 53)
    tmp = folder / f"{key}.tmp{unique_tag()}.z8"
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
        for f in folder.glob(f"{tmp.stem}.*"):
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


def _state_detail(facts, room: str, seen: Sequence[str]) -> str:
    """What else tells two states of one room with the same visible objects apart, for the state key:
    which of the room's doors and the visible containers are shut, and where each visible object lies
    (the cookbook on the table or on the counter). Without it a cooking game's pantry with its door open
    and shut was one key, and ProAS's rules graph kept the admissible commands of whichever it saw last,
    so an admissible step could read as invalid (found by a review at stop 30)."""
    where: dict[str, str] = {}
    closed, doors = set(), set()
    for p in facts or []:
        args = [a.name for a in p.arguments]
        if p.name in ("at", "in", "on") and len(args) == 2:
            where.setdefault(args[0], args[1])
        elif p.name in ("closed", "locked") and args:
            closed.add(args[0])
        elif p.name == "link" and len(args) == 3 and args[0].lower() == room:
            doors.add(args[1])
    shut = sorted(x for x in closed if x in doors or x in seen)
    return f"|at:{','.join(f'{o}@{where[o]}' for o in seen if o in where)}|shut:{','.join(shut)}"


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
    """The `first_screen_signature` of a game file: its compact first observation (room, way back, objects,
    goal, choices) and walkthrough, hashed — the same task to a policy even where a later room's name
    differs. Memoized per process (one reset of the game's logic engine, a few ms)."""
    key = str(path)
    if key not in _SIGNATURES:
        _SIGNATURES[key] = first_screen_signature(TextWorldEnv(path, EnvSettings(max_steps=1, obs_mode="compact")))
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
    by textworld's Python logic engine) or the game's own text (`full`, from the compiled game) less its
    objective, with the compact rendering's goal (`game_goal`) and the admissible commands.
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
        self._objective = ""

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
        full = "" if compact else (gs.feedback or "").replace(self._objective, "").strip()
        detail = _state_detail(gs.facts, room, seen) if gs.facts else ""
        key = f"{self.game_id}:{room}|see:{','.join(seen)}|hold:{hold}{detail}"
        info = StepInfo(admissible=choices, state_key=key, valid=valid, won=bool(gs.won), lost=bool(gs.lost),
                        score=float(gs.score or 0), max_score=float(gs.max_score or 1),
                        walkthrough=list(gs.policy_commands or []), full_text=full)
        if compact:
            return compact_observation(room, self._back, seen, hold, choices, self._goal), info
        goal = f"\n\ngoal: {self._goal}" if self._goal else ""
        return f"{full}{goal}\n\nAdmissible commands: {', '.join(choices)}", info

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict[str, Any]]:
        import textworld

        super().reset(seed=seed)
        if self._env is None:  # compact: textworld's pure-Python logic engine on the game's .json (fast, no
            # z-machine); full: the compiled .z8 through jericho, for the game's own text
            full = self.settings.obs_mode == "full"
            path = self.path if full else str(Path(self.path).with_suffix(".json"))
            self._env = textworld.start(path, _request_infos(full))
            self._goal = game_goal(Path(self.path).with_suffix(".json"))
        gs = self._env.reset()
        # the full text without the game's objective, shown at reset and on `goal`: a coin collector's and a
        # treasure hunter's is the walkthrough in prose ("head west ... recover the coin"); it shows the
        # compact line's goal instead (a review, stop 53)
        self._objective = (gs.objective or "").strip() if self.settings.obs_mode == "full" else ""
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


class TextWorldTask(GameTask):
    """A set of TextWorld games from one family, level and seed range (`GameTask`), generated once and
    cached with their walks beside them.

    Source config: the family's generator settings (`level`, ...) plus `PLAY_KEYS` (`games`, `max_steps`,
    `obs_mode`, `teacher_noise`, `confidence`).
    """

    def __init__(self, spec: SourceSpec, seed: int, cache_dir: Path | None = None) -> None:
        super().__init__(spec, seed)
        self.settings = game_settings(spec.target, spec.config)
        self.cache_dir = cache_dir

    def _path(self, seed: int) -> Path:
        return ensure_game(self.spec.target, self.settings, seed, self.cache_dir)

    def open_game(self, seed: int, settings: EnvSettings | None = None) -> TextWorldEnv:
        return TextWorldEnv(self._path(seed), settings or self.env_settings, game_id=f"{self.spec.target}-{seed}")

    def signature(self, seed: int) -> str:
        return game_signature(self._path(seed))

    def pool_file(self, seed: int) -> Path:
        # keyed on the step limit too: the walks restart where it truncates them (until stop 25 a config with
        # another `max_steps` reused the first one's pool)
        return self._path(seed).with_suffix(f".items{ITEMS_PER_GAME}-{self.env_settings.obs_mode}"
                                            f"-s{self.env_settings.max_steps}-r{RENDER_VERSION}.json")

    def game_path(self, g: int) -> Path:
        """The g-th game of this source (generated on first use, then cached)."""
        return self._path(self.played_seed(g))


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
            number_setting(settings, key, int, *rule)
        elif rule is bool and not isinstance(v, bool):
            raise SourceSpecError(f"{key} must be true or false (got {v!r})", f"config.{key}")
        elif isinstance(rule, set) and (isinstance(v, bool) or v not in rule):
            shown = sorted(rule) if all(isinstance(x, int) for x in rule) else sorted(rule, key=str)
            raise SourceSpecError(f"{key} must be one of {shown} (got {v!r})", f"config.{key}")
    if spec.target == "cooking" and settings["recipe_seed"] and not settings["take"]:  # textworld's own assert
        raise SourceSpecError("recipe_seed > 0 (a shuffled recipe) needs the take skill: set take >= 1",
                              "config.recipe_seed")
    TextWorldTask(spec, seed=0)
