"""Erasing a person (:mod:`timekeeper.platform.erasure`): after a real delivery through
moto SES, a bounce consumed from SNS by the real message-events consumer, and an opt-out,
erasing the person leaves their address in no column of any of our tables (every text and
JSON column of the schema is searched, so a column added later is searched too), keeps
every delivery row and count, takes them off the recipient lists with a history event,
and changes nothing for anyone else. A delivery attempt that was already sending when the
erasure committed writes its row without the address. Real PostgreSQL; moto SES, SNS, SQS."""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import timedelta

import pytest

from tests.integration import test_message_states as message_states_tests
from tests.integration.test_delivery import make_tenant
from tests.integration.test_message_states import NOW, _deliver, _drain, _publish, ses_event
from timekeeper.db.connection import connect
from timekeeper.platform import erasure
from timekeeper.reporting import delivery as dl
from timekeeper.reporting import message_states as ms
from timekeeper.reporting import opt_outs
from timekeeper.reporting.query_schedules import NewQuerySchedule, Source, create_query_schedule, list_recipients

T = "pe1"
#: The platform's own directory: the user's profile is the platform's to erase, not ours
#: (Timekeeper reads it to address a message at send time).
PLATFORM_DIRECTORY = {"users"}

#: The message-states tests' fixtures: moto SES, SNS and SQS, and the delivery services.
aws = message_states_tests.aws
env = message_states_tests.env


@pytest.fixture(scope="module")
def tenant(db_url):
    with connect(db_url) as c:
        return make_tenant(c, T)


@pytest.fixture(autouse=True)
def clean(db_url):
    with connect(db_url) as c:
        c.execute("DELETE FROM mail_suppressions")
        c.execute("DELETE FROM mail_suppression_removals")
        c.execute("DELETE FROM mail_opt_outs")
        c.execute("DELETE FROM notice_mail_opt_outs")
        c.execute("DELETE FROM person_erasures")
        c.commit()


def _u(name: str) -> str:
    return f"{T}-{name}"


def _address(name: str) -> str:
    return f"{T}.{name}@x.test"


def _schedule(conn, tenant, name: str, recipients=("rita", "ron")):
    schedule, _ = create_query_schedule(
        conn, workspace_id=tenant.workspace_id, actor=_u("olga"),
        new=NewQuerySchedule(name=name, recurrence={"cron": "0 7 * * *", "timezone": "UTC"},
                             source=Source("query", tenant.query_id), format="csv",
                             recipients=[_u(r) for r in recipients], subject_template="Invoices {{ run_date }}",
                             body_template="Hello {{ recipient_name }}: {{ link }}"), now=NOW)
    return schedule


def _columns_holding(conn, needle: str) -> set[str]:
    """Every ``table.column`` of the public schema (text, varchar, char, json, jsonb, text[])
    with a value containing ``needle``, whatever the case, the platform's directory left out."""
    columns = conn.execute("""
        SELECT c.table_name, c.column_name, c.data_type
          FROM information_schema.columns c
          JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
         WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE'
           AND (c.data_type IN ('text', 'character varying', 'character', 'json', 'jsonb')
                OR (c.data_type = 'ARRAY' AND c.udt_name IN ('_text', '_varchar')))
         ORDER BY 1, 2""").fetchall()
    assert len(columns) > 100, "the scan reads the whole schema"
    found = set()
    for col in columns:
        if col["table_name"] in PLATFORM_DIRECTORY or col["table_name"] == "schema_migrations":
            continue
        hit = conn.execute(f'SELECT 1 FROM "{col["table_name"]}" WHERE "{col["column_name"]}"::text ILIKE %s LIMIT 1',
                           (f"%{needle}%",)).fetchone()
        if hit:
            found.add(f"{col['table_name']}.{col['column_name']}")
    return found


def _deliveries(conn, workspace_id, run_id):
    return {d.user_id: d for d in dl.list_deliveries(conn, workspace_id=workspace_id, run_id=run_id)}


