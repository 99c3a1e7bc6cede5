"""Every command the README and docs/ show is exercised, so a renamed flag, subcommand, config field, script
or file breaks the build instead of the reader.

The commands are read from the Markdown itself: every line of a ```bash / ```sh / ```shell block
(continuation lines joined, comments dropped, `VAR=value`, `env`, `nice`, `taskset`, `flock` and `time`
prefixes set aside). How each is exercised, by its program:

- `envace ...`: parsed by the real CLI (typer / click `make_context`: the subcommand, every option, option
  types and required arguments), then its configuration is loaded as the command would load it (`load_config`
  on the config file and `key=value` overrides of sft, train, eval, demo, model init, and the sweep file of
  `sweep run / schedule`), so a renamed config field fails too. Nothing is trained or evaluated.
- `python bench/X.py ...`, `python -m envace....`: the script's `--help` must exit 0 and list every option
  the documentation passes; a command the documentation runs with `--dry-run` is run for real.
- `mlflow`, `prefect`, `dvc`, `ray`: `<program> <subcommands> --help` must exit 0 and list every option.
- `scripts/*.sh`, `source FILE`: the file exists; `scripts/demo.sh ARGS` is checked as `envace demo ARGS`,
  `scripts/test.sh ARGS` by the paths it names.
- Inline `envace ...` code spans in the prose: the subcommand exists and every option it names is one of it.
- Every relative link and every repository path a page names (`bench/x.py`, `configs/...`) exists.

Programs that cannot run on a CPU test machine (pip, git, vLLM, curl to a live server, ...) are listed in
`NOT_RUN` with the reason; a command whose program is in neither list fails, so a new kind of command in
the docs has to be classified here.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import typer

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_FENCES = {"bash", "sh", "shell", "console"}
BIN = Path(sys.executable).parent

# Programs shown in the docs that a CPU test machine cannot run, and why; everything else is exercised.
NOT_RUN = {
    "pip": "installs packages into an environment (the set-up script's job, checked by CI's install)",
    "git": "clones or checks out a repository",
    "vllm": "needs CUDA",
    "curl": "talks to a live server on another host",
    "apt-get": "needs root and the network",
    "nvidia-smi": "needs a GPU",
    "python -c": "an inline check of a cluster install",
    "python -m venv": "creates a virtual environment",
    "python -m verl.model_merger": "merges FSDP shards of a GPU checkpoint",
    ".venv/bin/activate": "created by the set-up script in the user's clone",
}
SHELL_BUILTINS = {"cd", "export", "echo", "mkdir", "ls"}
EXTERNAL_CLIS = {"mlflow", "prefect", "dvc", "ray", "streamlit"}
WRAPPERS = {"nice": 2, "taskset": 2, "flock": 1, "time": 0, "env": 0}  # program -> arguments to skip


@dataclass(frozen=True)
class DocCommand:
    source: str  # file:line
    argv: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.source}: {shlex.join(self.argv)}"


def _shell_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, logical line) of every shell code block, continuation lines joined."""
    out: list[tuple[int, str]] = []
    fence: str | None = None
    pending, start = "", 0
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else stripped[3:].strip().lower()
            continue
        if fence not in SHELL_FENCES:
            continue
        if not pending:
            start = no
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        out.append((start, pending + stripped))
        pending = ""
    return out


def _split(line: str) -> list[list[str]]:
    """The simple commands of one shell line (split at ; && || |), comments dropped."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    lex.commenters = "#"
    commands: list[list[str]] = [[]]
    for tok in lex:
        if tok in {";", "&&", "||", "|", "&"}:
            commands.append([])
        else:
            commands[-1].append(tok)
    return [c for c in commands if c]


def _strip_prefixes(argv: list[str]) -> list[str]:
    while argv:
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[0]):
            argv = argv[1:]
        elif argv[0] in WRAPPERS:
            skip = WRAPPERS[argv[0]]
            argv = argv[1:]
            while argv and argv[0].startswith("-"):  # the wrapper's own options and their values
                argv = argv[1 + (skip > 0 and not argv[0].startswith("--")):]
            if skip == 1 and argv:  # flock FILE
                argv = argv[1:]
        else:
            return argv
    return argv


def doc_commands() -> list[DocCommand]:
    found: list[DocCommand] = []
    for path in DOC_FILES:
        for no, line in _shell_lines(path):
            for argv in _split(line):
                argv = _strip_prefixes(argv)
                if argv:
                    found.append(DocCommand(f"{path.relative_to(ROOT)}:{no}", tuple(argv)))
    return found


def inline_envace_spans() -> list[DocCommand]:
    found: list[DocCommand] = []
    for path in DOC_FILES:
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for span in re.findall(r"`((?:\.venv/bin/)?envace [^`]+)`", line):
                try:
                    argv = shlex.split(span)
                except ValueError:
                    argv = span.split()
                found.append(DocCommand(f"{path.relative_to(ROOT)}:{no}", tuple(argv)))
    return found


# ----- envace: the real CLI's parser and config loading ---------------------------------------------------

@cache
def _root_command():
    from typer.main import get_command

    from envace.cli import app

    return get_command(app)


def _resolve(args: list[str]) -> tuple[tuple[str, ...], object, list[str]]:
    """(subcommand path, command, its arguments) for `envace ARGS`. Typer carries its own copy of click, so
    groups are recognised by their `commands` and errors by typer's exception classes."""
    cmd, path = _root_command(), []
    args = [a for a in args if a != "--debug"]
    while hasattr(cmd, "commands"):
        if not args or args[0].startswith("-"):
            break
        name = args[0]
        if name not in cmd.commands:
            raise AssertionError(f"`envace {' '.join([*path, name])}`: no such command; "
                                 f"`envace {' '.join(path)}` has {sorted(cmd.commands)}")
        cmd, path, args = cmd.commands[name], [*path, name], args[1:]
    return tuple(path), cmd, args


