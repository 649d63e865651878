"""The local stack's options: every bad value is a one-line usage error of its own
command (exit code 2, no traceback), and ``--outage none`` means no outage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from timekeeper.local import cli
from timekeeper.local.simulate import Outage


@pytest.mark.parametrize(("argv", "message"), [
    (["simulate", "--outage", "2027-03-20T10:00/-2"], "argument --outage: expected START/HOURS"),
    (["simulate", "--outage", "2027-03-20T10:00/0"], "HOURS must be above 0"),
    (["simulate", "--outage", "2027-03-20T10:00"], "missing /HOURS"),
    (["simulate", "--outage", "tomorrow/3"], "argument --outage"),
    (["simulate", "--poison", "-1"], "argument --poison: -1 is out of range 0..1000"),
    (["simulate", "--start", "9999-12-30"], "argument --start: 9999-12-30 is out of range"),
    (["simulate", "--start", "2027-02-30"], "argument --start: expected a date such as 2027-03-01"),
    (["simulate", "--days", "0"], "argument --days: 0 is out of range 1..3660"),
    (["simulate", "--days", "ten"], "argument --days: expected a whole number, not 'ten'"),
    (["serve", "--port", "99999"], "argument --port: 99999 is out of range 0..65535"),
    (["serve", "--port", "-1"], "argument --port: -1 is out of range 0..65535"),
])
def test_a_bad_option_is_a_one_line_error_of_its_command(argv, message, capsys):
    # When the command line carries a bad value
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    # Then the command's usage and one error line are printed, exit code 2, no traceback
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert f"python -m timekeeper {argv[0]}: error: " in err.splitlines()[-1]
    assert message in err.splitlines()[-1]
    assert "Traceback" not in err


def test_outage_none_is_no_outage_and_a_start_hours_pair_is_one():
    # Given the --outage values the help advertises
    # Then "none" parses to no outage and START/HOURS to an outage in UTC
    assert cli._outage("none") is None
    assert cli._outage("2027-03-20T10:00/3") == Outage(datetime(2027, 3, 20, 10, 0, tzinfo=UTC), timedelta(hours=3))
    assert cli._outage("2027-03-20T12:00+02:00/1.5").start == datetime(2027, 3, 20, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(("argv", "outages"), [
    (["--outage", "none"], ()),
    (["--no-outage"], ()),
    ([], (Outage(datetime(2027, 3, 20, 10, 0, tzinfo=UTC), timedelta(hours=3)),)),
    (["--outage", "none", "--outage", "2027-03-02T00:00/1"], (Outage(datetime(2027, 3, 2, tzinfo=UTC),
                                                                      timedelta(hours=1)),)),
])
def test_outage_options_reach_the_simulation(argv, outages):
    # When simulate's options are parsed
    options = cli.simulation_options(cli.build_parser().parse_args(["simulate", *argv]))
    # Then the simulation gets the outages asked for ("none": no outage; nothing: the default one)
    assert options.outages == outages


def test_an_interruption_whose_cleanup_fails_is_still_reported_as_the_interruption(monkeypatch, capsys):
    # Given a command interrupted by SIGINT whose cleanup then fails (a cancelled query's rollback)
    import signal

    from timekeeper.local import cli

    def interrupted_run(args):
        try:
            cli._interrupt(signal.SIGINT, None)
        finally:
            raise RuntimeError("rollback failed: the query was cancelled")

    monkeypatch.setattr(cli, "_run", interrupted_run)
    # When it ends
    code = cli.main(["psql"])
    # Then it exits as interrupted, with the one line and no traceback
    assert code == 128 + signal.SIGINT
    assert capsys.readouterr().err.strip() == "stopped by SIGINT"


def test_serve_s_access_log_leaves_out_a_download_link_s_token(capsys):
    from timekeeper.local import serve

    handler = object.__new__(serve._RequestHandler)
    handler.access_log = True
    handler.client_address = ("127.0.0.1", 5000)
    handler.requestline = "GET /downloads/abc.DEF-123_x HTTP/1.1"
    handler.log_message('"%s" %s %s', "GET /downloads/abc.DEF-123_x?y=1 HTTP/1.1", "302", "-")
    line = capsys.readouterr().err
    assert "abc.DEF-123_x" not in line and '"GET /downloads/<token>?y=1 HTTP/1.1" 302' in line
