"""The composable core of the trainer layer: advantage estimators and loss aggregations, each a small
function registered by role (ALGORITHMS.md §1), and the clipped surrogate and k3 KL they build on.
Policy losses are registered in `trainers.losses`; an algorithm (`trainers.algorithms`) is a named
combination.

Shapes: G samples per group, P groups, N = P·G sequences, C completion tokens.
"""

from __future__ import annotations

import torch

from evaluators.registry import Registry

ADVANTAGES: Registry = Registry("advantage estimator")
AGGREGATIONS: Registry = Registry("loss aggregation")

EPS_STD = 1e-4


def _grouped(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    if rewards.ndim != 1 or rewards.numel() % group_size:
        raise ValueError(f"rewards must be (P*G,) with G={group_size}; got shape {tuple(rewards.shape)}")
    return rewards.view(-1, group_size)  # (P, G)


@ADVANTAGES.register("group")
def group_advantage(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """GRPO (DeepSeekMath, arXiv 2402.03300): A_i = (R_i − mean_g R) / (std_g R + 1e-4). (N,) → (N,)"""
    r = _grouped(rewards, group_size)
    std = r.std(dim=1, keepdim=True, unbiased=True) if group_size > 1 else torch.zeros_like(r[:, :1])
    return ((r - r.mean(dim=1, keepdim=True)) / (std + EPS_STD)).reshape(-1)


@ADVANTAGES.register("batch")
def batch_scaled_advantage(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Group-centred, divided by the std of the whole batch (scale_rewards=batch)."""
    r = _grouped(rewards, group_size)
    centred = r - r.mean(dim=1, keepdim=True)
    std = rewards.std(unbiased=True) if rewards.numel() > 1 else rewards.new_zeros(())
    return (centred / (std + EPS_STD)).reshape(-1)


@ADVANTAGES.register("none")
def centred_advantage(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Dr.GRPO (arXiv 2503.20783): group-centred, not scaled (scale_rewards=none)."""
    r = _grouped(rewards, group_size)
    return (r - r.mean(dim=1, keepdim=True)).reshape(-1)


def overlong_penalty(lengths: torch.Tensor, truncated: torch.Tensor, max_len: int, buffer: int) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, arXiv 2503.14476, eq. 13), added to the reward: 0 up to
    `max_len − buffer` tokens, then falling linearly to −1 at `max_len`, and −1 for a truncated completion (it
    would have run past the limit). lengths (N,) completion tokens with the EOS, truncated (N,) bool → (N,)."""
    start = max_len - buffer
    pen = ((start - lengths.float()) / max(buffer, 1)).clamp(min=-1.0, max=0.0)
    return torch.where(truncated, torch.full_like(pen, -1.0), pen)


def on_mask(x: torch.Tensor, mask: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
    """`x` where `mask` holds and `fill` at the masked positions (padding after EOS): the reference log-probs
    (μ, π_prox, π_ref) a loss exponentiates against π_θ's, given `fill` = π_θ's own (detached) so that a masked
    ratio is 1 and its k3 0. The aggregations multiply by the mask, and an overflow there (a log-prob gap of
    88 nats at a padding token) times that 0 made the loss and every gradient NaN (review, stop 30)."""
    return torch.where(mask.bool(), x, fill)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(π_θ‖π_ref) per token: exp(q) − q − 1, q = logπ_ref − logπ_θ."""
    q = ref_logp - logp
    return torch.exp(q) - q - 1


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                      eps_low: float = 0.2, eps_high: float = 0.2) -> torch.Tensor:
    """PPO/GRPO per-token loss −min(r·A, clip(r, 1−ε_low, 1+ε_high)·A). (N, C) each; adv (N, C)."""
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv
    return -torch.minimum(unclipped, clipped)


@AGGREGATIONS.register("seq_mean")
def seq_mean(loss: torch.Tensor, mask: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """Mean over sequences of each sequence's token mean (GRPO's original aggregation); a sequence with no
    trainable token (e.g. a truncated one under `mask_truncated`) has no mean and is left out."""
    per_seq = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return per_seq.sum() / (mask.sum(-1) > 0).sum().clamp(min=1)


@AGGREGATIONS.register("token_mean")
def token_mean(loss: torch.Tensor, mask: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """DAPO (arXiv 2503.14476): sum over all tokens / number of tokens."""
    return (loss * mask).sum() / mask.sum().clamp(min=1)


@AGGREGATIONS.register("fixed_len")
def fixed_len(loss: torch.Tensor, mask: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """Dr.GRPO: sum over all tokens / (B · max_len), a constant normalizer. `max_len` is the generation
    limit (the trainer's `max_new_tokens`): the batch's padded width changes with its longest
    completion, since generation stops when every sequence has ended, and dividing by it would couple
    the gradient's scale to that length again (the width is used only when no limit is given)."""
    return (loss * mask).sum() / (mask.shape[0] * (max_len or mask.shape[1]))
