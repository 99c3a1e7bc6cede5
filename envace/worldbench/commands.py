"""The `envace worldbench` command group (registered by envace.cli): `build` and `score`, each a thin
wrapper that builds a validated config from [CONFIG] key=value ... and calls one library function."""

from __future__ import annotations

import json

import typer

worldbench_app = typer.Typer(help="World-model benchmark: real tool transitions, predicted and scored.",
                             no_args_is_help=True)


def _split(args: list[str]) -> tuple[str | None, list[str]]:
    if args and "=" not in args[0]:
        return args[0], args[1:]
    return None, list(args)


BUILD_EPILOG = """Examples:
  envace worldbench build configs/worldbench/build.yaml
  envace worldbench build sources=[tau2,bfcl] tau2_limit=5 out=data/wb-small
  envace worldbench build sources=[vita] vita_checkout=~/vitabench vita_calls=results.json"""


@worldbench_app.command("build", context_settings={"allow_extra_args": True}, epilog=BUILD_EPILOG)
def build_cmd(args: list[str] = typer.Argument(None, help="[CONFIG] BuildConfig key=value ...")):
    """Record real transitions (gold and perturbed calls) from τ², BFCL, VitaBench and the tool world."""
    from envace.config import load_config
    from envace.worldbench.build import build
    from envace.worldbench.config import BuildConfig

    path, overrides = _split(args or [])
    manifest = build(load_config(BuildConfig, path, overrides))
    typer.echo(json.dumps({s: {"counts": e["counts"], "seconds": e["seconds"], "dir_md5": e.get("dir_md5")}
                           for s, e in manifest["sources"].items()}, indent=2))


SCORE_EPILOG = """The model slot is a local dir or an OpenAI-compatible endpoint:
  model.model_dir=DIR, or model.base_url=URL model.model=NAME model.api_key_env=VAR
Without a model only the reference rows (copy_last, typed_empty) are scored. model_prompt=simulator asks
the slot through envace's prompted-simulator prompt instead of the Rehearse one.
Behaviour metrics (docs/worldbench.md): act_checkpoint=DIR with behr=true, env_nll=true, wm2real=true;
a rubric judge with judge.base_url=URL judge.model=NAME; seeds=[0,1,2] for seed-level intervals.
Examples:
  envace worldbench score configs/worldbench/score.yaml model.model_dir=models/tiny limit=40
  envace worldbench score data=data/worldbench few_shot=false model.base_url=http://127.0.0.1:8000/v1 model.model=m
  envace worldbench score data=data/wb "sources=[world]" model.model_dir=runs/demo/sft/model \
      act_checkpoint=runs/demo/sft/model behr=true env_nll=true wm2real=true
  envace worldbench score data=data/wb model.base_url=http://127.0.0.1:8000/v1 model.model=m model_prompt=simulator"""


@worldbench_app.command("score", context_settings={"allow_extra_args": True}, epilog=SCORE_EPILOG)
def score_cmd(args: list[str] = typer.Argument(None, help="[CONFIG] ScoreConfig key=value ...")):
    """Predict each test transition's response (Rehearse prompt) and score it against the real one; optionally
    the behaviour metrics (BehR, environment-token NLL, WM2Real, rubric judge)."""
    from envace.config import load_config
    from envace.worldbench.behaviour import flat as behaviour_flat
    from envace.worldbench.config import ScoreConfig
    from envace.worldbench.run import score

    path, overrides = _split(args or [])
    result = score(load_config(ScoreConfig, path, overrides))
    table = {}
    for name, row in result["rows"].items():
        table[name] = {"wall_s": row["wall_s"], "n_prompt_too_long": row["n_prompt_too_long"],
                       **{src: {k: summary.get(k) for k in ("n", "json_valid", "exact", "shape", "leaf_f1",
                                                             "error_precision", "error_recall")}
                          for src, summary in row["aggregate"]["source"].items()}}
    behaviour = {k: round(v, 4) for k, v in behaviour_flat(result.get("behaviour") or {}).items()
                 if ("/all/" in k or "/world/wm2real" in k) and not k.endswith(("_lo", "_hi", "_n"))}
    typer.echo(json.dumps({"out": result["config"]["out"], "mlflow_run_id": result.get("mlflow_run_id"),
                           "rows": table, **({"behaviour": behaviour} if behaviour else {})}, indent=2))
