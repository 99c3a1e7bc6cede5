"""The evaluation flow: one checkpoint on the tool world (real environment, with rehearsal fidelity) and
the benchmarks (one EvalConfig: policy / user-simulator / judge slots, benchmark data paths), fanned out
as one task per benchmark (`envace.evaluation.run.run_eval` with
`benchmarks=[b]`, results in `<out_dir>/<b>/eval.json`; several at once run in worker processes, as
sweep cells do). A benchmark task whose config names an
endpoint (remote judge / user simulator / model URL), or any task when `remote=True`, retries with
exponential backoff (an endpoint that fails its preflight probe fails the task at once). One failing
benchmark does not stop the others; the summary names it, and a benchmark that ran but measured nothing
(every task run failed, or the judge failed on too many runs: `run_eval`'s `failures`) is failed too. All
results go to one MLflow run (`eval/<benchmark>/<metric>` metrics, the JSON as artifacts), nested under
`parent_run_id` when given (the pipeline's run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.futures import as_completed

from envace.config import load_config
from envace.evaluation.config import EvalConfig
from envace.evaluation.run import resolve_model_dir, run_eval
from envace.sweeps.cells import eval_metrics
from envace.tracking.locations import Kind, locations
from envace.tracking.run_record import tracked_run
from envace_flows.common import task_runner_for
from envace_flows.train import with_endpoint_retries

ALL_BENCHMARKS = ["world", "bfcl", "tau2", "vita", "finmcp"]


def default_benchmarks(cfg: EvalConfig) -> list[str]:
    """world (local policies), bfcl, tau2, and vita / finmcp when their data paths are set."""
    out = ["world"] if cfg.policy is not None and cfg.policy.kind.value == "local" else []
    out += ["bfcl", "tau2"]
    out += [b for b in ("vita", "finmcp") if getattr(cfg.paths, b)]
    return out


@task(name="benchmark-eval", tags=["envace-eval"])
def benchmark_task(cfg: EvalConfig) -> dict[str, Any]:
    return run_eval(cfg)


@flow(name="evaluate-checkpoint")
def evaluate_checkpoint(model: str | None = None, benchmarks: list[str] | None = None,
                        overrides: list[str] | None = None, out_dir: str | None = None,
                        mlflow_uri: str | None = None, experiment: str = "envace-eval",
                        parent_run_id: str | None = None, max_workers: int = 1, remote: bool | None = None,
                        retries: int = 3, retry_backoff_s: float = 10.0, config: str | None = None,
                        paths: dict[str, str] | None = None, judge: dict[str, Any] | None = None,
                        user_sim: dict[str, Any] | None = None, k: int | None = None) -> dict[str, Any]:
    """Evaluate `model` (a model dir or a step_* checkpoint; or None with policy.* in the config /
    overrides) on each benchmark as its own task. `config` is an EvalConfig YAML; `paths`, `judge`,
    `user_sim` and `k` are EvalConfig fields (e.g. paths={"vita": ...}, judge={"base_url": ..., "model": ...,
    "api_key_env": "JUDGE_KEY"}). Default benchmarks: world, bfcl, tau2, and vita / finmcp when their
    data paths are set."""
    logger = get_run_logger()
    values: dict[str, Any] = {k_: v for k_, v in (("model", model), ("paths", paths), ("judge", judge),
                                                  ("user_sim", user_sim), ("k", k)) if v is not None}
    # the benchmark list is set per task below (a YAML's `benchmarks` is replaced by it)
    base = load_config(EvalConfig, config, overrides or [], **values, benchmarks=["bfcl"])
    benchmarks = benchmarks or default_benchmarks(base)
    name = base.model_name()
    if out_dir:
        out = Path(out_dir)
    elif model:
        out = resolve_model_dir(model).parent / f"eval_{Path(model).name}"
    else:
        out = Path("runs") / f"eval_{name}"
    configs = {b: EvalConfig.model_validate({**base.model_dump(), "benchmarks": [b], "out_dir": str(out / b)})
               for b in benchmarks}
    results: dict[str, Any] = {}
    failed: dict[str, str] = {}
    with task_runner_for(max_workers) as runner:
        futures = {}
        for b, cfg in configs.items():
            t = benchmark_task.with_options(task_run_name=f"eval[{b}]")
            t = with_endpoint_retries(t, cfg, retries, retry_backoff_s, force=remote)
            fut = runner.submit(t, {"cfg": cfg})
            futures[fut.task_run_id] = (fut, b)
        for fut in as_completed([f for f, _ in futures.values()]):
            b = futures[fut.task_run_id][1]
            fut.wait()  # the final state from the worker, not a possibly stale one from the API
            if fut.state.is_completed() and (fut.result().get("failures") or []):
                results[b] = fut.result()  # written and logged, but it measured nothing: a failure, not a zero
                failed[b] = "; ".join(results[b]["failures"])
                logger.error("eval[%s]: FAILED: %s", b, failed[b])
            elif fut.state.is_completed():
                results[b] = fut.result()
                logger.info("eval[%s]: done; %s", b, ", ".join(f"{k}={v:.3f}" for k, v in
                                                                 list(eval_metrics(results[b]).items())[:3]))
            else:
                exc = fut.result(raise_on_failure=False)
                failed[b] = f"{type(exc).__name__}: {exc}" if isinstance(exc, BaseException) else str(fut.state.message)
                logger.error("eval[%s]: FAILED: %s", b, failed[b])
    uri = locations(out, Kind.FLOW, mlflow_uri=mlflow_uri).mlflow_uri  # <out>/mlflow/ by default
    with tracked_run(uri, experiment, f"eval-{name}",
                   {"model": model, "benchmarks": benchmarks, "overrides": overrides or [],
                    "config": base.model_dump(mode="json")},
                     kind="eval", parent_run_id=parent_run_id, input_paths=[model] if model else []) as run:
        for b, res in results.items():  # world: eval/world/<metric>; others: eval/<benchmark>/<metric>
            run.log_step_metrics(0, eval_metrics(res, prefix="eval" if b == "world" else f"eval/{b}"))
            run.log_artifact_dict(res, f"eval/{b}.json")
        run.set_tags({"envace.failed_benchmarks": ",".join(sorted(failed))})
    if failed:
        logger.error("benchmarks failed: %s", "; ".join(f"{b}: {e}" for b, e in failed.items()))
    return {"model": model or name, "results": results, "failed": failed, "mlflow_run_id": run.run_id,
            "out_dir": str(out)}
