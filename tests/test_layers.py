"""The dependency rule (docs/architecture.md, "Layers"): a module imports only from its own layer
or the layers below it, and no import circle exists, counting imports inside functions
(a lazy import that hides a circle is still one). Read from the source with `ast`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "opc"

# Lowest first. A module belongs to the first layer one of whose prefixes it matches.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundations", ("opc.errors", "opc.symbolic", "opc.dtypes", "opc.interop.arrays", "opc.threads", "opc.profiler")),
    ("dialects", ("opc.dialects",)),
    ("ir", ("opc.ir",)),
    ("ops", ("opc.ops",)),
    ("targets", ("opc.targets",)),
    ("autodiff", ("opc.autodiff",)),
    ("frontends", ("opc.onnx_import",)),
    ("transforms", ("opc.transforms",)),
    ("lowering", ("opc.lowering",)),
    ("reading", ("opc.frontend", "opc.compile_cache")),
    ("api", ("opc.api", "opc.sanitize", "opc.universe")),
    ("tools", ("opc.explain", "opc.check", "opc.check_inputs", "opc.interop", "opc.onnx_load", "opc.onnx_backend")),
    ("cli", ("opc.cli", "opc.__main__", "opc")),
]

# The documented exceptions: (importer, imported).
ALLOWED_UPWARD = {
    # The pass registry names every pass, the lowering pass among them (lazily, as xDSL's does).
    ("opc.transforms", "opc.lowering.opc_lower_to_loops"),
}


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every opc module `name` imports, at module level or inside functions."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            candidates = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for c in candidates:
            while c and c not in known:
                c = c.rpartition(".")[0]
            if c and c != name:
                found.add(c)
                break
    return found


def layer_of(name: str) -> int:
    for i, (_, prefixes) in enumerate(LAYERS):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return i
    raise AssertionError(f"{name} is in no layer of tests/test_layers.py: add it to LAYERS")


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports_of(name, path, set(mods)) for name, path in mods.items()}


GRAPH = import_graph()


@pytest.mark.parametrize("name", sorted(GRAPH))
def test_imports_only_go_down(name: str) -> None:
    upward = [f"{name} ({LAYERS[layer_of(name)][0]}) imports {dep} ({LAYERS[layer_of(dep)][0]})"
              for dep in sorted(GRAPH[name])
              if layer_of(dep) > layer_of(name) and (name, dep) not in ALLOWED_UPWARD]
    assert not upward, "\n".join(upward)


def test_no_import_circle() -> None:
    """Tarjan's strongly connected components over the whole graph, upward exceptions included."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
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
                circles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_the_checker_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """The reader itself: an import inside a function and a relative one both count."""
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from opc.api import compile\nfrom . import ir\n")
    assert imports_of("opc.x", src, {"opc.api", "opc.ir", "opc"}) == {"opc.api", "opc.ir"}


def test_every_module_has_a_layer() -> None:
    for name in GRAPH:
        layer_of(name)


# Names that only alias a module the table names (`import opc.torch` is opc/interop/torch.py)
ALIASES = ("torch", "jax", "paddle")


def test_docs_layer_table_matches_the_folders() -> None:
    """The "Layers" table of docs/architecture.md has a row per layer of LAYERS, in order, and names
    every module file and folder of the package."""
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = page[page.index("## Layers"):]
    section = section[:section.index("\n## ", 1)]
    rows = [line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[1:] == [name for name, _ in LAYERS], rows
    for path in sorted(PACKAGE.iterdir()):
        if path.suffix == ".py" and path.stem not in ("__init__", "__main__", *ALIASES):
            assert path.name in section, f"docs/architecture.md's layer table does not name opc/{path.name}"
        elif path.is_dir() and (path / "__init__.py").exists() or path.is_dir() and any(path.glob("*.py")):
            assert f"opc/{path.name}/" in section, f"docs/architecture.md's layer table does not name opc/{path.name}/"
