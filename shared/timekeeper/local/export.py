"""``python -m timekeeper export``: one export end to end on the local stack.

The same path as in AWS: the export is requested (access rule, pinned version, committed,
published to the exports queue in moto), the local event source hands the message to the
REAL consumer handler (``functions/export_consumer``), which streams the rows into a file
and uploads it to the files bucket in moto; the command then downloads the object and
writes it to ``--out``. The database is the one ``serve`` uses (``timekeeper_serve``,
kept), so queries and data made through the API can be exported.

``--definition JSON`` saves a new query first (by ``--user``) when no ``--query`` is
given; ``--demo`` first creates what is missing of the workspace, the user (a member
with ``queries:read``) and some members and invoices, so a fresh machine has something
to export; it never changes a workspace, user or membership that exists.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from timekeeper.db.sql import load_queries

SQL = load_queries("timekeeper.local", "export.sql")

#: How many demo invoices ``--demo`` creates in an empty workspace.
DEMO_INVOICES = 1000


@dataclass(frozen=True)
class ExportOptions:
    """The ``export`` command's arguments (see ``python -m timekeeper export --help``)."""

    workspace: UUID
    user: str
    format: str
    out: Path
    query: UUID | None = None
    version: int | None = None
    definition: dict[str, Any] | None = None
    demo: bool = False
    database: str = "timekeeper_serve"


def ensure_demo_data(conn: Any, *, workspace_id: UUID, user_id: str, now: Any, invoices: int = DEMO_INVOICES) -> int:
    """Create what is missing of the demo: the workspace ``workspace_id`` ("Demo",
    Europe/Berlin, EUR), the user ``user_id`` (active, named by its id), their membership
    with ``queries:read``, and ``invoices`` invoices across 50 members when the workspace
    has none. Nothing that exists is changed: an existing workspace, user or membership
    (even one that left, or whose roles grant no export) is kept as it is, so the export
    that follows may be refused for it. Returns the invoices created."""
    from timekeeper.platform.directory import add_member, create_workspace, get_workspace, member_with_user, upsert_user

    with conn.transaction():
        if get_workspace(conn, workspace_id) is None:
            create_workspace(conn, name="Demo", timezone="Europe/Berlin", currency="EUR", workspace_id=workspace_id,
                             now=now)
        user, membership = member_with_user(conn, workspace_id=workspace_id, user_id=user_id)
        if user is None:
            upsert_user(conn, user_id=user_id, display_name=user_id, now=now)
        if membership is None:
            add_member(conn, workspace_id=workspace_id, user_id=user_id, roles=["queries:read"], now=now)
        if conn.execute(SQL["workspace_has_invoices"], (workspace_id,)).fetchone():
            return 0
        conn.execute(SQL["insert_demo_members"], (workspace_id, date(2026, 1, 1)))
        conn.execute(SQL["insert_demo_invoices"],
                     {"ws": workspace_id, "d": date(2026, 1, 1), "n": invoices})
    return invoices


def run_export_command(options: ExportOptions, out: Any = None) -> int:
    """Run the ``export`` command; return the exit code (0: the file was written; 1: the
    export was refused or failed, with one line saying why)."""
    out = out or sys.stdout
    from timekeeper.local.stack import quiet_lambda_environment, start_local_stack

    quiet_lambda_environment()
    from timekeeper import clock
    from timekeeper.db.connection import connect
    from timekeeper.edge import adapters
    from timekeeper.platform.access import QUERIES_READ, AccessDenied, check_person, require
    from timekeeper.reporting import exports as ex
    from timekeeper.reporting import store
    from timekeeper.reporting.definition import InvalidDefinition

    stack = start_local_stack(database=options.database, reset=False, aws_server=False)
    try:
        now = clock.now()
        with connect(stack.database_url) as conn:
            if options.demo:
                created = ensure_demo_data(conn, workspace_id=options.workspace, user_id=options.user, now=now)
                if created:
                    print(f"demo data: {created} invoices in workspace {options.workspace}", file=out)
            query_id = options.query
            try:
                if query_id is None:
                    with conn.transaction():  # nothing is saved for someone who may not export it
                        require(check_person(conn, workspace_id=options.workspace, user_id=options.user,
                                             permission=QUERIES_READ), "export queries")
                    query, _ = store.create_query(conn, workspace_id=options.workspace, name="CLI export",
                                                  definition=options.definition or {}, actor=options.user, now=now)
                    query_id = query.id
                    print(f"saved query {query_id} (version 1)", file=out)
                export, _ = ex.request_export(conn, workspace_id=options.workspace, query_id=query_id,
                                              version=options.version, format=options.format,
                                              requested_by=options.user, idempotency_key=None, now=now,
                                              publisher=adapters.export_publisher())
            except AccessDenied as refused:
                print(f"export refused: {refused.reason}", file=sys.stderr)
                return 1
            except store.QueryNotFound:
                print("no such query or version in that workspace", file=sys.stderr)
                return 1
            except InvalidDefinition as invalid:
                print(f"invalid definition: {invalid.field}: {invalid.reason}", file=sys.stderr)
                return 1
            for _ in range(20):  # each poll delivers everything visible; a retry shows up after the lease
                stack.poll(clock.now())
                export = ex.get_export(conn, workspace_id=options.workspace, export_id=export.id)
                if export.state in ("succeeded", "failed"):
                    break
                later = clock.now() + timedelta(seconds=EXPORTS_VISIBILITY_S)
                clock.install(lambda at=later: at)
        if export.state != "succeeded":
            print(f"export {export.id} {export.state}: {export.error_code} {export.error_message or ''}".rstrip(),
                  file=sys.stderr)
            return 1
        body = stack.aws.client("s3").get_object(Bucket=stack.aws.files_bucket, Key=export.object_key)["Body"]
        options.out.parent.mkdir(parents=True, exist_ok=True)
        with open(options.out, "wb") as f:
            for chunk in iter(lambda: body.read(1 << 20), b""):
                f.write(chunk)
        print(f"export {export.id}: {export.row_count} rows, {export.byte_size} bytes, sha256 {export.sha256}",
              file=out)
        print(f"  s3://{stack.aws.files_bucket}/{export.object_key} -> {options.out}", file=out)
        return 0
    finally:
        stack.stop()


def parse_definition(text: str) -> dict[str, Any]:
    """``--definition``: a JSON object, or ``@FILE`` naming a file holding one. Raises
    ``ValueError`` with a one-line reason."""
    if text.startswith("@"):
        text = Path(text[1:]).read_text(encoding="utf-8")
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("the definition must be a JSON object")
    return value


def _visibility_s() -> int:
    from timekeeper.topology import EXPORTS

    return EXPORTS.consumer.visibility_timeout_s


EXPORTS_VISIBILITY_S = _visibility_s()
