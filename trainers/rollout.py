"""Rollouts with transformers `generate` (KV cache) and per-token log-probabilities of completions."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import torch


@dataclass
class Rollouts:
    """G completions for each of P prompts, flattened prompt-major: row i*G + j is sample j of prompt i.

    Shapes: `input_ids`, `attention_mask` (N, L + C) with prompts left-padded to L; `completion_mask`
    (N, C) is 1 on generated tokens up to and including the first <eos>; `truncated` (N,) is True
    where no <eos> was produced within C tokens.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_mask: torch.Tensor
    truncated: torch.Tensor
    prompt_len: int
    texts: list[str]

    @property
    def completion_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_len :]

    def select(self, rows: list[int]) -> Rollouts:
        """The given rows, in order."""
        idx = torch.tensor(rows, dtype=torch.long, device=self.input_ids.device)
        return Rollouts(self.input_ids[idx], self.attention_mask[idx], self.completion_mask[idx],
                        self.truncated[idx], self.prompt_len, [self.texts[i] for i in rows])

    @staticmethod
    def cat(parts: list[Rollouts], pad_id: int) -> Rollouts:
        """Stack batches with different prompt and completion lengths: prompts stay left-padded to
        the longest, completions right-padded to the longest (padding is masked everywhere)."""
        L = max(r.prompt_len for r in parts)
        C = max(r.completion_ids.shape[1] for r in parts)

        def pad(t: torch.Tensor, left: int, right: int, value: int) -> torch.Tensor:
            return torch.nn.functional.pad(t, (left, right), value=value)

        ids, att, cm = [], [], []
        for r in parts:
            left, right = L - r.prompt_len, C - r.completion_ids.shape[1]
            ids.append(pad(r.input_ids, left, right, pad_id))
            att.append(pad(r.attention_mask, left, right, 0))
            cm.append(pad(r.completion_mask, 0, right, 0))
        return Rollouts(torch.cat(ids), torch.cat(att), torch.cat(cm), torch.cat([r.truncated for r in parts]),
                        L, [t for r in parts for t in r.texts])


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding, so a padded row sees the same positions as an unpadded one."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def eos_ids(model, tokenizer) -> list[int]:
    """Every token that ends a completion: the tokenizer's end of sequence and those of the model's
    generation config (a chat model such as Qwen2.5-Instruct lists `<|im_end|>` and `<|endoftext|>`;
    with the tokenizer's alone, a completion ending at the other ran on to `max_new_tokens`)."""
    out = [tokenizer.eos_token_id]
    cfg = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for i in cfg if isinstance(cfg, (list, tuple)) else [cfg]:
        if i is not None and i not in out:
            out.append(int(i))
    return out


NEUTRAL = dict(repetition_penalty=1.0, encoder_repetition_penalty=1.0, no_repeat_ngram_size=0, min_new_tokens=0)
"""Settings of a model's own generation config that would reshape the distribution generate samples from,
set to their neutral value: the trainers' log-probs are those of softmax(logits / T), and a shipped
`repetition_penalty` (Qwen2.5-Instruct's generation_config.json has one) made μ differ from π_θ on fresh
rollouts (mean |Δ log p| 0.11 at 1.1; until stop 25). Held-out scoring decodes the plain policy too."""
NEUTRAL_SAMPLING = dict(typical_p=1.0, min_p=0.0, epsilon_cutoff=0.0, eta_cutoff=0.0)
"""The same for the sampling-only filters (set only when sampling: greedy decoding warns about them)."""


@torch.no_grad()
def generate(model, tokenizer, prompts: list[str], group_size: int = 1, temperature: float = 1.0,
             max_new_tokens: int = 8, greedy: bool = False) -> Rollouts:
    """Sample `group_size` completions per prompt (greedy decoding when `greedy`)."""
    dev = next(model.parameters()).device
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(dev)
    kwargs = {**NEUTRAL, **(dict(do_sample=False) if greedy else dict(do_sample=True, temperature=temperature,
                                                                         top_k=0, top_p=1.0, **NEUTRAL_SAMPLING))}
    eos = eos_ids(model, tokenizer)
    out = model.generate(
        **enc, max_new_tokens=max_new_tokens, num_return_sequences=group_size,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=eos, **kwargs,
    )  # (N, L + C') with C' <= max_new_tokens
    prompt_len = enc["input_ids"].shape[1]
    comp = out[:, prompt_len:]
    is_eos = torch.isin(comp, torch.tensor(eos, device=comp.device))
    # 1 up to and including the first eos
    before_eos = (is_eos.long().cumsum(-1) - is_eos.long()) == 0
    completion_mask = before_eos.long()
    truncated = ~is_eos.any(-1)
    prompt_mask = enc["attention_mask"].repeat_interleave(group_size, dim=0)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
    texts = tokenizer.batch_decode(comp.masked_fill(completion_mask == 0, tokenizer.pad_token_id),
                                   skip_special_tokens=True)
    return Rollouts(out, attention_mask, completion_mask, truncated, prompt_len, texts)


