"""GRPO (DeepSeekMath, arXiv 2402.03300) with the Dr.GRPO and DAPO variants of ALGORITHMS.md §1:
group advantages, clipped token loss with ε_low/ε_high, optional k3 KL to a frozen reference (only
when β > 0), seq_mean / token_mean / fixed_len aggregation, truncated-completion masking, and rollout
reuse (`num_iterations` passes × `minibatches` optimizer steps per generation batch)."""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from evaluators.registry import Registry
from trainers.core import ADVANTAGES, AGGREGATIONS, k3_kl
from trainers.losses import POLICY_LOSSES, LossInputs, ProxKLSettings
from trainers.mixture import Mixture
from trainers.prompts import format_prompt
from trainers.rollout import Rollouts, completion_logprobs, generate


@dataclass
class GRPOConfig:
    lr: float = 1e-3
    """AdamW learning rate."""
    steps: int = 40
    """Generation batches (each followed by num_iterations × minibatches optimizer steps)."""
    group_size: int = 8
    """G: completions sampled per prompt; the advantage baseline is their mean."""
    prompts_per_step: int = 8
    """P: prompts per generation batch (N = P·G sequences)."""
    beta: float = 0.0
    """Weight of the k3 KL to the frozen initial policy; 0 keeps no reference model."""
    eps_low: float = 0.2
    """Lower clip: the ratio is clipped at 1 − eps_low."""
    eps_high: float = 0.2
    """Upper clip: the ratio is clipped at 1 + eps_high (DAPO's clip-higher when > eps_low)."""
    scale_rewards: str = "group"
    """Advantage scaling: group (GRPO), batch, or none (Dr.GRPO)."""
    aggregation: str = "seq_mean"
    """seq_mean, token_mean (DAPO) or fixed_len (Dr.GRPO)."""
    temperature: float = 1.0
    """Sampling temperature of rollouts."""
    max_new_tokens: int = 8
    """Completion length limit; longer completions are truncated."""
    policy_loss: str = "clip"
    """Per-token loss from trainers.losses: clip (GRPO/PPO), pg, cispo or proximal_kl."""
    prox: ProxKLSettings = field(default_factory=ProxKLSettings)
    """Proximal KL knobs (used when policy_loss is proximal_kl)."""
    staleness: int = 0
    """Train on the batch generated this many updates ago (the off-policy regime of async RL)."""
    mask_truncated: bool = False
    """Drop truncated completions from the loss (DAPO's overlong masking)."""
    num_iterations: int = 1
    """Passes over each generation batch."""
    minibatches: int = 1
    """Optimizer steps per pass."""
    grad_clip: float = 1.0
    """Max global gradient norm."""
    weight_decay: float = 0.0
    warmup_steps: int = 5
    """Linear learning-rate warm-up over the first generation batches, so Adam's first, sign-like
    steps are small while its second-moment estimate fills in."""
    optimizer: str = "adamw"
    """adamw, or sgd (momentum 0.9): steps proportional to the gradient, so weights the reward says
    nothing about barely move — gentler on a small model than Adam's sign-like first steps."""
    seed: int = 0
    max_seconds: float | None = None
    """Stop early (at a step boundary) after this many seconds."""

    def __post_init__(self) -> None:
        problems = []
        if not (self.lr > 0 and math.isfinite(self.lr)):
            problems.append(f"lr must be a positive number (got {self.lr})")
        for name in ("steps", "group_size", "prompts_per_step", "num_iterations", "minibatches", "max_new_tokens"):
            if int(getattr(self, name)) < 1:
                problems.append(f"{name} must be >= 1 (got {getattr(self, name)})")
        if self.group_size < 2:
            problems.append(f"group_size must be >= 2 for a group baseline (got {self.group_size})")
        if self.beta < 0 or self.eps_low < 0 or self.eps_high < 0 or self.temperature <= 0:
            problems.append("beta, eps_low, eps_high must be >= 0 and temperature > 0")
        if self.staleness < 0:
            problems.append(f"staleness must be >= 0 (got {self.staleness})")
        if self.policy_loss not in POLICY_LOSSES:
            problems.append(f"policy_loss must be one of {POLICY_LOSSES.names()} (got {self.policy_loss!r})")
        if isinstance(self.prox, dict):
            self.prox = ProxKLSettings(**self.prox)
        if self.scale_rewards not in ADVANTAGES:
            problems.append(f"scale_rewards must be one of {ADVANTAGES.names()} (got {self.scale_rewards!r})")
        if self.aggregation not in AGGREGATIONS:
            problems.append(f"aggregation must be one of {AGGREGATIONS.names()} (got {self.aggregation!r})")
        if (self.prompts_per_step * self.group_size) < self.minibatches:
            problems.append("minibatches cannot exceed prompts_per_step × group_size")
        if self.optimizer not in OPTIMIZERS:
            problems.append(f"optimizer must be one of {OPTIMIZERS.names()} (got {self.optimizer!r})")
        if problems:
            raise ValueError("GRPOConfig: " + "; ".join(problems))


