"""Held-out scoring of a policy: greedy completions graded by the benchmark's own verifier."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from evaluators.benchmark import Benchmark, BenchmarkResult
from trainers.prompts import format_prompt
from trainers.rollout import generate


@torch.no_grad()
def complete(model, tokenizer, questions: Sequence[str], max_new_tokens: int = 8,
             batch_size: int = 64, truncated: list[bool] | None = None) -> list[str]:
    """Greedy completions for each question, in order; `truncated`: one flag per question is appended
    to it (no end of sequence within `max_new_tokens`)."""
    was_training = model.training
    model.eval()
    out: list[str] = []
    for i in range(0, len(questions), batch_size):
        prompts = [format_prompt(q, tokenizer) for q in questions[i : i + batch_size]]
        ro = generate(model, tokenizer, prompts, greedy=True, max_new_tokens=max_new_tokens)
        out.extend(ro.texts)
        if truncated is not None:
            truncated.extend(bool(t) for t in ro.truncated.tolist())
    model.train(was_training)
    return out


def evaluate(model, tokenizer, bench: Benchmark, max_new_tokens: int = 8, batch_size: int = 64) -> BenchmarkResult:
    cut: list[bool] = []
    completions = complete(model, tokenizer, [it.question for it in bench.items], max_new_tokens, batch_size, cut)
    return bench.grade(completions, cut)
