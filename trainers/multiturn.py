"""Multi-turn rollouts and their trainer: G episodes per game played in lock-step, the policy's
action tokens trainable and observation tokens masked, one episode-level reward, per-step records
(state key, action, admissibility) kept for credit assignment — GRPO's broadcast or ProAS's shaping
(`trainers.proas`) — and optionally the agent's stated confidence at each step, graded against the
episode's outcome (ALGORITHMS.md §5).

Each step is one sequence: prompt = the observation (with the last `history` turns before it, all
masked), completion = the action the policy generated (trainable). The step's advantage covers its
action tokens; the GRPO loss of §1 (registered policy losses and aggregations) follows.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from evaluators.calibration import ConfidenceRecord, calibration_report, confidence_question
from evaluators.envs import EpisodeResult, StepInfo, close_quietly, end_reason, episode_metrics, resolve_action
from trainers.algorithms import ONE_PASS, RecipeValueError, check_regime, config_value, recipe_settings
from trainers.clocks import BatchSchedule, FailureClock, run_steps
from trainers.core import ADVANTAGES, AGGREGATIONS, EPS_STD, k3_kl, on_mask
from trainers.grpo import OPTIMIZERS, GRPOConfig
from trainers.losses import POLICY_LOSSES, LossInputs
from trainers.proas import ProASConfig, ReferenceGraph, deviations, step_advantages
from trainers.prompts import format_prompt
from trainers.readout import ConfidenceReadout, confidence_token_ids
from trainers.rollout import completion_logprobs, generate, position_ids
from trainers.weights import frozen_copy

CREDITS = ("grpo", "proas")


@dataclass
class MultiTurnConfig:
    """A multi-turn trainer: GRPO's settings (`base`) plus how episodes are played and credited."""

    base: GRPOConfig = field(default_factory=GRPOConfig)
    """lr, steps, group_size (episodes per game), prompts_per_step (games per step), loss, ..."""
    credit: str = "grpo"
    """grpo: the episode's advantage on every step; proas: reference-graph shaping (§2)."""
    proas: ProASConfig = field(default_factory=ProASConfig)
    reward: str = "success"
    """Episode reward: success (1 if won) or score (final score / max score)."""
    history: int = 0
    """Previous (observation, action) turns shown before the current observation (masked)."""
    confidence: bool = False
    """The agent states its probability of success after each action: c_t is the expected value of
    the stated probability (d + 0.5)/10 under its distribution over ten confidence tokens (the scale
    tokens of `trainers.readout` when the readout is fitted, else the digits 0-9)."""
    calib_weight: float = 1.0
    """Weight of the calibration term when `confidence` is on: the group-normalized advantage
    −(c_d − y)² of every level d the agent could state, on the confidence token only
    (`calibration_loss`; 0: stated, not trained, and no readout fit). 1 since the confidence question
    notes unlisted commands (stop 16: with 3 the held-out success fell; tuning seeds, docs/agent.md)."""
    readout_steps: int = 50
    """With `confidence` on, `calib_weight` > 0 and this > 0: the agent states c_t with ten scale
    tokens of its own, whose output rows are fitted by this many Adam steps after each iteration
    (`trainers.readout`; chosen on tuning seeds, docs/agent.md stop 15); 0: it states c_t with the
    digits 0-9, trained by the calibration term alone."""
    readout_buffer: int = 4
    """Iterations of confidence prompts the readout is fitted on (this one's and the previous ones')."""

    def __post_init__(self) -> None:
        if isinstance(self.base, dict):
            self.base = GRPOConfig(**self.base)
        if isinstance(self.proas, dict):
            self.proas = ProASConfig(**self.proas)
        problems = []
        if self.credit not in CREDITS:
            problems.append(f"credit must be one of {CREDITS} (got {self.credit!r})")
        if self.reward not in ("success", "score"):
            problems.append(f"reward must be success or score (got {self.reward!r})")
        for name in ("history", "calib_weight", "readout_steps"):  # one by name: an error names its mt.* key
            if not getattr(self, name) >= 0:
                problems.append(f"{name} must be >= 0 (got {getattr(self, name)})")
        if not self.readout_buffer >= 1:
            problems.append(f"readout_buffer must be >= 1 (got {self.readout_buffer})")
        unsupported = unsupported_settings(self.base) + (["mask_truncated"] if self.base.mask_truncated else [])
        if unsupported:
            problems.append(f"the multi-turn trainer plays fresh episodes for one pass per iteration and does not "
                            f"support {', '.join(unsupported)}; leave them at their defaults ({DEFAULTS}, "
                            "mask_truncated off)")
        if problems:
            raise ValueError("MultiTurnConfig: " + "; ".join(problems))


