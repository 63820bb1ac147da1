"""Per-token policy losses, registered by name; each maps `LossInputs` to a (N, C) loss before
aggregation. ALGORITHMS.md §1 (clipped surrogate), §3 (Proximal KL) and the baselines it names.

Three policies may differ: μ sampled the rollout (`behav_logp`, possibly several updates old),
π_prox is the proximal reference (`prox_logp`: the policy when this batch's update began), π_θ is
being trained (`logp`, with gradient). With fresh rollouts and one update per batch all three agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from evaluators.registry import Registry
from trainers.core import clipped_surrogate

POLICY_LOSSES: Registry = Registry("policy loss")


@dataclass
class LossInputs:
    """Tensors of one minibatch, all (N, C) except where noted."""

    logp: torch.Tensor
    """log π_θ(y_t), with gradient."""
    behav_logp: torch.Tensor
    """log μ(y_t): the policy that generated the rollout."""
    prox_logp: torch.Tensor
    """log π_prox(y_t): the policy at the start of this update."""
    adv: torch.Tensor
    """Per-token advantage Â_t."""
    mask: torch.Tensor
    """1 on trainable (policy-generated) tokens."""


@dataclass
class ProxKLSettings:
    """Knobs of the Proximal KL loss (ALGORITHMS.md §3)."""

    beta_p: float = 2.0
    """β_p: weight of the future-KL credit subtracted from the advantage. With β_p·B well above the
    typical |Â| (≈1 after group normalization), the credit can cancel the advantage of tokens that
    already moved away from π_prox: a soft trust region. At β_p = 0.1 it could not, and under reuse 4
    × staleness 2 at lr 1e-3 the training reward collapsed like plain policy gradient's; β_p = 1 still
    let it fall from its peak (docs/benchmarks.md, bench/offpolicy.py)."""
    horizon: int = 4
    """H: tokens of future KL credited to each token (0 means the whole tail)."""
    gamma: float = 1.0
    """γ: discount inside the horizon."""
    bound: float = 2.0
    """B: the future-KL credit is clipped to [−B, B]."""
    c_is: float = 2.0
    """C_is: cap on the staleness weight π_prox/μ."""
    c_mask: float = 3.0
    """C_mask: tokens whose staleness ratio exceeds this get weight 0 (the sample says little about
    π_prox there)."""
    c_prox: float = 1.0
    """C_prox: cap on ρ_t = exp(sg(δ_t)); 1 never up-weights a token whose probability already rose."""
    mode: str = "ewma"
    """π_prox: snapshot (the policy when each batch's update begins) or ewma (an exponential moving
    average of the weights, updated after every optimizer step; costs one more copy of the weights).
    ewma by default since stop 18: under reuse 4 × staleness 2 at lr 1e-3, on tuning seeds 10-15, the
    snapshot collapsed on 2 of 6 seeds and ewma on none, with higher held-out accuracy (docs/benchmarks.md).
    With ewma, Proximal KL no longer reduces to REINFORCE on fresh rollouts after the first step: the
    lagging π_prox is a trust-region anchor there too."""
    ewma_decay: float = 0.5
    """θ_prox ← decay·θ_prox + (1 − decay)·θ after each optimizer step (mode ewma). π_prox's log-probs are
    computed once per generation batch, from the average as that batch's update begins, so with K optimizer
    steps per batch (`num_iterations` × `minibatches`) the next batch's anchor keeps decay^K of this one's:
    what a decay means depends on the reuse knobs (docs/trainers.md)."""

    def __post_init__(self) -> None:
        if self.mode not in ("snapshot", "ewma"):
            raise ValueError(f"ProxKLSettings: mode must be snapshot or ewma (got {self.mode!r})")
        if not 0.0 <= self.ewma_decay < 1.0:
            raise ValueError(f"ProxKLSettings: ewma_decay must be in [0, 1) (got {self.ewma_decay})")


@POLICY_LOSSES.register("clip")
def clip_loss(x: LossInputs, eps_low: float = 0.2, eps_high: float = 0.2, **_: object) -> torch.Tensor:
    """PPO/GRPO clipped surrogate with r = π_θ/μ (DeepSeekMath, arXiv 2402.03300)."""
    return clipped_surrogate(x.logp, x.behav_logp, x.adv, eps_low, eps_high)


@POLICY_LOSSES.register("pg")
def pg_loss(x: LossInputs, **_: object) -> torch.Tensor:
    """Plain policy gradient (REINFORCE with the given baseline): −Â·log π_θ; no off-policy correction."""
    return -x.adv * x.logp


@POLICY_LOSSES.register("cispo")
def cispo_loss(x: LossInputs, eps_high: float = 0.2, **_: object) -> torch.Tensor:
    """CISPO (MiniMax-M1, arXiv 2506.13585): −sg(min(r, 1+ε_high))·Â·log π_θ.

    The importance weight is clipped and detached, so every token keeps a gradient (PPO's clip
    drops the gradient of clipped tokens altogether). Only from above: the paper sets ε_low so large
    that there is no lower bound (until stop 25 this clamped below at 1 − eps_low too, which raised a
    token's small weight, 0.3 to 0.8 at the default)."""
    ratio = torch.exp(x.logp.detach() - x.behav_logp)
    return -torch.clamp(ratio, max=1 + eps_high) * x.adv * x.logp


def future_kl(delta: torch.Tensor, mask: torch.Tensor, horizon: int, gamma: float) -> torch.Tensor:
    """F_t = Σ_{k=t}^{min(T, t+H−1)} γ^{k−t}·m_k·δ_k, per row. (N, C) → (N, C); H = 0 means H = ∞."""
    C = delta.shape[-1]
    H = C if horizon <= 0 else min(horizon, C)
    md = delta * mask
    out = torch.zeros_like(md)
    for j in range(H):  # shift-and-add: O(H·N·C), H is small
        out[:, : C - j] += (gamma**j) * md[:, j:]
    return out


@POLICY_LOSSES.register("proximal_kl")
def proximal_kl_loss(x: LossInputs, prox: ProxKLSettings | None = None, **_: object) -> torch.Tensor:
    """Proximal KL (ALGORITHMS.md §3): −w_t·ρ_t·Ã_t·log π_θ(y_t), no whole-response ratio, no clip.

    δ_t = log π_θ − log π_prox (stop-gradient where used as a weight); w_t = min(π_prox/μ, C_is), 0
    where π_prox/μ > C_mask; Ã_t = Â_t − β_p·clip(F_t, −B, B); ρ_t = min(exp(δ_t), C_prox).
    Closest published: decoupled PPO (Hilton et al. 2022), FRPO (2601.10201), CISPO (2506.13585).
    """
    p = prox or ProxKLSettings()
    delta, _, w, F = _proximal_terms(x, p)
    adv = x.adv - p.beta_p * torch.clamp(F, -p.bound, p.bound)
    rho = torch.clamp(torch.exp(delta), max=p.c_prox)
    return -w * rho * adv * x.logp


def _proximal_terms(x: LossInputs, p: ProxKLSettings) -> tuple[torch.Tensor, ...]:
    """δ (detached), the staleness ratio π_prox/μ, its weight w and the future-KL credit F, each (N, C); none
    carries a gradient (the callers pass π_prox and μ computed without one: detached here too, so that a new
    caller's cannot flow into the weight; a review, stop 53)."""
    delta = (x.logp - x.prox_logp).detach()
    stale = torch.exp(x.prox_logp - x.behav_logp).detach()
    w = torch.clamp(stale, max=p.c_is) * (stale <= p.c_mask).float()
    return delta, stale, w, future_kl(delta, x.mask, p.horizon, p.gamma)


@torch.no_grad()
def proximal_kl_stats(x: LossInputs, prox: ProxKLSettings | None = None) -> dict[str, float]:
    """What ALGORITHMS.md §3 asks Proximal KL to report, over the mask's tokens: mean and max |δ|, the
    effective sample size of w as a share of the tokens ((Σw)² / (n·Σw²), 1 when all weights are
    equal, 0 when all are masked), the masked fraction (π_prox/μ > C_mask) and the mean future-KL
    credit F."""
    p = prox or ProxKLSettings()
    delta, stale, w, F = _proximal_terms(x, p)
    m = x.mask
    n = m.sum().clamp(min=1)
    w2 = (w * w * m).sum()
    return {"prox_delta_mean": float((delta.abs() * m).sum() / n),
            "prox_delta_max": float((delta.abs() * m).max()) if m.any() else 0.0,
            "prox_ess": float((w * m).sum() ** 2 / (n * w2)) if w2 > 0 else 0.0,
            "prox_masked_frac": float(((stale > p.c_mask).float() * m).sum() / n),
            "prox_future_kl": float((F * m).sum() / n)}
