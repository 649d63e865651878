"""Where the command line keeps its state (``.timekeeper``: the embedded server's data,
delivered files): ``TIMEKEEPER_HOME``, else the nearest ``.timekeeper`` folder from the
current folder up, else a new one in the current folder, said so; ``psql`` on a folder with
no server says so in one line instead of starting a fresh, empty server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _state_home(cwd: Path, monkeypatch) -> Path:
    from timekeeper.local import embedded

    monkeypatch.chdir(cwd)
    return embedded.state_home()


def test_the_nearest_state_folder_up_from_the_current_folder_is_used(tmp_path, monkeypatch):
    # Given a checkout with its state, and a folder deep inside it
    monkeypatch.delenv("TIMEKEEPER_HOME", raising=False)
    (tmp_path / "checkout" / ".timekeeper" / "pgdata").mkdir(parents=True)
    deep = tmp_path / "checkout" / "docs" / "notes"
    deep.mkdir(parents=True)
    # Then commands run there use the checkout's state
    assert _state_home(deep, monkeypatch) == tmp_path / "checkout" / ".timekeeper"
    assert _state_home(tmp_path / "checkout", monkeypatch) == tmp_path / "checkout" / ".timekeeper"


def test_timekeeper_home_wins_and_without_any_state_the_current_folder_gets_one(tmp_path, monkeypatch):
    (tmp_path / "checkout" / ".timekeeper").mkdir(parents=True)
    monkeypatch.setenv("TIMEKEEPER_HOME", str(tmp_path / "elsewhere"))
    assert _state_home(tmp_path / "checkout", monkeypatch) == tmp_path / "elsewhere"
    monkeypatch.delenv("TIMEKEEPER_HOME")
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    assert _state_home(lonely, monkeypatch) == lonely / ".timekeeper"


@pytest.mark.skipif(bool(os.environ.get("DATABASE_URL")), reason="names the embedded server's folder")
def test_psql_where_there_is_no_local_state_says_so_and_starts_no_server(tmp_path):
    # Given a folder with no .timekeeper in it or above it
    folder = tmp_path / "somewhere"
    folder.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("TIMEKEEPER_HOME", "DATABASE_URL")}
    env["PYTHONPATH"] = f"{REPO / 'shared'}{os.pathsep}{REPO}"
    # When psql is asked for the simulation's database there
    done = subprocess.run([sys.executable, "-m", "timekeeper", "psql", "--database", "timekeeper_sim"], cwd=folder,
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    # Then it answers in one line naming the folder it looked at and that it holds no server
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert str(folder / ".timekeeper") in done.stderr and "no local database" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    # And no empty server was made there
    assert not (folder / ".timekeeper" / "pgdata").exists()


def test_export_from_a_folder_without_state_says_it_starts_an_empty_server(tmp_path, monkeypatch, capsys):
    from timekeeper.local.cli import announce_new_state

    monkeypatch.delenv("TIMEKEEPER_HOME", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    assert announce_new_state() is True
    err = capsys.readouterr().err
    assert str(tmp_path / ".timekeeper") in err and "holds no database yet" in err
    # A folder whose state holds a server, or DATABASE_URL, needs no word
    (tmp_path / ".timekeeper" / "pgdata").mkdir(parents=True)
    (tmp_path / ".timekeeper" / "pgdata" / "PG_VERSION").write_text("18\n")
    assert announce_new_state() is False
    monkeypatch.setenv("DATABASE_URL", "postgresql://localhost/x")
    assert announce_new_state() is False
