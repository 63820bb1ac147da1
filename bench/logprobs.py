"""A policy-gradient step's token log-probabilities at a large vocabulary: what every trainer computed until
stop 26 — logits at every position, the whole vocabulary's log-softmax, the entropy from that distribution —
against what replaced it: logits at the completion's positions only (`logits_to_keep`), each token's
log-probability and the entropy from a log-softmax taken a chunk of sequences at a time by an autograd
function that keeps only the logits for the backward pass (`trainers.rollout.completion_logits`,
`token_logprobs`), side by side. The model is one layer with hidden size 64, so the logits are most of the
step's memory; in a larger model the layers' activations take a share too, and the ratio is closer to 1.

Each path runs what a GRPO minibatch runs — forward pass, each completion token's log-probability, the
per-token entropy that is logged, a loss and its backward pass — on a Qwen2-architecture model with a
65,536-token vocabulary (Qwen's is 151,646; the per-token tensors scale with it) and 8 sequences of 64 prompt
and 192 completion tokens: one (N, C, V) float32 tensor is 0.4 GB. Peak memory is the growth of the process's
peak resident set (VmHWM) over the step, each path in its own child process (the allocator keeps what a path freed),
median over ROUNDS children per path; seconds are the median over ROUNDS steps in one process, the two paths
alternating.

Goal (stop 26, written before the first run): the new path's peak memory at most 0.7x the full path's,
no slower (time ratio <= 1.1), with the same log-probabilities and gradients (max |difference| <= 1e-4).
Run from the repo root after `make setup`: .venv/bin/python bench/logprobs.py
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from trainers.rollout import completion_logprobs, position_ids  # noqa: E402

VOCAB, N, PROMPT, COMPLETION = 65_536, 8, 64, 192
ROUNDS = 5
GOAL_MEMORY, GOAL_TIME, GOAL_DIFF = 0.7, 1.1, 1e-4


def model_and_batch(seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=PROMPT + COMPLETION)
    model = Qwen2ForCausalLM(cfg).float()
    ids = torch.randint(0, VOCAB, (N, PROMPT + COMPLETION))
    return model, ids, torch.ones_like(ids)


def full_path(model, ids, att):
    """Until stop 26: logits at every position, log_softmax over the vocabulary, gather, entropy from the whole
    distribution."""
    logits = model(input_ids=ids, attention_mask=att, position_ids=position_ids(att), use_cache=False).logits
    logp_all = torch.log_softmax(logits[:, PROMPT - 1 : -1, :].float(), dim=-1)
    logp = logp_all.gather(-1, ids[:, PROMPT:].unsqueeze(-1)).squeeze(-1)
    ent = -(logp_all.exp() * logp_all).sum(-1).detach()
    return logp, ent


def selective_path(model, ids, att):
    """Since stop 26: logits at the completion's positions; log-probabilities and entropy from a log-softmax
    taken a chunk of sequences at a time, only the logits kept for the backward pass."""
    return completion_logprobs(model, ids, att, PROMPT, with_entropy=True)  # what the trainers call


PATHS = {"until stop 26": full_path, "now": selective_path}


def step(path, model, ids, att):
    """One minibatch's work: log-probabilities, entropy, a policy-gradient-shaped loss, backward."""
    model.zero_grad(set_to_none=True)
    logp, ent = path(model, ids, att)
    adv = torch.linspace(-1, 1, N).unsqueeze(-1)
    loss = -(adv * logp).mean()
    loss.backward()
    return logp.detach(), ent, [p.grad.clone() for p in model.parameters()]


def child(name: str) -> None:
    """Measure one path's peak memory growth over one step in this fresh process; print it as JSON."""
    model, ids, att = model_and_batch()
    step(PATHS[name], model, ids[:1, : PROMPT + 4], att[:1, : PROMPT + 4])  # warm-up on a tiny batch
    with open("/proc/self/clear_refs", "w") as f:  # the peak resident set starts again from the current one
        f.write("5")
    before = status_kb("VmRSS")
    step(PATHS[name], model, ids, att)
    print(json.dumps({"peak_mb": (status_kb("VmHWM") - before) / 1024}))


def status_kb(field: str) -> int:
    """A /proc/self/status figure in KB: VmRSS the resident set now, VmHWM its peak. Not `getrusage`'s
    ru_maxrss: a child started from a large parent inherits the parent's resident set as its peak."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def peak_mb(name: str) -> float:
    out = subprocess.run([sys.executable, __file__, "--child", name], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_mb"]


def main() -> int:
    torch.set_num_threads(1)
    gb = N * COMPLETION * VOCAB * 4 / 1e9
    print(f"vocabulary {VOCAB}, {N} sequences x ({PROMPT} prompt + {COMPLETION} completion) tokens; one (N, C, V) "
          f"float32 tensor = {gb:.2f} GB; medians over {ROUNDS} rounds")
    model, ids, att = model_and_batch()
    ref = step(full_path, model, ids, att)
    new = step(selective_path, model, ids, att)
    diff = max(float((ref[0] - new[0]).abs().max()), float((ref[1] - new[1]).abs().max()),
               max(float((a - b).abs().max()) for a, b in zip(ref[2], new[2])))
    secs = {name: [] for name in PATHS}
    for _ in range(ROUNDS):
        for name, path in PATHS.items():
            t0 = time.perf_counter()
            step(path, model, ids, att)
            secs[name].append(time.perf_counter() - t0)
    peaks = {name: [peak_mb(name) for _ in range(ROUNDS)] for name in PATHS}
    print(f"{'path':<18}{'peak memory (MB)':>18}{'seconds':>10}")
    for name in PATHS:
        print(f"{name:<18}{statistics.median(peaks[name]):>18.0f}{statistics.median(secs[name]):>10.3f}")
    mem = statistics.median(peaks["now"]) / statistics.median(peaks["until stop 26"])
    t = statistics.median(secs["now"]) / statistics.median(secs["until stop 26"])
    ok = mem <= GOAL_MEMORY and t <= GOAL_TIME and diff <= GOAL_DIFF
    print(f"{'GOAL MET' if ok else 'GOAL MISSED'}: peak memory {mem:.2f}x that until stop 26 "
          f"(goal <= {GOAL_MEMORY}), time {t:.2f}x (goal <= {GOAL_TIME}), max |difference| of log-probs, "
          f"entropies and gradients {diff:.1e} (goal <= {GOAL_DIFF:.0e})")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        torch.set_num_threads(1)
        child(sys.argv[2])
        sys.exit(0)
    sys.exit(main())
