"""Data sources with their verifiers: reasoning-gym generators, local JSONL question/answer files, and
datasets read through `datasets` (a hub id, a local parquet/JSON/CSV file or dataset folder).

A `Task` yields `Item`s by index and scores a completion with `Task.score` — the single definition
of "correct": the trainer's reward and the benchmark's accuracy both call it.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import random
import re
import unicodedata
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import cached_property
from pathlib import Path
from typing import Any

MULTI_TURN_KINDS = frozenset({"textworld", "env"})
"""Source kinds whose items are games played over several turns (`evaluators.games.GameTask`)."""
STREAM_SIZE = 1_000_000  # items addressable per source; seeds are spaced further apart than this
SMALLER_STREAMS = (100_000, 20_000, 5_000, 1_000)
"""Stream sizes tried, in order, for a generator that refuses STREAM_SIZE items (its stream then repeats)."""
EAGER_STREAMS = {"acre": 20_000}
"""Stream sizes for generators that build every item when created, not item i from `seed + i` when asked:
timed over every registered reasoning-gym generator (0.1.25) at 1,000 and 4,000 items, only `acre` grew with
the size (0.24 s and 0.95 s: 1,000,000 items took about 4 minutes before a trial's first step, stop 37's note;
word_ladder refuses more than 20,000 itself). 20,000 acre items build in about 5 s; the stream then repeats."""
_TRAIN_SEED_BASE = 0
_HELDOUT_SEED_BASE = 1_000_000_000  # every held-out seed lies above every training seed


class SourceSpecError(ValueError):
    """A source or benchmark entry that cannot be built; `field` names the offending key."""

    def __init__(self, msg: str, field: str | None = None) -> None:
        super().__init__(msg)
        self.field = field


@dataclass(frozen=True)
class SourceSpec:
    """What a source is: its kind (`reasoning_gym`, `jsonl`, `textworld`, `env`), target and config."""

    kind: str
    target: str
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        cfg = json.dumps(self.config, sort_keys=True, default=str)
        return f"{self.kind}:{self.target}:{cfg}"


@dataclass(frozen=True)
class Item:
    """One problem: the question shown to the model and what the verifier needs to grade it."""

    question: str
    answer: str
    source: str
    entry: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


def derive_seed(project_seed: int, role: str, *keys: object) -> int:
    """A seed for one source stream; `role="heldout"` seeds never meet `role="train"` seeds.

    reasoning-gym seeds item i with `seed + i`, so streams are placed STREAM_SIZE apart and the
    held-out range starts above the whole training range.
    """
    if role not in ("train", "heldout"):
        raise ValueError(f"role must be 'train' or 'heldout', got {role!r}")
    digest = hashlib.sha256(repr((project_seed, role, keys)).encode()).digest()
    slot = int.from_bytes(digest[:4], "little") % 900
    base = _TRAIN_SEED_BASE if role == "train" else _HELDOUT_SEED_BASE
    return base + slot * STREAM_SIZE


def extract_answer(completion: str, lines: int = 1) -> str:
    """The model's final answer: the first `lines` lines of the completion (as many as the reference
    answer has: a grid, a board or a list of moves spans several), each stripped."""
    return "\n".join(ln.strip() for ln in completion.strip().split("\n")[:max(1, lines)])


def answer_lines(answer: str) -> int:
    """How many lines a reference answer spans (what `extract_answer` reads of a completion)."""
    return str(answer).strip().count("\n") + 1


def same_number(got: str, want: str) -> bool:
    """Both read as finite decimal numbers and equal: integers exactly (no float rounding of long ones),
    others within a relative 1e-6 (`0` is not `1e-7`). Underscores (`4_2`), nan and inf never match."""
    if "_" in got + want:
        return False
    try:
        a, b = Decimal(got), Decimal(want)
    except InvalidOperation:
        return False
    if not (a.is_finite() and b.is_finite()):
        return False
    try:  # a completion such as 1e1000000 overflowed the default context (a review, stop 37): never equal
        if a == b:
            return True
        if b == b.to_integral_value():  # an integer reference wants that integer: 123456789.4 read as it in float
            return False
        return abs(a - b) <= Decimal("1e-6") * max(abs(a), abs(b))  # in Decimal: float() made 1e-400 equal 2e-400
    except ArithmeticError:
        return False


def _canonical_text(text: str) -> str:
    """NFKC (fullwidth digits, ligatures, decomposed accents read as their plain forms), format characters
    (zero-width spaces and joiners) dropped, runs of whitespace one space, ends stripped."""
    text = str(text)
    if not text.isascii():  # ASCII is its own NFKC form and has no format characters (the common case, 3x faster)
        text = "".join(c for c in unicodedata.normalize("NFKC", text) if unicodedata.category(c) != "Cf")
    return re.sub(r"\s+", " ", text).strip()


QUESTION_KEY_VERSION = 2
"""Of `normalize`, in the keys of caches holding normalized questions (the pass-rate table, the catalog):
2 since stop 30 (Unicode forms read as one)."""


def normalize(text: str) -> str:
    """A question's identity, for decontamination, dedup and the pass-rate table: its canonical text
    (`_canonical_text`; until stop 30 an NFD accent or a zero-width space let a held-out question train),
    case-folded, so that a benchmark question differing in case alone is still held out."""
    return _canonical_text(text).casefold()


def normalize_answer(text: str) -> str:
    """An answer as a JSONL source grades it: its canonical text, case kept (until stop 30 answers were
    compared case-folded, so 'Ba' was graded correct for 'bA' and 'Co' for 'CO')."""
    return _canonical_text(text)


class Task:
    """A stream of items with a verifier."""

    spec: SourceSpec

    def item(self, idx: int) -> Item:
        raise NotImplementedError

    def score(self, item: Item, completion: str) -> float:
        """Reward in [0, 1]; 1.0 means correct."""
        raise NotImplementedError

    def items(self, n: int, start: int = 0) -> list[Item]:
        return [self.item(start + i) for i in range(n)]


class ReasoningGymTask(Task):
    """A reasoning-gym generator; its own `score_answer` is the verifier."""

    def __init__(self, spec: SourceSpec, seed: int) -> None:
        import reasoning_gym

        self.spec = spec
        self.seed = seed
        self.size = EAGER_STREAMS.get(spec.target, STREAM_SIZE)
        try:
            self.dataset = reasoning_gym.create_dataset(spec.target, seed=seed, size=self.size, **spec.config)
        except ValueError as first:  # a generator that caps its size (word_ladder: 20,000) was unusable: its own
            for size in SMALLER_STREAMS:  # error named a setting the user cannot change (a review, stop 37)
                try:
                    self.dataset = reasoning_gym.create_dataset(spec.target, seed=seed, size=size, **spec.config)
                except ValueError:
                    continue
                self.size = size
                break
            else:
                raise first

    def item(self, idx: int) -> Item:
        entry = self.dataset[idx % self.size]
        return Item(str(entry["question"]), str(entry["answer"]), self.spec.key, entry)

    def score(self, item: Item, completion: str) -> float:
        got = extract_answer(completion, answer_lines(item.answer))
        return float(self.dataset.score_answer(got, item.entry) or 0.0)


def _jsonl_lines(path: Path):
    """(line number, text) of each non-blank line of `path` (UTF-8, a byte-order mark read past), read here
    and parsed as JSON by the caller: `datasets`' JSON reader inferred one type per column (an answer of
    12345678901234567890 came back as 1.2345678901234567e+19, every integer answer as "2.0" once one answer
    was a decimal), and its text reader's cache, keyed on the path and modification time, served a file
    rewritten within the same second (or copied with `cp -p`) as it was before (until stop 30)."""
    with path.open(encoding="utf-8-sig") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                yield lineno, line


def _row_problem(question: Any, answer: Any) -> str | None:
    """What is wrong with a (question, answer) row of a file or dataset, None if nothing: a question that is
    not non-blank text (a number or an object trained as its str()), an answer that is null, blank (it matched
    an empty completion) or a list or mapping."""
    if not isinstance(question, str) or not question.strip():
        return f"question must be non-blank text (got {question!r})"
    if answer is None or isinstance(answer, (dict, list)) or (isinstance(answer, str) and not answer.strip()):
        return f"answer must be non-blank text or a number (got {answer!r})"
    return None


class JsonlTask(Task):
    """A local JSONL file of `question`/`answer` rows, in a seeded order (`_jsonl_lines`)."""

    def __init__(self, spec: SourceSpec, seed: int) -> None:
        self.spec = spec
        self.rows = self._read(spec)
        self.order = list(range(len(self.rows)))
        random.Random(seed).shuffle(self.order)

    @staticmethod
    def _read(spec: SourceSpec) -> list[dict[str, Any]]:
        return [json.loads(line) for _, line in _jsonl_lines(Path(spec.target))]

    @property
    def n_items(self) -> int:
        """Distinct rows: a benchmark takes at most this many (more would repeat rows)."""
        return len(self.rows)

    @property
    def content_id(self) -> str:
        """A digest of the rows: what caches keyed on this source must also key on (the file may change)."""
        return hashlib.sha256(json.dumps(self.rows, sort_keys=True).encode()).hexdigest()[:16]

    def item(self, idx: int) -> Item:
        row = self.rows[self.order[idx % len(self.order)]]
        return Item(str(row["question"]), str(row["answer"]), self.spec.key, dict(row))

    def score(self, item: Item, completion: str) -> float:
        got = normalize_answer(extract_answer(completion, answer_lines(item.answer)))
        want = normalize_answer(item.answer)
        return float(got == want or same_number(got, want))


DATASET_FILES = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".csv": "csv"}
"""A local data file's suffix → the `datasets` builder that reads it (`dataset:` sources)."""
DATASET_KEYS = {"split": "train", "name": None, "revision": None, "question": "question", "answer": "answer",
                "answer_after": None}
