"""The package's structure rules (docs/design.md, "The layers"), read from the source:

- no import loop anywhere in ``trilog/``, imports under ``TYPE_CHECKING`` included;
- the layers' arrows: ``trilog.broker`` imports nothing from ``trilog.client`` and the
  client nothing from the broker; ``net/``, ``storage/``, ``records/`` and ``protocol/``
  import none of the layers above them;
- no function over 80 lines (the documented hot-path decoder aside), no class over 700;
- no two test modules share a file name (pytest imports them by basename: a second one
  stops the collection of the whole suite).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "trilog"

MAX_FUNCTION_LINES = 80
MAX_CLASS_LINES = 700
#: Functions allowed to be longer, and why.
LONG_FUNCTIONS = {
    # The per-record decoder of RecordBatch v2: one loop with its state in locals (a call
    # per field would cost the consumer a third of its speed); its C twin mirrors it.
    ("trilog.records._v2", "_decode_records"),
}
#: Layer -> the layers it must not import (docs/design.md).
FORBIDDEN = {
    "trilog.broker": ("trilog.client", "trilog.sync", "trilog.spark", "trilog.cli"),
    "trilog.client": ("trilog.broker", "trilog.sync", "trilog.spark", "trilog.cli"),
    # the console uses only the public clients, so it works against any Kafka broker
    "trilog.console": ("trilog.broker", "trilog.sync", "trilog.spark", "trilog.cli",
                       "trilog.zk"),
    "trilog.net": ("trilog.broker", "trilog.client", "trilog.storage", "trilog.zk"),
    "trilog.storage": ("trilog.broker", "trilog.client", "trilog.net", "trilog.zk"),
    "trilog.records": ("trilog.broker", "trilog.client", "trilog.net", "trilog.storage"),
    "trilog.protocol": ("trilog.broker", "trilog.client", "trilog.net", "trilog.storage",
                        "trilog.records"),
    "trilog.zk": ("trilog.broker", "trilog.client", "trilog.net", "trilog.storage"),
}


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module of ``trilog`` that ``name`` (a module, or a name in one) lives in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> set[str]:
    """Every trilog module ``module`` imports, wherever the import is (a function body, an
    ``if TYPE_CHECKING:`` block)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name.startswith("trilog"):
                target = _resolve(name)
                if target is not None and target != module:
                    found.add(target)
    return found


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

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
                out.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    return out


def test_no_import_loop_not_even_a_type_only_one():
    assert _cycles() == []


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_each_layer_imports_only_those_below_it(layer):
    bad = sorted((module, target) for module, targets in GRAPH.items() if _within(module, layer)
                 for target in targets
                 if any(_within(target, other) for other in FORBIDDEN[layer]))
    assert bad == []


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _definitions():
    for module, path in sorted(MODULES.items()):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                assert node.end_lineno is not None
                yield module, node, node.end_lineno - node.lineno + 1


def test_no_function_over_80_lines():
    long = [(module, node.name, lines) for module, node, lines in _definitions()
            if not isinstance(node, ast.ClassDef) and lines > MAX_FUNCTION_LINES
            and (module, node.name) not in LONG_FUNCTIONS]
    assert long == []


def test_test_modules_have_unique_names():
    tests = Path(__file__).parent
    seen: dict[str, list[str]] = {}
    for path in tests.rglob("test_*.py"):
        seen.setdefault(path.name, []).append(str(path.relative_to(tests)))
    assert {name: where for name, where in seen.items() if len(where) > 1} == {}


def test_no_class_over_700_lines():
    long = [(module, node.name, lines) for module, node, lines in _definitions()
            if isinstance(node, ast.ClassDef) and lines > MAX_CLASS_LINES]
    assert long == []


def test_the_checks_see_what_they_check():
    """(The walk finds the package, and the graph its imports: a rule over nothing would
    pass for nothing.)"""
    assert len(MODULES) > 100
    assert "trilog.storage" in GRAPH["trilog.broker.replication._replica_manager"]
    assert any(node.name == "_decode_records" for _m, node, _n in _definitions())
