"""The repository's shape holds: no product module over 700 lines, no function over 150,
no import cycle in the package (imports inside functions count; imports only for type
checking do not), and the edge names no owner."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = [ROOT / "shared" / "timekeeper", ROOT / "functions", ROOT / "infra", ROOT / "app.py"]
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 150


def _product_files() -> list[Path]:
    files: list[Path] = []
    for root in PRODUCT:
        files += [root] if root.is_file() else sorted(root.rglob("*.py"))
    assert len(files) > 100, "the product's files were not found"
    return files


def test_no_product_module_is_over_700_lines() -> None:
    over = {str(f.relative_to(ROOT)): n for f in _product_files()
            if (n := f.read_text(encoding="utf-8").count("\n")) > MAX_MODULE_LINES}
    assert over == {}


def test_no_product_function_is_over_150_lines() -> None:
    over: dict[str, int] = {}
    for f in _product_files():
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    over[f"{f.relative_to(ROOT)}:{node.name}"] = length
    assert over == {}


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            targets = edges.get(node, [])
            if i < len(targets):
                work.append((node, i + 1))
                target = targets[i]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def test_the_package_has_no_import_cycle() -> None:
    graph = grimp.build_graph("timekeeper", exclude_type_checking_imports=True)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for name in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(name)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.x")
    graph.add_import(importer="a.z", imported="a.x")
    assert _cycles(graph) == [["a.x", "a.y"]]


@pytest.mark.parametrize("path", sorted((ROOT / "shared" / "timekeeper" / "edge").glob("*.py")), ids=lambda p: p.name)
def test_the_edge_names_no_owner_or_pipeline(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert re.findall(r"""["'](?:accounting|queries|posting\.[a-z_]+)["']""", text) == []
