"""Load the real Lambda handlers from ``functions/<name>/handler.py`` and invoke them the
way the Lambda runtime does (an event and a context object)."""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

#: The repository root (this file is shared/timekeeper/local/lambdas.py).
REPO_ROOT = Path(__file__).resolve().parents[3]
FUNCTIONS_DIR = REPO_ROOT / "functions"


@dataclass
class LambdaContext:
    """The attributes of the Lambda context object that Powertools reads."""

    function_name: str
    memory_limit_in_mb: int = 512
    function_version: str = "$LATEST"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    remaining_ms: int = 60_000

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:000000000000:function:{self.function_name}"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@cache
def load_handler(function: str) -> Callable[[dict[str, Any], Any], Any]:
    """Import ``functions/<function>/handler.py`` and return its ``lambda_handler``.

    Raises ``FileNotFoundError`` when the function folder has no handler.
    """
    path = FUNCTIONS_DIR / function / "handler.py"
    if not path.is_file():
        raise FileNotFoundError(path)
    spec = importlib.util.spec_from_file_location(f"timekeeper_functions.{function}", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module.lambda_handler


def invoke(function: str, event: dict[str, Any], *, timeout_s: int = 60) -> Any:
    """Invoke a function's handler with ``event`` and a fresh context; return its result."""
    handler = load_handler(function)
    return handler(event, LambdaContext(function_name=f"timekeeper-{function}", remaining_ms=timeout_s * 1000))
