"""The tracer never records a handler's response or a traced method's return value.

Powertools' Tracer puts a decorated function's return value in the X-Ray segment's
metadata by default (``capture_response``). The API's and the download function's
responses carry recipients' addresses (delivery rows, suppression lists), and the other
handlers' summaries may name people; traces are kept and read outside the product's
retention and access rules, so every ``capture_lambda_handler`` and ``capture_method`` in
``functions/`` and ``shared/`` must say ``capture_response=False``. The check walks the
source, so a new handler that forgets it fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DECORATORS = {"capture_lambda_handler", "capture_method"}


def _tracer_uses() -> list[tuple[str, int, ast.expr]]:
    uses = []
    for base in ("functions", "shared"):
        for path in sorted((ROOT / base).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for decorator in node.decorator_list:
                    target = decorator.func if isinstance(decorator, ast.Call) else decorator
                    if isinstance(target, ast.Attribute) and target.attr in DECORATORS:
                        uses.append((f"{path.relative_to(ROOT)}:{decorator.lineno}", decorator.lineno, decorator))
    return uses


def _captures_response(decorator: ast.expr) -> bool:
    if not isinstance(decorator, ast.Call):
        return True
    for keyword in decorator.keywords:
        if keyword.arg == "capture_response":
            return not (isinstance(keyword.value, ast.Constant) and keyword.value.value is False)
    return True


def test_every_traced_function_is_found():
    uses = _tracer_uses()
    handlers = {Path(where.split(":")[0]).parent.name for where, _, _ in uses if where.startswith("functions/")}
    assert {"api", "downloads", "message_events_consumer", "queries_consumer"} <= handlers


def test_no_traced_function_captures_its_response():
    capturing = [where for where, _, decorator in _tracer_uses() if _captures_response(decorator)]
    assert capturing == []
