"""The package's layers (attention_ports/__init__.py, docs/contributing.md's Layout): no module
imports a layer above its own, and no modules import each other in a circle.

Read from the source with ``ast``, not by importing: every ``import`` counts, the ones inside
functions too (a lazy import is still a dependency; it only runs later), and so does ``from X
import Y`` of a submodule ``Y``. The reference is the repository's top-level ``reference/``,
installed as ``attention_ports.reference``.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout: the reference is its reference/
PACKAGE = ROOT / "attention_ports"

# Bottom first: a module may import its own layer and the layers before it. The top (the CLI, the
# pytest plugin, the conformance package) is the last; the package's own __init__ sits below all.
LAYERS = (
    "attention_ports",
    "core",
    "reference",
    "spec",
    "truth",
    "fixtures",
    "runtimes",
    "judge",
    "report",
    "tools",
    "tiers",
    "pipeline",
    "top",
)
TOP = {"cli", "pytest_plugin", "conformance"}


def module_files() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its ``__init__.py``)."""
    found = {}
    for base, prefix in ((PACKAGE, "attention_ports"), (ROOT / "reference", "attention_ports.reference")):
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("")
            if "_assets" in rel.parts or (prefix == "attention_ports" and rel.parts[0] == "reference"):
                continue
            parts = [p for p in rel.parts if p != "__init__"]
            found[".".join([prefix, *parts])] = path
    return found


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "attention_ports"
    return "top" if parts[1] in TOP else parts[1]


def imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``module`` imports (anywhere in its file)."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            names = [origin] + [f"{origin}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            # import a.b.c names a.b.c's module (or the deepest package of it we have)
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                out.add(name)
    return out


@functools.cache  # one parse of every module per test process, for the four tests below
def graph() -> dict[str, set[str]]:
    files = module_files()
    known = set(files)
    return {m: imports(m, p, known) for m, p in files.items()}


def test_every_module_is_in_a_known_layer() -> None:
    unknown = sorted(m for m in graph() if layer(m) not in LAYERS)
    assert unknown == [], f"modules outside the layers {LAYERS}: {unknown}"


def test_no_module_imports_a_layer_above_its_own() -> None:
    rank = {name: i for i, name in enumerate(LAYERS)}
    upward = sorted(
        f"{m} ({layer(m)}) imports {d} ({layer(d)})"
        for m, deps in graph().items()
        for d in deps
        if rank[layer(d)] > rank[layer(m)] and layer(m) != "attention_ports"
    )
    assert upward == [], "\n".join(upward)


def test_the_package_root_imports_nothing_of_its_own() -> None:
    # attention_ports/__init__.py runs before every subpackage: it must import none of them.
    assert graph()["attention_ports"] == set()


def test_no_circular_imports() -> None:
    g = graph()
    # A module's package __init__ runs before it; a package importing its own submodules is the
    # usual re-export (report/__init__.py), so an edge into one's own package is not a cycle.
    edges = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in g.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert cycles == [], f"modules that import each other in a circle: {cycles}"


def test_the_layer_list_is_the_packages_docstring_order() -> None:
    import attention_ports

    doc = " ".join((attention_ports.__doc__ or "").split())
    named = [name for name in LAYERS[1:-1] if f"``{name}``" in doc]
    assert named == list(LAYERS[1:-1])
    assert [doc.index(f"``{name}``") for name in named] == sorted(doc.index(f"``{name}``") for name in named)