OPTIMIZERS: Registry = Registry("optimizer")
OPTIMIZERS.add("adamw", lambda params, c: torch.optim.AdamW(params, lr=c.lr, weight_decay=c.weight_decay))
OPTIMIZERS.add("sgd", lambda params, c: torch.optim.SGD(params, lr=c.lr, momentum=0.9, weight_decay=c.weight_decay))


class GRPOTrainer:
    """Trains `model` in place on prompts drawn from `mixture`, rewarded by each task's verifier."""

    def __init__(self, model, tokenizer, config: GRPOConfig, mixture: Mixture) -> None:
        self.model, self.tok, self.cfg, self.mixture = model, tokenizer, config, mixture
        self.opt = OPTIMIZERS.get(config.optimizer)(model.parameters(), config)
        self.ref = None
        if config.beta > 0:  # a frozen reference costs a model copy, so only when the KL is on
            self.ref = copy.deepcopy(model).eval()
            for p in self.ref.parameters():
                p.requires_grad_(False)
        self.samples = 0
        self.tokens = 0
        self.step_count = 0
        self._queue: list[tuple[Rollouts, torch.Tensor, torch.Tensor | None]] = []
        torch.manual_seed(config.seed)

    def _needs_behaviour_logp(self) -> bool:
        """μ differs from π_θ only under staleness or reuse; then it is kept (losses and metrics read it)."""
        cfg = self.cfg
        return cfg.staleness > 0 or cfg.num_iterations > 1 or cfg.minibatches > 1

    def _rollout(self) -> tuple[Rollouts, torch.Tensor, torch.Tensor | None]:
        """Generate one batch; return it, its rewards (N,) and log μ (N, C) when it will be needed."""
        batch = self.mixture.sample(self.cfg.prompts_per_step)
        prompts = [format_prompt(item.question, self.tok) for _, item in batch]
        self.model.eval()
        ro = generate(self.model, self.tok, prompts, self.cfg.group_size, self.cfg.temperature,
                      self.cfg.max_new_tokens)
        G = self.cfg.group_size
        rewards = torch.tensor([batch[i // G][0].score(batch[i // G][1], text) for i, text in enumerate(ro.texts)],
                               dtype=torch.float32)
        behav = None
        if self._needs_behaviour_logp():
            with torch.no_grad():
                behav = completion_logprobs(self.model, ro.input_ids, ro.attention_mask, ro.prompt_len)[0]
        return ro, rewards, behav

    def _next_batch(self) -> tuple[Rollouts, torch.Tensor, torch.Tensor | None]:
        """The batch generated `staleness` updates ago (the queue is filled on the first step)."""
        self._queue.append(self._rollout())
        while len(self._queue) <= self.cfg.staleness:
            self._queue.append(self._rollout())
        return self._queue.pop(0)

    def step(self) -> dict[str, float]:
        """One generation batch and its optimizer steps; returns the step's metrics."""
        cfg = self.cfg
        self.step_count += 1
        for g in self.opt.param_groups:
            g["lr"] = cfg.lr * min(1.0, self.step_count / max(1, cfg.warmup_steps))
        ro, rewards, behav = self._next_batch()
        dev = ro.input_ids.device
        adv = ADVANTAGES.get(cfg.scale_rewards)(rewards, cfg.group_size).to(dev)  # (N,)
        mask = ro.completion_mask.float()  # (N, C)
        if cfg.mask_truncated:
            mask = mask * (~ro.truncated).float().unsqueeze(-1)
        with torch.no_grad():
            # π_prox: the policy as this update begins (a snapshot, ALGORITHMS.md §3)
            prox = (completion_logprobs(self.model, ro.input_ids, ro.attention_mask, ro.prompt_len)[0]
                    if behav is not None or cfg.policy_loss == "proximal_kl" else None)
            ref_logp = (completion_logprobs(self.ref, ro.input_ids, ro.attention_mask, ro.prompt_len)[0]
                        if self.ref is not None else None)
        aggregate = AGGREGATIONS.get(cfg.aggregation)
        policy_loss = POLICY_LOSSES.get(cfg.policy_loss)
        self.model.train()
        N = ro.input_ids.shape[0]
        stats = {"loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_frac": 0.0, "grad_norm": 0.0, "stale_kl": 0.0}
        n_updates = 0
        for _ in range(cfg.num_iterations):
            for idx in torch.randperm(N).chunk(cfg.minibatches):
                logp, ent = completion_logprobs(self.model, ro.input_ids[idx], ro.attention_mask[idx],
                                                ro.prompt_len, with_entropy=True)  # (n, C)
                p_logp = prox[idx] if prox is not None else logp.detach()
                b_logp = behav[idx] if behav is not None else p_logp
                m = mask[idx]
                inputs = LossInputs(logp, b_logp, p_logp, adv[idx].unsqueeze(-1).expand_as(logp), m)
                tok_loss = policy_loss(inputs, eps_low=cfg.eps_low, eps_high=cfg.eps_high, prox=cfg.prox)
                kl = k3_kl(logp, ref_logp[idx]) if ref_logp is not None else torch.zeros_like(logp)
                loss = aggregate(tok_loss + cfg.beta * kl, m)
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
                self.opt.step()
                ratio = torch.exp(logp.detach() - b_logp)
                clipped = ((ratio < 1 - cfg.eps_low) | (ratio > 1 + cfg.eps_high)).float()
                denom = m.sum().clamp(min=1)
                stats["loss"] += loss.item()
                stats["kl"] += float((kl.detach() * m).sum() / denom)
                stats["entropy"] += float((ent.detach() * m).sum() / denom)
                stats["clip_frac"] += float((clipped * m).sum() / denom)
                stats["stale_kl"] += float(((p_logp - b_logp).abs() * m).sum() / denom)
                stats["grad_norm"] += float(gn)
                n_updates += 1
        self.model.eval()
        self.samples += N
        self.tokens += int(ro.attention_mask.sum())
        out = {k: v / n_updates for k, v in stats.items()}
        out.update(reward=float(rewards.mean()), accuracy=float((rewards >= 1).float().mean()),
                   truncated=float(ro.truncated.float().mean()), samples=self.samples, tokens=self.tokens)
        return out

    def train(self, on_step: Callable[[int, dict[str, float]], bool | None] | None = None) -> list[dict[str, float]]:
        """Run `steps` generation batches; `on_step(step, metrics)` returning True stops early."""
        history = []
        t0 = time.monotonic()
        for s in range(1, self.cfg.steps + 1):
            m = self.step()
            m["step"] = s
            m["wall_s"] = time.monotonic() - t0
            history.append(m)
            if on_step is not None and on_step(s, m):
                break
            if self.cfg.max_seconds is not None and m["wall_s"] >= self.cfg.max_seconds:
                break
        return history
