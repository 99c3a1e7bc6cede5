"""MLflow runs for envace jobs: one run per train / eval job, nested child runs under a sweep's parent.

`start_run(...)` is a context manager yielding an `MlflowRun` handle. It logs the flattened resolved
config as params (values over MLflow's 6000-character limit are truncated, marked, and the full config is
an artifact), the git commit / dirty flag and the DVC md5 of every input path as tags, and ends the run
FINISHED, FAILED (exception, or `mark_failed`) or KILLED (Ctrl-C, or SIGTERM, which raises while the run is
open: `envace.tracking.lifecycle`). Params, tags, the config artifact and JSON artifacts are written with
secrets masked (`envace.secrets`). Everything goes through an explicit
`MlflowClient`, never the fluent API's global state, so tests and sweeps can hold several runs at once and
nothing ever falls back to `./mlruns`.

The default tracking URI is a local SQLite file (`sqlite:///<dir>/mlflow.db`) with artifacts in
`<dir>/mlartifacts`; any MLflow URI works (`http://...`, `databricks`, another SQL URL). The first use of a
SQL database in a process creates MLflow's schema under a file lock (`tracking_client`), so runs started
together on a new directory do not race each other's migrations.

Checkpoints in a run and the model registry: `envace.tracking.mlflow_checkpoints`.

Resume: `resume_run_id=` reopens the same MLflow run. Params equal to the logged ones are skipped
(MLflow forbids changing a param; changed values are recorded in the `envace.resume_changed_params` tag),
and metric points at steps already logged before the crash are skipped, so a step that is re-run after
resuming from an earlier checkpoint does not appear twice in the curves.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import threading
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")  # offline machines: no telemetry attempts

from mlflow.entities import Metric, Param, RunTag  # noqa: E402
from mlflow.exceptions import MlflowException  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402
from mlflow.utils.validation import (  # noqa: E402
    MAX_ENTITY_KEY_LENGTH,
    MAX_PARAM_VAL_LENGTH,
    MAX_TAG_VAL_LENGTH,
)

from envace.config import BaseConfig, flatten  # noqa: E402
from envace.provenance.dvc_hash import input_hashes  # noqa: E402
from envace.provenance.gitinfo import git_info  # noqa: E402
from envace.secrets import mask_secrets, mask_text  # noqa: E402
from envace.tracking.lifecycle import RunOutcome, outcome_of, sigterm_raises  # noqa: E402
from envace.tracking.locations import MLFLOW_FILE  # noqa: E402

DEFAULT_DIR = "mlruns"
# Checkpoints up to this size (MiB, the whole step directory) are uploaded as run artifacts; larger ones
# are linked (a tag and, for the final one, a registered version whose source is the directory).
PARENT_TAG = "mlflow.parentRunId"
TRUNCATED = "...[truncated]"
_BAD_KEY = re.compile(r"[^A-Za-z0-9_\-. :/]")


def default_tracking_uri(directory: str | Path = DEFAULT_DIR) -> str:
    return f"sqlite:///{Path(directory).expanduser().resolve() / MLFLOW_FILE}"


def resolve_tracking_uri(uri: str | Path | None) -> tuple[str, str | None]:
    """(tracking URI, artifact root URI or None). None or a directory path → local SQLite file there."""
    if uri is None:
        uri = DEFAULT_DIR
    text = str(uri)
    if "://" not in text and not text.startswith(("databricks", "file:")):
        directory = Path(text).expanduser().resolve()
        directory.mkdir(parents=True, exist_ok=True)
        return default_tracking_uri(directory), (directory / "mlartifacts").as_uri()
    if text.startswith("sqlite:///"):
        db = Path(text[len("sqlite:///"):])
        db.parent.mkdir(parents=True, exist_ok=True)
        return text, (db.resolve().parent / "mlartifacts").as_uri()
    return text, None


def metric_key(key: str) -> str:
    """A key MLflow accepts: allowed characters only, no `..` segment, at most 250 characters."""
    k = _BAD_KEY.sub("_", str(key)).replace("..", "__").lstrip("/") or "_"
    return k[:MAX_ENTITY_KEY_LENGTH]


def _param_value(v: Any) -> str:
    s = json.dumps(v, sort_keys=True, default=str) if isinstance(v, (dict, list, tuple)) else str(v)
    return s if len(s) <= MAX_PARAM_VAL_LENGTH else s[: MAX_PARAM_VAL_LENGTH - len(TRUNCATED)] + TRUNCATED


def flatten_config(config: BaseConfig | Mapping[str, Any] | None) -> dict[str, str]:
    """Dotted-key params of a config (BaseConfig.flat() or a nested dict), as MLflow param strings, secrets
    (URL passwords, API keys) masked."""
    if config is None:
        return {}
    if isinstance(config, BaseConfig):
        flat = config.flat()
    elif isinstance(config, Mapping):
        flat = flatten(config)
    else:
        raise TypeError(f"config must be a BaseConfig or a dict, got {type(config).__name__}")
    return {metric_key(k): _param_value(v) for k, v in mask_secrets(flat).items()}


def _config_dict(config: BaseConfig | Mapping[str, Any] | None) -> dict[str, Any]:
    if isinstance(config, BaseConfig):
        return mask_secrets(config.model_dump(mode="json"))
    return mask_secrets(json.loads(json.dumps(dict(config or {}), default=str)))


# MLflow creates its schema on the first use of a new database, with no lock of its own: two processes
# starting together on a fresh `mlflow.db` both see no tables and both run the migrations, and one dies
# ("table ... already exists", or Alembic's "expected to match one row"). The first use of a database in
# this process happens under an exclusive file lock shared by every process on the machine.
_READY: set[str] = set()
_READY_LOCK = threading.Lock()


def _init_lock_path(uri: str) -> Path | None:
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):] + ".init.lock")
    scheme = uri.split("://", 1)[0] if "://" in uri else ""
    if scheme.split("+")[0] in ("postgresql", "mysql", "mssql", "sqlite"):
        digest = hashlib.sha256(uri.encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"envace-mlflow-init-{digest}.lock"
    return None  # a tracking server (http, databricks) creates its own schema


def tracking_client(uri: str) -> MlflowClient:
    """An `MlflowClient` on `uri` whose tracking and registry stores exist (schema created on first use,
    one process at a time)."""
    lock_path = _init_lock_path(uri)
    with _READY_LOCK:
        if lock_path is None or uri in _READY:
            return MlflowClient(tracking_uri=uri, registry_uri=uri)
        import fcntl

        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:  # the client opens the tracking store (migrations when tables are missing) on construction,
                # the registry store on first use; both are cached per URI for the rest of the process
                client = MlflowClient(tracking_uri=uri, registry_uri=uri)
                client.search_registered_models(max_results=1)
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        _READY.add(uri)
    return client


def _experiment_id(client: MlflowClient, name: str, artifact_root: str | None) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            raise ValueError(f"MLflow experiment {name!r} is deleted; restore it or choose another name")
        return exp.experiment_id
    location = f"{artifact_root}/{metric_key(name).replace(' ', '_')}" if artifact_root else None
    try:
        return client.create_experiment(name, artifact_location=location)
    except MlflowException:  # another process created it first
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


class MlflowRun:
    """Handle of one active MLflow run. All logging goes through here."""

    def __init__(self, client: MlflowClient, run_id: str, experiment_id: str, resumed: bool = False) -> None:
        self.client = client
        self.run_id = run_id
        self.experiment_id = experiment_id
        self.resumed = resumed
        self.outcome: RunOutcome | None = None  # set by mark_failed; None = decided by how the block exits
        self._done_steps: dict[str, int] = {}
        if resumed:  # last step per metric key logged before the crash
            for key in client.get_run(run_id).data.metrics:
                hist = client.get_metric_history(run_id, key)
                self._done_steps[key] = max(m.step for m in hist) if hist else -1

    @property
    def tracking_uri(self) -> str:
        return self.client.tracking_uri

    @property
    def artifact_uri(self) -> str:
        return self.client.get_run(self.run_id).info.artifact_uri

    def mark_failed(self, reason: str) -> None:
        """End the run FAILED even though its block exits normally (e.g. a sweep whose cells failed)."""
        self.outcome = RunOutcome.FAILED
        self.set_tags({"envace.failure": reason})

    # ----- params / tags ------------------------------------------------------------------------
    def log_params(self, params: Mapping[str, Any]) -> None:
        items = [Param(metric_key(k), _param_value(v)) for k, v in mask_secrets(dict(params)).items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[i:i + 100])

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        items = [RunTag(metric_key(k), mask_text(str(v))[:MAX_TAG_VAL_LENGTH]) for k, v in tags.items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, tags=items[i:i + 100])

    # ----- metrics ------------------------------------------------------------------------------
    def log_step_metrics(self, step: int, metrics: Mapping[str, float | int | None]) -> int:
        """Log `metrics` at `step`; None values are skipped. Returns how many points were logged."""
        return self.log_steps_metrics([(step, metrics, None)])

    def log_steps_metrics(self, entries: Iterable[tuple[int, Mapping[str, float | int | None], int | None]]) -> int:
        """Metrics of several steps, `(step, metrics, timestamp in ms or None = now)` each, in one MLflow call
        per 1000 points (each call costs the same whatever its size: a transaction of the tracking store)."""
        now = int(time.time() * 1000)
        points = []
        for step, metrics, stamp in entries:
            for k, v in metrics.items():
                if v is None:
                    continue
                key = metric_key(k)
                if step <= self._done_steps.get(key, -1):
                    continue  # logged before the crash this run resumed from
                points.append(Metric(key, float(v), now if stamp is None else int(stamp), int(step)))
        for i in range(0, len(points), 1000):
            self.client.log_batch(self.run_id, metrics=points[i:i + 1000])
        return len(points)

    def metric_history(self, key: str) -> list[tuple[int, float]]:
        return sorted((m.step, m.value) for m in self.client.get_metric_history(self.run_id, metric_key(key)))

    # ----- artifacts ----------------------------------------------------------------------------
    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        p = Path(path)
        if p.is_dir():
            self.client.log_artifacts(self.run_id, str(p), artifact_path)
        elif p.is_file():
            self.client.log_artifact(self.run_id, str(p), artifact_path)
        else:
            raise FileNotFoundError(f"artifact {p} does not exist")

    def log_artifact_dict(self, obj: Mapping[str, Any] | list, artifact_file: str) -> None:
        """A dict or list as a JSON (or YAML, by extension) artifact."""
        self.client.log_dict(self.run_id, mask_secrets(json.loads(json.dumps(obj, default=str))), artifact_file)

    def log_table(self, df: Any, artifact_file: str) -> None:
        """A pandas DataFrame (or dict of columns) as an MLflow table artifact (`.json`)."""
        if not artifact_file.endswith(".json"):
            raise ValueError(f"table artifact {artifact_file!r} must end with .json (MLflow's table format)")
        self.client.log_table(self.run_id, data=df, artifact_file=artifact_file)

    def log_figure(self, figure: Any, artifact_file: str) -> None:
        """A matplotlib figure (.png/.svg/...) or a plotly figure (.html)."""
        self.client.log_figure(self.run_id, figure, artifact_file)

    def artifact_paths(self, path: str | None = None) -> list[str]:
        """Every artifact file of the run (recursive), as paths relative to the artifact root."""
        out: list[str] = []
        for info in self.client.list_artifacts(self.run_id, path):
            if info.is_dir:
                out.extend(self.artifact_paths(info.path))
            else:
                out.append(info.path)
        return sorted(out)


def _resume(client: MlflowClient, run_id: str, params: dict[str, str]) -> MlflowRun:
    try:
        run = client.get_run(run_id)
    except MlflowException:
        raise ValueError(f"cannot resume MLflow run {run_id!r}: it is not in {mask_text(client.tracking_uri)}; "
                         f"check tracking.mlflow_uri or start a fresh run") from None
    client.update_run(run_id, status="RUNNING")
    handle = MlflowRun(client, run_id, run.info.experiment_id, resumed=True)
    old = run.data.params
    new = {k: v for k, v in params.items() if k not in old}
    changed = {k: [old[k], v] for k, v in params.items() if k in old and old[k] != v}
    handle.log_params(new)
    count = int(run.data.tags.get("envace.resume_count", "0")) + 1
    tags = {"envace.resume_count": count}
    if changed:
        warnings.warn(f"resuming MLflow run {run_id} with changed params {sorted(changed)}; the old values stay "
                      f"as params, the new ones are in the envace.resume_changed_params tag", stacklevel=3)
        tags["envace.resume_changed_params"] = json.dumps(changed, sort_keys=True)
    handle.set_tags(tags)
    return handle


@contextmanager
def start_run(tracking_uri: str | Path | None, experiment: str, run_name: str,
              config: BaseConfig | Mapping[str, Any] | None = None, *, parent_run_id: str | None = None,
              resume_run_id: str | None = None, tags: Mapping[str, Any] | None = None,
              input_paths: Iterable[str | Path] = (), code_dir: str | Path = ".") -> Iterator[MlflowRun]:
    """Open (or resume) an MLflow run; yields its handle and ends it when the block exits."""
    uri, artifact_root = resolve_tracking_uri(tracking_uri)
    client = tracking_client(uri)
    params = flatten_config(config)
    all_tags: dict[str, Any] = dict(git_info(code_dir).tags())
    hashes = input_hashes(input_paths)
    all_tags.update({f"input.{metric_key(p)}": h for p, h in hashes.items()})
    if hashes:
        all_tags["envace.inputs"] = json.dumps(hashes, sort_keys=True)
    all_tags.update(tags or {})
    with sigterm_raises():  # a SIGTERM ends the run KILLED instead of leaving it RUNNING
        if resume_run_id is not None:
            handle = _resume(client, resume_run_id, params)
        else:
            exp_id = _experiment_id(client, experiment, artifact_root)
            start_tags = {PARENT_TAG: parent_run_id} if parent_run_id else {}
            run = client.create_run(exp_id, run_name=run_name, tags=start_tags)
            handle = MlflowRun(client, run.info.run_id, exp_id)
        try:
            if resume_run_id is None:
                handle.log_params(params)
                if config is not None:
                    handle.log_artifact_dict(_config_dict(config), "config.yaml")
            handle.set_tags(all_tags)
            yield handle
        except BaseException as exc:
            outcome = outcome_of(exc)
            if outcome is RunOutcome.FAILED:  # why, in the run itself (masked: messages can quote URLs)
                try:
                    client.set_tag(handle.run_id, "envace.error",
                                   mask_text(f"{type(exc).__name__}: {exc}")[:MAX_TAG_VAL_LENGTH])
                except Exception:  # noqa: BLE001 - the tracking store may be what failed; the status matters more
                    pass
            client.set_terminated(handle.run_id, outcome.value)
            raise
        client.set_terminated(handle.run_id, (handle.outcome or RunOutcome.FINISHED).value)


def child_runs(tracking_uri: str | Path | None, parent_run_id: str) -> list[str]:
    """Run ids of the nested children of a sweep's parent run (searched in the parent's experiment)."""
    uri, _ = resolve_tracking_uri(tracking_uri)
    client = tracking_client(uri)
    parent = client.get_run(parent_run_id)
    runs = client.search_runs([parent.info.experiment_id], f"tags.`{PARENT_TAG}` = '{parent_run_id}'")
    return sorted(r.info.run_id for r in runs)
