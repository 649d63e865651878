"""The pinned requirements: requirements.txt is what the main job (``simulate``, ``serve``)
needs, the runtime and the local stack; requirements-dev.txt adds CDK synthesis, the test
libraries and the linters on top of it (.ci/run installs that one)."""

from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
MAIN = ROOT / "requirements.txt"
DEV = ROOT / "requirements-dev.txt"

# Needed only to synthesize the stacks, run the tests or lint: never by the main job.
DEV_ONLY = {"aws-cdk-lib", "cdk-nag", "cfn-lint", "constructs", "hypothesis", "schemathesis", "pytest",
            "pytest-xdist", "ruff", "import-linter", "jsonschema", "openapi-spec-validator", "pypdf",
            "cronsim", "requests"}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lines(path: Path) -> list[str]:
    return [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()
            if line.split("#", 1)[0].strip()]


def _requirements(path: Path) -> list[Requirement]:
    return [Requirement(line) for line in _lines(path) if not line.startswith("-")]


def test_the_main_requirements_hold_no_test_or_infrastructure_package():
    names = {_canonical(req.name) for req in _requirements(MAIN)}
    assert names & DEV_ONLY == set()


def test_the_dev_requirements_include_the_main_ones_and_pin_the_rest():
    lines = _lines(DEV)
    assert "-r requirements.txt" in lines
    dev = _requirements(DEV)
    assert {_canonical(req.name) for req in dev} >= DEV_ONLY
    for req in _requirements(MAIN) + dev:
        assert str(req.specifier).startswith("=="), f"{req} is not pinned"


def _closure(requirements: list[Requirement]) -> set[str]:
    """Installed distributions that ``requirements`` pull in (extras and markers honoured)."""
    seen: set[str] = set()
    todo = [(req, frozenset(req.extras)) for req in requirements]
    while todo:
        req, extras = todo.pop()
        name = _canonical(req.name)
        if name in seen:
            continue
        seen.add(name)
        for text in metadata.distribution(req.name).requires or []:
            dep = Requirement(text)
            envs = [{"extra": extra} for extra in extras] or [{"extra": ""}]
            if dep.marker is None or any(dep.marker.evaluate(env) for env in envs):
                todo.append((dep, frozenset(dep.extras)))
    return seen


def _third_party_imports(*folders: Path) -> dict[str, str]:
    """Top-level third-party module names imported anywhere under ``folders``, with a file."""
    found: dict[str, str] = {}
    for folder in folders:
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in {"timekeeper", "functions"}:
                        found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_what_the_product_and_the_local_stack_import_comes_with_the_main_requirements():
    # functions/ are the handlers the local stack drives; shared/timekeeper holds the layer
    # and the local stack (simulate, serve, export, chaos).
    installed = _closure(_requirements(MAIN))
    providers = metadata.packages_distributions()
    missing = {}
    for module, where in _third_party_imports(ROOT / "shared" / "timekeeper", ROOT / "functions").items():
        dists = {_canonical(d) for d in providers.get(module, [])}
        if not dists & installed:
            missing[module] = (where, sorted(dists))
    assert missing == {}
