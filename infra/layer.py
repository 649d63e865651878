"""The shared layer: ``shared/timekeeper`` plus its third-party packages, built for the
Lambda platform by pip on this machine (no Docker).

Layout of the asset: ``python/<packages>`` (wheels for manylinux on the deployment's
architecture, aarch64 by default, CPython 3.12, psycopg's binary wheel included) and
``python/timekeeper`` (copied from shared/, without what Lambda never runs:
:data:`infra.settings.LAYER_EXCLUDED`, chosen by :func:`in_layer`).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra import settings
from infra.functions import lambda_architecture
from timekeeper.settings import FILE_LOCALE_LANGUAGES

_IGNORED_PARTS = ("__pycache__", ".egg-info", ".pytest_cache")


def in_layer(relative: PurePosixPath) -> bool:
    """Whether the file ``relative`` (a path inside ``shared/timekeeper``, e.g.
    ``edge/batch.py``) goes into the layer: not under :data:`infra.settings.LAYER_EXCLUDED`,
    no byte code, no build or test caches."""
    if relative.suffix == ".pyc" or any(part.endswith(_IGNORED_PARTS) for part in relative.parts):
        return False
    return not any(relative == PurePosixPath(name) or PurePosixPath(name) in relative.parents
                   for name in settings.LAYER_EXCLUDED)


def layer_sources(shared_dir: Path) -> Iterator[Path]:
    """Files of the timekeeper package that go into the layer (:func:`in_layer`), in a
    stable order."""
    package = shared_dir / "timekeeper"
    for path in sorted(package.rglob("*")):
        if path.is_file() and in_layer(PurePosixPath(path.relative_to(package).as_posix())):
            yield path


def unbundled_excludes(shared_dir: Path) -> list[str]:
    """The asset ``exclude`` patterns of an unbundled layer (``shared/timekeeper`` as it is):
    every file of the package that :func:`in_layer` leaves out, by its exact relative path."""
    package = shared_dir / "timekeeper"
    return sorted(path.relative_to(package).as_posix() for path in package.rglob("*")
                  if path.is_file() and not in_layer(PurePosixPath(path.relative_to(package).as_posix())))


def pip_command(target: Path, requirements: Path, architecture: str = settings.DEFAULT_ARCHITECTURE) -> list[str]:
    """The pip invocation that installs ``requirements`` for the Lambda platform of
    ``architecture`` (``arm64`` | ``x86_64``) into ``target``."""
    platforms = [arg for platform in settings.LAYER_PLATFORMS_BY_ARCHITECTURE[architecture]
                 for arg in ("--platform", platform)]
    return [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--quiet",
            "--no-deps", "--no-compile", "--only-binary=:all:", "--implementation", "cp", *platforms,
            "--python-version", settings.PYTHON_VERSION, "--target", str(target),
            "--requirement", str(requirements)]


def layer_hash(shared_dir: Path, requirements: Path, *, bundled: bool,
               architecture: str = settings.DEFAULT_ARCHITECTURE) -> str:
    """A content hash of what decides the layer: the package files, the pinned
    requirements, the pip command's shape (the architecture's platforms) and whether the
    asset was bundled at all."""
    platforms = settings.LAYER_PLATFORMS_BY_ARCHITECTURE[architecture]
    digest = hashlib.sha256()
    digest.update(f"bundled={bundled};python={settings.PYTHON_VERSION};{platforms}".encode())
    digest.update(requirements.read_bytes())
    for path in layer_sources(shared_dir):
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

    def __init__(self, *, shared_dir: Path, requirements: Path, architecture: str = settings.DEFAULT_ARCHITECTURE):
        self.shared_dir = shared_dir
        self.requirements = requirements
        self.architecture = architecture

    def try_bundle(self, output_dir: str, options: BundlingOptions) -> bool:  # noqa: ARG002 - CDK's signature
        """Build the layer into ``output_dir``; return True (bundled, no Docker needed)."""
        target = Path(output_dir) / "python"
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(pip_command(target, self.requirements, self.architecture), check=True)
        shutil.rmtree(target / "bin", ignore_errors=True)  # console scripts: no use in a layer
        prune_locale_data(target)
        for path in layer_sources(self.shared_dir):
            destination = target / path.relative_to(self.shared_dir)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, destination)
        return True


def prune_locale_data(target: Path) -> int:
    """Drop from the installed Babel (``target/babel/locale-data``) every language's CLDR
    data but :data:`timekeeper.settings.FILE_LOCALE_LANGUAGES`' (and ``root``, which every
    locale inherits from), and its message-catalogue tooling (``babel.messages``, which
    only translators' commands import); return the data files removed. A workspace's locale is checked
    against the same list, so the layer holds the data of every locale a workspace may
    have."""
    shutil.rmtree(target / "babel" / "messages", ignore_errors=True)  # gettext catalogue tooling: never run
    folder = target / "babel" / "locale-data"
    removed = 0
    for path in sorted(folder.glob("*.dat")) if folder.is_dir() else ():
        if path.stem != "root" and path.stem.split("_")[0] not in FILE_LOCALE_LANGUAGES:
            path.unlink()
            removed += 1
    return removed


class SharedLayer(Construct):
    """The ``timekeeper`` layer for Python 3.12 on ``architecture`` (``arm64`` | ``x86_64``;
    None: the context ``timekeeper:architecture`` visible from ``scope``, the functions' own).

    ``bundle=False`` ships shared/ as it is (no third-party packages); only tests and
    offline template reviews use it, and its asset hash differs from a bundled one.
    """

    def __init__(self, scope: Construct, construct_id: str, *, bundle: bool = True,
                 shared_dir: Path = settings.SHARED_DIR, requirements: Path = settings.LAYER_REQUIREMENTS,
                 architecture: str | None = None):
        super().__init__(scope, construct_id)
        self.architecture = architecture or settings.architecture_of(self.node)
        asset_hash = layer_hash(shared_dir, requirements, bundled=bundle, architecture=self.architecture)
        if bundle:
            code = lambda_.Code.from_asset(
                str(shared_dir), asset_hash_type=AssetHashType.CUSTOM, asset_hash=asset_hash,
                bundling=BundlingOptions(
                    # Never pulled: local bundling always succeeds or raises.
                    image=DockerImage.from_registry("public.ecr.aws/sam/build-python3.12"),
                    local=PipLayerBundling(shared_dir=shared_dir, requirements=requirements,
                                           architecture=self.architecture),
                    command=["false"],
                ))
        else:
            code = lambda_.Code.from_asset(str(shared_dir / "timekeeper"), asset_hash_type=AssetHashType.CUSTOM,
                                           asset_hash=asset_hash, exclude=unbundled_excludes(shared_dir))
        self.layer = lambda_.LayerVersion(
            self, "Layer",
            code=code,
            compatible_runtimes=[lambda_.Runtime.PYTHON_3_12],
            compatible_architectures=[lambda_architecture(self.architecture)],
            description="Timekeeper shared code and its dependencies (python/timekeeper)",
        )