"""A `dataset:` source's `config:` keys and their defaults: the split, the subset (`name`) and `revision` of a hub
dataset, the question and answer columns, and `answer_after`: the answer is the text after the last occurrence of
this marker (GSM8K's `#### 72`)."""


def _dataset_settings(spec: SourceSpec) -> dict[str, Any]:
    unknown = sorted(set(spec.config) - set(DATASET_KEYS))
    if unknown:
        raise SourceSpecError(f"a dataset source has no config key {unknown[0]!r}; its keys: {', '.join(DATASET_KEYS)}",
                              f"config.{unknown[0]}")
    for k in ("split", "question", "answer", "answer_after", "name", "revision"):  # `answer_after: ""` was a
        v = spec.config.get(k)  # ValueError traceback, `answer_after: 4` a TypeError (a review, stop 37)
        if k in spec.config and (v is None and k in ("split", "question", "answer") or v is not None and
                                 (not isinstance(v, str) or not v)):
            raise SourceSpecError(f"config.{k} must be non-empty text (got {v!r})", f"config.{k}")
    return {**DATASET_KEYS, **spec.config}


_DATASET_ROWS: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
"""Rows already read in this process, by `_dataset_key`: the config check, the source's task and a
benchmark of the same dataset read it once (until stop 32 each read it again, four times for a file that
is both a source and a benchmark)."""


