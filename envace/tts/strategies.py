"""Memory strategies of test-time rehearsal: how the private phase's rehearsals and reviews become what the
committed run is given. One registry, one signature: `strategy(inputs: MemoryInputs) -> list[Memory]` (one
per view, envace.tts.phase), selected by name (`TTSConfig.memory`, `tts.memory=...`).

- `prose` (default): the policy's own notes. A memory prompt (envace.tts.prompts) shows the request, every
  rehearsal's transcript with its review and the earlier memory; the generation, capped at
  `memory_max_tokens` tokens (and as many words), is m_x. The paper's memory; its prompt wording is ours.
- `calls_results`: no prose. The calls of the rehearsal the policy's review rates best, each with the result
  the rehearsal imagined, verbatim, one call per line (`1. name {arguments}` / `   result: ...`).
- `calls`: the calls of that rehearsal alone.
- `best_of_n`: no note. The committed run starts the user turn with that rehearsal's first Act output,
  replayed as it was written (when it made a well-formed call; otherwise the committed run acts on its
  own), then continues as usual.

"Best" is read from the policy's own reviews: "Achieved: yes" over no verdict over "Achieved: no", the
earliest rehearsal on a tie (`best_rehearsal`); nothing privileged enters. The structured memories are
bounded like the prose one: whole lines are kept while the text is within `memory_max_tokens` tokens of the
engine's tokenizer (words on a chat-level engine, which has none); when not even the first line fits, its
head is kept. Under `rehearse_at=every` a structured memory describes the latest user turn only (the prose
memory carries the earlier one forward through its prompt).

A new strategy: a function with this signature in its own module (envace.tts.structured has the parts the
structured ones share), registered here with one line (docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable

from envace.registry import Registry
from envace.rollout.seeds import derive_seed
from envace.tts.phase import Memory, MemoryInputs, cap_words, generate_notes, imagined, said_requests
from envace.tts.prompts import memory_prompt
from envace.tts.structured import best_rehearsal, bounded, call_line, rehearsal_calls
from envace.types import Role

MemoryStrategy = Callable[[MemoryInputs], list[Memory]]
STRATEGIES: Registry[MemoryStrategy] = Registry("TTS memory strategy")


def register_memory(name: str, *, note: bool = True) -> Callable[[MemoryStrategy], MemoryStrategy]:
    """Decorator: `@register_memory("name")` adds a strategy; a different function under a taken name raises.
    `note=False`: the strategy gives the committed run something other than a memory note."""
    return STRATEGIES.register(name, note=note)


def writes_note(name: str) -> bool:
    """Whether strategy `name` gives the committed run a memory note (registered with note=True)."""
    return bool(STRATEGIES.info(name).get("note", True))


def memory_names() -> list[str]:
    return STRATEGIES.names()


def memory_strategy(name: str) -> MemoryStrategy:
    """The strategy registered as `name`; an unknown name raises UnknownName, listing the valid ones."""
    return STRATEGIES.get(name)


def _structured(inp: MemoryInputs, with_results: bool) -> list[Memory]:
    out = []
    for ph in inp.phases:
        best = best_rehearsal(ph)
        if best is None:
            out.append(Memory())
            continue
        lines = []
        for i, (call, result) in enumerate(rehearsal_calls(ph.rehearsals[best]), 1):
            lines.append(call_line(i, call))
            if with_results:
                lines.append(f"   result: {result if result is not None else '(none)'}")
        text, tokens = bounded(lines, inp.engine, inp.max_tokens)
        out.append(Memory(text=text, tokens=tokens, chosen=best))
    return out


@register_memory("prose")
def prose(inp: MemoryInputs) -> list[Memory]:
    """The policy writes m_x from every rehearsal and review (and the earlier memory)."""
    builds = [lambda chars, ph=ph, v=v, m=m: memory_prompt(
        said_requests(v.messages), [imagined(r) for r in ph.rehearsals], ph.assessments,
        inp.words, max(chars // max(len(ph.rehearsals), 1), 20), earlier=m)
        for v, ph, m in zip(inp.views, inp.phases, inp.earlier)]
    notes = generate_notes(inp.engine, builds, [derive_seed(inp.seed, "tts-memory", p) for p in range(len(inp.views))],
                           max_new=inp.max_tokens, temperature=inp.temperature, cfg=inp.cfg, max_chars=inp.max_chars,
                           enable_thinking=inp.enable_thinking)
    # chat engines report no token count: the word cap bounds their memory
    return [Memory(skipped=True) if note is None else Memory(text=cap_words(note[0], inp.max_tokens), tokens=note[1])
            for note in notes]


@register_memory("calls_results")
def calls_results(inp: MemoryInputs) -> list[Memory]:
    """The best-reviewed rehearsal's calls with their imagined results, verbatim."""
    return _structured(inp, with_results=True)


@register_memory("calls")
def calls(inp: MemoryInputs) -> list[Memory]:
    """The best-reviewed rehearsal's calls, verbatim."""
    return _structured(inp, with_results=False)


@register_memory("best_of_n", note=False)
def best_of_n(inp: MemoryInputs) -> list[Memory]:
    """No note; the committed run replays the best-reviewed rehearsal's first Act output."""
    out = []
    for ph in inp.phases:
        best = best_rehearsal(ph)
        acts = ph.rehearsals[best].turns_of(Role.ACT) if best is not None else []
        first = acts[0] if acts and acts[0].tool_calls else None
        out.append(Memory(chosen=best, replay=first))
    return out
