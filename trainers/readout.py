"""The stated confidence's readout (ALGORITHMS.md §5): ten scale tokens the agent states its chance
of success with, and a fit of their output rows on the outcomes of recent episodes.

Why tokens of its own. The agent used to state c_t with the digits 0-9, which are also the choice
numbers of the action list, and the embedded model ties its output rows to its input embeddings. Any
change that makes the digits follow the outcome therefore moves the policy (measured: with a fast
digit readout the policy answered "8" and collapsed; docs/agent.md). The tokens `<|conf0|>` ..
`<|conf9|>` are added to the tokenizer; they start as copies of the digits' rows, so the model states
what it stated before, and they appear in no prompt and no action.

Why a fit. The calibration term trains the network at the policy's learning rate for a few dozen
iterations. That is enough for the network's state to carry the chance of success (a linear probe on
it reads the outcome with held-out AUROC 0.90), but the ten output rows that turn that state into c_t
learn only a level. So after each iteration `steps` Adam steps fit those ten rows, and nothing else,
to the last `buffer` iterations' confidence prompts (their final hidden states held fixed), with:
- the Brier score of c_t against the episode outcome (a proper scoring rule, as the term's is);
- an L2 pull towards the rows' starting values. It keeps the rows small, and with them the term's
  gradient into the network, which grows with the rows' norm and would otherwise crowd the policy's
  gradient out of the clipped update (measured: gradient norm 3 → 60, success 0.81 → 0.54);
- a guard: at the policy's own prompts the scale tokens' log-sum-exp may fall but not rise, so that
  the policy does not start answering with them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import torch

from trainers.rollout import position_ids

SCALE_TOKENS = tuple(f"<|conf{d}|>" for d in range(10))
"""Token d states the probability (d + 0.5)/10, as digit d did."""


def vocab_ids(tok, tokens: Sequence[str]) -> list[int | None]:
    """Each token's id in `tok`'s vocabulary (added tokens included), None where it has none. Looked up
    token by token rather than through `get_vocab()`, which builds a dict of the whole vocabulary
    (about 150k entries for a hub Qwen2) on every call; these lookups run at every turn of every episode."""
    if not hasattr(tok, "convert_tokens_to_ids"):
        return [None] * len(tokens)
    unk = getattr(tok, "unk_token_id", None)
    return [None if i is None or i == unk else i for i in tok.convert_tokens_to_ids(list(tokens))]


def digit_token_ids(tok) -> list[int]:
    """The token ids of the digits 0-9 (the vocabulary's own "0".."9", else a single-token encoding)."""
    ids = []
    for d, known in enumerate(vocab_ids(tok, [str(d) for d in range(10)])):
        if known is not None:
            ids.append(known)
            continue
        enc = tok(str(d), add_special_tokens=False)["input_ids"]
        if len(enc) != 1:
            raise ValueError(f"step confidence needs the digits 0-9 as single tokens, but this tokenizer splits "
                             f"{str(d)!r} into {enc}; use a tokenizer with single-digit tokens (as Qwen2's) or "
                             f"set mt.confidence: false")
        ids.append(enc[0])
    return ids


def confidence_token_ids(tok) -> list[int]:
    """The ten tokens the agent states c_t with: the scale tokens once `add_scale_tokens` added them
    (a policy trained with the readout), else the digits 0-9 (a base model, or the readout off)."""
    ids = vocab_ids(tok, SCALE_TOKENS)
    return ids if None not in ids else digit_token_ids(tok)


def add_scale_tokens(model, tok) -> list[int]:
    """Add the scale tokens to `tok` (and rows for them to `model`, if it has none spare), each a copy
    of its digit's input and output rows; return their ids. A model and tokenizer that have them
    already (a policy trained with the readout, reloaded) keep their rows."""
    digits = digit_token_ids(tok)
    fresh = None in vocab_ids(tok, SCALE_TOKENS)
    if fresh:
        tok.add_tokens(list(SCALE_TOKENS), special_tokens=True)
    ids = [tok.convert_tokens_to_ids(t) for t in SCALE_TOKENS]
    if max(ids) >= model.get_input_embeddings().weight.shape[0]:
        # a hub model often has spare rows past its tokenizer's last id; the tiny one has none
        model.resize_token_embeddings(max(ids) + 1, mean_resizing=False)
        fresh = True
    if not fresh:
        return ids
    with torch.no_grad():
        for w in {id(p): p for p in (model.get_input_embeddings().weight,
                                     model.get_output_embeddings().weight)}.values():
            w[ids] = w[digits]
    return ids


@torch.no_grad()
def final_states(model, tok, prompts: Sequence[str], batch: int = 64) -> torch.Tensor:
    """The last layer's (normed) hidden state at each prompt's last token: (N, hidden), the vector the
    output rows score for the answer's first token."""
    dev = next(model.parameters()).device
    out = []
    for i in range(0, len(prompts), batch):
        enc = tok(list(prompts[i:i + batch]), return_tensors="pt", padding=True, add_special_tokens=False).to(dev)
        o = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                  position_ids=position_ids(enc["attention_mask"]), use_cache=False, output_hidden_states=True)
        out.append(o.hidden_states[-1][:, -1].float())
    return torch.cat(out)


