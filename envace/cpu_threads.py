"""The CPU thread policy of envace's entry points: how many torch threads a job uses and how its idle
OpenMP threads wait, chosen so that jobs sharing a machine share it in proportion instead of stalling
each other.

Mechanism (measured by bench/contention.py): torch's CPU kernels run as OpenMP parallel regions, one
per op, each ending at a barrier where every thread of the team must arrive. The bundled GNU OpenMP
runtime lets a thread that reaches the barrier early spin (busy-wait, up to GOMP_SPINCOUNT iterations)
before it sleeps. On a machine where another process also wants a core, the spinning thread holds its
core while the team thread it waits for sits in the run queue behind the neighbour, so every op of a
small model costs a scheduler time slice rather than microseconds; two jobs with a thread per core each
make it worse. The policy:
- OMP_WAIT_POLICY=PASSIVE unless the user set it: a thread that waits at a barrier sleeps at once and
  gives its core to whoever is runnable. The runtime reads the variable when it is loaded, i.e. when
  torch is first imported, so `configure_environment` runs at the top of the `envace` command (before any
  command imports torch) and `apply_thread_policy` reports when it came too late for its process.
- torch threads: a config's `threads` field when given, else the user's OMP_NUM_THREADS, else this job's
  share of the CPUs it may run on: usable CPUs (affinity) // ENVACE_CPU_JOBS (the number of envace jobs
  a driver runs side by side here, set by the sweep for its cell processes; default 1), at least 1.
`apply_thread_policy` also applies the allocator policy of envace.cpu_memory (freed blocks kept for reuse).
Nothing here imports torch at module level; `plan_threads` is pure so the rules can be tested.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum

from envace.cpu_memory import keep_freed_memory

WAIT_POLICY_VAR = "OMP_WAIT_POLICY"
JOBS_VAR = "ENVACE_CPU_JOBS"  # envace jobs running side by side on this machine (set by drivers for their children)
WAIT_POLICY = "PASSIVE"


class ThreadSource(str, Enum):
    CONFIG = "config"  # the job's own `threads` field
    ENV = "env"  # the user's OMP_NUM_THREADS
    SHARE = "share"  # usable CPUs // ENVACE_CPU_JOBS


@dataclass(frozen=True)
class ThreadPlan:
    """What the policy decided for one process."""

    threads: int
    source: ThreadSource
    env: dict[str, str] = field(default_factory=dict)  # variables to set (none the user already set)


def _positive_int(environ: Mapping[str, str], var: str) -> int | None:
    raw = environ.get(var, "").strip()
    if not raw:
        return None
    try:
        value = int(raw.split(",")[0])  # OMP_NUM_THREADS may be a per-nesting-level list: the first level
    except ValueError:
        raise ValueError(f"{var}={raw!r} in the environment is not a positive integer; unset it or set e.g. "
                         f"{var}=1") from None
    if value < 1:
        raise ValueError(f"{var}={raw!r} in the environment is not a positive integer; unset it or set e.g. {var}=1")
    return value


def plan_threads(environ: Mapping[str, str], cpus: int, threads: int | None = None) -> ThreadPlan:
    """The plan for a process with `cpus` usable CPUs, environment `environ` and the config's `threads`."""
    if threads is not None and threads < 1:
        raise ValueError(f"threads={threads} must be >= 1 (or unset for this job's share of the CPUs)")
    env = {} if environ.get(WAIT_POLICY_VAR) else {WAIT_POLICY_VAR: WAIT_POLICY}
    if threads is not None:
        return ThreadPlan(threads, ThreadSource.CONFIG, env)
    user = _positive_int(environ, "OMP_NUM_THREADS")
    if user is not None:
        return ThreadPlan(user, ThreadSource.ENV, env)
    jobs = _positive_int(environ, JOBS_VAR) or 1
    return ThreadPlan(max(1, max(1, cpus) // jobs), ThreadSource.SHARE, env)


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask; the CPU count where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def configure_environment() -> dict[str, str]:
    """Set the policy's environment variables the user left unset (before torch loads OpenMP); returns them."""
    plan = plan_threads(os.environ, usable_cpus())
    for k, v in plan.env.items():
        os.environ.setdefault(k, v)
    return plan.env


def apply_thread_policy(threads: int | None = None) -> ThreadPlan:
    """Set the environment, the allocator policy (envace.cpu_memory), then torch's intra-op threads, for
    this process; returns the plan. A wait policy set after torch was imported has no effect in this
    process (it still reaches child processes)."""
    late = "torch" in sys.modules and WAIT_POLICY_VAR not in os.environ
    plan = plan_threads(os.environ, usable_cpus(), threads)
    for k, v in plan.env.items():
        os.environ.setdefault(k, v)
    import torch

    keep_freed_memory()  # the allocator half of the process policy (envace.cpu_memory)
    if torch.get_num_threads() != plan.threads:
        torch.set_num_threads(plan.threads)
    if late:
        import warnings

        warnings.warn(f"{WAIT_POLICY_VAR} was set after torch was imported, so this process's OpenMP threads "
                      f"still spin while waiting; run through the `envace` command or set {WAIT_POLICY_VAR}="
                      f"{WAIT_POLICY} before starting Python", RuntimeWarning, stacklevel=2)
    return plan


@contextmanager
def cpu_jobs(n: int | None) -> Iterator[None]:
    """ENVACE_CPU_JOBS=n for the child processes started inside the block (n side-by-side jobs); the previous
    value is restored after it. None leaves the environment alone."""
    if n is None:
        yield
        return
    before = os.environ.get(JOBS_VAR)
    os.environ[JOBS_VAR] = str(n)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(JOBS_VAR, None)
        else:
            os.environ[JOBS_VAR] = before
