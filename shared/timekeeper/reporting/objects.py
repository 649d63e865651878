"""The files bucket as exports and renders write to it: one client shape, one key rule.

Every file a work item writes lives at ``<prefix><workspace id>/<name>.<extension>``: a
function of the work item alone, so every attempt of it writes the same object (a retry
after a crash between the upload and the record overwrites it, never leaves a stray one).
A kind declares how it differs as data (:class:`ObjectKind`): its prefix (which the
bucket's lifecycle rules expire by) and whether its name is hashed (a render is named by
an idempotency key, any printable text; its SHA-256 hex is a safe, fixed-length name).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import UUID

from timekeeper.settings import EXPORTS_PREFIX, REPORTS_PREFIX


class ObjectStore(Protocol):
    """The calls of a boto3 S3 client the files' writers make (a boto3 S3 client, or
    moto's, satisfies it): a managed upload of a file on disk (multipart when large) and
    a put of bytes held in memory."""

    def upload_file(self, Filename: str, Bucket: str, Key: str, ExtraArgs: dict | None = None,  # noqa: N803
                    Callback: Any = None) -> None: ...

    def put_object(self, **kwargs: Any) -> Any: ...


@dataclass(frozen=True)
class ObjectKind:
    """Where one kind of work item writes its file: under ``prefix``; ``hashed``: the name
    is the SHA-256 hex of the item's name (UTF-8) rather than the name itself."""

    prefix: str
    hashed: bool = False

    def key(self, workspace_id: UUID, name: str | UUID, extension: str) -> str:
        """The object key of item ``name`` of ``workspace_id``:
        ``<prefix><workspace_id>/<name or its SHA-256 hex>.<extension>``."""
        stem = hashlib.sha256(str(name).encode("utf-8")).hexdigest() if self.hashed else str(name)
        return f"{self.prefix}{workspace_id}/{stem}.{extension}"


#: An export's file: ``exports/<workspace_id>/<export_id>.<csv|xlsx>``.
EXPORT_FILES = ObjectKind(EXPORTS_PREFIX)
#: A render's PDF: ``reports/<workspace_id>/<sha256 hex of the idempotency key>.pdf``.
RENDER_FILES = ObjectKind(REPORTS_PREFIX, hashed=True)