def unsupported_settings(base: GRPOConfig) -> list[str]:
    """The recipe keys of `base` set to what the multi-turn trainer does not do: it plays fresh episodes for
    one pass per iteration (`MultiTurnConfig` refuses them, and `multi_turn_config` names them by key). In one
    pass the policy ratio is 1, so a clip range does nothing: until stop 53 `eps_low`/`eps_high` were accepted,
    and declared for `proas`, and a search spent dimensions on them (a review)."""
    default = GRPOConfig()
    return [key for key in ONE_PASS if config_value(base, key) != config_value(default, key)]


DEFAULTS = ", ".join(f"{k} {config_value(GRPOConfig(), k)}" for k in ONE_PASS)
"""What `unsupported_settings` expects, as the refusals say it."""


MT_SETTINGS = ("reward", "history", "confidence", "calib_weight", "readout_steps", "readout_buffer")
"""The `MultiTurnConfig` fields a recipe sets as `mt.<field>`."""


@dataclass
class Step:
    """One decision: what the policy saw and did, and what the environment said about it."""

    prompt: str
    action_ids: list[int]
    action: str
    """The normalized command sent to the game."""
    state_key: str
    valid: bool
    """The environment's verdict on the command (until it answers: whether the command was listed)."""
    conf_prompt: str | None = None
    confidence: float | None = None
    """c_t: the expected stated probability of success (see `expected_confidence`)."""
    listed: bool = True
    """Whether the command was among the listed (admissible) ones; `valid` may differ, on a free-text adapter."""


@dataclass
class Episode:
    game: str
    steps: list[Step] = field(default_factory=list)
    result: EpisodeResult | None = None
    obs: str = ""
    info: StepInfo | None = None
    turns: list[str] = field(default_factory=list)


def _ids(ro, j: int) -> list[int]:
    return ro.completion_ids[j][ro.completion_mask[j] == 1].tolist()


