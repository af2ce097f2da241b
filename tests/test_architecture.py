"""The package layering of docs/architecture.md, read from the code: every `import` of src/oomkit
(deferred and TYPE_CHECKING ones included, since those are how cycles hide) is parsed with `ast`,
folded to the top-level package it names, and checked against the stage order. A new package must
be placed in a layer here (and in docs/architecture.md) before it can import anything."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "oomkit"

# Below every stage: any package may import these; they import only each other.
SHARED = frozenset(
    {
        "units",
        "fsio",
        "errors",
        "rundir",
        "runs",
        "redact",
        "yamlio",
        "imports",
        "serial",
        "client",
        "metrics",
        "workload",
        "testbed",
        "scaleout",  # the client pool `bench --clients` streams through (docs: shared below the stages)
    }
)
# The stages in pipeline order; a package may import its own layer and the layers before it.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"triage", "logs", "env"}),  # evidence
    frozenset({"plan"}),
    frozenset({"launch"}),
    frozenset({"loadrun", "bench", "ladder", "compare", "forecast"}),  # load, forecast beside it
    frozenset({"decide"}),
    frozenset({"report"}),
    frozenset({"investigate", "commands", "cli", "__main__"}),  # runs the stages; the CLI
)
# In the load layer the stages share only `loadrun`: none imports a sibling's internals, and
# loadrun imports none of them.
LOAD_BASE = "loadrun"
LOAD_STAGES = frozenset({"bench", "ladder", "compare", "forecast"})
# (importing package, imported package): an import the order forbids that is kept on purpose,
# each with the reason. None today.
KNOWN_EXCEPTIONS: Mapping[tuple[str, str], str] = {}


def modules(src: Path) -> Iterator[tuple[str, bool, Path]]:
    """(dotted module name, is a package __init__, file) for every .py file under `src`."""
    for path in sorted(src.rglob("*.py")):
        parts = [src.name, *path.relative_to(src).with_suffix("").parts]
        is_init = parts[-1] == "__init__"
        yield ".".join(parts[:-1] if is_init else parts), is_init, path


def imported(module: str, is_init: bool, tree: ast.AST) -> Iterator[str]:
    """Every dotted name the module imports, relative imports made absolute; for `from X import
    Y` both X and X.Y (Y may be a submodule)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_init else module.split(".")[:-1]
                here = here[: len(here) - node.level + 1]
                base = ".".join(here + ([node.module] if node.module else []))
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def package_edges(src: Path) -> dict[str, dict[str, str]]:
    """{importing top-level package: {imported top-level package: the first module that does}}."""
    root = src.name
    tops = {p.name for p in src.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    tops |= {p.stem for p in src.glob("*.py") if p.stem != "__init__"}
    edges: dict[str, dict[str, str]] = {}
    for module, is_init, path in modules(src):
        parts = module.split(".")
        if len(parts) < 2:
            continue  # the root package's own __init__
        for name in imported(module, is_init, ast.parse(path.read_text(encoding="utf-8"))):
            target = name.split(".")
            if target[0] != root or len(target) < 2 or target[1] not in tops or target[1] == parts[1]:
                continue
            edges.setdefault(parts[1], {}).setdefault(target[1], module)
    return edges


def cycles(edges: Mapping[str, Mapping[str, str]]) -> list[list[str]]:
    """The strongly connected components with more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def layer_of(package: str) -> int | None:
    """-1 for a shared helper, the stage's index, None for a package placed nowhere."""
    if package in SHARED:
        return -1
    return next((i for i, layer in enumerate(LAYERS) if package in layer), None)


def violations(edges: Mapping[str, Mapping[str, str]]) -> list[str]:
    out = []
    for source, targets in sorted(edges.items()):
        for target, where in sorted(targets.items()):
            if (source, target) in KNOWN_EXCEPTIONS:
                continue
            why = _forbidden(source, target)
            if why:
                out.append(f"{where} imports oomkit.{target}: {why}")
    return out


def _forbidden(source: str, target: str) -> str | None:
    mine, theirs = layer_of(source), layer_of(target)
    if mine is None or theirs is None:
        unplaced = source if mine is None else target
        return f"{unplaced} is in no layer (place it in tests/test_architecture.py and docs/architecture.md)"
    if mine == -1 and theirs != -1:
        return "a shared helper imports a stage"
    if theirs > mine:
        return "a stage imports a later stage"
    if source in LOAD_STAGES and target in LOAD_STAGES:
        return f"load stages share only oomkit.{LOAD_BASE}, not each other's internals"
    if source == LOAD_BASE and target in LOAD_STAGES:
        return f"oomkit.{LOAD_BASE} is below the load stages"
    return None


def test_no_package_cycle() -> None:
    assert cycles(package_edges(SRC)) == []


def test_every_import_follows_the_layer_order() -> None:
    assert violations(package_edges(SRC)) == []


def test_every_package_is_placed_in_a_layer() -> None:
    tops = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    tops |= {p.stem for p in SRC.glob("*.py") if p.stem != "__init__"}
    assert sorted(p for p in tops if layer_of(p) is None) == []


def test_the_known_exceptions_are_still_needed() -> None:
    edges = package_edges(SRC)
    assert [pair for pair in KNOWN_EXCEPTIONS if pair[1] not in edges.get(pair[0], {})] == []


def test_the_docs_name_every_package() -> None:
    text = (SRC.parent.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    packages = [p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    assert sorted(p for p in packages if f"`oomkit.{p}`" not in text) == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    src = tmp_path / "oomkit"
    for name, body in {"__init__.py": "", **files}.items():
        path = src / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
    return src


def test_the_checker_sees_a_deferred_cycle_and_a_sibling_import(tmp_path: Path) -> None:
    src = _tree(
        tmp_path,
        {
            "bench/__init__.py": "",
            "bench/render.py": "from oomkit.ladder.render import table\n",
            "ladder/__init__.py": "",
            "ladder/render.py": "def f():\n    from ..bench import render\n",
            "loadrun/__init__.py": "from oomkit.errors import E\n",
            "errors.py": "from oomkit import report\n",
            "report/__init__.py": "",
        },
    )
    edges = package_edges(src)
    assert cycles(edges) == [["bench", "ladder"]]
    assert violations(edges) == [
        "oomkit.bench.render imports oomkit.ladder: load stages share only oomkit.loadrun, not each other's internals",
        "oomkit.errors imports oomkit.report: a shared helper imports a stage",
        "oomkit.ladder.render imports oomkit.bench: load stages share only oomkit.loadrun, not each other's internals",
    ]
