"""Every import in envace/, flows/ and dashboard/ respects the layer order written in envace/__init__.py,
no modules import each other in a cycle (lazy imports inside functions count: they hide a cycle,
they do not remove it), and the dashboard reads results without reaching into the code that makes them
(`FORBIDDEN`). flows/ and dashboard/ install as `envace_flows` and `envace_dashboard` (pyproject.toml's
package-dir): the folder names in the layer order stand for those packages."""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

import envace

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("envace", "flows", "dashboard")
# folder -> the name it installs as
INSTALL_NAMES = {"envace": "envace", **{folder: name for name, folder in tomllib.loads(
    (ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].items()}}
PACKAGES = tuple(INSTALL_NAMES[f] for f in FOLDERS)
# (importing package, imported package): a reach that the layer order allows but the design does not. The
# dashboard shows what runs wrote to the store and MLflow; the benchmark code that produced it stays out.
FORBIDDEN = {("envace_dashboard", "envace.benchmarks")}
LAYER_LINE = re.compile(r"^\s*(\d+)\.\s[^:]*:\s*(.+)$")
CONTINUATION = re.compile(r"^\s{6,}[a-z_]")


@dataclass(frozen=True)
class Violation:
    module: str
    line: int
    imported: str
    module_layer: int
    imported_layer: int

    def __str__(self) -> str:
        return (f"{self.module}:{self.line} imports {self.imported} (layer {self.imported_layer}) from layer "
                f"{self.module_layer}: move the shared code down, or import it where it is used")


def layer_order(doc: str, root: Path = ROOT) -> dict[str, int]:
    """{unit: layer number} from the numbered lines of envace/__init__.py's docstring. A unit is a module
    or package: `types` is envace.types when envace/types.py (or envace/types/) exists, else a top-level
    folder (flows, dashboard), which stands for the package it installs as."""
    layers: dict[str, int] = {"envace": 0}  # the package face imports nothing
    number = None
    for line in doc.splitlines():
        m = LAYER_LINE.match(line)
        if m:
            number, names = int(m.group(1)), m.group(2)
        elif number is not None and CONTINUATION.match(line):
            names = line  # a long layer wraps onto deeper-indented lines
        else:
            number = None
            continue
        for name in names.split():
            if (root / "envace" / f"{name}.py").exists() or (root / "envace" / name).is_dir():
                unit = f"envace.{name}"
            elif (root / f"{name}.py").exists() or (root / name).is_dir():
                unit = INSTALL_NAMES.get(name, name)
            else:
                raise AssertionError(f"layer name {name!r} in envace/__init__.py's docstring matches no module")
            assert unit not in layers, f"{unit} is listed twice in envace/__init__.py's layer order"
            layers[unit] = number
    assert len(layers) > 1, "envace/__init__.py's docstring lists no layers"
    return layers


def layer_of(module: str, layers: dict[str, int]) -> int | None:
    """The layer of the longest listed unit that `module` is or lies inside (the bare `envace` package
    face is a unit of its own: a new envace.x is in no layer until it is listed)."""
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        unit = ".".join(parts[:i])
        if unit in layers and (unit != "envace" or module == "envace"):
            return layers[unit]
    return None


def imported_modules(module: str, source: str, is_package: bool = False) -> list[tuple[str, int]]:
    """(imported module, line) for every import statement in `source`, at any depth (function-level and
    TYPE_CHECKING imports included); `from a import b` yields a.b as well as a, since b may be a module."""
    out: list[tuple[str, int]] = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out.append((base, node.lineno))
            out += [(f"{base}.{a.name}", node.lineno) for a in node.names if a.name != "*"]
    return [(name, line) for name, line in out if name.split(".")[0] in PACKAGES]


def upward_imports(module: str, source: str, layers: dict[str, int], is_package: bool = False) -> list[Violation]:
    """The imports in `source` (the text of `module`) that reach a higher layer than the module's own."""
    own = layer_of(module, layers)
    assert own is not None, f"{module} is in no layer: add it to the layer order in envace/__init__.py's docstring"
    found: dict[int, Violation] = {}  # one per import statement: `from a import b` names a (and maybe a.b)
    for name, line in imported_modules(module, source, is_package):
        theirs = layer_of(name, layers)
        if theirs is not None and theirs > own and line not in found:
            found[line] = Violation(module, line, name, own, theirs)
    return list(found.values())


def forbidden_imports(module: str, source: str, is_package: bool = False) -> list[tuple[str, int]]:
    """(imported module, line), one per import statement, of the imports in `source` that `FORBIDDEN` rules
    out for `module`."""
    def inside(name: str, unit: str) -> bool:
        return name == unit or name.startswith(unit + ".")

    found: dict[int, str] = {}
    for name, line in imported_modules(module, source, is_package):
        if line not in found and any(inside(module, a) and inside(name, b) for a, b in FORBIDDEN):
            found[line] = name
    return [(name, line) for line, name in found.items()]


def project_modules(root: Path = ROOT) -> dict[str, tuple[str, bool]]:
    """{module name: (source, is_package)} for every .py file of envace/, flows/ and dashboard/, named as
    installed (flows/sweep.py is envace_flows.sweep)."""
    mods = {}
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            parts[0] = INSTALL_NAMES[folder]
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            mods[name] = (path.read_text(encoding="utf-8"), is_package)
    return mods


def import_cycles(mods: dict[str, tuple[str, bool]]) -> list[list[str]]:
    """Groups of project modules that import each other in a loop (strongly connected components > 1)."""
    graph = {m: sorted({n for n, _ in imported_modules(m, src, pkg) if n in mods and n != m})
             for m, (src, pkg) in mods.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for m in graph:
        if m not in index:
            visit(m)
    return cycles


LAYERS = layer_order(envace.__doc__ or "")


def test_no_module_imports_a_higher_layer():
    bad = [v for name, (src, pkg) in project_modules().items() if layer_of(name, LAYERS) is not None
           for v in upward_imports(name, src, LAYERS, pkg)]  # a module in no layer: the last test says so
    assert not bad, "upward imports:\n" + "\n".join(map(str, bad))


def test_no_import_cycles():
    cycles = import_cycles(project_modules())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_an_upward_import_is_caught():
    # A synthetic module in layer 1 (records) that reaches up to the trainers (layer 7).
    src = "from envace.types import Role\n\n\ndef f():\n    from envace.trainers.config import TrainConfig\n"
    (v,) = upward_imports("envace.types", src, LAYERS)
    assert (v.line, v.imported, v.module_layer, v.imported_layer) == (5, "envace.trainers.config", 1, 7)
    assert upward_imports("envace.trainers.config", src, LAYERS) == []  # downward and sideways are fine


def test_a_relative_upward_import_is_caught():
    (v,) = upward_imports("envace.algos.kl", "from ..cli import main\n", LAYERS)
    assert (v.imported, v.module_layer, v.imported_layer) == ("envace.cli", 2, 11)
    (v,) = upward_imports("envace.algos.kl", "from envace import cli\n", LAYERS)
    assert (v.imported, v.imported_layer) == ("envace.cli", 11)


def test_a_cycle_is_caught():
    mods = {"envace.a": ("import envace.b\n", False), "envace.b": ("def f():\n    from envace import a\n", False),
            "envace.c": ("import envace.a\n", False)}
    assert import_cycles(mods) == [["envace.a", "envace.b"]]


def test_a_module_in_no_layer_is_reported():
    assert layer_of("envace.brand_new", LAYERS) is None and layer_of("envace", LAYERS) == 0
    with pytest.raises(AssertionError, match="envace.brand_new is in no layer"):
        upward_imports("envace.brand_new", "import envace.types\n", LAYERS)


def test_every_module_has_a_layer():
    missing = [m for m in project_modules() if layer_of(m, LAYERS) is None]
    assert not missing, f"modules in no layer (add them to envace/__init__.py's docstring): {missing}"


def test_no_forbidden_reach():
    bad = [f"{m}:{line} imports {name}" for m, (src, pkg) in project_modules().items()
           for name, line in forbidden_imports(m, src, pkg)]
    assert not bad, ("the dashboard reads what runs wrote (the store, MLflow artifacts); it may not import the "
                     "benchmark code:\n" + "\n".join(bad))


def test_a_forbidden_reach_is_caught():
    src = "from envace.store import query\n\n\ndef f():\n    from envace.benchmarks.report import MAIN\n"
    assert forbidden_imports("envace_dashboard.views.benchmarks", src) == [("envace.benchmarks.report", 5)]
    assert forbidden_imports("envace_dashboard", "import envace.benchmarks\n", True) == [("envace.benchmarks", 1)]
    assert forbidden_imports("envace.evaluation.run", src) == []  # the rule is the dashboard's only


def test_the_apps_are_layered_under_their_install_names():
    mods = project_modules()
    assert "envace_flows.sweep" in mods and "envace_dashboard.views.benchmarks" in mods
    assert not any(m.split(".")[0] in ("flows", "dashboard") for m in mods)
    assert LAYERS["envace_flows"] == LAYERS["envace_dashboard"] > LAYERS["envace.sweeps"]
    (v,) = upward_imports("envace.sweeps.cells", "from envace_flows.common import cell_processes\n", LAYERS)
    assert v.imported_layer == LAYERS["envace_flows"]