@torch.no_grad()
def play_episodes(model, tok, envs: Sequence, games: Sequence[str], *, greedy: bool, temperature: float = 1.0,
                  max_new_tokens: int = 8, history: int = 0, confidence: bool = False,
                  on_state: Callable[[StepInfo], None] | None = None) -> list[Episode]:
    """Play one episode in each env in lock-step (one batched generate per turn).

    An env that crashes (at reset or at a step) ends its episode as a failure with the reason logged
    in `result.reason`; the step limit ends it as truncated (also a failure).
    """
    was_training = model.training
    model.eval()
    eps = [Episode(g) for g in games]
    for ep, env in zip(eps, envs):
        try:
            ep.obs, info = env.reset()
            ep.info = info["step"]
            if on_state:
                on_state(ep.info)
        except Exception as e:
            ep.result = EpisodeResult(False, 0.0, 0, 0, f"env error at reset: {type(e).__name__}: {e}")
            close_quietly(env)
    active = [i for i, ep in enumerate(eps) if ep.result is None]
    while active:
        prompts = [format_prompt("\n".join(eps[i].turns[-2 * history:] + [eps[i].obs]) if history else eps[i].obs, tok)
                   for i in active]
        ro = generate(model, tok, prompts, 1, temperature, max_new_tokens, greedy=greedy)
        cmds = [resolve_action(ro.texts[j], eps[i].info.admissible) for j, i in enumerate(active)]
        listed = [cmds[j] in eps[i].info.admissible for j, i in enumerate(active)]
        conf = None
        if confidence:
            cq = [format_prompt(confidence_question(  # about the command the env runs (a choice's number resolved)
                eps[i].obs, cmds[j], len(eps[i].steps) + 1,
                getattr(getattr(envs[i], "settings", None), "max_steps", None),
                listed=listed[j],
                earlier_unlisted=sum(not s.listed for s in eps[i].steps)), tok)
                for j, i in enumerate(active)]
            conf = expected_confidence(confidence_logits(model, tok, cq)).tolist()
        still = []
        for j, i in enumerate(active):
            ep, env = eps[i], envs[i]
            st = ep.info
            cmd = cmds[j]
            step = Step(prompts[j], _ids(ro, j), cmd, st.state_key, listed[j], listed=listed[j])
            if conf is not None:
                step.conf_prompt, step.confidence = cq[j], conf[j]
            ep.steps.append(step)
            try:
                obs, _, term, trunc, info = env.step(ro.texts[j])
            except Exception as e:
                # the step the env crashed on got no verdict: not counted invalid, as `evaluators.envs.play` counts
                ep.result = EpisodeResult(False, st.score / max(st.max_score, 1e-9), len(ep.steps),
                                          sum(not s.valid for s in ep.steps[:-1]), f"env error: {type(e).__name__}: {e}")
                close_quietly(env)
                continue
            ep.turns += [ep.obs, f"> {cmd}"]
            ep.obs, ep.info = obs, info["step"]
            # the environment's verdict on the command, not its membership in the listed commands: a free-text
            # or synonym-accepting adapter lists few or none, and ProAS gave its won episodes no credit (stop 37)
            step.valid = bool(ep.info.valid)
            if on_state:
                on_state(ep.info)
            if term or trunc:
                s = ep.info
                ep.result = EpisodeResult(s.won, s.score / max(s.max_score, 1e-9), len(ep.steps),
                                          sum(not s.valid for s in ep.steps), end_reason(s, trunc))
                close_quietly(env)
            else:
                still.append(i)
        active = still
    model.train(was_training)
    return eps


def evaluate_episodes(model, tok, task, n_games: int, max_new_tokens: int = 8, history: int = 0,
                      confidence: bool = False, failures: list[str] | None = None) -> dict[str, float]:
    """Greedy play of one episode on each of the task's first `n_games` games: success, score, steps,
    invalid-action rate, `env_errors` (episodes the environment ended by an exception: failures) and
    calibration when `confidence`. `failures`: each such episode's reason is appended to it."""
    envs = [task.make_env(g) for g in range(n_games)]
    eps = play_episodes(model, tok, envs, [str(g) for g in range(n_games)], greedy=True,
                        max_new_tokens=max_new_tokens, history=history, confidence=confidence)
    out = episode_metrics([e.result for e in eps])
    errors = [f"game {e.game}: {e.result.reason}" for e in eps if e.result.crashed]
    out["env_errors"] = float(len(errors))
    if failures is not None:
        failures += errors
    if confidence:
        out.update(flat_calibration(eps, per_step=True))
    return out


def confidence_records(eps: Sequence[Episode]) -> list[ConfidenceRecord]:
    return [ConfidenceRecord(i, t, s.confidence if s.confidence is not None else 0.5, bool(e.result.success))
            for i, e in enumerate(eps) for t, s in enumerate(e.steps)]


def flat_calibration(eps: Sequence[Episode], tau: float = 0.5, per_step: bool = False) -> dict[str, float]:
    """§5's calibration of the episodes' stated confidences as flat metrics: pooled (`calib_*`), at the
    first step (`calib_first_*`), selective execution at `tau` (`selective_*`) and, with `per_step`, at
    each step index the episodes reached (`calib_step<t>_*`, t from 0)."""
    rep = calibration_report(confidence_records(eps), tau,  # every episode, one that crashed at reset too
                             outcomes={i: bool(e.result.success) for i, e in enumerate(eps)})
    out = {f"calib_{k}": float(v) for k, v in rep["pooled"].items() if k != "n"}
    out.update({f"calib_first_{k}": float(v) for k, v in rep["first_step"].items() if k != "n"})
    out.update({f"selective_{k}": float(v) for k, v in rep["selective"].items()})
    if per_step:
        out.update({f"calib_step{t}_{k}": float(v) for t, block in rep["per_step"].items()
                    for k, v in block.items()})
    return out


