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


class Termination(str, Enum):
    """How an episode ended, where the summary line names it (the benchmarks' own labels, plus `context`)."""

    CONTEXT = "context"  # a prompt did not fit the model's context (ContextLengthExceeded, or a server's 400)
    USER_ERROR = "user_error"  # the user simulator produced an empty message
    AGENT_ERROR = "agent_error"
    MAX_STEPS = "max_steps"
    TOO_MANY_ERRORS = "too_many_errors"
    INVALID_AGENT_MESSAGE = "invalid_agent_message"
    TASK_ERROR = "task_error"


# endings where no score was measured (the task raised, or its prompt did not fit): a run ending only so failed.
# A user simulator's empty message (user_error) is τ²'s own premature termination scoring 0: named in the
# summary line, not a failed run.
FAILED_ENDINGS = frozenset({Termination.TASK_ERROR.value, Termination.CONTEXT.value})
NORMAL_ENDINGS = frozenset({"user_stop", "agent_stop", "transfer", "out_of_scope"})


def is_context_error(err: TaskError) -> bool:
    return err.type == "ContextLengthExceeded" or "maximum context length" in err.message


def termination_of(record: Mapping[str, Any]) -> str | None:
    """The record's ending: `context` for a prompt over the context limit, else the benchmark's own label
    (None where the benchmark has no episodes, e.g. a single-turn BFCL entry that ran)."""
    err = error_of(record)
    if err is not None and is_context_error(err):
        return Termination.CONTEXT.value
    t = record.get("termination")
    if isinstance(t, str):
        return t
    return Termination.TASK_ERROR.value if err is not None else None


def summarize(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """{"count", "total", "by_cause": {"<stage>: <Type>": n}, "examples": {cause: first message},
    "terminations": {ending: n}, "judge": {...} or None} over a run's records (one per task x sample).
    `judge` (records with `n_windows`, i.e. rubric-judged ones): windows judged, windows whose verdict did
    not parse, runs that reached the judge, and runs where it failed (raised, or left a window unparsed)."""
    total, by_cause, examples, ends = 0, {}, {}, {}
    judge = {"windows": 0, "unparsed": 0, "runs": 0, "failed": 0}
    judged = False
    for r in records:
        total += 1
        end = termination_of(r)
        if end is not None:
            ends[end] = ends.get(end, 0) + 1
        err = error_of(r)
        if "n_windows" in r:
            judged = True
            raised = err is not None and err.stage is TaskStage.EVALUATOR
            unparsed = int(r.get("unparsed_windows") or 0)
            judge["windows"] += int(r.get("n_windows") or 0)
            judge["unparsed"] += unparsed
            if raised or int(r.get("n_windows") or 0) > 0:
                judge["runs"] += 1
                judge["failed"] += bool(raised or unparsed)
        if err is None:
            continue
        by_cause[err.cause] = by_cause.get(err.cause, 0) + 1
        examples.setdefault(err.cause, f"{r.get('id')}: {err.message[:200]}")
    return {"count": sum(by_cause.values()), "total": total, "by_cause": by_cause, "examples": examples,
            "terminations": ends, "judge": judge if judged else None}


def summary_line(benchmark: str, summary: Mapping[str, Any]) -> str:
    """One line: how many tasks errored and why (grouped by stage and exception type), then the endings
    that are not a normal stop (user_error, max_steps, context, ...) and the judge's unparsed verdicts."""
    if not summary.get("count"):
        line = f"{benchmark}: no task errored ({summary.get('total', 0)} task runs)"
    else:
        parts = [f"{cause} x{n} (e.g. {summary['examples'][cause]})"
                 for cause, n in sorted(summary["by_cause"].items(), key=lambda kv: (-kv[1], kv[0]))]
        line = (f"{benchmark}: {summary['count']} of {summary['total']} task runs errored and score 0: "
                + "; ".join(parts))
    ends = {k: n for k, n in (summary.get("terminations") or {}).items()
            if k not in NORMAL_ENDINGS and k != Termination.TASK_ERROR.value}
    if ends:
        line += "; ended " + ", ".join(f"{k} x{n}" for k, n in sorted(ends.items(), key=lambda kv: (-kv[1], kv[0])))
    judge = summary.get("judge")
    if judge and (judge["unparsed"] or judge["failed"]):
        line += (f"; judge: {judge['unparsed']} of {judge['windows']} windows unparsed, failed on "
                 f"{judge['failed']} of {judge['runs']} judged runs")
    return line
