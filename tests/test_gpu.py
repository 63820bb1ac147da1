"""A quickstart trial on CUDA (trained weights in fp32, scoring-only models in bf16), with the same code as
on CPU (skipped where there is no GPU)."""

from __future__ import annotations

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
