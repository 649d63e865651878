"""Exports on ``python -m timekeeper serve``: requested over HTTP with the development
token, run by the real consumer through the local event source, downloaded through the
presigned link from the moto server."""

from __future__ import annotations

import hashlib
import time
import uuid

import pytest
import requests

from tests.api.conftest import serving
from timekeeper import clock
from timekeeper.db.connection import connect
from timekeeper.local.export import ensure_demo_data
from timekeeper.reporting import store

WORKSPACE = uuid.uuid4()
AUTH = {"Authorization": f"Bearer dev:alice:{WORKSPACE}:queries:read"}


@pytest.fixture(scope="module")
def local_server(db_url):
    with serving(db_url, poll_interval_s=0.2) as server:
        yield server


def test_serve_runs_an_export_and_its_link_downloads_the_file(local_server, db_url):
    # Given alice, a reader of a workspace with 1,000 invoices, and her saved query
    with connect(db_url) as conn:
        ensure_demo_data(conn, workspace_id=WORKSPACE, user_id="alice", now=clock.now())
        query, _ = store.create_query(conn, workspace_id=WORKSPACE, name="Open", actor="alice", now=clock.now(),
                                      definition={"entity": "invoices", "columns": ["number", "amount_minor"],
                                                  "filters": [{"column": "status", "op": "eq", "value": "open"}]})
    base = local_server.base_url
    # When she requests an XLSX export over HTTP and polls it
    accepted = requests.post(f"{base}/queries/{query.id}/exports", headers=AUTH, json={"format": "xlsx"}, timeout=10)
    assert accepted.status_code == 202, accepted.text
    deadline = time.monotonic() + 90  # seconds as a rule; generous for a busy machine
    while True:
        export = requests.get(f"{base}/exports/{accepted.json()['id']}", headers=AUTH, timeout=10).json()
        if export["state"] in ("succeeded", "failed") or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    # Then the serve worker ran it, and the presigned link serves the recorded file
    assert export["state"] == "succeeded", export
    assert export["row_count"] == 250
    download = requests.get(export["download_url"], timeout=10)
    assert download.status_code == 200
    assert hashlib.sha256(download.content).hexdigest() == export["sha256"]
