"""The frozen Act checkpoint as a scorer: log-probabilities of given completions after given prompts.

`FrozenPolicy` loads a local model dir (or a `step_*` checkpoint dir: its `policy/` or `act/` model, as
envace.engines.slots.resolve_model_dir reads it) the way the trainer loads its policy
(envace.models.loading.load_policy, eval mode, no gradients) and reads completion log-probs with the
trainer's own readout (envace.engines.logprobs.response_logprobs: log_softmax over the full vocabulary at
temperature 1, the output layer only at completion positions), in batches of `batch_size` rows.
A (prompt, completion) pair longer than the model's context (`max_position_embeddings`) is not run: its
result is None and the caller counts it.

`act_pair` is the Act role's (prompt, completion) as SFT builds it (envace.trainers.sft_samples.act_samples): the
prompt is the conversation rendered by the chat template with the tools and a generation prompt
(envace.roles.act.act_prompt_ids); the completion is the template's rendering of the next assistant message,
up to and including the end-of-turn token, encoded as a training target (envace.chat_tokens.encode_target).
A test holds the two equal on tool-world tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from envace.chat_tokens import encode_target
from envace.roles.act import act_prompt_ids
from envace.types import Message

END = "<|im_end|>"  # the end-of-turn marker every envace chat template writes (SFT's targets end with it)


@dataclass
class SeqScore:
    logprob: float  # sum over the completion's tokens
    n_tokens: int

    @property
    def nll_per_token(self) -> float:
        return -self.logprob / self.n_tokens if self.n_tokens else 0.0


def _render(tokenizer: Any, messages: list[Message], tools: list[dict[str, Any]], generation: bool) -> str:
    return tokenizer.apply_chat_template([m.to_openai() for m in messages], tools=tools or None,
                                         add_generation_prompt=generation, tokenize=False)


def act_pair(tokenizer: Any, context: list[Message], tools: list[dict[str, Any]],
             action: Message) -> tuple[list[int], list[int]]:
    """(prompt ids, completion ids) of the Act role writing `action` after `context` (module docstring)."""
    prompt_text = _render(tokenizer, context, tools, True)
    full_text = _render(tokenizer, [*context, action], tools, False)
    if not full_text.startswith(prompt_text):
        raise ValueError(f"chat template of {getattr(tokenizer, 'name_or_path', '?')!r} does not render the prompt "
                         "as a prefix of the conversation; the Act completion cannot be cut out of it")
    target = full_text[len(prompt_text):]
    target = target[: target.index(END) + len(END)] if END in target else target + (tokenizer.eos_token or "")
    return act_prompt_ids(tokenizer, context, tools), encode_target(tokenizer, target)


class FrozenPolicy:
    """A local checkpoint, frozen, reading completion log-probs (module docstring)."""

    def __init__(self, model_dir: str | Path, *, batch_size: int = 8, device: str | None = None) -> None:
        from envace.engines.slots import resolve_model_dir
        from envace.models.loading import load_policy

        self.dir = resolve_model_dir(model_dir)
        self.model, self.tokenizer = load_policy(self.dir, device=device)
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.batch_size = batch_size
        ctx = getattr(self.model.config, "max_position_embeddings", None)
        self.context = int(ctx) if ctx else None
        self.forward_rows = 0  # (prompt, completion) rows run so far: the cost the report states

    def fits(self, prompt: Sequence[int], completion: Sequence[int]) -> bool:
        return self.context is None or len(prompt) + len(completion) <= self.context

    def score(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[SeqScore | None]:
        """Summed completion log-prob and token count per (prompt ids, completion ids); None when the pair does
        not fit the context or the completion is empty."""
        from envace.engines.logprobs import response_logprobs

        out: list[SeqScore | None] = [None] * len(pairs)
        todo = [i for i, (p, c) in enumerate(pairs) if p and c and self.fits(p, c)]
        todo.sort(key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))  # similar lengths share a batch: less padding
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        with torch.no_grad():
            for start in range(0, len(todo), self.batch_size):
                rows = todo[start:start + self.batch_size]
                lp, mask, _ = response_logprobs(self.model, [list(pairs[i][0]) for i in rows],
                                                [list(pairs[i][1]) for i in rows], [1.0] * len(rows), pad)
                sums = (lp * mask).sum(dim=1).tolist()
                counts = mask.sum(dim=1).tolist()
                for i, s, n in zip(rows, sums, counts):
                    out[i] = SeqScore(float(s), int(n))
                self.forward_rows += len(rows)
        return out