def _parse(args: list[str]) -> tuple[tuple[str, ...], dict, bool]:
    """Parse with click as `envace` would; returns (path, params, asked_for_help)."""
    path, cmd, rest = _resolve(args)
    try:
        ctx = cmd.make_context(" ".join(["envace", *path]), list(rest))
    except typer.Exit:  # --help
        return path, {}, True
    except typer.TyperException as exc:
        raise AssertionError(f"`envace {' '.join(args)}`: {exc.format_message()}") from None
    return path, dict(ctx.params), False


def _check_config(path: tuple[str, ...], params: dict) -> None:
    """Load the configuration the command would load (nothing runs)."""
    from envace.cli import _split_config_args
    from envace.config import load_config

    if path == ("sft",):
        from envace.trainers.config import SFTConfig

        load_config(SFTConfig, *_split_config_args(params.get("args") or []))
    elif path == ("train",) and params.get("backend", "embedded") == "embedded":
        from envace.trainers.config import TrainConfig

        load_config(TrainConfig, *_split_config_args(params.get("args") or []))
    elif path == ("eval",):
        from envace.evaluation.config import EvalConfig, GoldConfig

        overrides, model = list(params.get("overrides") or []), params.get("checkpoint")
        if model is not None and "=" in model:
            overrides, model = [model, *overrides], None
        if params.get("gold"):  # the oracle replay takes no model; it loads its own config
            assert model is None, f"`envace eval --gold` takes no model, the docs pass {model!r}"
            load_config(GoldConfig, None, overrides)
        else:
            load_config(EvalConfig, None, overrides, **({"model": model} if model else {}))
    elif path == ("demo",):
        from envace.demo import DemoConfig

        load_config(DemoConfig, None, list(params.get("overrides") or []), out=str(params.get("out", "runs/demo")))
    elif path == ("tts", "diagnose"):
        from envace.evaluation.tts_diagnosis import TTSDiagnosisConfig

        load_config(TTSDiagnosisConfig, None, list(params.get("overrides") or []), model=params["model_dir"])
    elif path == ("model", "init"):
        from envace.models.tiny import TinyModelConfig

        load_config(TinyModelConfig, None, list(params.get("overrides") or []))
    elif path in {("sweep", "run"), ("sweep", "schedule")}:
        from envace.sweeps.grid import SweepConfig, expand_cells

        cfg = load_config(SweepConfig, ROOT / params["config"])
        assert expand_cells(cfg), f"sweep {params['config']} has no cells"
        if path == ("sweep", "schedule"):
            from envace.sweeps.schedule import validate_cron

            validate_cron(params["cron"])


def check_envace(args: list[str]) -> None:
    path, params, helped = _parse(args)
    if not helped:
        _check_config(path, params)


# ----- scripts and other programs ---------------------------------------------------------------------------

