"""The install tiers of envace and the guarded use of their optional packages.

The core install (`pip install envace`) runs the embedded trainer, evaluation, `envace serve`, the model and
data commands, the store on SQLite and MLflow tracking. Each extra of pyproject.toml adds one tier (`EXTRAS`:
the top-level modules it brings); `all` is every tier. Code that needs an optional package imports it
through `require` (or, when it only starts a program of that package, checks it with `check`), so a
missing package is one line that names the package, what needed it and the extra to install:

    prefect is not installed: `envace sweep run` needs the flows extra: pip install 'envace[flows]'

The CLI prints it as its usual `error: <what> (<command>): <fix>` line (envace/cli_errors.py). The verl
backend uses the same error through envace/trainers/verl/deps.py, whose hints also cover pieces that come
from elsewhere than an extra (vLLM on a GPU cluster).
"""

from __future__ import annotations

import importlib
import importlib.util
from importlib.machinery import ModuleSpec
from types import ModuleType

# extra -> the top-level modules it brings (pyproject.toml's [project.optional-dependencies] installs them)
EXTRAS: dict[str, tuple[str, ...]] = {
    "cluster": ("verl", "ray"),
    "flows": ("prefect", "prefect_ray", "dvc", "plotly"),  # plotly: a sweep's HTML plots
    "dashboard": ("streamlit", "plotly"),
    "postgres": ("psycopg",),
}


def install_command(extra: str) -> str:
    """The pip command that installs `extra` (from a checkout: `pip install -e '.[<extra>]'`)."""
    return f"pip install 'envace[{extra}]'"


class MissingExtra(ImportError):
    """An optional package is not installed (or does not import); the message names it, what needed it and
    what to install. `what` and `fix` are the two halves the CLI prints."""

    def __init__(self, what: str, purpose: str, install: str, extra: str | None = None) -> None:
        self.what = f"{what}: {purpose} needs " + (f"the {extra} extra" if extra else "it")
        self.fix = install
        self.extra = extra
        super().__init__(f"{self.what}: {install}")


def missing(module: str, exc: ImportError, purpose: str, extra: str | None, install: str) -> MissingExtra:
    """The MissingExtra for `exc`, raised while importing `module`: "<package> is not installed" when a
    module is absent (naming the requested module when the absent one is a dependency of it), else the
    import error itself (an installed version that does not fit)."""
    absent = exc.name if isinstance(exc, ModuleNotFoundError) and exc.name else None
    if absent is None:
        what = f"{module} could not be imported ({' '.join(str(exc).split())})"
    elif absent.split(".")[0] == module.split(".")[0]:
        what = f"{absent} is not installed"
    else:
        what = f"{absent.split('.')[0]} is not installed ({module} imports it)"
    return MissingExtra(what, purpose, install, extra)


def require(module: str, extra: str, purpose: str, install: str | None = None) -> ModuleType:
    """Import `module` (e.g. "plotly.graph_objects") or raise MissingExtra naming `extra` and `purpose` (what
    needs it, as the subject of "... needs the <extra> extra", e.g. "`envace sweep run`")."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing(module, exc, purpose, extra, install or install_command(extra)) from exc


def spec(module: str) -> ModuleSpec | None:
    """`module`'s import spec without importing it; None when it is not installed (or an import hook
    refuses it)."""
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None


def check(module: str, extra: str, purpose: str, install: str | None = None) -> None:
    """Raise MissingExtra unless `module` is installed, without importing it (for a package whose program
    runs in another process, or whose import is slow and only needed later)."""
    if spec(module) is None:
        raise MissingExtra(f"{module} is not installed", purpose, install or install_command(extra), extra)
