"""The front door says what the code is: the README's first screen is the pitch, the loop sketch, the two
set-up commands (the demo's and the tests', which CI runs) and a map with one line per package of the
repository; it names no timing (docs/performance.md holds them) and no issue numbers. docs/architecture.md's
layer table is the layer order of envace/__init__.py's docstring, layer by layer and name by name."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import envace

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
LAYER_LINE = re.compile(r"^\s*(\d+)\.\s([^:]*):\s*(.+)$")
CONTINUATION = re.compile(r"^\s{6,}[a-z_]")
TABLE_ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*([^|]+?)\s*\|\s*([^|]*)\|\s*$")
MAPPED_FOLDERS = ("flows", "dashboard", "bench", "configs")  # besides every package folder of envace/

Layers = dict[int, tuple[str, list[str]]]


def docstring_layers(doc: str) -> Layers:
    """{number: (title, names)} from the numbered lines of envace/__init__.py's docstring (a long layer wraps
    onto deeper-indented lines)."""
    layers: Layers = {}
    number = None
    for line in doc.splitlines():
        m = LAYER_LINE.match(line)
        if m:
            number = int(m.group(1))
            layers[number] = (m.group(2).strip(), m.group(3).split())
        elif number is not None and CONTINUATION.match(line):
            layers[number][1].extend(line.split())
        else:
            number = None
    return layers


def section(markdown: str, heading: str) -> str:
    """The text under `## heading`, up to the next `## `."""
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", markdown, re.M | re.S)
    assert m, f"no section '## {heading}'"
    return m.group(1)


def table_layers(markdown: str) -> Layers:
    """{number: (title, names)} from the table of docs/architecture.md's "The layer order"."""
    layers: Layers = {}
    for line in section(markdown, "The layer order").splitlines():
        m = TABLE_ROW.match(line)
        if m:
            assert int(m.group(1)) not in layers, f"layer {m.group(1)} has two rows"
            layers[int(m.group(1))] = (m.group(2), re.findall(r"`([^`]+)`", m.group(3)))
    return layers


def layer_differences(code: Layers, doc: Layers) -> list[str]:
    """What the table says differently from the docstring, one line per difference."""
    out = []
    for n in sorted(code.keys() | doc.keys()):
        if n not in doc:
            out.append(f"layer {n} ({code[n][0]}) has no row in the table")
            continue
        if n not in code:
            out.append(f"the table's layer {n} ({doc[n][0]}) is not in envace/__init__.py")
            continue
        (title, names), (doc_title, doc_names) = code[n], doc[n]
        if title != doc_title:
            out.append(f"layer {n} is '{title}' in envace/__init__.py, '{doc_title}' in the table")
        missing, extra = [x for x in names if x not in doc_names], [x for x in doc_names if x not in names]
        if missing:
            out.append(f"layer {n}: the table lacks {missing}")
        if extra:
            out.append(f"layer {n}: the table lists {extra}, which envace/__init__.py does not")
        if not missing and not extra and names != doc_names:
            out.append(f"layer {n}: the table orders the names differently: {doc_names} vs {names}")
    return out


def test_the_layer_table_is_the_layer_order_of_the_code():
    code = docstring_layers(envace.__doc__ or "")
    assert len(code) >= 10, "envace/__init__.py's docstring lists no layers"
    diff = layer_differences(code, table_layers(ARCHITECTURE))
    assert not diff, "docs/architecture.md's layer table differs from envace/__init__.py:\n" + "\n".join(diff)


def test_a_module_missing_from_the_table_is_caught():
    code = docstring_layers(envace.__doc__ or "")
    title, names = code[1]
    row = f"| 1 | {title} | " + " ".join(f"`{x}`" for x in names) + " |"
    dropped = row.replace(f" `{names[-1]}`", "", 1)
    assert layer_differences(code, table_layers(ARCHITECTURE.replace(row, dropped))) == [
        f"layer 1: the table lacks ['{names[-1]}']"]
    renamed = {**code, 4: ("service", code[4][1])}
    assert layer_differences(renamed, table_layers(ARCHITECTURE))[0].startswith("layer 4 is 'service'")
    wrapped = "  1. records: types\n       config\n  2. pure parts: algos\n"  # a wrapped layer
    assert docstring_layers(wrapped) == {1: ("records", ["types", "config"]), 2: ("pure parts", ["algos"])}


def test_the_readme_opens_with_the_set_up_commands_and_the_map():
    headings = re.findall(r"^## (.+)$", README, re.M)
    assert headings[:2] == ["Start", "Map"], headings
    intro = README[:README.index("## Start")]
    assert "Act" in intro and "Rehearse" in intro and "```" in intro  # the pitch and the loop sketch
    block = re.search(r"```bash\n(.*?)```", section(README, "Start"), re.S).group(1)
    commands = [shlex.split(line, comments=True) for line in block.splitlines()]
    assert [c for c in commands if c] == [["./scripts/demo.sh"], ["./scripts/test.sh"]]
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()  # CI runs the README's test command


def package_folders(root: Path = ROOT) -> list[str]:
    """`envace/<name>/` for every folder of envace/ holding .py files, and the other mapped folders."""
    inside = [f"envace/{d.name}/" for d in sorted((root / "envace").iterdir())
              if d.is_dir() and d.name != "__pycache__" and any(d.rglob("*.py"))]
    return ["envace/*.py", *inside, *(f"{d}/" for d in MAPPED_FOLDERS)]


def test_the_map_has_one_line_per_package():
    rows = re.findall(r"^\|\s*`([^`]+)`\s*\|", section(README, "Map"), re.M)
    assert sorted(rows) == sorted(package_folders()), (
        f"README's map: missing {sorted(set(package_folders()) - set(rows))}, "
        f"stale {sorted(set(rows) - set(package_folders()))}; one line per package")
    assert len(rows) == len(set(rows))


def prose(markdown: str) -> str:
    """The text outside fenced code blocks (verbatim output may hold anything)."""
    return re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S)


def test_the_readme_names_no_timings_and_no_issue_numbers():
    text = prose(README)
    timings = re.findall(r"\b\d+(?:[.,]\d+)?(?:-\d+)? ?(?:s|min|minutes?|seconds?|hours?)\b|\bminute\b", text)
    assert not timings, f"README names timings {timings}: they belong in docs/performance.md"
    assert not re.findall(r"(?<![\w&/])#\d+\b|\bissues?\b", text, re.I), "README names issue numbers"


def test_the_checks_see_a_timing_and_a_stale_map():
    assert re.findall(r"\b\d+(?:[.,]\d+)?(?:-\d+)? ?(?:s|min|minutes?|seconds?|hours?)\b",
                      prose("The demo takes 3 min 40 s.\n```text\nTotal 0.3 min.\n```\n")) == ["3 min", "40 s"]
    assert "envace/tts/" in package_folders() and "envace/models/" in package_folders()