class ConfidenceReadout:
    """Fits the scale tokens' output rows after each iteration (see the module's docstring)."""

    LEVELS = (torch.arange(10, dtype=torch.float32) + 0.5) / 10

    def __init__(self, model, tok, steps: int = 50, buffer: int = 4, lr: float = 1e-2,
                 l2: float = 0.1, guard: float = 10.0) -> None:
        self.model, self.tok = model, tok
        self.ids = add_scale_tokens(model, tok)
        self.steps, self.l2, self.guard = steps, l2, guard
        w = model.get_output_embeddings().weight
        self.anchor = w[self.ids].detach().float().clone()
        self.rows = torch.nn.Parameter(self.anchor.clone())
        self.opt = torch.optim.Adam([self.rows], lr=lr)
        self.memory: deque[tuple[list[str], torch.Tensor]] = deque(maxlen=buffer)

    def fit(self, conf_prompts: Sequence[str], outcomes: Sequence[float], policy_prompts: Sequence[str]) -> float:
        """Remember this iteration's confidence prompts and outcomes, then fit the rows on the memory;
        returns the Brier score of the fitted rows on it."""
        self.memory.append((list(conf_prompts), torch.as_tensor(outcomes, dtype=torch.float32)))
        if self.steps <= 0:
            return float("nan")
        was_training = self.model.training
        self.model.eval()
        h = final_states(self.model, self.tok, [p for ps, _ in self.memory for p in ps])
        y = torch.cat([o for _, o in self.memory]).to(h.device)
        hp = final_states(self.model, self.tok, policy_prompts) if self.guard > 0 and policy_prompts else None
        self.model.train(was_training)
        w = self.model.get_output_embeddings().weight
        rows, levels = self.rows, self.LEVELS.to(h.device)
        with torch.no_grad():
            rows.copy_(w[self.ids].float())  # the network's own update moved them too
            lse0 = torch.logsumexp(hp @ rows.T, -1) if hp is not None else None
        for _ in range(self.steps):
            brier = (((h @ rows.T).softmax(-1) @ levels - y) ** 2).mean()
            loss = brier + self.l2 * ((rows - self.anchor.to(h.device)) ** 2).sum()
            if hp is not None:
                loss = loss + self.guard * torch.relu(torch.logsumexp(hp @ rows.T, -1) - lse0).mean()
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
        with torch.no_grad():
            w[self.ids] = rows.to(w.dtype)
            # of the rows as written, not the rows before the last step (until stop 52 it lagged one Adam step)
            brier = (((h @ w[self.ids].float().T).softmax(-1) @ levels - y) ** 2).mean()
        return brier.item()
