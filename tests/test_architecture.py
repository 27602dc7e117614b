"""The structure the architecture section of the README describes, checked.

* The import graph of braze's modules has no cycles, counting imports inside
  functions (the kind that hide a cycle from the interpreter).
* Layers import only downward: the graph core knows no tracing, tracing no
  compilation, the pipeline no particular target.
"""
from __future__ import annotations

import ast
import functools
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = {"braze": ROOT / "src" / "braze", "braze.kernels": ROOT / "kernels", "braze.targets": ROOT / "targets"}


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for pkg, root in PACKAGES.items():
        for path in root.rglob("*.py"):
            rel = path.relative_to(root).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            mods[".".join([pkg] + parts)] = path
    return mods


def _imports(name: str, path: pathlib.Path, mods: dict) -> set[str]:
    """Modules of braze that ``name`` imports anywhere (top level or in a function)."""
    is_pkg = path.name == "__init__.py"
    deps = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # `from pkg import sub` imports the submodule; `from mod import name` the module
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in mods else module for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in mods:  # `import braze.numpy as bnp` -> braze.numpy
                t = t.rpartition(".")[0]
            if t and t != name:
                deps.add(t)
    return deps


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    mods = _modules()
    return {name: frozenset(_imports(name, path, mods)) for name, path in mods.items()}


def import_graph() -> dict[str, set[str]]:
    return {name: set(deps) for name, deps in _graph().items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_import_graph_has_no_cycles():
    graph = import_graph()
    assert len(graph) > 40 and "braze.pipeline" in graph["braze.api"]
    found = cycles(graph)
    assert not found, "import cycles (function-level imports count): " + "; ".join(" <-> ".join(c) for c in found)


def test_the_cycle_check_can_fail():
    graph = import_graph()
    graph["braze.graph"] = graph["braze.graph"] | {"braze.api"}  # the core importing the API: a cycle
    assert any("braze.graph" in c and "braze.api" in c for c in cycles(graph))


# Each layer may import only layers listed before it (and itself).
LAYERS = [
    ("foundation", ["braze._version", "braze.errors", "braze.log", "braze.aval", "braze.layout", "braze.pytree"]),
    ("graph and op table", ["braze.graph", "braze.core", "braze.ops", "braze.ops.*"]),
    ("tracing and the NumPy surface", ["braze.views", "braze.numpy", "braze.indexing", "braze.ufuncs",
                                       "braze.surface", "braze.intercept", "braze.sideeffects", "braze.tracing"]),
    ("composites and kernels by name", ["braze.registry", "braze.composite"]),
    ("graph to graph", ["braze.passes", "braze.select", "braze.autodiff", "braze.fusion", "braze.reroll"]),
    ("calling convention and pipeline", ["braze.calling", "braze.pipeline"]),
    ("targets", ["braze.targets", "braze.targets.*"]),
    ("compiled functions", ["braze.paired", "braze.distributed", "braze.api"]),
    ("tools", ["braze.verify", "braze.testing", "braze.kernels", "braze.kernels.*", "braze",
               "braze.cli", "braze.__main__", "braze.bench", "braze.workloads", "braze.suite", "braze.suite.*"]),
]


def _layer_of(module: str) -> int:
    for k, (_, members) in enumerate(LAYERS):
        for m in members:
            if module == m or (m.endswith(".*") and module.startswith(m[:-1])):
                return k
    raise AssertionError(f"{module} is in no layer of the architecture: add it to LAYERS (and the README)")


@pytest.mark.parametrize("module", sorted(import_graph()))
def test_layers_import_only_downward(module):
    graph = import_graph()
    mine = _layer_of(module)
    upward = sorted(d for d in graph[module] if _layer_of(d) > mine)
    assert not upward, f"{module} ({LAYERS[mine][0]}) imports {upward} from a higher layer"