def step_validities(eps: Sequence[Episode], graph: ReferenceGraph) -> list[list[float]]:
    """v(e) of each step of each episode, as the graph stands now; the rules read whether the environment
    accepted the step's command then (`Step.valid`), not the admissible set last recorded for its state key."""
    return [[graph.validity((s.state_key, s.action), admissible=s.valid) for s in e.steps] for e in eps]


def crashed(e: Episode) -> bool:
    """Whether the environment ended `e` by an exception (at reset or at a step): a failure, not a play."""
    return e.result is not None and e.result.crashed


def group_advantages(eps: Sequence[Episode], rewards: torch.Tensor, cfg: MultiTurnConfig) -> list[float]:
    """Each episode's group advantage (`base.scale_rewards`'s estimator), over the group's episodes that the
    environment did not crash: a crash says nothing about the policy, and as a 0 in the baseline it gave its
    siblings credit they had not earned (a review, stop 37). Crashed episodes, and a group with fewer than
    two left, get 0."""
    estimator, G = ADVANTAGES.get(cfg.base.scale_rewards), cfg.base.group_size
    if not any(crashed(e) for e in eps):
        return estimator(rewards, G).tolist()
    out = [0.0] * len(eps)
    groups = [kept for start in range(0, len(eps), G)
              if len(kept := [i for i in range(start, min(start + G, len(eps))) if not crashed(eps[i])]) >= 2]
    # `batch` scales by the spread of the whole batch: of every episode kept, not of each group alone (a review,
    # stop 52: one crash rescaled the groups without one)
    by_batch = cfg.base.scale_rewards == "batch"
    spread = rewards[[i for g in groups for i in g]].std() + EPS_STD if by_batch and groups else None
    for kept in groups:
        if by_batch:
            adv = (ADVANTAGES.get("none")(rewards[kept], len(kept)) / spread).tolist()
        else:
            adv = estimator(rewards[kept], len(kept)).tolist()
        for i, a in zip(kept, adv):
            out[i] = a
    return out


def credit(eps: Sequence[Episode], rewards: torch.Tensor, cfg: MultiTurnConfig,
           graph: ReferenceGraph | None, validity: list[list[float]] | None = None) -> list[list[float]]:
    """Per-step advantages of each episode: GRPO's group advantage broadcast, or ProAS's shaping with the
    steps' `validity` (read from `graph` when not given)."""
    adv = group_advantages(eps, rewards, cfg)
    if cfg.credit == "grpo" or graph is None:
        return [[a] * len(e.steps) for a, e in zip(adv, eps)]
    return step_advantages(adv, step_validities(eps, graph) if validity is None else validity, cfg.proas)


CONF_LEVELS = ConfidenceReadout.LEVELS
"""The probability that scale token (or digit) d states: (d + 0.5)/10, the centre of its calibration bin."""


def confidence_logits(model, tok, prompts: list[str]) -> torch.Tensor:
    """Logits of the ten confidence tokens (`confidence_token_ids`: the scale tokens, else the digits
    0-9) as the answer's first token after each confidence prompt: (N, 10).

    Differentiable (the trainer calls it with gradients for the calibration term)."""
    dev = next(model.parameters()).device
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(dev)
    logits = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                   position_ids=position_ids(enc["attention_mask"]), use_cache=False).logits[:, -1, :]
    return logits[:, confidence_token_ids(tok)].float()


def expected_confidence(digit_logits: torch.Tensor) -> torch.Tensor:
    """c_t = Σ_d q(d)·(d + 0.5)/10 with q the model's distribution renormalized over the digits: (N,).

    Deterministic and smooth, where one sampled digit is a noisy draw from q (and a reply that does
    not start with a digit, such as the weak teacher's "The answer is 7", would state nothing)."""
    return digit_logits.float().softmax(-1) @ CONF_LEVELS.to(digit_logits.device)