@functools.cache
def _keeps_logits(cls: type) -> bool:
    """Whether a model class's forward takes `logits_to_keep` (transformers' causal LMs do)."""
    return "logits_to_keep" in inspect.signature(cls.forward).parameters


def completion_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int,
                      temperature: float = 1.0) -> torch.Tensor:
    """The logits / T that predict every completion token: (N, C, V), float32. Their softmax is π_T, the
    distribution `generate` samples at temperature T: the trainers pass the rollout temperature, so the
    likelihood ratios and the policy gradient are those of the policy that sampled (as TRL does; at T = 1
    it is π itself).

    The output layer runs at the C positions that predict the completion only (`logits_to_keep`): the
    prompt's logits, an (N, L, V) tensor, and their gradient are never built (until stop 26 they were, then
    dropped)."""
    if _keeps_logits(type(model)):  # the last C + 1 positions (an int: what every model's forward accepts)
        logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask),
                       use_cache=False, logits_to_keep=input_ids.shape[1] - prompt_len + 1).logits[:, :-1, :]
    else:  # a copy of the completion's part, not a view, which would keep the prompt's logits too
        logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask),
                       use_cache=False).logits[:, prompt_len - 1 : -1, :].clone()
    logits = logits.float()
    return logits / temperature if temperature != 1.0 else logits


def completion_log_dist(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                        prompt_len: int, temperature: float = 1.0) -> torch.Tensor:
    """log π_T(· | y_<t) over the vocabulary at every completion position: (N, C, V), float32. Only what
    needs the whole distribution (self-distillation's divergences) calls this; a token's log-probability
    and the entropy come from the logits (`token_logprobs`, `token_entropy`) without a second (N, C, V)
    tensor."""
    return torch.log_softmax(completion_logits(model, input_ids, attention_mask, prompt_len, temperature), dim=-1)


class _TokenLogprob(torch.autograd.Function):
    """log softmax(z)[token] at every position of logits z (..., V) (a chunk of sequences), and the entropy
    there (without gradient). Autograd keeps z alone, not the (C, V) log-softmax: the backward pass recomputes
    softmax(z), the gradient being g · (onehot(token) − softmax(z))."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, tok: torch.Tensor, with_entropy: bool):
        logp = torch.log_softmax(z, dim=-1)
        lp = logp.gather(-1, tok.unsqueeze(-1)).squeeze(-1)
        ent = -(logp.exp() * logp).sum(-1) if with_entropy else lp.new_zeros(0)
        ctx.save_for_backward(z, tok)
        ctx.mark_non_differentiable(ent)
        return lp, ent

    @staticmethod
    def backward(ctx, g: torch.Tensor, _ent_grad):
        z, tok = ctx.saved_tensors
        grad = torch.softmax(z, dim=-1).mul_(-g.unsqueeze(-1))
        grad.scatter_add_(-1, tok.unsqueeze(-1), g.unsqueeze(-1))
        return grad, None, None


CHUNK_ELEMENTS = 1 << 24
"""`token_logprobs` takes as many sequences at a time as fit in this many logits (64 MB in float32), at least
one: one long completion at a 150k vocabulary is a chunk of its own, many short ones share a chunk (a Python
loop over 512 two-token sequences took 8x the time of one pass)."""


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor,
                   with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log softmax(logits)[token] at every position, (N, C), in chunks of sequences (`CHUNK_ELEMENTS`); with
    `with_entropy`, the entropy at every position too (N, C, without gradient). The same values and gradient
    as gathering from `log_softmax(logits)` over the batch, but autograd keeps no (N, C, V) log-softmax beside
    the logits, and no temporary is larger than a chunk's (`_TokenLogprob`; `bench/logprobs.py`; until stop
    26 every trainer built them)."""
    N, C, V = logits.shape
    if N == 0 or C == 0:
        empty = logits.sum(-1) * 0.0  # (N, C), in the graph: a backward pass through it works
        return empty, empty.detach() if with_entropy else None
    k = max(1, CHUNK_ELEMENTS // (C * V))
    parts = [_TokenLogprob.apply(z, tok, with_entropy) for z, tok in zip(logits.split(k), tokens.split(k))]
    return torch.cat([lp for lp, _ in parts]), torch.cat([e for _, e in parts]) if with_entropy else None


@torch.no_grad()
def token_entropy(logits: torch.Tensor, rows: int = 1) -> torch.Tensor:
    """The entropy of softmax(logits) at every position, (N, C), without gradient, `rows` sequences at a time
    (so the temporary log-softmax is one sequence's, not the batch's)."""
    out = []
    for part in logits.split(rows):
        logp = torch.log_softmax(part, dim=-1)
        out.append(-(logp.exp() * logp).sum(-1))
    return torch.cat(out)


def completion_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int,
                        with_entropy: bool = False, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π_T(y_t | y_<t) for every completion token: (N, C); optionally the entropy per token (N, C),
    without gradient."""
    logits = completion_logits(model, input_ids, attention_mask, prompt_len, temperature)
    return token_logprobs(logits, input_ids[:, prompt_len:], with_entropy)
