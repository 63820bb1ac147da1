"""GRPO learns: held-out accuracy on an easy task rises well above the base model's.

The task: "Is N even or odd?". The base model is a small Qwen2 pre-trained on it with the weak
teacher's habit on most answers ("odd odd"), so it knows the rule but usually answers in a form the
strict verifier rejects. Only the verifier's reward tells the two apart, and what it teaches carries
over to numbers never seen in training.
"""

from __future__ import annotations

import json
import random

import pytest
import torch

from evaluators.benchmark import Benchmark
from evaluators.sources import SourceSpec, make_task
from trainers.evaluate import evaluate
from trainers.grpo import GRPOConfig, GRPOTrainer
from trainers.mixture import Mixture
from trainers.prompts import format_prompt
from trainers.tiny import TinySpec, build_model, build_tokenizer, pretrain, with_habit


def _rows(numbers):
    return [(f"Is {n} even or odd?", "even" if n % 2 == 0 else "odd") for n in numbers]


def _write(path, rows):
    path.write_text("\n".join(json.dumps({"question": q, "answer": a}) for q, a in rows))


@pytest.mark.slow
def test_grpo_raises_heldout_accuracy(tmp_path):
    torch.manual_seed(0)
    rng = random.Random(0)
    numbers = rng.sample(range(100, 10_000), 1200)
    train, held = _rows(numbers[:1000]), _rows(numbers[1000:])
    _write(tmp_path / "train.jsonl", train)
    _write(tmp_path / "held.jsonl", held)
    task = make_task(SourceSpec("jsonl", str(tmp_path / "train.jsonl")), seed=0)
    bench = Benchmark.build("parity", SourceSpec("jsonl", str(tmp_path / "held.jsonl")), 200, 0, "d")

    spec = TinySpec(hidden_size=64, layers=2, heads=4, kv_heads=2, intermediate_size=128,
                    pretrain_steps=PRETRAIN_STEPS, batch_size=32, lr=3e-3, vocab_size=280)
    corpus = with_habit(train, rate=0.6, seed=0)
    tok = build_tokenizer([format_prompt(q, None) + a for q, a in corpus], spec.vocab_size)
    model = build_model(len(tok), spec, tok)
    pretrain(model, tok, corpus, spec)
    base = evaluate(model, tok, bench, max_new_tokens=6)

    cfg = GRPOConfig(lr=LR, steps=STEPS, group_size=8, prompts_per_step=16, max_new_tokens=6, seed=0)
    trainer = GRPOTrainer(model, tok, cfg, Mixture({"d": [task]}, seed=0))
    history = trainer.train()
    after = evaluate(model, tok, bench, max_new_tokens=6)
    assert after.score >= base.score + 0.25, (base.score, after.score, [round(h["reward"], 2) for h in history])
    assert after.score >= 0.8
    assert history[-1]["samples"] == STEPS * 16 * 8


PRETRAIN_STEPS, LR, STEPS = 150, 1e-3, 20
