"""How a question becomes a prompt, one rule for training, rollouts and evaluation."""

from __future__ import annotations

from typing import Any

PLAIN_SUFFIX = "\nAnswer: "
SYSTEM = "Reply with only the final answer on one line."


def format_prompt(question: str, tokenizer: Any) -> str:
    """A chat model gets its own template, the instruction as a system turn, or at the head of the user's where
    the template refuses a system turn (Gemma's, older Mistral's: until stop 53 their first prompt raised, and
    the search stopped with a traceback; a review); a plain LM (such as `tiny`) gets `question\\nAnswer: `, after
    the BOS token where its tokenizer starts texts with one."""
    if getattr(tokenizer, "chat_template", None):
        from jinja2.exceptions import TemplateError  # transformers renders chat templates with jinja2

        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
        try:
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except TemplateError:
            merged = [{"role": "user", "content": f"{SYSTEM}\n\n{question}"}]
            return tokenizer.apply_chat_template(merged, tokenize=False, add_generation_prompt=True)
    return _bos(tokenizer) + question.strip() + PLAIN_SUFFIX


def _bos(tokenizer: Any) -> str:
    """The BOS token's text where the tokenizer starts every text with it (Llama's and Mistral's base models):
    prompts are encoded without special tokens (a chat template writes its own BOS), so until stop 53 a plain
    LM's prompts had none (a review). Nothing for a tokenizer without one, such as `tiny`'s."""
    bos = getattr(tokenizer, "bos_token", None)
    if not bos or getattr(tokenizer, "bos_token_id", None) is None:
        return ""
    return bos if tokenizer("a")["input_ids"][:1] == [tokenizer.bos_token_id] else ""
