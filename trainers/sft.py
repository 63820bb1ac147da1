"""Supervised fine-tuning as a recipe stage before RL (SFT → RL): next-token loss on verified
solutions drawn from the same training mixture the RL stage uses.

A solution is verified when the source's own verifier scores its reference answer as correct, so
SFT never trains on an answer the reward would reject.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from trainers.mixture import Mixture
from trainers.prompts import format_prompt


@dataclass
class SFTConfig:
    steps: int = 0
    """Optimizer steps (0: no SFT stage)."""
    lr: float = 1e-4
    """AdamW learning rate (cosine decay to 0, 3 warm-up steps)."""
    batch_size: int = 16
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 0 or self.batch_size < 1 or not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"SFTConfig: steps >= 0, batch_size >= 1 and lr > 0 required (got {self})")


def cosine_decay(lr: float, step: int, steps: int) -> float:
    """`lr` at step `step` (0-based) of a cosine decay from `lr` at step 0 towards 0 at step `steps`."""
    return lr * 0.5 * (1 + math.cos(math.pi * step / steps))


def learning_rate(cfg: SFTConfig, step: int) -> float:
    """AdamW's rate at optimizer step `step` (0-based): the cosine decay of `cfg.lr` over `cfg.steps`, times a
    linear warm-up over the first 3 steps."""
    return cosine_decay(cfg.lr * min(1.0, (step + 1) / 3), step, cfg.steps)  # the float order of stop 51's


def supervised_batch(tokenizer, pairs: Sequence[tuple[str, str]]) -> tuple[torch.Tensor, ...]:
    """Right-padded (B, T) ids, mask and labels; the loss falls on the answer and its <eos> only."""
    rows, labels = [], []
    for q, a in pairs:
        p = tokenizer(format_prompt(q, tokenizer), add_special_tokens=False)["input_ids"]
        c = tokenizer(a, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append(p + c)
        labels.append([-100] * len(p) + c)
    width = max(map(len, rows))
    pad = tokenizer.pad_token_id
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    lab = torch.tensor([r + [-100] * (width - len(r)) for r in labels])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    return ids, mask, lab


def verified_pairs(mixture: Mixture, n: int) -> tuple[list[tuple[str, str]], int]:
    """Up to `n` (question, answer) pairs from the mixture whose answer passes the source's verifier;
    also returns how many drawn items were rejected."""
    pairs, rejected = [], 0
    for task, item in mixture.sample(n):
        if task.score(item, item.answer) >= 1.0:
            pairs.append((item.question, item.answer))
        else:
            rejected += 1
    return pairs, rejected


def sft(model, tokenizer, mixture: Mixture, cfg: SFTConfig,
        on_step: Callable[[int, float], None] | None = None, deadline: float | None = None) -> dict[str, float]:
    """Run the SFT stage in place; returns its cost (steps, samples and tokens, prompt tokens included,
    as the RL stage counts them) and final loss. It stops after the step that reaches `deadline` (a
    `time.monotonic()` value, e.g. the trial's time limit), with `sft_cut` = 1."""
    if cfg.steps == 0:
        return {"sft_steps": 0.0, "sft_samples": 0.0, "sft_tokens": 0.0}
    dev = next(model.parameters()).device
    pairs, rejected = verified_pairs(mixture, cfg.steps * cfg.batch_size)
    if not pairs:
        raise ValueError("SFT stage: no source item has a reference answer its verifier accepts")
    rng = random.Random(cfg.seed)
    rng.shuffle(pairs)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    model.train()
    loss = torch.tensor(float("nan"))
    first = None
    done = tokens = 0
    for step in range(cfg.steps):
        for g in opt.param_groups:
            g["lr"] = learning_rate(cfg, step)
        chunk = [pairs[(step * cfg.batch_size + i) % len(pairs)] for i in range(cfg.batch_size)]
        ids, mask, lab = (t.to(dev) for t in supervised_batch(tokenizer, chunk))
        loss = model(input_ids=ids, attention_mask=mask, labels=lab).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        first = loss.item() if first is None else first
        done, tokens = step + 1, tokens + int(mask.sum())
        if on_step:
            on_step(step + 1, loss.item())
        if deadline is not None and time.monotonic() >= deadline:
            break
    model.eval()
    return {"sft_steps": float(done), "sft_samples": float(done * cfg.batch_size), "sft_tokens": float(tokens),
            "sft_rejected": float(rejected), "sft_loss_first": first, "sft_loss": loss.item(),
            **({"sft_cut": 1.0} if done < cfg.steps else {})}
