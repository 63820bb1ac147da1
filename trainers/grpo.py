"""GRPO (DeepSeekMath, arXiv 2402.03300) with the Dr.GRPO and DAPO variants of ALGORITHMS.md §1:
group advantages, clipped token loss with ε_low/ε_high, optional k3 KL to a frozen reference (only
when β > 0), seq_mean / token_mean / fixed_len aggregation, truncated-completion masking, and rollout
reuse (`num_iterations` passes × `minibatches` optimizer steps per generation batch), DAPO's dynamic
sampling, rollout staleness, self-distillation mixed into the loss (ALGORITHMS.md §4) and the two
clocks of §6 (batch schedule with lr scaling; the failure clock that stops a collapsing trial)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from evaluators.registry import Registry
from evaluators.sources import Item, Task
from trainers.backends import ROLLOUT_BACKENDS
from trainers.clocks import BatchSchedule, CollapseSettings, FailureClock, run_steps
from trainers.core import ADVANTAGES, AGGREGATIONS, k3_kl, on_mask, overlong_penalty
from trainers.distill import CONTEXTS, DIVERGENCES, DistillSettings, grad_cosine, teacher_log_dist
from trainers.losses import POLICY_LOSSES, LossInputs, ProxKLSettings, proximal_kl_stats
from trainers.mixture import Mixture
from trainers.prompts import format_prompt
from trainers.rollout import Rollouts, completion_log_dist, completion_logprobs, token_entropy
from trainers.weights import ema_update, frozen_copy


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
    overlong_buffer: int = 0
    """DAPO's soft overlong punishment, ALGORITHMS.md §1's "soft length penalty": the last this many tokens
    before max_new_tokens cost up to 1 of the reward, linearly, and a truncated completion 1 (0: off)."""
    dynamic_sampling: bool = False
    """DAPO: drop groups whose rewards are all equal (no signal) and sample more prompts until the
    batch is full or `max_sample_rounds` rounds have run."""
    max_sample_rounds: int = 3
    batch_switch_at: float = 1.0
    """Batch schedule: after this fraction of the steps, prompts per step grow by batch_multiplier
    (1.0: never)."""
    batch_multiplier: int = 1
    lr_alpha: float = 0.0
    """lr = lr₀·(N/N₀)^α with N the batch in sequences: 0 keeps lr, 0.5 square-root, 1 linear."""
    lr_ref_batch: int | None = None
    """N₀ in sequences (default: the starting batch prompts_per_step × group_size)."""
    distill: DistillSettings = field(default_factory=DistillSettings)
    """Self-distillation mixed into the loss (off while distill.weight is 0)."""
    collapse: CollapseSettings = field(default_factory=CollapseSettings)
    """When the failure clock fires."""
    stop_on_collapse: bool = True
    """Stop training when the failure clock fires (the trainer's `collapse` says why)."""
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
    rollout_backend: str = "hf"
    """Who samples rollouts: hf (transformers generate, CPU/GPU) or vllm (GPU, extra `sro[vllm]`)."""
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
        if 1 <= self.group_size < 2:  # one message per value (a review, stop 38: group_size 0 had two)
            problems.append(f"group_size must be >= 2 for a group baseline (got {self.group_size})")
        for name in ("beta", "eps_low", "eps_high"):  # each named with its value (they were one message)
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0 (got {getattr(self, name)})")
        if self.temperature <= 0:
            problems.append(f"temperature must be > 0 (got {self.temperature})")
        if self.staleness < 0:
            problems.append(f"staleness must be >= 0 (got {self.staleness})")
        if not 0 <= self.overlong_buffer <= self.max_new_tokens:
            problems.append(f"overlong_buffer must be in [0, max_new_tokens={self.max_new_tokens}] "
                            f"(got {self.overlong_buffer})")
        if self.policy_loss not in POLICY_LOSSES:
            problems.append(f"policy_loss must be one of {POLICY_LOSSES.names()} (got {self.policy_loss!r})")
        if isinstance(self.prox, dict):
            self.prox = ProxKLSettings(**self.prox)
        if isinstance(self.distill, dict):
            self.distill = DistillSettings(**self.distill)
        if isinstance(self.collapse, dict):
            self.collapse = CollapseSettings(**self.collapse)
        if not 0.0 < self.batch_switch_at <= 1.0:
            problems.append(f"batch_switch_at must be in (0, 1] (got {self.batch_switch_at})")
        if self.batch_multiplier < 1:
            problems.append(f"batch_multiplier must be >= 1 (got {self.batch_multiplier})")
        if self.lr_alpha < 0:
            problems.append(f"lr_alpha must be >= 0 (got {self.lr_alpha})")
        if self.max_sample_rounds < 1:
            problems.append(f"max_sample_rounds must be >= 1 (got {self.max_sample_rounds})")
        if self.scale_rewards not in ADVANTAGES:
            problems.append(f"scale_rewards must be one of {ADVANTAGES.names()} (got {self.scale_rewards!r})")
        if self.aggregation not in AGGREGATIONS:
            problems.append(f"aggregation must be one of {AGGREGATIONS.names()} (got {self.aggregation!r})")
        if self.prompts_per_step >= 1 and self.group_size >= 1 and self.prompts_per_step * self.group_size < self.minibatches:
            problems.append(f"minibatches cannot exceed prompts_per_step × group_size "
                            f"({self.prompts_per_step} × {self.group_size}; got {self.minibatches})")
        if self.rollout_backend not in ROLLOUT_BACKENDS:
            problems.append(f"rollout_backend must be one of {ROLLOUT_BACKENDS.names()} (got {self.rollout_backend!r})")
        if self.optimizer not in OPTIMIZERS:
            problems.append(f"optimizer must be one of {OPTIMIZERS.names()} (got {self.optimizer!r})")
        if problems:
            raise ValueError("GRPOConfig: " + "; ".join(problems))


OPTIMIZERS: Registry = Registry("optimizer")
OPTIMIZERS.add("adamw", lambda params, c: torch.optim.AdamW(params, lr=c.lr, weight_decay=c.weight_decay))
OPTIMIZERS.add("sgd", lambda params, c: torch.optim.SGD(params, lr=c.lr, momentum=0.9, weight_decay=c.weight_decay))


DISTILL_STATS = ("distill_loss", "distill_kl", "grad_cos")
"""Per-step figures of self-distillation, averaged over the minibatches that had a row to distill."""


@dataclass
class Batch:
    """One generation batch, flattened prompt-major like `Rollouts`: rewards (N,), log μ (N, C) when
    it will be needed, and each row's prompt text and (task, item)."""

    ro: Rollouts
    rewards: torch.Tensor
    prompts: list[str]
    items: list[tuple[Task, Item]]
    behav: torch.Tensor | None = None
    rounds: int = 1
    kept: float = 1.0
    """Share of the wanted groups that carried signal (dynamic sampling)."""
    generated: torch.Tensor | None = None
    """The rewards of every completion generated for this batch, the groups dynamic sampling dropped too
    (None: the batch is all of them)."""

    def groups(self, keep: list[int], group_size: int) -> Batch:
        rows = [g * group_size + j for g in keep for j in range(group_size)]
        return Batch(self.ro.select(rows), self.rewards[rows], [self.prompts[i] for i in rows],
                     [self.items[i] for i in rows])

    @staticmethod
    def cat(parts: list[Batch], pad_id: int) -> Batch:
        return Batch(Rollouts.cat([b.ro for b in parts], pad_id), torch.cat([b.rewards for b in parts]),
                     [p for b in parts for p in b.prompts], [it for b in parts for it in b.items])


def clipped_tokens(ratio: torch.Tensor, cfg: GRPOConfig) -> torch.Tensor:
    """1.0 where the loss clips the ratio π_θ/μ (the `clip_frac` metric): outside [1 − eps_low, 1 + eps_high]
    for the clipped surrogate, nowhere for pg and proximal_kl, which clip no ratio, or for CISPO, whose weight is clipped from above only, above 1 + eps_high (until stop 25 its metric
    counted the lower side too, about twice what the loss clipped)."""
    if cfg.policy_loss not in ("clip", "cispo"):  # pg and proximal_kl clip no ratio (a review, stop 37)
        return torch.zeros_like(ratio)
    clipped = ratio > 1 + cfg.eps_high
    if cfg.policy_loss != "cispo":
        clipped = clipped | (ratio < 1 - cfg.eps_low)
    return clipped.float()


class GRPOTrainer:
    """Trains `model` in place on prompts drawn from `mixture`, rewarded by each task's verifier."""

    def __init__(self, model, tokenizer, config: GRPOConfig, mixture: Mixture) -> None:
        self.model, self.tok, self.cfg, self.mixture = model, tokenizer, config, mixture
        self.opt = OPTIMIZERS.get(config.optimizer)(model.parameters(), config)
        # extra weight copies cost memory, so each exists only when its feature is on
        self.ref = frozen_copy(model) if config.beta > 0 else None
        d = config.distill
        self.teacher = frozen_copy(model) if d.weight > 0 and d.teacher != "live" else None
        ewma = config.policy_loss == "proximal_kl" and config.prox.mode == "ewma"
        self.prox_model = frozen_copy(model) if ewma else None
        self.schedule = BatchSchedule(config.prompts_per_step, config.group_size, config.steps,
                                      config.batch_switch_at, config.batch_multiplier, config.lr_alpha,
                                      config.lr_ref_batch)
        self.clock = FailureClock(config.collapse)
        self.collapse: str | None = None
        """Why the failure clock fired (None while the trial is healthy)."""
        self.samples = 0
        """Completions generated so far (dynamic sampling and staleness included: what was paid for)."""
        self.tokens = 0
        self.step_count = 0
        self._queue: list[Batch] = []
        torch.manual_seed(config.seed)
        self.backend = ROLLOUT_BACKENDS.get(config.rollout_backend)(model, tokenizer, seed=config.seed)

    def _needs_behaviour_logp(self) -> bool:
        """μ differs from π_θ only under staleness or reuse; then it is kept (losses and metrics read it)."""
        cfg = self.cfg
        return cfg.staleness > 0 or cfg.num_iterations > 1 or cfg.minibatches > 1

    def _generate(self, n_prompts: int) -> Batch:
        drawn = self.mixture.sample(n_prompts)
        prompts = [format_prompt(item.question, self.tok) for _, item in drawn]
        self.model.eval()
        G = self.cfg.group_size
        ro = self.backend.generate(prompts, G, self.cfg.temperature, self.cfg.max_new_tokens)
        items = [drawn[i // G] for i in range(len(ro.texts))]
        rewards = torch.tensor([task.score(item, text) for (task, item), text in zip(items, ro.texts)],
                               dtype=torch.float32)
        self.samples += len(ro.texts)
        self.tokens += int(ro.attention_mask.sum())
        return Batch(ro, rewards, [prompts[i // G] for i in range(len(ro.texts))], items)

    def _rollout(self) -> Batch:
        """Generate one batch (with dynamic sampling: only groups whose rewards differ, over up to
        `max_sample_rounds` rounds), and log μ when it will be needed."""
        cfg, G = self.cfg, self.cfg.group_size
        P = self.schedule.prompts(self.step_count + len(self._queue))
        b = self._generate(P)
        if cfg.dynamic_sampling:
            parts, have, rounds, generated = [], 0, 1, [b.rewards]
            while True:
                r = b.rewards.view(-1, G)
                signal = [g for g in range(r.shape[0]) if float(r[g].max() - r[g].min()) > 0][: P - have]
                if signal:
                    parts.append(b.groups(signal, G))
                    have += len(signal)
                if have >= P or rounds >= cfg.max_sample_rounds:
                    break
                b = self._generate(P - have)
                generated.append(b.rewards)
                rounds += 1
            if parts:  # else: no group carried signal; train on the last (zero-advantage) batch
                b = Batch.cat(parts, self.tok.pad_token_id)
            b.rounds, b.kept, b.generated = rounds, have / P, torch.cat(generated)
        if self._needs_behaviour_logp():
            with torch.no_grad():
                b.behav = completion_logprobs(self.model, b.ro.input_ids, b.ro.attention_mask, b.ro.prompt_len,
                                              temperature=cfg.temperature)[0]
        return b

    def _next_batch(self) -> Batch:
        """The batch generated `staleness` updates ago (the queue is filled on the first step)."""
        self._queue.append(self._rollout())
        while len(self._queue) <= self.cfg.staleness:
            self._queue.append(self._rollout())
        return self._queue.pop(0)

    def step(self) -> dict[str, float]:
        """One generation batch and its optimizer steps; returns the step's metrics."""
        cfg, d = self.cfg, self.cfg.distill
        self.step_count += 1
        lr = self.schedule.lr(cfg.lr, self.step_count) * min(1.0, self.step_count / max(1, cfg.warmup_steps))
        for g in self.opt.param_groups:
            g["lr"] = lr
        b = self._next_batch()
        ro = b.ro
        dev = ro.input_ids.device
        shaped = b.rewards
        if cfg.overlong_buffer > 0:  # the task's reward (logged) less the length penalty (trained on)
            shaped = b.rewards + overlong_penalty(ro.completion_mask.sum(-1).cpu(), ro.truncated.cpu(),
                                                  cfg.max_new_tokens, cfg.overlong_buffer)
        adv = ADVANTAGES.get(cfg.scale_rewards)(shaped, cfg.group_size).to(dev)  # (N,)
        mask = ro.completion_mask.float()  # (N, C)
        if cfg.mask_truncated:
            mask = mask * (~ro.truncated).float().unsqueeze(-1)
        distilling = d.weight > 0
        T = cfg.temperature  # log-probs of the distribution the rollouts were sampled from
        with torch.no_grad():
            # π_prox: the policy as this update begins (snapshot) or the EWMA of its weights (§3)
            prox = (completion_logprobs(self.prox_model or self.model, ro.input_ids, ro.attention_mask,
                                        ro.prompt_len, temperature=T)[0]
                    if b.behav is not None or cfg.policy_loss == "proximal_kl" else None)
            ref_logp = (completion_logprobs(self.ref, ro.input_ids, ro.attention_mask, ro.prompt_len, temperature=T)[0]
                        if self.ref is not None else None)
            if distilling:
                prefixes, use = CONTEXTS.get(d.context)([it.question for _, it in b.items],
                                                        [it.answer for _, it in b.items], ro.texts, b.rewards,
                                                        cfg.group_size, self.tok)
                t_dist = teacher_log_dist(self.teacher or self.model, self.tok, ro, prefixes, b.prompts, T)
                d_mask = mask * use.to(dev).unsqueeze(-1)
        aggregate = AGGREGATIONS.get(cfg.aggregation)
        policy_loss = POLICY_LOSSES.get(cfg.policy_loss)
        divergence = DIVERGENCES.get(d.divergence)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.model.train()
        N = ro.input_ids.shape[0]
        stats = {"loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_frac": 0.0, "grad_norm": 0.0, "stale_kl": 0.0}
        if distilling:
            stats.update(distill_loss=0.0, distill_kl=0.0, grad_cos=0.0)  # distill_kl: sampled KL(student‖teacher)
        n_updates = n_distilled = 0
        # dynamic sampling found no group with a reward spread in `max_sample_rounds`: §1 drops such groups, so
        # nothing trains (until stop 30 the zero-advantage batch was stepped on: AdamW's momentum and weight decay
        # moved the weights with no signal, and the EWMA copies with them)
        skipped = cfg.dynamic_sampling and b.kept == 0
        for _ in range(0 if skipped else cfg.num_iterations):
            # exactly `minibatches` parts, or one row each where dynamic sampling kept fewer rows than that
            # (until stop 25 the empty parts crashed the step)
            for idx in torch.tensor_split(torch.randperm(N), min(cfg.minibatches, N)):
                tokens = ro.completion_ids[idx]
                if distilling:  # the divergences need the whole distribution
                    s_dist = completion_log_dist(self.model, ro.input_ids[idx], ro.attention_mask[idx], ro.prompt_len, T)
                    logp = s_dist.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # (n, C)
                    ent = token_entropy(s_dist)
                else:  # no (n, C, V) log-softmax kept for the backward pass (`token_logprobs`)
                    logp, ent = completion_logprobs(self.model, ro.input_ids[idx], ro.attention_mask[idx],
                                                    ro.prompt_len, with_entropy=True, temperature=T)  # (n, C) each
                p_logp = prox[idx] if prox is not None else logp.detach()
                # μ: recorded under staleness or reuse; else the rollout is fresh and this is the
                # update's only pass, so μ is the policy right now (not π_prox, which in ewma mode lags)
                b_logp = b.behav[idx] if b.behav is not None else logp.detach()
                m = mask[idx]
                own = logp.detach()  # at the padding positions, so nothing there is exponentiated against it
                b_logp, p_logp = on_mask(b_logp, m, own), on_mask(p_logp, m, own)
                inputs = LossInputs(logp, b_logp, p_logp, adv[idx].unsqueeze(-1).expand_as(logp), m)
                tok_loss = policy_loss(inputs, eps_low=cfg.eps_low, eps_high=cfg.eps_high, prox=cfg.prox)
                kl = k3_kl(logp, on_mask(ref_logp[idx], m, own)) if ref_logp is not None else torch.zeros_like(logp)
                loss = aggregate(tok_loss + cfg.beta * kl, m, max_len=cfg.max_new_tokens)
                self.opt.zero_grad(set_to_none=True)
                dm = d_mask[idx] if distilling else None
                distills = dm is not None and float(dm.sum()) > 0
                # a minibatch with no distillable row (no successful sibling) trains on the policy gradient
                # alone: mixing a zero g_dis scaled it by (1 − w_d) (a review, stop 37)
                if distills:
                    n_distilled += 1
                    dloss = (divergence(s_dist, t_dist[idx], tokens, top_k=d.top_k) * dm).sum() / dm.sum().clamp(min=1)
                    # the two gradients apart, to log their cosine (§4), then mixed (1 − w_d)·g_pol + w_d·g_dis
                    g_pol = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
                    g_dis = torch.autograd.grad(dloss, params, allow_unused=True)
                    for p, gp, gd in zip(params, g_pol, g_dis):
                        parts = [(1 - d.weight) * gp if gp is not None else None, d.weight * gd if gd is not None else None]
                        parts = [x for x in parts if x is not None]
                        p.grad = sum(parts) if parts else None
                    stats["distill_loss"] += float(dloss.detach())
                    t_tok = t_dist[idx].gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
                    stats["distill_kl"] += float(((logp.detach() - t_tok) * dm).sum() / dm.sum().clamp(min=1))
                    stats["grad_cos"] += grad_cosine(g_pol, g_dis)
                    loss = (1 - d.weight) * loss + d.weight * dloss
                else:
                    loss.backward()
                gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
                # a non-finite gradient would poison the weights (the clock reports it); a minibatch with no
                # trainable token (every row truncated under `mask_truncated`) has no signal, and AdamW's
                # momentum and weight decay moved the weights anyway (a review, stop 38)
                if torch.isfinite(gn) and (distills or float(m.sum()) > 0):
                    self.opt.step()
                if self.prox_model is not None:
                    ema_update(self.prox_model, self.model, cfg.prox.ewma_decay)
                if self.teacher is not None and d.teacher == "ema":
                    ema_update(self.teacher, self.model, d.ema_decay)
                ratio = torch.exp(logp.detach() - b_logp)
                clipped = clipped_tokens(ratio, cfg)
                denom = m.sum().clamp(min=1)
                stats["loss"] += loss.item()
                stats["kl"] += float((kl.detach() * m).sum() / denom)
                stats["entropy"] += float((ent * m).sum() / denom)
                stats["clip_frac"] += float((clipped * m).sum() / denom)
                stats["stale_kl"] += float(((p_logp - b_logp).abs() * m).sum() / denom)
                stats["grad_norm"] += float(gn)
                if cfg.policy_loss == "proximal_kl":  # §3's own figures, δ and F as this minibatch's loss saw them
                    for k, v in proximal_kl_stats(inputs, cfg.prox).items():
                        stats[k] = max(stats.get(k, 0.0), v) if k == "prox_delta_max" else stats.get(k, 0.0) + v
                n_updates += 1
        self.model.eval()
        self.backend.sync(self.model)
        # a skipped step measured no loss, gradient or entropy (a 0 would read as an entropy collapse); the
        # distillation figures are means over the minibatches that distilled (none: left out)
        per = {k: n_distilled if k in DISTILL_STATS else n_updates for k in stats}
        out = {k: v if k == "prox_delta_max" else v / per[k] for k, v in stats.items() if per[k]} if n_updates else {}
        # the policy's reward over everything it generated: the kept groups alone (always mixed) pulled it towards
        # the middle, and the failure clock, the progress clock and the report's curve read it (a review, stop 37)
        every = b.rewards if b.generated is None else b.generated
        out.update(reward=float(every.mean()), accuracy=float((every >= 1).float().mean()),
                   truncated=float(ro.truncated.float().mean()), samples=self.samples, tokens=self.tokens,
                   lr=lr, batch=N)
        if cfg.dynamic_sampling:
            out.update(kept_groups=b.kept, sample_rounds=b.rounds, skipped=float(skipped),
                       reward_kept=float(b.rewards.mean()))
        return out

    def train(self, on_step: Callable[[int, dict[str, float]], bool | None] | None = None) -> list[dict[str, float]]:
        """Run `steps` generation batches; `on_step(step, metrics)` returning True stops early, and so
        does the failure clock (then `self.collapse` says why)."""
        return run_steps(self, self.cfg, on_step)
