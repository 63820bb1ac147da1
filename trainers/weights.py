"""Extra copies of the policy's weights: a frozen copy (the KL reference, a frozen teacher) and an
exponential moving average (an EMA teacher, an EWMA proximal policy)."""

from __future__ import annotations

import copy

import torch


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` in eval mode whose parameters take no gradient."""
    twin = copy.deepcopy(model).eval()
    for p in twin.parameters():
        p.requires_grad_(False)
    return twin


@torch.no_grad()
def ema_update(target: torch.nn.Module, source: torch.nn.Module, decay: float) -> None:
    """θ_target ← decay·θ_target + (1 − decay)·θ_source, parameter by parameter."""
    for t, s in zip(target.parameters(), source.parameters()):
        t.lerp_(s.detach(), 1.0 - decay)
