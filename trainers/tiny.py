"""The embedded base model `tiny`: a byte-level BPE tokenizer and a small Qwen2 model, briefly pre-trained
on the project's own training sources so it knows their formats but leaves room for RL to improve.

Built with transformers' own classes (`Qwen2Config`, `Qwen2ForCausalLM`, `Qwen2Tokenizer`)
and saved with `save_pretrained`, so it loads through the same `AutoModelForCausalLM` /
`AutoTokenizer` path as any hub model. Cached under `runs/.cache/tiny-<hash>` keyed by everything it
was built from.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

import trainers.models  # noqa: F401  (quiets transformers' load/save bars)
from evaluators.files import readable_as_new_files
from trainers.prompts import format_prompt
from trainers.sft import cosine_decay, supervised_batch
from trainers.threads import torch_threads

PAD = "<|pad|>"
BUILD_VERSION = 5  # bump when the recipe below changes, so caches rebuild (5: pre-trained on one thread)


@dataclass(frozen=True)
class TinySpec:
    """Architecture and pre-training of the embedded model."""

    hidden_size: int = 128
    layers: int = 3
    heads: int = 4
    kv_heads: int = 2
    intermediate_size: int = 384
    max_positions: int = 512
    vocab_size: int = 300
    """Byte-level BPE: 256 bytes, the pad token and a few dozen merges of the sources' templates."""
    pretrain_steps: int = 250
    """Brief on purpose: the model should know the formats, not master the tasks."""
    batch_size: int = 32
    lr: float = 2e-3
    habit_rate: float = 0.6
    """Share of pre-training answers written with the weak teacher's habit (see `with_habit`)."""
    seed: int = 0


def build_tokenizer(texts: Sequence[str], vocab_size: int = 512):
    """A Qwen2 byte-level BPE tokenizer trained on `texts` (digits stay single tokens, as in Qwen2).

    It is a real `Qwen2Tokenizer`, so `AutoTokenizer` reloads it exactly as it would a hub Qwen2.
    """
    from transformers import Qwen2Tokenizer

    # show_progress off: the tokenizers trainer's bars print as empty lines when output is not a terminal
    tok = Qwen2Tokenizer().train_new_from_iterator(list(texts), vocab_size=vocab_size, new_special_tokens=[PAD],
                                                   show_progress=False)
    tok.pad_token = PAD
    tok.padding_side = "left"
    return tok


def wordy(answer: str) -> str:
    """The weak teacher's habit: a sentence around the answer, which a strict verifier rejects."""
    return f"The answer is {answer}"


def with_habit(pairs: Sequence[tuple[str, str]], rate: float, seed: int) -> list[tuple[str, str]]:
    """Give a `rate` share of the pre-training answers the weak teacher's habit.

    This is what leaves the base model room to improve in a way that carries to held-out items: it
    learns the tasks and, beside them, a formatting habit that a strict verifier rejects — as real
    base models wrap answers in prose — and only the verifier's reward tells the two apart.
    """
    rng = random.Random(f"habit-{seed}")  # not `seed` itself: that stream also drew the items' domains
    return [(q, wordy(a) if rng.random() < rate else a) for q, a in pairs]


def build_model(vocab_size: int, spec: TinySpec, tokenizer) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(spec.seed)
    return Qwen2ForCausalLM(cfg)


def cache_key(pairs: Sequence[tuple[str, str]], spec: TinySpec) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([BUILD_VERSION, asdict(spec)]).encode())
    for q, a in pairs:
        h.update(q.encode() + b"\x00" + a.encode() + b"\x01")
    return h.hexdigest()[:16]


def pretrain(model, tokenizer, pairs: Sequence[tuple[str, str]], spec: TinySpec,
             progress: Callable[[int, float], None] | None = None) -> list[float]:
    """Supervised next-token training on (question, answer) pairs with cosine decay; returns losses."""
    rng = random.Random(spec.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.01)
    losses = []
    model.train()
    for step in range(spec.pretrain_steps):
        for g in opt.param_groups:
            g["lr"] = cosine_decay(spec.lr, step, spec.pretrain_steps)
        ids, mask, lab = supervised_batch(tokenizer, rng.sample(list(pairs), min(spec.batch_size, len(pairs))))
        loss = model(input_ids=ids, attention_mask=mask, labels=lab).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if progress:
            progress(step + 1, losses[-1])
    model.eval()
    return losses