def _dataset_key(spec: SourceSpec, c: dict[str, Any]) -> tuple[str, str, str]:
    """The source, its settings, and what its rows are read from: a file's bytes, a folder's files' sizes and
    modification times (a hub id: nothing, `datasets` pins what it loaded in its own cache)."""
    path = Path(spec.target).expanduser()
    if path.is_file():
        state = hashlib.sha256(path.read_bytes()).hexdigest()
    elif path.is_dir():
        state = json.dumps(sorted((str(f.relative_to(path)), f.stat().st_size, f.stat().st_mtime_ns)
                                  for f in path.rglob("*") if f.is_file()))
    else:
        state = ""
    return spec.target, json.dumps(c, sort_keys=True, default=str), state


def load_dataset_rows(spec: SourceSpec) -> list[dict[str, Any]]:
    """The (question, answer) rows of a `dataset:` source through `datasets.load_dataset`: a local parquet,
    JSON, JSONL or CSV file (rebuilt from the file when its bytes changed: `datasets`' cache is keyed on its
    modification time), or a hub id or a local dataset folder (the hub's own code path, cached by `datasets`;
    offline, a dataset already in the HF cache loads with HF_DATASETS_OFFLINE=1). Read once per process
    (`_DATASET_ROWS`). Raises `SourceSpecError` naming the fix."""
    c = _dataset_settings(spec)
    key = _dataset_key(spec, c)
    if key not in _DATASET_ROWS:
        _DATASET_ROWS[key] = _read_dataset_rows(spec, c)
    return list(_DATASET_ROWS[key])


