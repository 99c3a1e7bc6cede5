"""Preflight probes: every endpoint slot an evaluation will use (policy, user simulator, judge) answers one
short chat completion before any task runs.

An unreachable server, a wrong model name, a bad key or a server that answers without choices would
otherwise surface only inside the tasks: each one retried with backoff, recorded as that task's error and
scored 0. Here it stops the run at once with one `EndpointProbeFailed` (a ConfigError: one CLI line,
exit 2) naming the slot's field, the URL, the model and what went wrong. The probe makes one attempt plus
one retry and waits at most `PROBE_TIMEOUT_S` per attempt; slots that share a URL and model are probed once.
Local slots are not probed: loading the model checks them.
"""

from __future__ import annotations

from typing import Any

from envace.config import ConfigError
from envace.engines.slots import ModelSlot, SlotKind

PROBE_TIMEOUT_S = 30.0
PROBE_MESSAGES = [{"role": "user", "content": "Reply with the word OK."}]


class EndpointProbeFailed(ConfigError):
    """An endpoint slot did not answer the probe chat completion."""


def used_endpoint_slots(slots: dict[str, ModelSlot | None]) -> list[tuple[str, ModelSlot]]:
    """(field, slot) for each endpoint slot, one per (base_url, model), in the order given."""
    seen: set[tuple[str, str]] = set()
    out = []
    for field, slot in slots.items():
        if slot is None or slot.kind is not SlotKind.ENDPOINT:
            continue
        key = (slot.base_url or "", slot.model or "")
        if key not in seen:
            seen.add(key)
            out.append((field, slot))
    return out


def probe_endpoint(field: str, slot: ModelSlot, transport: Any = None) -> None:
    """One short chat completion against `slot`; raises `EndpointProbeFailed` naming the field."""
    from envace.engines.openai_client import OpenAIChatClient
    from envace.secrets import mask_text

    slot.check(field)  # the key variable is set (else its own ConfigError)
    import os

    key = os.environ.get(slot.api_key_env) if slot.api_key_env else None
    url = mask_text(slot.base_url or "")
    client = OpenAIChatClient(slot.base_url or "", slot.model or "", api_key=key,
                              timeout=min(slot.timeout_s, PROBE_TIMEOUT_S), max_retries=1, transport=transport)
    try:
        client.chat(PROBE_MESSAGES, temperature=0.0, max_tokens=4)
    except Exception as exc:  # noqa: BLE001 - any failure of the probe stops the run, classified here
        what = f"{field} endpoint {url} (model {slot.model}) failed a probe chat completion: {exc}"
        fix = (f"start the server there (envace serve MODEL_DIR --port N, or vLLM) or fix {field}.base_url / "
               f"{field}.model / {field}.api_key_env")
        raise EndpointProbeFailed(f"{what}; {fix}", field=f"{field}.base_url", what=what, fix=fix) from None
    finally:
        client.close()


def probe_endpoints(slots: dict[str, ModelSlot | None], transport: Any = None) -> list[str]:
    """Probe every endpoint slot in `slots` ({field: slot or None}); returns the fields probed."""
    probed = []
    for field, slot in used_endpoint_slots(slots):
        probe_endpoint(field, slot, transport)
        probed.append(field)
    return probed
