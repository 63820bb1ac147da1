"""A quickstart trial and a ProAS agent trial on CUDA (trained weights in fp32, scoring-only models in bf16),
with the same code as on CPU (skipped where there is no GPU)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from sro.config import load_project
from sro.executor import SearchContext, run_trial
from sro.recipe import Recipe


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_quickstart_trial_on_cuda_bf16(tmp_path):
    project = load_project("search_spaces/quickstart.yaml")
    project.runtime.device = "cuda"
    ctx = SearchContext.prepare(project, tmp_path / "cache", log=lambda s: None)
    recipe = Recipe({"lr": 1e-4, "group_size": 8, "prompts_per_step": 16, "steps": 20, "eps": 0.2,
                     "beta": 0.0, "temperature": 1.0})
    from trainers.models import load_policy

    model, _ = load_policy(ctx.base_path, "cuda")  # trained: fp32 weights (bf16 rounds small updates away)
    p = next(model.parameters())
    assert p.device.type == "cuda" and p.dtype == torch.float32
    scored, _ = load_policy(ctx.base_path, "cuda", training=False)
    assert next(scored.parameters()).dtype == torch.bfloat16
    out = run_trial(recipe, ctx)
    assert out.cost["gpu_h"] > 0
    base = ctx.score_base()
    assert all(0.0 <= v <= 1.0 for v in out.scores.values())
    assert sum(out.scores.values()) > sum(base.values())


ROOT = Path(__file__).resolve().parents[1]
AGENT = {"name": "c", "base_model": "tiny", "seed": 0,
         "plugins": [str(ROOT / "search_spaces" / "plugins" / "corridor.py")],
         "domains": {"corridor": {
             "sources": [{"env": "corridor", "config": {"length": 2, "doors": 2, "games": 4, "max_steps": 4}}],
             "benchmarks": [{"name": "held", "env": "corridor",
                             "config": {"length": 2, "doors": 2, "games": 4, "max_steps": 4}}]}}}
"""An agent project (the corridor plugin's environment): its trials train with the multi-turn trainer."""


def agent_trial(tmp_path, device: str):
    """A ProAS trial of the agent project on `device` (the multi-turn trainer: episodes, step credit, the
    confidence question), with its outcome and the trained policy's parameter dtype and device."""
    from sro.config import project_from_data

    project = project_from_data(AGENT, tmp_path, "agent.yaml")
    project.runtime.device = device
    ctx = SearchContext.prepare(project, tmp_path / "cache", log=lambda s: None)
    seen: list[tuple[str, torch.dtype]] = []

    def on_checkpoint(step, model, tok):
        p = next(model.parameters())
        seen.append((p.device.type, p.dtype))

    recipe = Recipe({"algorithm": "proas", "lr": 2e-3, "group_size": 4, "prompts_per_step": 4, "steps": 3},
                    {"max_new_tokens": 4, "mt.confidence": True})
    return run_trial(recipe, ctx, on_checkpoint=on_checkpoint), seen


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_proas_agent_trial_on_cuda(tmp_path):
    out, seen = agent_trial(tmp_path, "cuda")
    assert seen and all(s == ("cuda", torch.float32) for s in seen)  # trained in fp32 on the GPU
    assert out.cost["gpu_h"] > 0 and out.metrics["episodes"] > 0 and out.metrics["env_errors"] == 0
    assert all(0.0 <= v <= 1.0 for v in out.scores.values())
    assert all(math.isfinite(p[k]) for p in out.curve for k in ("loss", "grad_norm", "reward", "calib_brier"))
