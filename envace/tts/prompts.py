"""Prompts of test-time rehearsal (TTS): the self-assessment after each private rehearsal, the reflection
note a sequential rehearsal sees, the rehearsal-memory summary, and where the memory goes in the
committed run. Shared by the token-level (envace.tts.rollout) and chat-level (envace.tts.chat) front-ends;
the memory prompt is the `prose` memory strategy's (envace.tts.strategies).

The paper describes these steps (a self-assessment and a fix per rehearsal, a short memory m_x, one
committed execution with m_x in context) but its prompts are not public; the wording here is ours.
Memory placement (our choice, documented): m_x is appended to the system prompt of the committed run
under `MEMORY_HEADER`, so it precedes the user request and survives every later turn of the episode;
a conversation without a system prompt gets one holding only the note.
"""

from __future__ import annotations

from typing import Any

from envace.types import Message

MEMORY_HEADER = "Rehearsal notes (your own private, imagined attempts; nothing was executed):"
EARLIER_HEADER = "Earlier private rehearsals of this request (imagined; nothing was executed):"
ASSESS_MARK = "Review of an imagined attempt."
MEMORY_MARK = "Write your rehearsal notes."
ACHIEVED_YES, ACHIEVED_NO = "achieved: yes", "achieved: no"

ASSESS_PROMPT = """{mark}
The tool results below were imagined by you; no tool was really called.

User request:
{request}

Imagined episode:
{transcript}

Did this episode achieve the request? Answer on the first line exactly "Achieved: yes" or "Achieved: no", \
then say in one sentence what to change next time."""

MEMORY_PROMPT = """{mark}
You are about to do the request below for real. In at most {words} words, say what your private \
rehearsals taught you: which tools and arguments to use, in which order, and which mistakes to avoid.

User request:
{request}

{earlier}{attempts}"""

EARLIER_MEMORY = "Your notes from earlier in this conversation:\n{memory}\n\n"

ATTEMPT_BLOCK = "Attempt {i}:\n{transcript}\nReview: {assessment}"


def crop(text: str, max_chars: int) -> str:
    """Keep the head and the tail of a long text (the request and the outcome matter most)."""
    if len(text) <= max_chars:
        return text
    half = max(max_chars // 2 - 3, 1)
    return text[:half] + "\n...\n" + text[-half:]


def attempts_text(transcripts: list[str], assessments: list[str], max_chars: int) -> str:
    """The earlier attempts, each with its review, each cropped to `max_chars`."""
    return "\n\n".join(ATTEMPT_BLOCK.format(i=i + 1, transcript=crop(t, max_chars) or "(nothing)",
                                            assessment=a.strip() or "(none)")
                       for i, (t, a) in enumerate(zip(transcripts, assessments)))


def assess_prompt(request: str, transcript: str, max_chars: int) -> str:
    return ASSESS_PROMPT.format(mark=ASSESS_MARK, request=crop(request, max_chars),
                                transcript=crop(transcript, max_chars) or "(the assistant did nothing)")


def memory_prompt(request: str, transcripts: list[str], assessments: list[str], words: int, max_chars: int,
                  earlier: str = "") -> str:
    """The memory prompt; `earlier` (the memory of earlier user turns) is carried forward into it."""
    return MEMORY_PROMPT.format(mark=MEMORY_MARK, words=words, request=crop(request, max_chars),
                                earlier=EARLIER_MEMORY.format(memory=crop(earlier, max_chars)) if earlier else "",
                                attempts=attempts_text(transcripts, assessments, max_chars))


def earlier_attempts_note(transcripts: list[str], assessments: list[str], max_chars: int) -> str:
    """What a sequential rehearsal sees of the attempts before it."""
    return (f"{EARLIER_HEADER}\n{attempts_text(transcripts, assessments, max_chars)}\n"
            "Do not repeat what failed.")


def parse_achieved(text: str) -> bool | None:
    """The self-assessment's verdict: True / False, or None when the model did not say."""
    low = text.lower()
    yes, no = low.find(ACHIEVED_YES), low.find(ACHIEVED_NO)
    if yes < 0 and no < 0:
        return None
    if yes < 0:
        return False
    if no < 0:
        return True
    return yes < no


def add_to_system(system: str | None, note: str) -> str:
    return note if not system else f"{system}\n\n{note}"


def memory_note(memory: str) -> str:
    return f"{MEMORY_HEADER}\n{memory.strip()}"


def with_system_note(messages: list[Message], note: str) -> list[Message]:
    """`messages` with `note` appended to the system prompt (one is added when there is none); a new list."""
    out = list(messages)
    if out and out[0].role == "system":
        out[0] = Message(role="system", content=add_to_system(out[0].content, note))
        return out
    return [Message(role="system", content=note)] + out


def openai_with_system_note(messages: list[dict[str, Any]], note: str) -> list[dict[str, Any]]:
    """`with_system_note` on OpenAI chat dicts (the chat-level front-end's wire form); copies each dict."""
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system":
        out[0]["content"] = add_to_system(out[0].get("content") or "", note)
        return out
    return [{"role": "system", "content": note}] + out
