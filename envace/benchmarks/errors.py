"""Per-task failures of a benchmark run: one task's exception never ends the run.

A task whose adapter (our loading / loop code), environment (the benchmark's tools and state), policy
transport (the model server) or the benchmark's own evaluator (checker, judge) raises is recorded as
that task's `TaskError` (stage + exception type + message), scored as a failure (reward 0, not valid:
it stays in the denominator, so an error can never raise a score), and the run goes on.
`KeyboardInterrupt` / `SystemExit` are not `Exception`s and still stop the run.

`StageTracker` says which stage a task is in; a runner advances it as it goes, and `StagedPolicy`
marks the stage `policy` for the duration of each model call, so the recorded stage is the one that
raised. `summarize` groups a run's errors by cause for the summary line every result carries.

Departure: the official runners differ (BFCL's stops at a checker exception, τ²'s raises, VitaBench's
retries a failed task 3 times and then raises); every result lists how many tasks errored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the runtime needs neither
    from envace.engines.reply import AssistantReply, BenchPolicy

MAX_MESSAGE = 2000  # characters of an exception message kept in a record (tracebacks can be huge)


class TaskStage(str, Enum):
    ADAPTER = "adapter"  # envace's own code: task parsing, the agent / user loop, record building
    ENVIRONMENT = "environment"  # the benchmark's environment: construction, tools, state
    POLICY = "policy"  # a model call (agent, user simulator) raised: transport failure
    EVALUATOR = "evaluator"  # the benchmark's own scorer: checker, evaluator, judge


@dataclass(frozen=True)
class TaskError:
    stage: TaskStage
    type: str  # the exception's class name
    message: str

    @classmethod
    def of(cls, stage: TaskStage, exc: BaseException) -> TaskError:
        text = str(exc) or repr(exc)
        return cls(TaskStage(stage), type(exc).__name__, text[:MAX_MESSAGE])

    @property
    def cause(self) -> str:
        return f"{self.stage.value}: {self.type}"

    def to_dict(self) -> dict[str, str]:
        return {"stage": self.stage.value, "type": self.type, "message": self.message}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TaskError:
        return cls(TaskStage(d["stage"]), str(d["type"]), str(d["message"]))


class StageTracker:
    """The stage one task is in; an exception is attributed to the stage current when it was raised."""

    def __init__(self, stage: TaskStage = TaskStage.ADAPTER) -> None:
        self.stage = stage

    def error(self, exc: BaseException) -> TaskError:
        return TaskError.of(self.stage, exc)


class StagedPolicy:
    """A BenchPolicy whose calls run in stage `policy`: the previous stage is restored only when the call
    returns, so an exception leaves the tracker at `policy`. Every other attribute is the inner policy's."""

    def __init__(self, inner: BenchPolicy, tracker: StageTracker) -> None:
        self.inner, self.tracker = inner, tracker
        self.name = getattr(inner, "name", type(inner).__name__)

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, seed: int | None = None,
              context: Mapping[str, Any] | None = None) -> AssistantReply:
        before = self.tracker.stage
        self.tracker.stage = TaskStage.POLICY
        out = self.inner.reply(messages, tools, seed=seed, context=context)
        self.tracker.stage = before
        return out

    def __getattr__(self, item: str) -> Any:  # only called for attributes not found on the wrapper
        return getattr(self.inner, item)


def error_of(record: Mapping[str, Any]) -> TaskError | None:
    raw = record.get("task_error")
    return TaskError.from_dict(raw) if raw else None


def failed_record(task_id: str, category: str, sample: int, seed: int, error: TaskError,
                  messages: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    """The record of a task that errored: scored as a failure, its error and the messages so far kept."""
    return {"id": str(task_id), "category": category, "sample": sample, "seed": seed, "reward": 0.0,
            "valid": False, "termination": "task_error", "task_error": error.to_dict(),
            "messages": list(messages or []), **extra}


def summarize(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """{"count", "total", "by_cause": {"<stage>: <Type>": n}, "examples": {cause: first message}} over a
    run's records (one per task x sample)."""
    total, by_cause, examples = 0, {}, {}
    for r in records:
        total += 1
        err = error_of(r)
        if err is None:
            continue
        by_cause[err.cause] = by_cause.get(err.cause, 0) + 1
        examples.setdefault(err.cause, f"{r.get('id')}: {err.message[:200]}")
    return {"count": sum(by_cause.values()), "total": total, "by_cause": by_cause, "examples": examples}


def summary_line(benchmark: str, summary: Mapping[str, Any]) -> str:
    """One line: how many tasks errored and why (grouped by stage and exception type)."""
    if not summary.get("count"):
        return f"{benchmark}: no task errored ({summary.get('total', 0)} task runs)"
    parts = [f"{cause} x{n} (e.g. {summary['examples'][cause]})"
             for cause, n in sorted(summary["by_cause"].items(), key=lambda kv: (-kv[1], kv[0]))]
    return (f"{benchmark}: {summary['count']} of {summary['total']} task runs errored and score 0: "
            + "; ".join(parts))