@cache
def _help_text(argv: tuple[str, ...]) -> str:
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb", "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([*argv, "--help"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"`{shlex.join(argv)} --help` exited {proc.returncode}: {proc.stderr[-2000:]}"
    return proc.stdout + proc.stderr


def _options(args: list[str] | tuple[str, ...]) -> list[str]:
    return [a.split("=", 1)[0] for a in args if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", a)]


def _check_help_lists(argv: tuple[str, ...], args: list[str]) -> None:
    text = _help_text(argv)
    for opt in _options(args):
        assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text), \
            f"`{shlex.join(argv)}` has no option {opt} (not in its --help)"


def _run_dry(argv: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"`{shlex.join(argv)}` exited {proc.returncode}: {proc.stderr[-2000:]}"


def check_python(args: list[str]) -> None:
    if args[:1] == ["-c"]:
        return
    if args[:1] == ["-m"]:
        module, rest = args[1], args[2:]
        key = f"python -m {module}"
        if key in NOT_RUN:
            return
        assert module.startswith(("envace.", "flows.")), f"`{key}`: classify it in NOT_RUN or exercise it"
        if "--dry-run" in rest:
            _run_dry([sys.executable, "-m", module, *rest])
        else:
            _check_help_lists((sys.executable, "-m", module), rest)
        return
    script, rest = args[0], args[1:]
    assert (ROOT / script).is_file(), f"python script {script} does not exist"
    _check_help_lists((sys.executable, str(ROOT / script)), rest)


def check_script(script: str, args: list[str]) -> None:
    name = script.removeprefix("./")
    assert (ROOT / name).is_file(), f"{script} does not exist"
    if name == "scripts/demo.sh":
        check_envace(["demo", *args])
    elif name == "scripts/test.sh":
        for a in args:
            if not a.startswith("-"):
                assert (ROOT / a).exists(), f"scripts/test.sh {a}: no such test path"


def check_external(prog: str, args: list[str]) -> None:
    exe = BIN / prog
    assert exe.is_file(), f"{prog} is not installed beside {sys.executable}"
    subs = []
    for a in args:
        if a.startswith("-"):
            break
        subs.append(a)
    _check_help_lists((str(exe), *subs), args)


def exercise(cmd: DocCommand) -> None:
    prog, args = cmd.argv[0], list(cmd.argv[1:])
    base = Path(prog).name
    if prog in NOT_RUN or base in NOT_RUN or f"{base} {' '.join(args[:2])}" in NOT_RUN:
        return
    if base in {"python", "python3"} and (f"python {args[0]}" in NOT_RUN if args else False):
        return
    if base in SHELL_BUILTINS:
        return
    if base == "envace":
        check_envace(args)
    elif base in {"python", "python3"}:
        check_python(args)
    elif prog in {"source", "."}:
        if args[0] not in NOT_RUN:
            assert (ROOT / args[0]).is_file(), f"`{prog} {args[0]}`: no such file"
    elif prog == "bash" or prog.endswith(".sh"):
        script = args[0] if prog == "bash" else prog
        check_script(script, args[1:] if prog == "bash" else args)
    elif base in EXTERNAL_CLIS:
        check_external(base, args)
    else:
        raise AssertionError(f"`{prog}` is neither exercised nor listed in NOT_RUN with a reason: classify it here")


@pytest.fixture(autouse=True)
def _at_the_repository_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the docs' relative paths (configs, scripts) are relative to the repository root


COMMANDS = doc_commands()
INLINE = inline_envace_spans()


def test_the_docs_show_commands():
    # the extraction itself works: every page with a shell block yields commands, the README's own among them
    sources = {c.source.split(":")[0] for c in COMMANDS}
    assert "README.md" in sources and len(COMMANDS) > 30, sorted(sources)


@pytest.mark.parametrize("cmd", COMMANDS, ids=str)
def test_documented_command(cmd: DocCommand):
    exercise(cmd)


@pytest.mark.parametrize("cmd", INLINE, ids=str)
def test_inline_envace_span_names_real_options(cmd: DocCommand):
    path, command, _ = _resolve(list(cmd.argv[1:]))
    known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
    for opt in _options(cmd.argv[1:]):
        assert opt in known, f"`envace {' '.join(path)}` has no option {opt}; it has {sorted(known)}"


REPO_DIRS = ("envace", "bench", "configs", "tests", "scripts", "docs", "flows", "dashboard", "requirements", ".ci")


def referenced_paths(path: Path) -> list[tuple[str, Path]]:
    """(text, file it names) for every relative Markdown link and every repository path (`bench/x.py`,
    `configs/...`, `docs/...`) the page mentions; a `module.py:function` suffix is dropped."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in re.finditer(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if not re.match(r"[a-z]+:", m.group(1)):
            out.append((m.group(1), path.parent / m.group(1)))
    prefix = "|".join(re.escape(d) for d in REPO_DIRS)
    for m in re.finditer(rf"(?<![\w/.~-])((?:{prefix})/[\w./-]+)", text):
        name = m.group(1).rstrip(".,/").split(":")[0]
        out.append((name, ROOT / name))
    return out


@pytest.mark.parametrize("page", DOC_FILES, ids=lambda p: p.name)
def test_every_file_a_page_names_exists(page: Path):
    missing = sorted({text for text, target in referenced_paths(page) if not target.exists()})
    assert not missing, f"{page.relative_to(ROOT)} names files that do not exist: {missing}"


def test_a_renamed_flag_is_caught():
    # the checker itself can fail: a flag that does not exist, a config field that does not exist, a
    # missing script
    with pytest.raises(AssertionError, match="--benchmark"):
        check_envace(["eval", "MODEL", "--benchmark", "world"])
    with pytest.raises(Exception, match="no_such_field"):
        check_envace(["train", "configs/train/envace.yaml", "no_such_field=1"])
    with pytest.raises(AssertionError, match="does not exist"):
        exercise(DocCommand("x:1", ("./scripts/no_such_script.sh",)))
    with pytest.raises(AssertionError, match="classify"):
        exercise(DocCommand("x:1", ("unknown-program", "--flag")))


def test_a_missing_file_is_caught(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("See [the runbook](gpu.md), `bench/no_such_bench.py` and `configs/train/envace.yaml`.\n")
    missing = [text for text, target in referenced_paths(page) if not target.exists()]
    assert missing == ["gpu.md", "bench/no_such_bench.py"]