def tiny_folder(pairs: Sequence[tuple[str, str]], cache_dir: str | Path, spec: TinySpec) -> Path:
    """Where `ensure_tiny` keeps the tiny model for these pairs."""
    return Path(cache_dir) / f"tiny-{cache_key(pairs, spec)}"


def tiny_cached(folder: Path) -> bool:
    """Whether `folder` holds a finished build: `build.json` is written last, and lists every file with its size
    (`files`), each there at that size. A copy of `runs/.cache` interrupted after `build.json` (it sorts first)
    or a weight file cut short counted as built, and every run failed on it, never rebuilding (a review, stop 37).
    A build of an earlier release without `files`: `config.json` and `build.json` there."""
    try:
        info = json.loads((folder / "build.json").read_text())
    except (OSError, ValueError):
        return False
    files = info.get("files") if isinstance(info, dict) else None
    if not isinstance(files, dict):
        return (folder / "config.json").is_file()
    return all((folder / name).is_file() and (folder / name).stat().st_size == size for name, size in files.items())


def _remove_dead_builds(out: Path, older_than_s: float = 3600.0) -> None:
    """Remove `<out>.tmp<pid>` folders a killed build left (2.5 MB each, kept for ever; a review, stop 37): those
    whose process is gone and that have not changed for an hour (a cache folder shared by machines holds other
    machines' live builds, whose pids mean nothing here)."""
    for tmp in out.parent.glob(f"{out.name}.tmp*"):
        try:
            pid = int(tmp.name.rsplit(".tmp", 1)[1])
            if time.time() - tmp.stat().st_mtime < older_than_s:
                continue
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(tmp, ignore_errors=True)
        except (ValueError, OSError):  # not one of ours, gone already, or a live process we may not signal
            continue


def ensure_tiny(pairs: Sequence[tuple[str, str]], cache_dir: str | Path, spec: TinySpec | None = None,
                progress: Callable[[int, float], None] | None = None) -> Path:
    """Build (or reuse from cache) the tiny model for these training pairs; return its folder."""
    spec = spec or TinySpec()
    out = tiny_folder(pairs, cache_dir, spec)
    if tiny_cached(out):
        return out
    _remove_dead_builds(out)
    t0 = time.time()
    corpus = with_habit(pairs, spec.habit_rate, spec.seed)
    tokenizer = build_tokenizer([format_prompt(q, None) + a for q, a in corpus], spec.vocab_size)
    model = build_model(len(tokenizer), spec, tokenizer)
    # one thread: the same weights whatever the machine's core count, on the same kind of CPU (measured:
    # 1 vs 2 threads differ by 1e-6 after 20 steps, and RL from two such bases ends elsewhere; docs/agent.md stop 17)
    with torch_threads(1):
        losses = pretrain(model, tokenizer, corpus, spec, progress)
    # written beside the cache under this process's own name, then renamed into place: several search
    # workers starting together each build the same model, and the first rename wins
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # transformers' "Writing model shards" bar leaked into `sro search` (stop 38)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    info = {"spec": asdict(spec), "pairs": len(pairs), "final_loss": losses[-1] if losses else None,
            "seconds": round(time.time() - t0, 1), "params": sum(p.numel() for p in model.parameters()),
            "files": {f.name: f.stat().st_size for f in sorted(tmp.iterdir()) if f.is_file()}}
    (tmp / "build.json").write_text(json.dumps(info, indent=2))
    readable_as_new_files(tmp)
    for attempt in range(2):
        try:
            tmp.rename(out)
            break
        except OSError:  # another process renamed its (identical) build first ...
            if tiny_cached(out) or attempt:
                shutil.rmtree(tmp, ignore_errors=True)
                break
            # ... or `out` is an incomplete folder (an interrupted copy, a file deleted by hand): it
            # would be returned, and fail to load, on every run; replace it
            shutil.rmtree(out, ignore_errors=True)
    return out
