"""Self-distillation with privileged information (ALGORITHMS.md §4, SDPO / OPSD style).

The student is the policy on the plain prompt; the teacher is the same network (live, a frozen copy
of the start, or an EMA of the student) shown privileged context — the reference answer, or a
successful sibling completion from the same group — before the same prompt. Per student token the
loss is a divergence from student to teacher on the student's own sample, mixed with the policy
loss as `(1 − w_d)·L_policy + w_d·L_distill`.

Divergences (registered): `sampled_rkl`, the reverse KL estimated on the sampled token, whose
gradient is E_{y∼π_s}[(log π_s(y) − log π_t(y))·∇log π_s(y)]; and `topk_rkl`, the exact reverse KL
restricted to the student's top-k tokens at each position (renormalized).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from evaluators.registry import Registry
from trainers.prompts import format_prompt
from trainers.rollout import Rollouts, completion_log_dist

DIVERGENCES: Registry = Registry("distillation divergence")
CONTEXTS: Registry = Registry("privileged context")
TEACHERS = ("live", "frozen", "ema")


@dataclass
class DistillSettings:
    weight: float = 0.0
    """w_d: share of the distillation loss; 0 turns self-distillation off."""
    context: str = "answer"
    """Privileged context shown to the teacher: answer (the reference answer) or sibling (a
    successful completion from the same group; groups without one are not distilled)."""
    divergence: str = "sampled_rkl"
    """sampled_rkl or topk_rkl."""
    top_k: int = 8
    """Vocabulary entries per position for topk_rkl."""
    teacher: str = "live"
    """live (the current weights), frozen (the weights at the start) or ema."""
    ema_decay: float = 0.9
    """θ_t ← decay·θ_t + (1 − decay)·θ after each optimizer step (teacher = ema)."""

    def __post_init__(self) -> None:
        problems = []
        if not 0.0 <= self.weight <= 1.0:
            problems.append(f"weight must be in [0, 1] (got {self.weight})")
        if self.context not in CONTEXTS:
            problems.append(f"context must be one of {CONTEXTS.names()} (got {self.context!r})")
        if self.divergence not in DIVERGENCES:
            problems.append(f"divergence must be one of {DIVERGENCES.names()} (got {self.divergence!r})")
        if self.teacher not in TEACHERS:
            problems.append(f"teacher must be one of {list(TEACHERS)} (got {self.teacher!r})")
        if self.top_k < 1 or not 0.0 <= self.ema_decay < 1.0:
            problems.append("top_k must be >= 1 and ema_decay in [0, 1)")
        if problems:
            raise ValueError("DistillSettings: " + "; ".join(problems))


@DIVERGENCES.register("sampled_rkl")
def sampled_rkl(student: torch.Tensor, teacher: torch.Tensor, tokens: torch.Tensor, top_k: int = 8) -> torch.Tensor:
    """Per-token surrogate (N, C) whose gradient is the reverse-KL gradient on the sampled token.
    `student` (N, C, V) log-probs with gradient, `teacher` (N, C, V) without, `tokens` (N, C)."""
    s = student.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    t = teacher.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return (s - t).detach() * s


@DIVERGENCES.register("topk_rkl")
def topk_rkl(student: torch.Tensor, teacher: torch.Tensor, tokens: torch.Tensor, top_k: int = 8) -> torch.Tensor:
    """KL(π_s‖π_t) over the student's top-k tokens per position, both renormalized on that set. (N, C)"""
    idx = student.detach().topk(min(top_k, student.shape[-1]), dim=-1).indices
    s = torch.log_softmax(student.gather(-1, idx), dim=-1)
    t = torch.log_softmax(teacher.detach().gather(-1, idx), dim=-1)  # a target, as in `sampled_rkl` (a review, stop 53)
    return (s.exp() * (s - t)).sum(-1)


def _demo(question: str, answer: str, tok) -> str:
    """A worked example of the same question, placed before the prompt."""
    return format_prompt(question, tok) + answer + "\n"


@CONTEXTS.register("answer")
def answer_context(questions: list[str], answers: list[str], texts: list[str], rewards: torch.Tensor,
                   group_size: int, tok) -> tuple[list[str], torch.Tensor]:
    """Every row's teacher sees the reference answer. Returns (teacher prefixes, rows to distill)."""
    return [_demo(q, a, tok) for q, a in zip(questions, answers)], torch.ones(len(texts))


@CONTEXTS.register("sibling")
def sibling_context(questions: list[str], answers: list[str], texts: list[str], rewards: torch.Tensor,
                    group_size: int, tok) -> tuple[list[str], torch.Tensor]:
    """Each row's teacher sees the best-rewarded other completion of its group, if that one succeeded."""
    prefixes, use = [], []
    for i, q in enumerate(questions):
        g0 = i - i % group_size
        others = [j for j in range(g0, g0 + group_size) if j != i]
        best = max(others, key=lambda j: float(rewards[j]))
        ok = float(rewards[best]) >= 1.0
        prefixes.append(_demo(q, texts[best].strip(), tok) if ok else "")
        use.append(1.0 if ok else 0.0)
    return prefixes, torch.tensor(use)


def teacher_log_dist(teacher, tok, ro: Rollouts, prefixes: list[str], prompts: list[str],
                     temperature: float = 1.0) -> torch.Tensor:
    """The teacher's (N, C, V) log-probs on the student's completion tokens, given prefix + prompt (at
    the rollout temperature, as the student's)."""
    dev = ro.input_ids.device
    enc = tok([p + q for p, q in zip(prefixes, prompts)], return_tensors="pt", padding=True,
              add_special_tokens=False).to(dev)
    ids = torch.cat([enc["input_ids"], ro.completion_ids], dim=1)
    att = torch.cat([enc["attention_mask"], ro.completion_mask.to(enc["attention_mask"].dtype)], dim=1)
    with torch.no_grad():
        return completion_log_dist(teacher, ids, att, enc["input_ids"].shape[1], temperature)


def grad_cosine(a: list[torch.Tensor | None], b: list[torch.Tensor | None]) -> float:
    """Cosine between two gradients given per parameter (None where a parameter got none)."""
    dot = na = nb = 0.0
    for x, y in zip(a, b):
        if x is not None:
            na += float((x * x).sum())
        if y is not None:
            nb += float((y * y).sum())
        if x is not None and y is not None:
            dot += float((x * y).sum())
    return dot / max(1e-12, (na * nb) ** 0.5)