def test_after_an_erasure_no_column_holds_the_address_and_every_count_stays(conn, env, aws, tenant):
    # Given a delivery to Rita and Ron; Rita's message bounced permanently (her address is
    # suppressed) and she opted out of a second schedule's messages
    schedule = _schedule(conn, tenant, "Erasure: daily")
    other = _schedule(conn, tenant, "Erasure: weekly", recipients=("rita", "cleo"))
    run_id = _deliver(conn, env, schedule)
    rita = next(s for s in env.mailer.sent if s["to"] == _address("rita"))
    _publish(aws, ses_event("bounce", rita["id"], rita["to"]))
    assert all(not r["failed"] for r in _drain(aws))
    assert opt_outs.record_opt_out(conn, opt_outs.OptOutLink(tenant.workspace_id, other.id, run_id,
                                                             _u("rita")), now=NOW)
    conn.commit()
    # (the scan sees her address where it is held, so it can see it anywhere)
    assert _columns_holding(conn, _address("rita")) == {"query_deliveries.address", "mail_suppressions.address"}
    counts = "SELECT status, count(*) AS n FROM query_deliveries GROUP BY status ORDER BY status"
    counts_before = conn.execute(counts).fetchall()
    ron_before = _deliveries(conn, tenant.workspace_id, run_id)[_u("ron")]

    # When staff erase Rita
    erased = erasure.erase_person(conn, user_id=_u("rita"), actor="staff-1", now=NOW + timedelta(days=3))
    conn.commit()

    # Then it says what it removed, recorded by her id's digest
    assert erased == erasure.Erasure(user_digest=hashlib.sha256(_u("rita").encode()).hexdigest(), recipient_lists=2,
                                     opt_outs=1, delivery_addresses=1, suppressions=1)
    assert conn.execute("SELECT user_digest FROM person_erasures").fetchall() == [{"user_digest": erased.user_digest}]
    # And no column of ours holds her address any more
    assert _columns_holding(conn, _address("rita")) == set()
    # And her delivery row stays with its outcome; the counts are the same; Ron's row is untouched
    rows = _deliveries(conn, tenant.workspace_id, run_id)
    assert (rows[_u("rita")].status, rows[_u("rita")].address) == ("sent", None)
    assert conn.execute("SELECT address_erased_at FROM query_deliveries WHERE run_id = %s AND user_id = %s",
                        (run_id, _u("rita"))).fetchone()["address_erased_at"] == NOW + timedelta(days=3)
    assert conn.execute(counts).fetchall() == counts_before
    assert rows[_u("ron")] == ron_before
    # And she is on no recipient list; each schedule's history says so, with the lists
    assert list_recipients(conn, workspace_id=tenant.workspace_id, schedule_id=schedule.id) == [_u("ron")]
    assert list_recipients(conn, workspace_id=tenant.workspace_id, schedule_id=other.id) == [_u("cleo")]
    event = conn.execute("""SELECT actor, reason, detail FROM schedule_events
                             WHERE schedule_id = %s AND kind = 'updated' ORDER BY id DESC LIMIT 1""",
                         (schedule.id,)).fetchone()
    assert event == {"actor": "staff-1", "reason": "person_erased", "detail": {"changes": {"recipients": {
        "from": sorted([_u("rita"), _u("ron")]), "to": [_u("ron")]}}}}
    # And her opt-out and suppression are gone; her message states stay (they name her id only)
    assert opt_outs.list_opt_outs(conn, workspace_id=tenant.workspace_id, schedule_id=other.id) == []
    assert ms.list_suppressions(conn, workspace_id=tenant.workspace_id) == []
    assert ms.states_of_run(conn, workspace_id=tenant.workspace_id, run_id=run_id)[_u("rita")].state == "bounced"

    # And the next run sends to Ron only
    env.mailer.sent.clear()
    _deliver(conn, env, schedule, day=1)
    assert [s["to"] for s in env.mailer.sent] == [_address("ron")]

    # And erasing her again removes nothing more
    again = erasure.erase_person(conn, user_id=_u("rita"), actor="staff-1", now=NOW + timedelta(days=4))
    assert dataclasses.astuple(again)[1:] == (0, 0, 0, 0)


def _ritas_message_reported(conn, env, aws, tenant, name: str, event: str):
    """A delivery of a new schedule ``name`` to Rita and Ron, and SES's ``event`` (bounce,
    complaint) for Rita's message consumed; returns the run id and Rita's sent message."""
    schedule = _schedule(conn, tenant, name)
    run_id = _deliver(conn, env, schedule)
    rita = next(s for s in env.mailer.sent if s["to"] == _address("rita"))
    _publish(aws, ses_event(event, rita["id"], rita["to"]))
    assert all(not r["failed"] for r in _drain(aws))
    return run_id, rita


def _anonymized(conn, run_id) -> None:
    """Rita's delivery row of ``run_id`` lost its address, as the retention pass does it."""
    conn.execute("UPDATE query_deliveries SET address = NULL, address_erased_at = %s"
                 " WHERE run_id = %s AND user_id = %s", (NOW + timedelta(days=1), run_id, _u("rita")))


