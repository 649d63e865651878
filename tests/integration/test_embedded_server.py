"""The embedded PostgreSQL server started by several processes at once on a new folder.

The test workers of one session (and two terminals running the local stack) start the
server on the same data directory at the same moment; every one of them must get the one
server's URL.
"""

import multiprocessing
import os

import psycopg
import pytest

from timekeeper.local import embedded

STARTERS = 6


def _start(data_dir, barrier, results, release):
    barrier.wait()
    try:
        results.put(("ok", embedded.server_url(data_dir)))
    except BaseException as exc:  # reported to the test, which names it
        results.put(("error", f"{type(exc).__name__}: {exc}"))
    # A holder's exit stops the server when it is the last one: hold it until the test
    # has connected.
    release.wait(120)


@pytest.mark.skipif(bool(os.environ.get("DATABASE_URL")), reason="DATABASE_URL names the server")
def test_processes_starting_on_one_new_folder_at_once_all_get_the_one_server(tmp_path):
    data_dir = tmp_path / "pgdata"
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(STARTERS)
    results = ctx.Queue()
    release = ctx.Event()
    starters = [ctx.Process(target=_start, args=(data_dir, barrier, results, release))
                for _ in range(STARTERS)]
    for p in starters:
        p.start()
    outcomes = [results.get(timeout=120) for _ in starters]
    urls = {value for kind, value in outcomes if kind == "ok"}
    try:
        assert [value for kind, value in outcomes if kind == "error"] == []
        assert len(urls) == 1
        with psycopg.connect(urls.pop(), connect_timeout=30) as conn:
            assert conn.execute("select 1").fetchone() == (1,)
    finally:
        # The last starter to exit stops the server.
        release.set()
        for p in starters:
            p.join(timeout=60)
