"""The layer: pinned requirements installed for the Lambda platform by pip (no Docker), the
package copied beside them, and a real build holding ``python/timekeeper`` and psycopg's
binary for manylinux aarch64 (the default, Graviton) or x86_64 / CPython 3.12, every
native library of it built for that machine.

The real build needs the package registry (or pip's cache); set TIMEKEEPER_SKIP_LAYER_BUILD=1
to skip it offline."""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import BundlingOptions, DockerImage

from infra import settings
from infra.layer import PipLayerBundling, SharedLayer, layer_hash, layer_sources, pip_command

#: The layer's unzipped size budget: half of Lambda's 250 MB for a function and its layers.
LAYER_BUDGET_BYTES = 125 * 1024 * 1024

_PIN = re.compile(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==(\S+)$")


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        match = _PIN.match(line)
        if match:
            pins[match[1].lower().replace("_", "-")] = match[3]
    return pins


def test_layer_requirements_are_fully_pinned():
    lines = [line.split("#", 1)[0].strip() for line in settings.LAYER_REQUIREMENTS.read_text().splitlines()]
    lines = [line for line in lines if line]
    assert lines and all(_PIN.match(line) for line in lines), lines
    pins = _pins(settings.LAYER_REQUIREMENTS)
    for required in ("aws-lambda-powertools", "aws-xray-sdk", "psycopg", "psycopg-binary", "pydantic",
                     "pydantic-core", "tzdata", "python-dateutil", "itsdangerous"):
        assert required in pins, required
    # boto3/botocore come from the Lambda runtime
    assert "boto3" not in pins and "botocore" not in pins


def test_layer_pins_agree_with_the_repository_requirements():
    requirements = settings.ROOT / "requirements.txt"
    if not requirements.is_file():
        pytest.skip("no requirements.txt yet")
    repo = _pins(requirements)
    disagreeing = {name: (version, repo[name]) for name, version in _pins(settings.LAYER_REQUIREMENTS).items()
                   if name in repo and repo[name] != version}
    assert disagreeing == {}


def test_pip_targets_the_lambda_platform_without_docker(tmp_path):
    command = pip_command(tmp_path / "python", settings.LAYER_REQUIREMENTS)
    text = " ".join(command)
    # (the default architecture is Graviton's)
    assert "--platform manylinux2014_aarch64" in text and "--platform manylinux_2_28_aarch64" in text
    assert "x86_64" not in text
    x86 = " ".join(pip_command(tmp_path / "python", settings.LAYER_REQUIREMENTS, settings.X86_64))
    assert "--platform manylinux2014_x86_64" in x86 and "aarch64" not in x86
    assert "--python-version 3.12" in text
    assert "--only-binary=:all:" in command and "--no-deps" in command
    assert "docker" not in text.lower()


def test_layer_hash_follows_sources_and_requirements(tmp_path):
    shared = tmp_path / "shared"
    (shared / "timekeeper" / "local").mkdir(parents=True)
    (shared / "timekeeper" / "__init__.py").write_text("")
    (shared / "timekeeper" / "local" / "cli.py").write_text("")
    requirements = tmp_path / "req.txt"
    requirements.write_text("six==1.17.0\n")
    first = layer_hash(shared, requirements, bundled=True)
    # The local stack is not in the layer, so it does not change its hash
    (shared / "timekeeper" / "local" / "cli.py").write_text("changed")
    assert layer_hash(shared, requirements, bundled=True) == first
    (shared / "timekeeper" / "topology.py").write_text("X = 1")
    second = layer_hash(shared, requirements, bundled=True)
    assert second != first
    requirements.write_text("six==1.16.0\n")
    assert layer_hash(shared, requirements, bundled=True) != second
    assert layer_hash(shared, requirements, bundled=False) != layer_hash(shared, requirements, bundled=True)
    # and an x86_64 layer is another asset than a Graviton one
    assert layer_hash(shared, requirements, bundled=True, architecture=settings.X86_64) != layer_hash(
        shared, requirements, bundled=True, architecture=settings.ARM64)


def _package_files(root: Path) -> set[str]:
    """The files under ``root`` (a ``timekeeper`` folder) as relative POSIX paths."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _expected_layer_files() -> set[str]:
    """What the layer must hold of the real tree: every file of shared/timekeeper except the
    local stack, the command line, byte code and caches (computed here independently of
    the bundling code)."""
    return {name for name in _package_files(settings.SHARED_DIR / "timekeeper")
            if not name.startswith("local/") and name != "__main__.py" and "__pycache__" not in name
            and not name.endswith(".pyc") and ".egg-info" not in name and ".pytest_cache" not in name}


def _assert_holds_only_what_lambda_runs(package: Path) -> None:
    files = _package_files(package)
    # Lambda never runs the local stack (simulation, chaos campaigns, sample data), nor the CLI
    assert not [name for name in files if name.startswith("local/")]
    assert "__main__.py" not in files
    assert not [name for name in files if "generator" in name or "chaos" in name or "sample" in name], files
    assert files == _expected_layer_files()
    assert {"edge/batch.py", "settings.py", "topology/__init__.py", "db/migrations/0001_schedules.sql"} <= files


def test_the_layer_sources_of_the_real_tree_are_what_lambda_runs():
    # Given the function the bundling copies the package with, on the real tree
    package = settings.SHARED_DIR / "timekeeper"
    chosen = {p.relative_to(package).as_posix() for p in layer_sources(settings.SHARED_DIR)}

    # Then it chooses exactly the files Lambda runs
    assert chosen == _expected_layer_files()


def test_no_module_of_the_layer_imports_what_the_layer_leaves_out():
    # Given every Python module the layer ships
    package = settings.SHARED_DIR / "timekeeper"
    offending = []
    for path in layer_sources(settings.SHARED_DIR):
        if path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if isinstance(node, ast.ImportFrom) and node.module == "timekeeper":
                names = [f"timekeeper.{alias.name}" for alias in node.names]
            offending += [f"{path.relative_to(package)}: {name}" for name in names
                          if name == "timekeeper.local" or name.startswith("timekeeper.local.")]

    # Then none imports the local stack (it would fail in Lambda, where the stack is absent)
    assert offending == []


def test_the_unbundled_layer_asset_holds_only_what_lambda_runs(tmp_path):
    # Given the layer without bundling (tests and offline template reviews), staged for real
    app = cdk.App(outdir=str(tmp_path / "out"))
    stack = cdk.Stack(app, "LayerOnly")
    SharedLayer(stack, "Shared", bundle=False)
    assembly = app.synth()

    # When its asset folder is read
    manifest = json.loads((Path(assembly.directory) / "LayerOnly.assets.json").read_text())
    [asset] = [a for a in manifest["files"].values() if a.get("displayName", "").endswith("Layer/Code")]
    staged = Path(assembly.directory) / asset["source"]["path"]

    # Then it holds the package without the local stack, the CLI or the generators
    _assert_holds_only_what_lambda_runs(staged)


#: ELF ``e_machine`` of each architecture's native libraries, and the machine name in
#: CPython's extension file names.
_ELF_MACHINE = {settings.ARM64: 0xB7, settings.X86_64: 0x3E}
_SUFFIX_MACHINE = {settings.ARM64: "aarch64", settings.X86_64: "x86_64"}


def _elf_machine(path: Path) -> int | None:
    """The ``e_machine`` of an ELF file (little-endian), or None for a file that is not ELF."""
    header = path.read_bytes()[:20]
    if header[:4] != b"\x7fELF":
        return None
    return int.from_bytes(header[18:20], "little")


@pytest.mark.skipif(os.environ.get("TIMEKEEPER_SKIP_LAYER_BUILD") == "1", reason="layer build skipped")
@pytest.mark.parametrize("architecture", [settings.ARM64, settings.X86_64])
def test_real_layer_build_holds_the_package_and_psycopg_binary(tmp_path, architecture):
    # Given the local bundler CDK calls for the layer asset, for the functions' architecture
    bundler = PipLayerBundling(shared_dir=settings.SHARED_DIR, requirements=settings.LAYER_REQUIREMENTS,
                               architecture=architecture)

    # When it builds into an empty folder
    built = bundler.try_bundle(str(tmp_path), BundlingOptions(image=DockerImage.from_registry("unused")))

    # Then the layer has the package (only what Lambda runs), the migrations and psycopg's C
    # extension for CPython 3.12 on that machine
    python = tmp_path / "python"
    machine = _SUFFIX_MACHINE[architecture]
    assert built is True
    _assert_holds_only_what_lambda_runs(python / "timekeeper")
    assert list((python / "timekeeper" / "db" / "migrations").glob("0001_*.sql"))
    assert list((python / "psycopg_binary").glob(f"_psycopg.cpython-312-{machine}-linux-gnu.so"))
    assert list((python / "pydantic_core").glob(f"_pydantic_core.cpython-312-{machine}-linux-gnu.so"))
    # And every native library of every package (psycopg's bundled libpq, Pillow's codecs,
    # nh3, MarkupSafe, wrapt, ...) is built for it: not one wheel fell back to another machine
    native = [p for p in python.rglob("*") if p.is_file() and (p.suffix == ".so" or ".so." in p.name)]
    assert len(native) > 10
    wrong = {p.relative_to(python).as_posix(): _elf_machine(p) for p in native
             if _elf_machine(p) not in (None, _ELF_MACHINE[architecture])}
    assert wrong == {}
    assert {_elf_machine(p) for p in native} - {None} == {_ELF_MACHINE[architecture]}
    assert (python / "aws_lambda_powertools").is_dir() and (python / "aws_xray_sdk").is_dir()
    assert not (python / "botocore").exists()
    # And Babel holds the CLDR data of exactly the languages a workspace's locale may have
    from timekeeper.settings import FILE_LOCALE_LANGUAGES

    languages = {p.stem.split("_")[0] for p in (python / "babel" / "locale-data").glob("*.dat")}
    assert languages == FILE_LOCALE_LANGUAGES | {"root"} and (python / "babel" / "global.dat").is_file()
    assert not (python / "babel" / "messages").exists()
    # And it stays within half of Lambda's 250 MB unzipped limit for a function and its layers
    # together (105 MiB on arm64 with Babel's 33 languages, fontTools for the PDF font and the
    # holiday calendars), so a dependency that doubles it fails here, not at deploy
    size = sum(p.stat().st_size for p in python.rglob("*") if p.is_file())
    assert size < LAYER_BUDGET_BYTES, f"layer is {size / 2**20:.0f} MiB unzipped"


@pytest.mark.skipif(os.environ.get("TIMEKEEPER_SKIP_LAYER_BUILD") == "1", reason="layer build skipped")
def test_the_app_synthesized_with_bundling_ships_a_layer_for_its_functions_architecture():
    # Given the whole app synthesized with bundling on (what `cdk synth` does), default context
    from tests.infra.conftest import functions_by_folder, resources, synthesize

    built = synthesize({"aws:cdk:bundling-stacks": ["**"]})

    # When the layer's staged asset is read
    manifest = json.loads((built.outdir / "TimekeeperApp.assets.json").read_text())
    [asset] = [a for a in manifest["files"].values() if a.get("displayName", "").endswith("Layer/Code")]
    python = built.outdir / asset["source"]["path"] / "python"

    # Then it holds the package and wheels for arm64, the architecture of every function
    template = built.app_template
    [layer] = resources(template, "AWS::Lambda::LayerVersion").values()
    assert layer["Properties"]["CompatibleArchitectures"] == ["arm64"]
    assert {tuple(template["Resources"][lid]["Properties"]["Architectures"])
            for lid in functions_by_folder(template).values()} == {("arm64",)}
    _assert_holds_only_what_lambda_runs(python / "timekeeper")
    [psycopg] = list((python / "psycopg_binary").glob("_psycopg.cpython-312-*-linux-gnu.so"))
    assert psycopg.name == "_psycopg.cpython-312-aarch64-linux-gnu.so"
    assert _elf_machine(psycopg) == _ELF_MACHINE[settings.ARM64]