def test_an_erasure_deletes_the_suppression_removal_records_and_notice_opt_outs_of_the_person(
        conn, env, aws, tenant):
    # Given Rita's message bounced, an admin took her address off the suppression list (the
    # removal record holds the address), and she opted out of the workspace's notice e-mails
    run_id, _ = _ritas_message_reported(conn, env, aws, tenant, "Erasure: removals", "bounce")
    assert ms.remove_suppression(conn, workspace_id=tenant.workspace_id, address=_address("rita").upper(),
                                 actor=_u("admin"), reason="mailbox fixed", now=NOW + timedelta(hours=1))
    assert opt_outs.record_notice_opt_out(conn, opt_outs.NoticeOptOutLink(tenant.workspace_id, _u("rita")),
                                          now=NOW + timedelta(hours=2))
    # And the retention pass already erased her delivery row's address: only the removal
    # record and the directory know it now
    _anonymized(conn, run_id)
    conn.commit()
    assert _columns_holding(conn, _address("rita")) == {"mail_suppression_removals.address"}

    # When staff erase her
    erased = erasure.erase_person(conn, user_id=_u("rita"), actor="staff-1", now=NOW + timedelta(days=3))
    conn.commit()

    # Then the removal record and the notice opt-out are gone, counted with the others
    assert (erased.suppressions, erased.opt_outs) == (1, 1)
    assert _columns_holding(conn, _address("rita")) == set()
    assert ms.list_suppression_removals(conn, workspace_id=tenant.workspace_id) == []
    assert opt_outs.notice_opted_out_at(conn, workspace_id=tenant.workspace_id, user_id=_u("rita")) is None
    # And Ron's delivery row keeps its address
    assert _deliveries(conn, tenant.workspace_id, run_id)[_u("ron")].address == _address("ron")


def test_an_erasure_finds_a_suppression_by_the_directorys_address_when_no_delivery_row_holds_it(
        conn, env, aws, tenant):
    # Given Rita's address is suppressed, and every delivery row of hers was anonymized
    run_id, rita = _ritas_message_reported(conn, env, aws, tenant, "Erasure: directory", "complaint")
    # (and no message event of hers names the message: the entry is the address alone)
    conn.execute("DELETE FROM message_events WHERE provider_message_id = %s", (rita["id"],))
    _anonymized(conn, run_id)
    conn.commit()
    assert _columns_holding(conn, _address("rita")) == {"mail_suppressions.address"}
    # When staff erase her, the platform directory's address of hers finds the entry
    erased = erasure.erase_person(conn, user_id=_u("rita"), actor="staff-1", now=NOW + timedelta(days=3))
    conn.commit()
    assert erased.suppressions == 1
    assert _columns_holding(conn, _address("rita")) == set()


def test_an_attempt_sending_when_the_erasure_commits_writes_no_address(conn, env, aws, tenant, db_url):
    # Given a run whose attempt resolved Rita and Ron, and Rita is erased (by another
    # connection, committed) while her message is being submitted
    schedule = _schedule(conn, tenant, "Erasure: in flight")
    inner = env.mailer

    class ErasingMailer:
        def send(self, *, to, subject, html, text, headers=None):
            message_id = inner.send(to=to, subject=subject, html=html, text=text, headers=headers)
            if to == _address("rita"):
                with connect(db_url) as staff:
                    erasure.erase_person(staff, user_id=_u("rita"), actor="staff-1",
                                         now=NOW + timedelta(hours=1, minutes=2))
                    staff.commit()
            return message_id

    env.services = dataclasses.replace(env.services, mailer=ErasingMailer())
    # When the attempt records her submission after the erasure
    run_id = _deliver(conn, env, schedule)
    # Then her row is sent without an address (erased at the erasure's instant); Ron's keeps his
    rows = conn.execute("""SELECT user_id, status, address, address_erased_at FROM query_deliveries
                            WHERE run_id = %s ORDER BY user_id""", (run_id,)).fetchall()
    assert [(r["user_id"], r["status"], r["address"], r["address_erased_at"]) for r in rows] == [
        (_u("rita"), "sent", None, NOW + timedelta(hours=1, minutes=2)),
        (_u("ron"), "sent", _address("ron"), None)]
    assert sorted(s["to"] for s in inner.sent) == [_address("rita"), _address("ron")]


def test_a_later_run_of_a_person_added_back_keeps_their_address(conn, env, aws, tenant):
    # Given Rita erased, then added to a schedule again by its owner (a new consent)
    erasure.erase_person(conn, user_id=_u("rita"), actor="staff-1", now=NOW)
    conn.commit()
    schedule = _schedule(conn, tenant, "Erasure: added back", recipients=("rita",))
    # When its next run sends to her
    run_id = _deliver(conn, env, schedule)
    # Then the row keeps her address (the run was queued after the erasure)
    assert _deliveries(conn, tenant.workspace_id, run_id)[_u("rita")].address == _address("rita")
