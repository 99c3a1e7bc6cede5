"""Store runs of evaluations: one per (checkpoint, benchmark, protocol), found again by its id, so
re-running an evaluation adds to the run it made before instead of starting a new one.

    run id = "eval-" + the first 24 hex digits of sha256(JSON [checkpoint content hash, benchmark, protocol])

- checkpoint: the content hash of the scored model directory (`envace.provenance.checkpoint_ref`; a model
  that is not a local directory, an endpoint, is named instead);
- benchmark: "bfcl", "tau2", "vita", "finmcp", or "world" for the tool world;
- protocol: whatever else changes the trajectories: the other model slots (user simulator, judge) and the
  policy's sampling settings as the result records them, test-time rehearsal; for the tool world also
  the task source and rollout settings.

What only adds rows is left out: more tasks (a larger limit), more attempts (a larger k) and another seed
(stored as another step) reuse the run, and the store's natural key (set, task, attempt, seed) keeps every
row that was stored already. So re-running the same checkpoint × benchmark × seed adds no row.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

RUN_ID_PREFIX = "eval-"
# slot fields that name the model rather than how it is run: the policy's are covered by the checkpoint hash
_POLICY_IDENTITY_FIELDS = ("model_dir", "name", "base_url", "model", "label")


def eval_run_id(checkpoint_hash: str, benchmark: str, protocol: Mapping[str, Any] | None = None) -> str:
    blob = json.dumps([checkpoint_hash, benchmark, dict(protocol or {})], sort_keys=True, default=str)
    return RUN_ID_PREFIX + hashlib.sha256(blob.encode()).hexdigest()[:24]


def benchmark_protocol(result: Any) -> dict[str, Any]:
    """The protocol of a `BenchmarkResult`: its model slots as it recorded them (`meta["slots"]`, else the
    model names in `models`), the policy's minus its identity, and its test-time rehearsal settings."""
    meta = getattr(result, "meta", None) or {}
    slots = meta.get("slots") if isinstance(meta.get("slots"), Mapping) else None
    roles = dict(slots) if slots is not None else dict(getattr(result, "models", None) or {})
    policy = roles.pop("policy", None)
    out: dict[str, Any] = {"roles": roles}
    if isinstance(policy, Mapping):
        out["policy_sampling"] = {k: v for k, v in policy.items() if k not in _POLICY_IDENTITY_FIELDS}
    tts = meta.get("tts")
    if isinstance(tts, Mapping) and tts.get("config"):
        out["tts"] = tts["config"]
    return out