def calibration_loss(digit_logits: torch.Tensor, outcomes: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """The calibration term of §5 on the confidence token only.

    Every digit d the agent could state at step t has reward r_{t,d} = −(c_d − y_t)², y_t the episode's
    outcome; Â_{t,d} = (r_{t,d} − mean)/(std + 1e-4) over the rewards of the group's steps and digits
    (`groups[t]` = the step's group of episodes). The loss −mean_t Σ_d q_t(d)·Â_{t,d} is the policy
    gradient over all ten digits at once, q_t the distribution over digits (no sampling noise): it
    moves probability towards the digits with the smaller squared error, so c_t towards P(y | state).
    digit_logits (N, 10), outcomes (N,) in {0, 1}, groups (N,) integer ids.
    """
    # Â is a constant of the episodes: built on the CPU, where they are, then moved to the logits' device
    # (built beside CUDA logits it mixed devices, and every agent trial with mt.confidence failed on a GPU)
    outcomes, groups = outcomes.detach().cpu().float(), groups.detach().cpu()
    r = -(CONF_LEVELS.cpu().unsqueeze(0) - outcomes.unsqueeze(-1)) ** 2  # (N, 10)
    adv = torch.empty_like(r)
    for g in groups.unique():
        m = groups == g
        adv[m] = (r[m] - r[m].mean()) / (r[m].std() + 1e-4)
    q = digit_logits.float().softmax(-1)
    return -(q * adv.to(q.device)).sum(-1).mean()


def pack(tok, prompts: list[str], completions: list[list[int]], device) -> tuple[torch.Tensor, ...]:
    """Left-padded prompts + right-padded completions: ids, attention mask (N, L+C), completion mask (N, C)."""
    p_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    L = max(map(len, p_ids))
    C = max(1, max(map(len, completions)))
    pad = tok.pad_token_id
    ids = [[pad] * (L - len(p)) + p + c + [pad] * (C - len(c)) for p, c in zip(p_ids, completions)]
    att = [[0] * (L - len(p)) + [1] * (len(p) + len(c)) + [0] * (C - len(c)) for p, c in zip(p_ids, completions)]
    cm = [[1] * len(c) + [0] * (C - len(c)) for c in completions]
    t = lambda x: torch.tensor(x, device=device)  # noqa: E731
    return t(ids), t(att), t(cm).float(), L


class MultiTurnTrainer:
    """Trains `model` in place by playing groups of episodes on games from `tasks`."""

    def __init__(self, model, tokenizer, config: MultiTurnConfig, tasks: Sequence) -> None:
        if not tasks:
            raise ValueError("the multi-turn trainer needs at least one environment source")
        self.model, self.tok, self.cfg, self.tasks = model, tokenizer, config, list(tasks)
        # before the optimizer: adding the scale tokens may give the model new embedding parameters
        self.readout = (ConfidenceReadout(model, tokenizer, config.readout_steps, config.readout_buffer)
                        if config.confidence and config.calib_weight > 0 and config.readout_steps > 0 else None)
        self.opt = OPTIMIZERS.get(config.base.optimizer)(model.parameters(), config.base)
        c = config.base
        self.ref = frozen_copy(model) if c.beta > 0 else None  # after the readout's new tokens
        self.schedule = BatchSchedule(c.prompts_per_step, c.group_size, c.steps, c.batch_switch_at,
                                      c.batch_multiplier, c.lr_alpha, c.lr_ref_batch)
        self.graph = ReferenceGraph(config.proas, seed=config.base.seed) if config.credit == "proas" else None
        self.rng = random.Random(config.base.seed)
        self.samples = self.episodes = self.tokens = self.step_count = 0
        self.failures: list[str] = []
        """Reasons of episodes that ended in an environment error (logged, never fatal)."""
        self.clock = FailureClock(c.collapse)  # the recipe's `collapse.*`, as the single-turn trainer's
        self.collapse: str | None = None
        """Why the failure clock fired (None while the trial is healthy)."""
        torch.manual_seed(config.base.seed)

    def _observe(self, st: StepInfo) -> None:
        # recorded whatever the graph's source: a distilled graph does not read the rules (`validity`
        # checks the source), but its agreement with them is reported (until stop 25 it was always NaN)
        if self.graph is not None:
            self.graph.observe_state(st.state_key, st.admissible, st.walkthrough)

    def rollout(self) -> list[Episode]:
        c = self.cfg.base
        envs, games = [], []
        for _ in range(self.schedule.prompts(max(1, self.step_count))):  # games this iteration (§6's batch clock)
            task = self.rng.choice(self.tasks)
            g = self.rng.randrange(task.n_games)
            for _ in range(c.group_size):
                envs.append(task.make_env(g))
                games.append(f"{task.spec.key}#{g}")
        return play_episodes(self.model, self.tok, envs, games, greedy=False, temperature=c.temperature,
                             max_new_tokens=c.max_new_tokens, history=self.cfg.history,
                             confidence=self.cfg.confidence, on_state=self._observe)

    def step(self) -> dict[str, float]:
        cfg, c = self.cfg, self.cfg.base
        self.step_count += 1
        for g in self.opt.param_groups:
            g["lr"] = self.schedule.lr(c.lr, self.step_count) * min(1.0, self.step_count / max(1, c.warmup_steps))
        eps = self.rollout()
        results = [e.result for e in eps]
        self.failures += [r.reason for r in results if r.crashed]
        rewards = torch.tensor([float(r.success) if cfg.reward == "success" else r.score for r in results])
        # the validities the credit uses, read once before this iteration is distilled into the graph
        validity = step_validities(eps, self.graph) if self.graph is not None else None
        step_adv = credit(eps, rewards, cfg, self.graph, validity)
        if self.graph is not None:
            # a crash is not a play of the policy: it would count as a failure of its steps (a review, stop 52)
            self.graph.add_iteration([([(s.state_key, s.action) for s in e.steps], bool(e.result.success))
                                      for e in eps if not crashed(e)])
        prompts, comps, advs = [], [], []
        for e, a in zip(eps, step_adv):
            if crashed(e):  # its steps are not trained on: the environment, not the policy, ended it
                continue
            for s, x in zip(e.steps, a):
                prompts.append(s.prompt)
                comps.append(s.action_ids)
                advs.append(x)
        calib = readout_brier = None
        rows = [(s.conf_prompt, float(e.result.success), k // c.group_size)  # a crash grades no confidence
                for k, e in enumerate(eps) if not crashed(e) for s in e.steps if s.conf_prompt is not None]
        cp, y, grp = zip(*rows) if rows else ((), (), ())
        if cfg.confidence and cfg.calib_weight > 0 and rows:

            def calib() -> torch.Tensor:
                return cfg.calib_weight * calibration_loss(confidence_logits(self.model, self.tok, list(cp)),
                                                           torch.tensor(y), torch.tensor(grp))
        # no step at all (every env failed at reset): nothing to learn from, and no update
        loss, gn, kl = self._update(prompts, comps, advs, calib) if prompts else (0.0, 0.0, None)
        if self.readout is not None and rows:
            readout_brier = self.readout.fit(cp, y, prompts)
        self.samples += len(prompts)
        self.episodes += len(eps)
        m = episode_metrics(results)
        m.update(loss=loss, grad_norm=gn, reward=float(rewards.mean()), episodes=float(self.episodes),
                 samples=float(self.samples), tokens=float(self.tokens), env_errors=float(len(self.failures)))
        if kl is not None:
            m["kl"] = kl
        if self.graph is not None:
            m.update(self.graph.stats())
            failed = [v for e, v in zip(eps, validity or []) if not e.result.success and not crashed(e)]
            m["deviations_per_failed"] = sum(deviations(v, cfg.proas.theta_v) for v in failed) / max(1, len(failed))
        if cfg.confidence:
            m.update(flat_calibration(eps))
        if readout_brier is not None:
            m["readout_brier"] = readout_brier
        return m

    def _update(self, prompts: list[str], comps: list[list[int]], advs: list[float],
                extra: Callable[[], torch.Tensor] | None = None) -> tuple[float, float, float | None]:
        """One optimizer step on the policy loss of the action tokens (+ `extra()`, the calibration term);
        returns the loss, the gradient norm and, when β > 0, the mean k3 KL to the base."""
        c = self.cfg.base
        dev = next(self.model.parameters()).device
        ids, att, mask, L = pack(self.tok, prompts, comps, dev)
        adv = torch.tensor(advs, device=dev).unsqueeze(-1).expand_as(mask)  # (N, C)
        self.model.train()
        kl = None
        logp, _ = completion_logprobs(self.model, ids, att, L, temperature=c.temperature)  # (N, C), π_T as sampled
        old = logp.detach()  # one pass over fresh rollouts: μ = π_prox = π_θ, r ≡ 1
        tok_loss = POLICY_LOSSES.get(c.policy_loss)(LossInputs(logp, old, old, adv, mask),
                                                   eps_low=c.eps_low, eps_high=c.eps_high, prox=c.prox)
        if self.ref is not None:  # β·k3 KL to the frozen base, per action token (§1)
            with torch.no_grad():
                ref_logp, _ = completion_logprobs(self.ref, ids, att, L, temperature=c.temperature)
            kl_tok = k3_kl(logp, on_mask(ref_logp, mask, old))  # padding: 0, never inf · 0
            tok_loss = tok_loss + c.beta * kl_tok
            kl = float((kl_tok.detach() * mask).sum() / mask.sum().clamp(min=1))
        loss = AGGREGATIONS.get(c.aggregation)(tok_loss, mask, max_len=c.max_new_tokens)
        if extra is not None:
            loss = loss + extra()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.grad_clip)
        if torch.isfinite(gn):  # as GRPO's trainer: a non-finite gradient would poison the weights (stop 37)
            self.opt.step()
        self.model.eval()
        self.tokens += int(att.sum())
        return loss.item(), float(gn), kl

    def train(self, on_step: Callable[[int, dict[str, float]], bool | None] | None = None) -> list[dict[str, float]]:
        """Run `base.steps` iterations; `on_step(step, metrics)` returning True stops early, and so does the
        failure clock (then `self.collapse` says why)."""
        return run_steps(self, self.cfg.base, on_step)


def multi_turn_config(algorithm: str, base: GRPOConfig, values: dict) -> MultiTurnConfig:
    """The multi-turn trainer for a recipe: algorithm `proas` shapes credit with its `proas.*` knobs,
    any other algorithm broadcasts GRPO credit; `mt.<field>` for the fields in `MT_SETTINGS` sets how
    episodes are played. A value of the wrong type or out of range is a `RecipeValueError` naming its
    recipe key (`proas.n_min=2.5 must be a whole number`, `mt.history must be >= 0 (got -1)`)."""
    check_regime(algorithm, "multi_turn")  # e.g. proximal_kl: one pass over fresh episodes is plain REINFORCE to it

    def key(field: str) -> str:  # the recipe key that set it: `eps` sets both clip ends
        return "eps" if field.startswith("eps_") and field not in values and "eps" in values else field

    # by their recipe keys, so a space's fixed one is named before anything trains
    unsupported = list(dict.fromkeys(key(f) for f in unsupported_settings(base) if key(f) in values))
    if unsupported:
        detail = (f"{', '.join(unsupported)}: the multi-turn trainer plays fresh episodes for one pass per iteration "
                  f"and does not support them; leave them at their defaults ({DEFAULTS})")
        raise RecipeValueError(tuple(unsupported), detail)
    proas = {k[len("proas."):]: v for k, v in values.items() if k.startswith("proas.")}
    known = set(ProASConfig.__dataclass_fields__)
    if set(proas) - known:
        raise ValueError(f"unknown ProAS settings {sorted(set(proas) - known)}; known: {sorted(known)}")
    mt = {k[len("mt."):]: v for k, v in values.items() if k.startswith("mt.")}
    if set(mt) - set(MT_SETTINGS):
        raise ValueError(f"unknown multi-turn settings {sorted(set(mt) - set(MT_SETTINGS))}; "
                         f"known: {sorted(MT_SETTINGS)}")
    return recipe_settings(MultiTurnConfig, "mt", mt, base=base, credit="proas" if algorithm == "proas" else "grpo",
                           proas=recipe_settings(ProASConfig, "proas", proas))
