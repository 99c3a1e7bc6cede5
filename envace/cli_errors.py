"""One-line CLI errors: every failure of an `envace` command is printed as

    error: <what> (<file/field>): <fix as a CLI command or option>

and the command exits with status 2; `envace --debug ...` (or ENVACE_DEBUG=1) re-raises instead, so the
full traceback is shown. `classify` maps the library's exceptions (config, model dir, data, database,
file system, usage errors, a missing optional package) to the three parts; anything unforeseen still gets
one line that says how to see the traceback. Passwords in URLs are masked in every line.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from pathlib import Path

EXIT_CODE = 2
MAX_PART = 400
_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)[^@\s]+@")
DB_FIX = ("start the database or fix the URL, or pass tracking.store_url=sqlite:///runs/store.db "
          "(envace dashboard: --store PATH)")


@dataclass(frozen=True)
class CliError:
    what: str
    where: str
    fix: str

    def line(self) -> str:
        return f"error: {_one_line(self.what)} ({_one_line(self.where)}): {_one_line(self.fix)}"


class UserError(Exception):
    """Raised by CLI commands for a bad argument that the library would only notice later."""

    def __init__(self, what: str, where: str, fix: str) -> None:
        super().__init__(f"{what} ({where}): {fix}")
        self.error = CliError(what, where, fix)


def click_classes(name: str) -> tuple[type, ...]:
    """click's exception class `name`, from typer's vendored click and from click itself (typer >= 0.29
    raises its own copies)."""
    out = []
    for module in ("typer._click.exceptions", "typer.exceptions", "click.exceptions"):
        try:
            cls = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if isinstance(cls, type) and cls not in out:
            out.append(cls)
    return tuple(out)


def mask_urls(text: str) -> str:
    """`scheme://user:secret@host` -> `scheme://user:***@host` (and secret query values, envace.secrets)."""
    from envace.secrets import mask_text

    return mask_text(_URL_PASSWORD.sub(r"\1***@", text))


def _one_line(text: str) -> str:
    flat = " ".join(mask_urls(str(text)).split())
    return flat if len(flat) <= MAX_PART else flat[:MAX_PART - 3] + "..."


def _split_fix(message: str) -> tuple[str, str | None]:
    """Library messages read '<what>; <fix>': split at the last '; ' of the first line."""
    first = message.strip().splitlines()[0] if message.strip() else message
    if "; " in first:
        what, fix = first.rsplit("; ", 1)
        return what, fix
    return first, None


def _database(exc: BaseException, command: str) -> CliError:
    orig = getattr(exc, "orig", None)
    detail = (str(orig if orig is not None else exc).strip().splitlines() or [""])[0]
    where = ("--store" if command.endswith("dashboard") else "STORE argument" if command.startswith("envace store")
             else "tracking.store_url")
    return CliError(f"cannot use the database: {type(orig or exc).__name__}: {detail}", where, DB_FIX)


def classify(exc: BaseException, command: str = "envace") -> CliError:
    """The one-line error for `exc`, raised while running `command` (e.g. 'envace train')."""
    from envace.config import ConfigError
    from envace.data.errors import DataError
    from envace.extras import MissingExtra
    from envace.models.model_dir import ModelDirError

    help_fix = f"see `{command} --help`"
    if isinstance(exc, UserError):
        return exc.error
    if isinstance(exc, MissingExtra):  # an optional package: what is missing, what needs it, what to install
        return CliError(exc.what, command, exc.fix)
    if isinstance(exc, click_classes("ClickException")):
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else command
        param = getattr(exc, "param", None)
        if param is not None and getattr(param, "opts", None):
            where += f" {'/'.join(param.opts)}"
        return CliError(exc.format_message(), where, f"see `{ctx.command_path if ctx else command} --help`")
    if isinstance(exc, ConfigError):
        what = getattr(exc, "what", None)
        fix = getattr(exc, "fix", None)
        if what is None:
            what, fix = _split_fix(str(exc))
        return CliError(what, getattr(exc, "field", None) or "config", f"{fix or 'fix the config'}; {help_fix}")
    if isinstance(exc, ModelDirError):
        return CliError(exc.what, exc.path, exc.fix)
    if isinstance(exc, DataError):
        p = exc.problems[0]
        where = p.file + (f": row {p.row}" if p.row is not None else "") + f", field '{p.field}'"
        more = f" (and {len(exc.problems) - 1} more problem(s))" if len(exc.problems) > 1 else ""
        return CliError(f"bad data: {p.what}{more}", where,
                        f"{p.fix}, then rerun; or pass data.path=<a valid file> (data.source=world needs none)")
    if _is_database_error(exc):
        return _database(exc, command)
    if isinstance(exc, RecursionError):
        return CliError("input nested too deeply to read", command, "flatten the input file")
    if isinstance(exc, OSError) and (exc.filename or isinstance(exc, (FileNotFoundError, PermissionError))):
        what, fix = _split_fix(str(exc) if not exc.filename else (exc.strerror or str(exc)))
        where = str(exc.filename) if exc.filename else command
        default = ("pass an existing path" if isinstance(exc, FileNotFoundError)
                   else "check the path's permissions" if isinstance(exc, PermissionError) else help_fix)
        return CliError(what, where, fix or default)
    if isinstance(exc, (ValueError, KeyError, NotImplementedError)):
        text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        what, fix = _split_fix(str(text))
        return CliError(what, command, fix or help_fix)
    return CliError(f"unexpected {type(exc).__name__}: {exc}", command,
                    f"rerun with `envace --debug {command.removeprefix('envace ').strip()} ...` for the traceback")


def _is_database_error(exc: BaseException) -> bool:
    mod = type(exc).__module__ or ""
    return mod.startswith(("sqlalchemy", "psycopg", "sqlite3")) or type(exc).__name__ == "NoSuchModuleError"


def report(exc: BaseException, command: str) -> str:
    """Print the one-line error to stderr and return it."""
    import sys

    line = classify(exc, command).line()
    print(line, file=sys.stderr, flush=True)
    return line


def existing_path(path: Path, option: str, fix: str) -> Path:
    """`path` when it exists, else a UserError naming the option."""
    if not Path(path).exists():
        raise UserError(f"{path} does not exist", option, fix)
    return path