class _TextRows(list):
    """The rows of a local JSON, JSONL or CSV file, as `datasets.Dataset` is read here (`column_names`)."""

    def __init__(self, rows: list[dict[str, Any]], split: str, path: Path) -> None:
        if split != "train":
            raise SourceSpecError(f"{path.name} is one file, read as the split 'train' (got config.split "
                                  f"{split!r}); leave split out", "config.split")
        super().__init__(rows)
        self.column_names = list(dict.fromkeys(k for r in rows for k in r))


def _text_file_rows(path: Path, kind: str) -> list[dict[str, Any]]:
    """The rows of a local JSON (a list of objects, or one object per line) or CSV file, every value as the
    file writes it: `datasets`' inference turned 12345678901234567891 into 1.2345678901234567e+19 and 3 into
    3.0, and pandas read a CSV's `None`, `NA` or `00210` as a missing value or 210 (a review, stop 37)."""
    if kind == "csv":
        import csv

        with path.open(encoding="utf-8-sig", newline="") as f:
            return [dict(r) for r in csv.DictReader(f)]
    text = path.read_text(encoding="utf-8-sig")
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, list):
        rows = whole
    elif isinstance(whole, dict) and len(text.strip().splitlines()) > 1:
        raise SourceSpecError(f"{path.name}: one JSON object, not rows; write a list of objects or one object "
                              "per line", "dataset")
    else:
        rows = []
        for lineno, line in _jsonl_lines(path):
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                raise SourceSpecError(f"{path.name} line {lineno}: not JSON ({e})", "dataset") from None
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise SourceSpecError(f"{path.name} row {i}: a row must be an object with the question and answer "
                                  f"columns (got {r!r:.60})", "dataset")
    return rows


def _read_dataset_rows(spec: SourceSpec, c: dict[str, Any]) -> list[dict[str, Any]]:
    import datasets

    path = Path(spec.target).expanduser()
    try:
        if path.is_file():
            builder = DATASET_FILES.get(path.suffix.lower())
            if builder is None:
                raise SourceSpecError(f"{path.name}: a dataset file must end in {', '.join(DATASET_FILES)}", "dataset")
            if builder in ("json", "csv"):  # text formats: read as written, not through `datasets`' type inference
                ds = _TextRows(_text_file_rows(path, builder), c["split"], path)
            else:
                ds = datasets.load_dataset(builder, data_files=str(path), split=c["split"],
                                           download_mode="force_redownload")
        elif not path.exists() and (path.suffix.lower() in DATASET_FILES or spec.target.startswith((".", "/", "~"))):
            # a path, not a hub id: it read as "Couldn't reach ... on the Hub" (a review, stop 37)
            raise SourceSpecError(f"{spec.target}: no such file or folder (a relative path is read from the project's "
                                  "folder)", "dataset")
        elif path.is_dir() and ((path / "state.json").is_file() or (path / "dataset_dict.json").is_file()):
            ds = datasets.load_from_disk(str(path))  # a `save_to_disk` folder (load_dataset refuses one)
            if isinstance(ds, datasets.DatasetDict):
                if c["split"] not in ds:
                    raise SourceSpecError(f"dataset folder {path} has no split {c['split']!r}; its splits: "
                                          f"{', '.join(ds)} (config.split)", "config.split")
                ds = ds[c["split"]]
        else:
            ds = datasets.load_dataset(spec.target, c["name"], split=c["split"], revision=c["revision"])
    except SourceSpecError:
        raise
    except Exception as e:  # no such hub id, no network, an unknown split or subset
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        # offline, the hub's own words named no way on (a review, stop 57)
        fix = ("; the hub cannot be reached from here: load it once where it can (datasets keeps it in its cache, "
               "~/.cache/huggingface), or give a local file (.jsonl, .csv, .parquet) or a save_to_disk folder"
               if re.search(r"Offline|Couldn't reach|ConnectionError|connect", first) else "")
        raise SourceSpecError(f"cannot load dataset {spec.target!r} (split {c['split']!r}"
                              f"{', subset ' + repr(c['name']) if c['name'] else ''}): {first[:300]}{fix}",
                              "dataset") from None
    # no rows, checked before the columns: a header-only CSV, an empty .jsonl or `[]` was told to fix its columns
    # (a review, stop 53)
    if len(ds) == 0:
        raise SourceSpecError(f"dataset {spec.target!r} (split {c['split']!r}) has no rows; give it (question, answer) "
                              "rows, or read another split (config.split)", "dataset")
    missing = [c[k] for k in ("question", "answer") if c[k] not in ds.column_names]
    if missing:
        raise SourceSpecError(f"dataset {spec.target!r} has no column {missing[0]!r}; its columns: "
                              f"{', '.join(ds.column_names)} (set config.question and config.answer)", "dataset")
    rows = []
    for i, r in enumerate(ds):
        q, a = r.get(c["question"]), r.get(c["answer"])  # a text file's row may lack a column: named below
        if c["answer_after"] is not None and isinstance(a, str):
            if c["answer_after"] not in a:
                raise SourceSpecError(f"dataset {spec.target!r} row {i}: its answer has no {c['answer_after']!r} "
                                      "(config.answer_after)", "dataset")
            a = a.rsplit(c["answer_after"], 1)[1].strip()
        problem = _row_problem(q, a)
        if problem:
            raise SourceSpecError(f"dataset {spec.target!r} row {i}: {problem}", "dataset")
        rows.append({"question": q, "answer": a})
    return rows


