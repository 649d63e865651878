"""The shared layer: ``shared/timekeeper`` plus its third-party packages, built for the
Lambda platform by pip on this machine (no Docker).

Layout of the asset: ``python/<packages>`` (wheels for manylinux x86_64, CPython 3.12,
psycopg's binary wheel included) and ``python/timekeeper`` (copied from shared/).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra import settings

_IGNORED_PARTS = ("__pycache__", ".egg-info", ".pytest_cache")


def _layer_sources(shared_dir: Path) -> Iterator[Path]:
    """Files of the timekeeper package that go into the layer, in a stable order."""
    package = shared_dir / "timekeeper"
    excluded = {package / name for name in settings.LAYER_EXCLUDED_PACKAGES}
    for path in sorted(package.rglob("*")):
        if not path.is_file() or path.suffix == ".pyc":
            continue
        if any(part.endswith(_IGNORED_PARTS) for part in path.parts):
            continue
        if any(parent in excluded for parent in path.parents):
            continue
        yield path


def pip_command(target: Path, requirements: Path) -> list[str]:
    """The pip invocation that installs ``requirements`` for the Lambda platform into ``target``."""
    platforms = [arg for platform in settings.LAYER_PLATFORMS for arg in ("--platform", platform)]
    return [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--quiet",
            "--no-deps", "--no-compile", "--only-binary=:all:", "--implementation", "cp", *platforms,
            "--python-version", settings.PYTHON_VERSION, "--target", str(target),
            "--requirement", str(requirements)]


def layer_hash(shared_dir: Path, requirements: Path, *, bundled: bool) -> str:
    """A content hash of what decides the layer: the package files, the pinned
    requirements, the pip command's shape and whether the asset was bundled at all."""
    digest = hashlib.sha256()
    digest.update(f"bundled={bundled};python={settings.PYTHON_VERSION};{settings.LAYER_PLATFORMS}".encode())
    digest.update(requirements.read_bytes())
    for path in _layer_sources(shared_dir):
        digest.update(str(path.relative_to(shared_dir)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@jsii.implements(ILocalBundling)
class PipLayerBundling:
    """Local bundling (CDK calls :meth:`try_bundle`): pip installs the pinned requirements
    for the Lambda platform into ``<out>/python`` and the package is copied beside them.

    Raises ``subprocess.CalledProcessError`` when pip fails (no wheel for the platform, no
    registry), which fails the synth rather than shipping a half-built layer.
    """

    def __init__(self, *, shared_dir: Path, requirements: Path):
        self.shared_dir = shared_dir
        self.requirements = requirements

    def try_bundle(self, output_dir: str, options: BundlingOptions) -> bool:  # noqa: ARG002 - CDK's signature
        """Build the layer into ``output_dir``; return True (bundled, no Docker needed)."""
        target = Path(output_dir) / "python"
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(pip_command(target, self.requirements), check=True)
        shutil.rmtree(target / "bin", ignore_errors=True)  # console scripts: no use in a layer
        for path in _layer_sources(self.shared_dir):
            destination = target / path.relative_to(self.shared_dir)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, destination)
        return True


class SharedLayer(Construct):
    """The ``timekeeper`` layer for Python 3.12 on x86_64.

    ``bundle=False`` ships shared/ as it is (no third-party packages); only tests and
    offline template reviews use it, and its asset hash differs from a bundled one.
    """

    def __init__(self, scope: Construct, construct_id: str, *, bundle: bool = True,
                 shared_dir: Path = settings.SHARED_DIR, requirements: Path = settings.LAYER_REQUIREMENTS):
        super().__init__(scope, construct_id)
        asset_hash = layer_hash(shared_dir, requirements, bundled=bundle)
        if bundle:
            code = lambda_.Code.from_asset(
                str(shared_dir), asset_hash_type=AssetHashType.CUSTOM, asset_hash=asset_hash,
                bundling=BundlingOptions(
                    # Never pulled: local bundling always succeeds or raises.
                    image=DockerImage.from_registry("public.ecr.aws/sam/build-python3.12"),
                    local=PipLayerBundling(shared_dir=shared_dir, requirements=requirements),
                    command=["false"],
                ))
        else:
            code = lambda_.Code.from_asset(str(shared_dir / "timekeeper"), asset_hash_type=AssetHashType.CUSTOM,
                                           asset_hash=asset_hash, exclude=["**/__pycache__", "*.pyc"])
        self.layer = lambda_.LayerVersion(
            self, "Layer",
            code=code,
            compatible_runtimes=[lambda_.Runtime.PYTHON_3_12],
            compatible_architectures=[lambda_.Architecture.X86_64],
            description="Timekeeper shared code and its dependencies (python/timekeeper)",
        )
