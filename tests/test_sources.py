from __future__ import annotations

import json

from evaluators.benchmark import Benchmark
from evaluators.sources import STREAM_SIZE, SourceSpec, derive_seed, make_task
from trainers.mixture import Mixture

ARITH = SourceSpec("reasoning_gym", "basic_arithmetic",
                   {"min_terms": 2, "max_terms": 2, "max_digits": 2, "operators": ["+"]})


def test_heldout_seeds_never_meet_training_seeds():
    train = [derive_seed(s, "train", d, i) for s in range(5) for d in "abc" for i in range(3)]
    held = [derive_seed(s, "heldout", d, n) for s in range(5) for d in "abc" for n in "xyz"]
    assert max(train) + STREAM_SIZE <= min(held)


def test_verifier_is_both_reward_and_score():
    b = Benchmark.build("b", ARITH, 10, project_seed=0, domain="a")
    right = [it.answer for it in b.items]
    assert b.grade(right).score == 1.0
    assert all(b.task.score(it, it.answer) == 1.0 for it in b.items)
    wrong = ["x"] * 10
    assert b.grade(wrong).score == 0.0
    half = right[:5] + wrong[5:]
    assert b.grade(half).score == 0.5


def test_mixture_skips_heldout_questions_and_follows_weights():
    b = Benchmark.build("b", ARITH, 50, project_seed=0, domain="a")
    t1 = make_task(ARITH, derive_seed(0, "train", "a", 0))
    t2 = make_task(SourceSpec("reasoning_gym", "spell_backward", {"min_word_len": 3, "max_word_len": 4}),
                   derive_seed(0, "train", "w", 0))
    mix = Mixture({"a": [t1], "w": [t2]}, {"a": 0.8, "w": 0.2}, seed=0, exclude_questions=b.questions())
    drawn = mix.sample(500)
    held = b.questions()
    assert not any(it.question.strip().lower() in held for _, it in drawn)
    share = sum(t is t1 for t, _ in drawn) / 500
    assert 0.74 < share < 0.86


def test_jsonl_source(tmp_path):
    p = tmp_path / "qa.jsonl"
    p.write_text("\n".join(json.dumps({"question": f"{i}+{i}?", "answer": str(2 * i)}) for i in range(20)))
    t = make_task(SourceSpec("jsonl", str(p)), seed=1)
    items = t.items(20)
    assert sorted(it.question for it in items) == sorted(f"{i}+{i}?" for i in range(20))
    it = items[0]
    assert t.score(it, f" {it.answer}\nmore") == 1.0 and t.score(it, "nope") == 0.0
