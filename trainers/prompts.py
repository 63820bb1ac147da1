"""How a question becomes a prompt, one rule for training, rollouts and evaluation."""

from __future__ import annotations

from typing import Any

PLAIN_SUFFIX = "\nAnswer: "
SYSTEM = "Reply with only the final answer on one line."


def format_prompt(question: str, tokenizer: Any) -> str:
    """A chat model gets its own template; a plain LM (such as `tiny`) gets `question\\nAnswer: `."""
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return question.strip() + PLAIN_SUFFIX