class DatasetTask(JsonlTask):
    """A dataset's (question, answer) rows (`load_dataset_rows`), in a seeded order, graded as a JSONL
    file's are (its text with its case, or the same number)."""

    @staticmethod
    def _read(spec: SourceSpec) -> list[dict[str, Any]]:
        return load_dataset_rows(spec)


def make_task(spec: SourceSpec, seed: int, cache_dir: Path | None = None) -> Task:
    """The task of a source. `cache_dir`: where generated artefacts live (textworld games go to
    `cache_dir/textworld`, an adapter's walks to `cache_dir/env`; default `$SRO_CACHE_DIR`, else `runs/.cache`)."""
    if spec.kind == "reasoning_gym":
        return ReasoningGymTask(spec, seed)
    if spec.kind == "jsonl":
        return JsonlTask(spec, seed)
    if spec.kind == "dataset":
        return DatasetTask(spec, seed)
    if spec.kind == "textworld":
        from evaluators.textworld_env import TextWorldTask  # lazy: textworld is heavy to import

        return TextWorldTask(spec, seed, Path(cache_dir) / "textworld" if cache_dir is not None else None)
    if spec.kind == "env":
        from evaluators.adapters import EnvTask

        return EnvTask(spec, seed, Path(cache_dir) / "env" if cache_dir is not None else None)
    raise SourceSpecError(
        f"{spec.kind} sources are not available in this version; use reasoning_gym, jsonl, dataset, textworld or env",
        spec.kind)


class _RGCatalog:
    @cached_property
    def datasets(self) -> dict[str, tuple[type, type]]:
        from reasoning_gym.factory import DATASETS

        return dict(DATASETS)


_RG = _RGCatalog()


def _check_reasoning_gym(spec: SourceSpec) -> None:
    if spec.target not in _RG.datasets:
        hint = difflib.get_close_matches(spec.target, list(_RG.datasets), n=1)
        fix = f"did you mean {hint[0]!r}?" if hint else "see reasoning_gym.factory.DATASETS for the names"
        raise SourceSpecError(f"unknown reasoning-gym generator {spec.target!r}; {fix}", "reasoning_gym")
    config_cls = _RG.datasets[spec.target][1]
    fields = [f.name for f in dataclasses.fields(config_cls) if f.name not in ("seed", "size")]
    for key in spec.config:
        if key in ("seed", "size"):
            raise SourceSpecError(f"{key!r} is set by SRO (held-out seeds stay disjoint); remove it", f"config.{key}")
        if key not in fields:
            raise SourceSpecError(
                f"{spec.target} has no config field {key!r}; its fields: {', '.join(fields)}", f"config.{key}"
            )
    try:
        make_task(spec, seed=0).item(0)
    except Exception as e:  # the generator's own validation (e.g. min_terms > max_terms)
        # a value of another kind than its default (`min_terms: "two"`: "'>' not supported between instances of
        # 'str' and 'int'") is named (until stop 53 the field was `config`, whichever key it was: a review)
        odd = _mistyped(config_cls, spec.config)
        if len(odd) == 1:
            k, default = odd[0]
            raise SourceSpecError(f"{spec.target} rejects this config: {e} (config.{k} is {spec.config[k]!r}, its "
                                  f"default {default!r})", f"config.{k}") from None
        raise SourceSpecError(f"{spec.target} rejects this config: {e}", "config") from None


