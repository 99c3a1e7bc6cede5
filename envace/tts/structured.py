"""Building blocks of the test-time-rehearsal memories made from a rehearsal rather than written by the policy
(envace.tts.strategies): which rehearsal the policy's own reviews rate best, the calls of a rehearsal with the
results it showed, one call as a line, and a cap that keeps whole lines.

"Best": "Achieved: yes" over no verdict over "Achieved: no", the earliest rehearsal on a tie (the reviews are
the policy's; nothing privileged is read). Length: tokens of the engine's tokenizer, words on a chat-level
engine (which has none), the unit of the prose memory's cap.
"""

from __future__ import annotations

import json

from envace.engines.base import GenerationEngine
from envace.tts.phase import PrivatePhase, cap_words
from envace.types import ToolCall, Trajectory


def best_rehearsal(phase: PrivatePhase) -> int | None:
    """The rehearsal the policy's own review rates best (module docstring); None without rehearsals."""
    if not phase.rehearsals:
        return None
    rank = {True: 2, None: 1, False: 0}
    verdicts = list(phase.achieved) + [None] * (len(phase.rehearsals) - len(phase.achieved))
    return max(range(len(phase.rehearsals)), key=lambda i: (rank[verdicts[i]], -i))


def rehearsal_calls(traj: Trajectory) -> list[tuple[ToolCall, str | None]]:
    """(call, the result its episode showed Act, None if unanswered) of every well-formed call after the
    episode's last user message, in order."""
    last = max((i for i, m in enumerate(traj.messages) if m.role == "user"), default=0)
    out: list[tuple[ToolCall, str | None]] = []
    pending: list[int] = []
    for m in traj.messages[last:]:
        if m.role == "assistant":
            pending = []
            for c in m.tool_calls:
                pending.append(len(out))
                out.append((c, None))
        elif m.role == "tool" and pending:
            i = pending.pop(0)
            out[i] = (out[i][0], m.content)
    return out


def call_line(i: int, call: ToolCall) -> str:
    return f"{i}. {call.name} {json.dumps(call.arguments, ensure_ascii=False)}"


def _length(engine: GenerationEngine, text: str) -> int:
    tok = getattr(engine, "tokenizer", None)
    return len(tok.encode(text, add_special_tokens=False)) if tok is not None else len(text.split())


def _head(engine: GenerationEngine, text: str, cap: int) -> str:
    tok = getattr(engine, "tokenizer", None)
    if tok is None:
        return cap_words(text, cap)
    return tok.decode(tok.encode(text, add_special_tokens=False)[:cap], skip_special_tokens=True)


def bounded(lines: list[str], engine: GenerationEngine, cap: int) -> tuple[str, int]:
    """(text, length) of the longest prefix of whole `lines` within `cap` (module docstring)."""
    kept: list[str] = []
    for line in lines:
        if _length(engine, "\n".join([*kept, line])) > cap:
            break
        kept.append(line)
    text = "\n".join(kept) if kept or not lines else _head(engine, lines[0], cap)
    return text, _length(engine, text) if text else 0
