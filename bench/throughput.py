"""GRPO training throughput: SRO's trainer against TRL's `GRPOTrainer`, same tiny model, batch,
group size, completion length and learning rate, in one process, alternating rounds; then the peak
memory of one quickstart trial (measured in a child process).

Goal (issue: trainer layer): SRO's samples per second >= 1.0x TRL's (median over rounds).
Run from the repo root after `make setup`:  .venv/bin/python bench/throughput.py
"""

from __future__ import annotations

import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench.common import quickstart  # noqa: E402
from sro.executor import SearchContext  # noqa: E402
from trainers.grpo import GRPOConfig, GRPOTrainer  # noqa: E402
from trainers.mixture import Mixture  # noqa: E402
from trainers.models import load_policy  # noqa: E402
from trainers.prompts import format_prompt  # noqa: E402
from trainers.threads import usable_cores  # noqa: E402

PROMPTS, GROUP, COMPLETION, LR = 16, 8, 8, 1e-4
STEPS = 6  # timed steps per round (after one untimed warm-up step)
ROUNDS = 3


def sro_round(ctx: SearchContext, seed: int) -> float:
    """Samples per second of SRO's GRPOTrainer over STEPS steps."""
    model, tok = load_policy(ctx.base_path, "cpu")
    cfg = GRPOConfig(lr=LR, steps=STEPS + 1, group_size=GROUP, prompts_per_step=PROMPTS, max_new_tokens=COMPLETION,
                     beta=0.0, seed=seed, warmup_steps=1)
    tr = GRPOTrainer(model, tok, cfg, Mixture(ctx.tasks, seed=seed, exclude_questions=ctx.exclude))
    tr.step()
    t0 = time.perf_counter()
    for _ in range(STEPS):
        tr.step()
    return STEPS * PROMPTS * GROUP / (time.perf_counter() - t0)


def trl_round(ctx: SearchContext, seed: int) -> float:
    """Samples per second of TRL's GRPOTrainer on the same model, data and shapes."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer as TRLTrainer

    model, tok = load_policy(ctx.base_path, "cpu")
    mix = Mixture(ctx.tasks, seed=seed, exclude_questions=ctx.exclude)
    drawn = mix.sample(PROMPTS * (STEPS + 2))
    rows = [{"prompt": format_prompt(it.question, tok), "row": i} for i, (_, it) in enumerate(drawn)]

    def reward(prompts, completions, row, **_):
        return [drawn[r][0].score(drawn[r][1], c) for c, r in zip(completions, row)]

    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            times.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kw):
            times[-1] = time.perf_counter() - times[-1]

    with tempfile.TemporaryDirectory() as out:
        args = TRLConfig(output_dir=out, per_device_train_batch_size=PROMPTS * GROUP, num_generations=GROUP,
                         max_completion_length=COMPLETION, learning_rate=LR, beta=0.0, max_steps=STEPS + 1,
                         temperature=1.0, top_k=0, top_p=1.0, use_cpu=True, report_to="none", save_strategy="no",
                         logging_steps=1000, disable_tqdm=True, seed=seed, dataloader_num_workers=0,
                         gradient_accumulation_steps=1, steps_per_generation=1, shuffle_dataset=False,
                         gradient_checkpointing=False)  # SRO does not checkpoint either
        trainer = TRLTrainer(model=model, reward_funcs=reward, args=args, train_dataset=Dataset.from_list(rows),
                             processing_class=tok, callbacks=[Clock()])
        trainer.train()
    timed = times[1:]  # the first step pays for set-up
    return len(timed) * PROMPTS * GROUP / sum(timed)


def peak_memory_of_trial() -> tuple[float, float]:
    """(peak RSS MiB of a quickstart trial, peak RSS MiB of the same process after loading only)."""
    code = """
import resource, sys
sys.path.insert(0, {root!r})
from sro.config import load_project
from sro.executor import SearchContext, run_trial
from sro.recipe import Recipe
ctx = SearchContext.prepare(load_project({root!r} + "/search_spaces/quickstart.yaml"), {cache!r}, log=lambda m: None)
from trainers.models import load_policy
load_policy(ctx.base_path, "auto")
print("loaded", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
if {train}:
    run_trial(Recipe({{"lr": 1e-4, "steps": 20, "group_size": 8, "prompts_per_step": 16, "eps": 0.2}}), ctx)
print("peak", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""
    out = {}
    for train in (False, True):
        res = subprocess.run([sys.executable, "-c", code.format(root=str(ROOT), cache=str(ROOT / "runs" / ".cache"),
                                                                train=train)],
                             capture_output=True, text=True, check=True)
        out[train] = float(res.stdout.split("peak")[-1]) / 1024  # ru_maxrss is KiB on Linux
    return out[True], out[False]


def main() -> int:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    console = Console()
    ctx = quickstart()
    torch.set_num_threads(usable_cores())
    sro, trl = [], []
    for r in range(ROUNDS):
        sro.append(sro_round(ctx, r))
        trl.append(trl_round(ctx, r))
        console.print(f"round {r}: SRO {sro[-1]:.0f} samples/s, TRL {trl[-1]:.0f} samples/s")
    ms, mt = statistics.median(sro), statistics.median(trl)
    peak, loaded = peak_memory_of_trial()
    table = Table(title=f"GRPO throughput, tiny model, {PROMPTS} prompts x G={GROUP}, {COMPLETION} completion "
                        f"tokens, median of {ROUNDS} rounds x {STEPS} steps, CPU threads {torch.get_num_threads()}")
    for c in ("trainer", "samples/s", "ratio"):
        table.add_column(c, justify="right")
    table.add_row("SRO GRPOTrainer", f"{ms:.0f}", f"{ms / mt:.2f}x")
    table.add_row("TRL GRPOTrainer", f"{mt:.0f}", "1.00x")
    console.print(table)
    console.print(f"peak memory of a quickstart trial (20 steps): {peak:.0f} MiB RSS "
                  f"({loaded:.0f} MiB after loading the model alone), CPU")
    ok = ms / mt >= 1.0
    console.print(f"summary: SRO {ms:.0f} vs TRL {mt:.0f} samples/s = {ms / mt:.2f}x (goal >= 1.0x); "
                  f"trial peak memory {peak:.0f} MiB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