def _kind(v: Any) -> str:
    """What a config value is, as far as a generator tells it: true/false, an integer, a number, text, a list."""
    for kind, types in (("bool", bool), ("int", int), ("number", float), ("text", str), ("list", (list, tuple))):
        if isinstance(v, types):
            return kind
    return "other"


def _mistyped(config_cls: type, config: dict[str, Any]) -> list[tuple[str, Any]]:
    """(key, default) of each config value of another kind than its field's default (an integer where the
    default is a number is not)."""
    out = []
    for f in dataclasses.fields(config_cls):
        if f.name not in config:
            continue
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        want, got = _kind(default), _kind(config[f.name])
        if default is not None and want != got and (want, got) != ("number", "int"):
            out.append((f.name, default))
    return out


def _check_jsonl(spec: SourceSpec) -> None:
    path = Path(spec.target)
    if not path.is_file():
        raise SourceSpecError(f"no such file {spec.target!r} (a relative path is read from the project YAML's folder; "
                              "a recipe from `sro export` keeps the absolute paths of the machine it ran on: copy the "
                              "file there, or edit the path)", "jsonl")
    other = (f"`dataset: {spec.target}` reads it with `config: {{question: <its question key>, answer: <its answer "
             "key>}` (and `answer_after:`, `split:`)")
    if spec.config:  # taken and ignored: `config: {question: prompt}` still said the rows lack 'question'
        raise SourceSpecError(f"a jsonl source takes no config (got {', '.join(map(str, spec.config))}): its rows "
                              f"are read as question/answer; for other key names {other}", "config")
    rows = 0
    shape = '(each line is one {"question": ..., "answer": ...} object)'
    try:
        for lineno, line in _jsonl_lines(path):  # every line: a bad one used to surface mid-search
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise SourceSpecError(f"{path.name} line {lineno} is not JSON ({e.msg})", "jsonl") from None
            missing = sorted(k for k in ("question", "answer") if not isinstance(row, dict) or row.get(k) is None)
            if missing:  # absent or null: it would train and score against the text "None"
                null = [k for k in missing if isinstance(row, dict) and k in row]
                what = f"has {' and '.join(null)} null" if null else f"lacks {missing}"
                keys = (f"; its keys are {', '.join(map(str, row))}: {other}"  # it was found in the code (stop 58)
                        if isinstance(row, dict) and set(row) - {"question", "answer"} and not null else "")
                raise SourceSpecError(f"{path.name} line {lineno} {what} {shape}{keys}", "jsonl")
            problem = _row_problem(row["question"], row["answer"])
            if problem:
                raise SourceSpecError(f"{path.name} line {lineno}: {problem} {shape}", "jsonl")
            rows += 1
    except UnicodeDecodeError as e:
        raise SourceSpecError(f"{path.name} is not UTF-8 text ({e.reason} at byte {e.start}); save it as UTF-8",
                              "jsonl") from None
    if not rows:
        raise SourceSpecError(f"{path.name} is empty", "jsonl")


def check_source_spec(spec: SourceSpec) -> None:
    """Raise `SourceSpecError` if `spec` cannot produce items."""
    if spec.kind == "reasoning_gym":
        _check_reasoning_gym(spec)
    elif spec.kind == "jsonl":
        _check_jsonl(spec)
    elif spec.kind == "dataset":
        load_dataset_rows(spec)
    elif spec.kind == "textworld":
        from evaluators.textworld_env import check_textworld

        check_textworld(spec)
    elif spec.kind == "env":
        from evaluators.adapters import check_env_source

        check_env_source(spec)
    else:
        make_task(spec, seed=0)
