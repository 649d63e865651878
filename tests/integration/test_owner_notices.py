"""Owners are told: pauses (five failures, lost access, an invalid definition), stale skips
and failed posting jobs become one notice per (event, recipient), listed in the product and
mailed through the per-recipient outbox with a digest; the owner hand-off pauses a departed
owner's schedules as ownerless until an admin reassigns them. Real PostgreSQL, the real
dispatcher and consumer, moto SES."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from tests.support import ListNotifier, ListPublisher, dispatch_settings
from timekeeper.aws.ses import SesMailer
from timekeeper.platform import notices
from timekeeper.platform.directory import (
    add_member,
    create_workspace,
    leave_workspace,
    set_notify_admins,
    set_user_status,
    upsert_user,
)
from timekeeper.reporting import store
from timekeeper.reporting.notice_mail import DIGEST_WINDOW, send_notice_mail
from timekeeper.reporting.query_schedules import (
    NewQuerySchedule,
    OwnerRefused,
    Source,
    create_query_schedule,
    reassign_owner,
    update_query_schedule,
)
from timekeeper.reporting.work_kinds import register as register_queries
from timekeeper.schedules import service
from timekeeper.schedules.consumer import ConsumerSettings, process_run
from timekeeper.schedules.dispatcher import dispatch
from timekeeper.schedules.notifications import Notice, enqueue_notifications
from timekeeper.schedules.work import Refused, Succeeded, WorkKindRegistry

NOW = datetime(2027, 3, 1, 6, tzinfo=UTC)
SENDER = "notices@timekeeper.test"
DAILY = {"calendar": {"frequency": "daily", "times": ["07:00"]}, "timezone": "Europe/Berlin"}
SUBJECT = "{{ schedule_name }}"
BODY = '<p><a href="{{ link }}">download</a></p>'


@pytest.fixture
def ses(monkeypatch):
    credentials = {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1"}
    for key, value in credentials.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client = boto3.client("ses")
        client.verify_email_identity(EmailAddress=SENDER)
        yield client


@pytest.fixture(autouse=True)
def quiet(conn):
    """Each test starts with every earlier test's events told and notices mailed (the
    module's database is shared), so its passes' counts are its own."""
    conn.execute("UPDATE schedule_notifications SET people_at = created_at WHERE people_at IS NULL")
    conn.execute("UPDATE owner_notices SET mail_key = 'earlier', mailed_at = created_at WHERE mailed_at IS NULL")


@pytest.fixture
def mailer(ses):
    return SesMailer(ses, SENDER)


class Tenant:
    def __init__(self, workspace_id: UUID, name: str, query_id: UUID):
        self.workspace_id, self.name, self.query_id = workspace_id, name, query_id

    def user(self, short: str) -> str:
        return f"{self.name}-{short}"


def make_tenant(conn, name: str) -> Tenant:
    with conn.transaction():
        ws = create_workspace(conn, name=name, timezone="Europe/Berlin", now=NOW).id
        for short, roles, email in (("olga", ["queries:write"], True), ("ada", ["workspace:admin"], True),
                                    ("rita", ["queries:read"], True), ("bert", ["queries:write"], True),
                                    ("vic", ["schedules:read"], True), ("noe", ["queries:write"], False)):
            uid = f"{name}-{short}"
            upsert_user(conn, user_id=uid, display_name=short.title(),
                        email=f"{uid}@x.test" if email else None, now=NOW)
            add_member(conn, workspace_id=ws, user_id=uid, roles=roles, now=NOW - timedelta(days=30))
        query, _ = store.create_query(conn, workspace_id=ws, name="Open invoices", actor=f"{name}-olga", now=NOW,
                                      definition={"entity": "invoices", "columns": ["number"]})
    return Tenant(ws, name, query.id)


def make_schedule(conn, tenant: Tenant, owner: str = "olga", name: str = "Daily invoices") -> UUID:
    schedule, _ = create_query_schedule(
        conn, workspace_id=tenant.workspace_id, actor=tenant.user(owner),
        new=NewQuerySchedule(name=name, recurrence=DAILY, source=Source("query", query_id=tenant.query_id),
                             format="csv", recipients=[tenant.user("rita")], subject_template=SUBJECT,
                             body_template=BODY), now=NOW)
    return schedule.id


def notices_of(conn, tenant: Tenant, short: str) -> list[notices.OwnerNotice]:
    return notices.list_notices(conn, workspace_id=tenant.workspace_id, user_id=tenant.user(short))


def notice_messages(conn, tenant: Tenant, short: str) -> list[dict]:
    return conn.execute("SELECT communication_key, provider_message_id, sent_at FROM query_delivery_outbox "
                        "WHERE run_id IS NULL AND workspace_id = %s AND user_id = %s ORDER BY sent_at",
                        (tenant.workspace_id, tenant.user(short))).fetchall()


def queries_registry() -> WorkKindRegistry:
    registry = WorkKindRegistry()
    register_queries(registry)
    return registry


def test_a_stale_skip_after_an_outage_tells_the_owner_once_and_mails_them(conn, mailer, ses):
    # Given a query schedule whose dispatcher was down for a day (its 07:00 delivery is stale)
    tenant = make_tenant(conn, "stale")
    schedule_id = make_schedule(conn, tenant)
    later = NOW + timedelta(days=1, hours=10)
    # When the dispatcher returns, and the people pass runs twice (a repeat tells nothing new)
    report = dispatch(conn, dispatch_settings("queries"), now=later,
                      publisher=ListPublisher(), registry=queries_registry())
    assert report.stale_skipped == 1
    assert notices.tell_people(conn, now=later) == {"events": 1, "notices": 1}
    assert notices.tell_people(conn, now=later) == {"events": 0, "notices": 0}
    # Then the owner (only: the workspace does not ask for admin copies) has one notice
    [notice] = notices_of(conn, tenant, "olga")
    assert (notice.kind, notice.audience, notice.schedule_id, notice.reason) == (
        "delivery_skipped_stale", "owner", schedule_id, "skipped_stale")
    assert notices_of(conn, tenant, "ada") == []
    # And one e-mail through the per-recipient outbox, its provider id recorded
    assert send_notice_mail(conn, mailer=mailer, now=later)["sent"] == 1
    [message] = notice_messages(conn, tenant, "olga")
    assert message["communication_key"].startswith(f"notice:{tenant.workspace_id}:{tenant.user('olga')}:")
    assert message["provider_message_id"]
    assert notices_of(conn, tenant, "olga")[0].mailed_at == later
    # And a second mail pass sends nothing more
    assert send_notice_mail(conn, mailer=mailer, now=later + timedelta(hours=2))["sent"] == 0
    assert ses.get_send_quota()["SentLast24Hours"] == 1


def test_an_invalid_definition_pause_tells_the_owner_and_the_admins_when_the_workspace_asks(conn):
    # Given a workspace that wants its admins told, and a schedule whose saved rule no longer validates
    tenant = make_tenant(conn, "invalid")
    set_notify_admins(conn, tenant.workspace_id, True)
    schedule_id = make_schedule(conn, tenant)
    conn.execute("UPDATE schedules SET recurrence = '{\"cron\": \"61 * * * *\"}' WHERE id = %s", (schedule_id,))
    # When the dispatcher claims it
    report = dispatch(conn, dispatch_settings("queries"), now=NOW + timedelta(days=1), publisher=ListPublisher(),
                      registry=queries_registry(), notifier=ListNotifier())
    assert report.paused_invalid == 1
    notices.tell_people(conn, now=NOW + timedelta(days=1))
    # Then the owner and the admin are told, once each, with the reason
    assert [(n.kind, n.reason, n.audience) for n in notices_of(conn, tenant, "olga")] == [
        ("schedule_paused", "definition_invalid", "owner")]
    assert [(n.kind, n.audience) for n in notices_of(conn, tenant, "ada")] == [("schedule_paused", "admin")]
    # And a plain member is not
    assert notices_of(conn, tenant, "rita") == []


def test_five_failures_in_a_row_pause_and_tell_the_owner_and_the_operators_topic_as_before(conn, utc):
    # Given a generic schedule whose work fails every time
    tenant = make_tenant(conn, "streak")
    owner = tenant.user("bert")
    schedule = service.create_schedule(conn, workspace_id=tenant.workspace_id, owner="accounting",
                                       work_kind="boom", recurrence={"cron": "0 * * * *",
                                                                     "timezone": "UTC"}, actor=owner, now=NOW)
    registry = WorkKindRegistry()
    registry.register("accounting", "boom", lambda ctx: Refused("broken", "it broke"))
    settings = ConsumerSettings(owner="accounting", lease=timedelta(minutes=2), max_receive_count=5,
                                failure_threshold=5)
    topic = ListNotifier()
    now = NOW
    for _ in range(5):
        now += timedelta(hours=1)
        publisher = ListPublisher()
        dispatch(conn, dispatch_settings("accounting"), now=now, publisher=publisher, registry=registry, notifier=topic)
        for message in publisher.sent:
            process_run(conn, message, receive_count=1, now=now, registry=registry, settings=settings)
            # When the same run message is delivered twice
            process_run(conn, message, receive_count=2, now=now, registry=registry, settings=settings)
    dispatch(conn, dispatch_settings("accounting"), now=now + timedelta(minutes=1), publisher=ListPublisher(),
             registry=registry, notifier=topic)
    assert service.get_state(conn, workspace_id=tenant.workspace_id, schedule_id=schedule.id).pause_reason == (
        "consecutive_failures")
    notices.tell_people(conn, now=now)
    # Then the owner was told of the streak's first failure and of the pause (newest first),
    # once each, and the topic got its pause notice as before (failure notices are people's)
    assert [(n.kind, n.reason) for n in notices_of(conn, tenant, "bert")] == [
        ("schedule_paused", "consecutive_failures"), ("schedule_failed", "broken")]
    assert [n["subject"] for n in topic.notices] == ["Timekeeper accounting: schedule_paused"]


def failing_schedule(conn, tenant: Tenant, **options):
    """An hourly accounting schedule of ``tenant``'s bert whose work fails, and a function
    running its next ``n`` occurrences (failing, or succeeding with ``ok=True``)."""
    schedule = service.create_schedule(conn, workspace_id=tenant.workspace_id, owner="accounting",
                                       work_kind="flaky", recurrence={"cron": "0 * * * *", "timezone": "UTC"},
                                       actor=tenant.user("bert"), now=NOW, name="Hourly roll", **options)
    verdict = {"ok": False}
    registry = WorkKindRegistry()
    registry.register("accounting", "flaky",
                      lambda ctx: Succeeded() if verdict["ok"] else Refused("ledger_closed", "the ledger is closed"))
    settings = ConsumerSettings(owner="accounting", lease=timedelta(minutes=2), max_receive_count=5,
                                failure_threshold=5)
    clock = {"now": NOW}

    def run(n: int, *, ok: bool = False) -> None:
        verdict["ok"] = ok
        for _ in range(n):
            clock["now"] += timedelta(hours=1)
            publisher = ListPublisher()
            dispatch(conn, dispatch_settings("accounting"), now=clock["now"], publisher=publisher, registry=registry,
                     notifier=ListNotifier())
            for message in publisher.sent:
                process_run(conn, message, receive_count=1, now=clock["now"], registry=registry,
                            settings=settings)
        notices.tell_people(conn, now=clock["now"])
    return schedule, run


def test_the_first_failure_of_a_streak_tells_the_owner_in_words_with_a_link(conn):
    from timekeeper.reporting.notice_mail import compose

    # Given a schedule whose owner chose nothing (first failure is the default)
    tenant = make_tenant(conn, "first")
    schedule, run = failing_schedule(conn, tenant)
    assert schedule.notify_on == "first_failure"
    # When it fails twice, succeeds, then fails again
    run(2)
    run(1, ok=True)
    run(1)
    # Then the owner was told of each streak's first failure only, with the outcome
    told = notices_of(conn, tenant, "bert")
    assert [(n.kind, n.reason, n.detail["consecutive_failures"]) for n in told] == [
        ("schedule_failed", "ledger_closed", 1), ("schedule_failed", "ledger_closed", 1)]
    # And its message says what failed, why, what happens next, and links the schedule
    row = {"kind": "schedule_failed", "reason": told[0].reason, "schedule_name": "Hourly roll",
           "schedule_id": schedule.id, "detail": told[0].detail, "created_at": told[0].created_at}
    subject, markup, text = compose([row], display_name="Bert", workspace_name="Spree",
                                    base_url="https://tk.example/v1/")
    assert subject == "[Timekeeper] \u201cHourly roll\u201d failed"
    assert "the ledger is closed" in text and "ledger_closed" not in text
    assert "runs again at its next occurrence" in text
    link = f"https://tk.example/v1/console/open/{schedule.id}"
    assert link in text and f'href="{link}"' in markup


@pytest.mark.parametrize(("notify_on", "kinds"), [
    ("every_failure", ["schedule_paused"] + ["schedule_failed"] * 4),
    ("first_failure", ["schedule_paused", "schedule_failed"]),
    ("pause_only", ["schedule_paused"]),
])
def test_the_owner_chooses_which_failures_they_hear_of(conn, notify_on, kinds):
    # Given a schedule whose owner chose ``notify_on``
    tenant = make_tenant(conn, f"choice-{notify_on}")
    schedule, run = failing_schedule(conn, tenant, notify_on=notify_on)
    assert schedule.notify_on == notify_on
    # When it fails five times in a row (the fifth pauses it)
    run(5)
    # Then the owner heard of the failures they chose, and always of the pause (told once:
    # the pausing failure is the pause's notice)
    assert [n.kind for n in notices_of(conn, tenant, "bert")] == kinds


def test_changing_the_choice_changes_no_definition(conn):
    # Given a schedule with the default choice
    tenant = make_tenant(conn, "change")
    schedule, _ = failing_schedule(conn, tenant)
    # When its owner asks to hear of every failure
    updated = service.update_schedule(conn, workspace_id=tenant.workspace_id, schedule_id=schedule.id,
                                      actor=tenant.user("bert"), now=NOW + timedelta(minutes=5),
                                      notify_on="every_failure")
    # Then the choice is kept, the definition version and the next due instant are not touched
    assert updated.notify_on == "every_failure"
    assert (updated.definition_version, updated.next_due_at) == (schedule.definition_version, schedule.next_due_at)


def test_the_same_event_told_twice_is_one_notice_per_recipient(conn):
    # Given one event enqueued twice (a duplicate delivery of the message that decided it)
    tenant = make_tenant(conn, "dup")
    set_notify_admins(conn, tenant.workspace_id, True)
    schedule_id = make_schedule(conn, tenant)
    event = Notice(schedule_id, tenant.workspace_id, "queries", "delivery_skipped_stale", f"stale:{schedule_id}",
                   {"reason": "skipped_stale"})
    with conn.transaction():
        enqueue_notifications(conn, [event], now=NOW)
    notices.tell_people(conn, now=NOW)
    with conn.transaction():
        enqueue_notifications(conn, [event], now=NOW + timedelta(seconds=5))
    # When both are told
    assert notices.tell_people(conn, now=NOW + timedelta(seconds=5)) == {"events": 1, "notices": 0}
    # Then the owner and the admin have one notice each
    assert len(notices_of(conn, tenant, "olga")) == 1 and len(notices_of(conn, tenant, "ada")) == 1


def test_a_flapping_schedule_costs_one_message_then_one_digest_an_hour(conn, mailer, ses):
    # Given a schedule that pauses, and is told at once
    tenant = make_tenant(conn, "flap")
    schedule_id = make_schedule(conn, tenant)

    def pause(at: datetime, n: int) -> None:
        with conn.transaction():
            enqueue_notifications(conn, [Notice(schedule_id, tenant.workspace_id, "queries", "schedule_paused",
                                                f"paused:{schedule_id}:{n}", {"reason": "source_access_lost"})],
                                  now=at)
        notices.tell_people(conn, now=at)

    pause(NOW, 0)
    assert send_notice_mail(conn, mailer=mailer, now=NOW)["sent"] == 1
    # When it pauses five more times within the hour
    for n in range(1, 6):
        at = NOW + timedelta(minutes=10 * n)
        pause(at, n)
        counts = send_notice_mail(conn, mailer=mailer, now=at)
        # Then nothing is mailed inside the window
        assert counts["sent"] == 0 and counts["waiting"] == 1
    # And when the hour is over, ONE digest carries the five
    counts = send_notice_mail(conn, mailer=mailer, now=NOW + DIGEST_WINDOW)
    assert (counts["sent"], counts["digests"]) == (1, 1)
    messages = notice_messages(conn, tenant, "olga")
    assert len(messages) == 2
    carried = conn.execute("SELECT mail_key, count(*) AS n FROM owner_notices WHERE user_id = %s "
                           "GROUP BY mail_key ORDER BY n", (tenant.user("olga"),)).fetchall()
    assert [row["n"] for row in carried] == [1, 5]
    assert ses.get_send_quota()["SentLast24Hours"] == 2
    # And the product lists all six
    assert len(notices_of(conn, tenant, "olga")) == 6


def test_a_claimed_but_unrecorded_notice_message_is_sent_again_with_the_same_key(conn, mailer):
    # Given a notice whose first submission failed after its claim
    tenant = make_tenant(conn, "retry")
    schedule_id = make_schedule(conn, tenant)
    with conn.transaction():
        enqueue_notifications(conn, [Notice(schedule_id, tenant.workspace_id, "queries", "schedule_paused",
                                            f"paused:{schedule_id}", {"reason": "consecutive_failures"})], now=NOW)
    notices.tell_people(conn, now=NOW)

    class Down:
        def send(self, **_: object) -> str:
            raise ConnectionError("provider unreachable")

    assert send_notice_mail(conn, mailer=Down(), now=NOW)["failed"] == 1
    [claimed] = conn.execute("SELECT communication_key, provider_message_id, last_error FROM query_delivery_outbox "
                             "WHERE run_id IS NULL AND user_id = %s", (tenant.user("olga"),)).fetchall()
    assert claimed["provider_message_id"] is None and claimed["last_error"] == "submission_error"
    # When the next pass runs with the provider back
    assert send_notice_mail(conn, mailer=mailer, now=NOW + timedelta(minutes=1))["sent"] == 1
    # Then the same key carries it (one outbox row), now recorded
    [sent] = notice_messages(conn, tenant, "olga")
    assert sent["communication_key"] == claimed["communication_key"] and sent["provider_message_id"]


def _paused_notice(conn, name: str) -> Tenant:
    """A tenant whose schedule paused, told to its owner olga (her notice waits for mail)."""
    tenant = make_tenant(conn, name)
    schedule_id = make_schedule(conn, tenant)
    with conn.transaction():
        enqueue_notifications(conn, [Notice(schedule_id, tenant.workspace_id, "queries", "schedule_paused",
                                            f"paused:{schedule_id}", {"reason": "consecutive_failures"})], now=NOW)
    notices.tell_people(conn, now=NOW)
    return tenant


def _outbox_of(conn, tenant: Tenant, short: str) -> list[dict]:
    return conn.execute("SELECT communication_key, provider_message_id, last_error, submissions "
                        "FROM query_delivery_outbox WHERE run_id IS NULL AND user_id = %s",
                        (tenant.user(short),)).fetchall()


def test_a_throttled_notice_message_is_submitted_again_by_the_next_pass(conn, mailer):
    # Given SES throttling the first submission (its answer when the sending rate is exceeded)
    tenant = _paused_notice(conn, "throttled")

    class Throttling:
        def send(self, **_: object) -> str:
            raise ClientError({"Error": {"Code": "Throttling", "Message": "Maximum sending rate exceeded."}},
                              "SendEmail")

    assert send_notice_mail(conn, mailer=Throttling(), now=NOW)["failed"] == 1
    [claimed] = _outbox_of(conn, tenant, "olga")
    assert claimed["provider_message_id"] is None and claimed["last_error"] == "throttled"
    # When the next pass runs, the same message goes out under the same key
    assert send_notice_mail(conn, mailer=mailer, now=NOW + timedelta(minutes=1))["sent"] == 1
    [sent] = _outbox_of(conn, tenant, "olga")
    assert sent["communication_key"] == claimed["communication_key"] and sent["provider_message_id"]
    assert sent["submissions"] == 2


def test_a_notice_message_the_provider_rejects_is_never_submitted_again(conn, ses, mailer):
    # Given SES refusing the message permanently: MessageRejected (moto answers so for a
    # sender that is not verified, as SES does)
    tenant = _paused_notice(conn, "rejected")
    counts = send_notice_mail(conn, mailer=SesMailer(ses, "unverified@elsewhere.test"), now=NOW)
    assert (counts["refused"], counts["failed"], counts["sent"]) == (1, 0, 0)
    [refused] = _outbox_of(conn, tenant, "olga")
    assert refused["provider_message_id"] is None and refused["last_error"] == "rejected"
    # When later passes run with a provider that would accept it
    for minutes in (1, 61, 180):
        assert send_notice_mail(conn, mailer=mailer, now=NOW + timedelta(minutes=minutes))["sent"] == 0
    # Then it was never submitted again, and the notice stays listed in the product
    assert ses.get_send_quota()["SentLast24Hours"] == 0
    assert _outbox_of(conn, tenant, "olga") == [refused]
    [notice] = notices_of(conn, tenant, "olga")
    assert notice.mailed_at is not None


def test_a_person_without_an_address_keeps_the_notice_in_the_product(conn, mailer):
    tenant = make_tenant(conn, "nomail")
    schedule_id = make_schedule(conn, tenant, owner="noe")
    with conn.transaction():
        enqueue_notifications(conn, [Notice(schedule_id, tenant.workspace_id, "queries", "schedule_paused",
                                            f"paused:{schedule_id}", {"reason": "consecutive_failures"})], now=NOW)
    notices.tell_people(conn, now=NOW)
    assert send_notice_mail(conn, mailer=mailer, now=NOW)["no_address"] == 1
    assert len(notices_of(conn, tenant, "noe")) == 1 and notice_messages(conn, tenant, "noe") == []


def test_mark_read_changes_only_the_persons_own_notices(conn):
    tenant = make_tenant(conn, "read")
    set_notify_admins(conn, tenant.workspace_id, True)
    schedule_id = make_schedule(conn, tenant)
    with conn.transaction():
        enqueue_notifications(conn, [Notice(schedule_id, tenant.workspace_id, "queries", "schedule_paused",
                                            f"paused:{schedule_id}", {"reason": "consecutive_failures"})], now=NOW)
    notices.tell_people(conn, now=NOW)
    [admins] = notices_of(conn, tenant, "ada")
    assert notices.mark_read(conn, workspace_id=tenant.workspace_id, user_id=tenant.user("olga"), now=NOW,
                             ids=[admins.id]) == 0
    assert notices.mark_read(conn, workspace_id=tenant.workspace_id, user_id=tenant.user("olga"), now=NOW) == 1
    assert notices.count_unread(conn, workspace_id=tenant.workspace_id, user_id=tenant.user("olga")) == 0
    assert notices.count_unread(conn, workspace_id=tenant.workspace_id, user_id=tenant.user("ada")) == 1


# ------------------------------------------------------------------------------ the owner hand-off


def test_an_owner_who_leaves_has_their_schedules_paused_ownerless_and_the_admins_told(conn):
    # Given two schedules of olga's (one active, one paused by her) and one of bert's
    tenant = make_tenant(conn, "leave")
    active = make_schedule(conn, tenant, name="Active")
    paused = make_schedule(conn, tenant, name="Paused")
    service.pause_schedule(conn, workspace_id=tenant.workspace_id, schedule_id=paused, actor=tenant.user("olga"),
                           now=NOW)
    berts = make_schedule(conn, tenant, owner="bert", name="Bert's")
    # When olga leaves the workspace
    with conn.transaction():
        leave_workspace(conn, workspace_id=tenant.workspace_id, user_id=tenant.user("olga"), now=NOW)
    # Then both of hers are paused as ownerless, bert's runs on
    ownerless = service.list_ownerless(conn, workspace_id=tenant.workspace_id)
    assert sorted(s.id for s in ownerless) == sorted([active, paused])
    assert {s.owner_user_id for s in ownerless} == {tenant.user("olga")}
    assert service.get_state(conn, workspace_id=tenant.workspace_id, schedule_id=berts).status == "active"
    events = conn.execute("SELECT kind, reason, detail->>'why' AS why FROM schedule_events WHERE schedule_id = %s "
                          "ORDER BY id DESC LIMIT 1", (active,)).fetchone()
    assert (events["kind"], events["reason"], events["why"]) == ("paused", "ownerless", "left_workspace")
    # And nobody may resume them before an admin reassigns them
    with pytest.raises(service.Ownerless):
        service.resume_schedule(conn, workspace_id=tenant.workspace_id, schedule_id=active,
                                actor=tenant.user("ada"), now=NOW)
    # And the admins are told (the departed owner is not: she is no longer a member)
    notices.tell_people(conn, now=NOW)
    assert sorted(n.kind for n in notices_of(conn, tenant, "ada")) == ["schedule_ownerless"] * 2
    assert notices_of(conn, tenant, "olga") == []


def test_a_deactivated_owner_is_handed_off_in_every_workspace(conn):
    tenant = make_tenant(conn, "deact")
    schedule_id = make_schedule(conn, tenant)
    with conn.transaction():
        set_user_status(conn, tenant.user("olga"), "deactivated", now=NOW)
    assert service.get_state(conn, workspace_id=tenant.workspace_id, schedule_id=schedule_id).pause_reason == (
        "ownerless")
    with pytest.raises(ValueError):
        set_user_status(conn, tenant.user("bert"), "deactivated")


def test_an_admin_reassigns_an_ownerless_schedule_to_someone_the_access_rule_allows(conn):
    # Given an ownerless schedule
    tenant = make_tenant(conn, "reassign")
    schedule_id = make_schedule(conn, tenant)
    with conn.transaction():
        leave_workspace(conn, workspace_id=tenant.workspace_id, user_id=tenant.user("olga"), now=NOW)
    # When an admin proposes someone who may not read the source
    with pytest.raises(OwnerRefused) as refused:
        reassign_owner(conn, workspace_id=tenant.workspace_id, schedule_id=schedule_id,
                       owner_user_id=tenant.user("vic"), actor=tenant.user("ada"), now=NOW)
    assert refused.value.reason == "missing_role"
    # Or the departed owner again
    with pytest.raises(OwnerRefused):
        reassign_owner(conn, workspace_id=tenant.workspace_id, schedule_id=schedule_id,
                       owner_user_id=tenant.user("olga"), actor=tenant.user("ada"), now=NOW)
    # Then reassigning to bert (who may read it) makes him the acting owner, and resuming works
    settings = reassign_owner(conn, workspace_id=tenant.workspace_id, schedule_id=schedule_id,
                              owner_user_id=tenant.user("bert"), actor=tenant.user("ada"), now=NOW)
    assert settings.owner_user_id == tenant.user("bert")
    assert service.get_owner(conn, workspace_id=tenant.workspace_id, schedule_id=schedule_id) == tenant.user("bert")
    assert service.list_ownerless(conn, workspace_id=tenant.workspace_id) == []
    resumed = service.resume_schedule(conn, workspace_id=tenant.workspace_id, schedule_id=schedule_id,
                                      actor=tenant.user("bert"), now=NOW)
    assert resumed.status == "active"
    event = conn.execute("SELECT actor, detail FROM schedule_events WHERE schedule_id = %s AND kind = 'owner_changed'",
                         (schedule_id,)).fetchone()
    assert event["actor"] == tenant.user("ada")
    assert (event["detail"]["from"], event["detail"]["to"]) == (tenant.user("olga"), tenant.user("bert"))


# ------------------------------------------------------------------------------ the audit trail


def test_every_settings_change_of_a_query_schedule_is_a_history_event_with_actor_and_time(conn):
    tenant = make_tenant(conn, "audit")
    schedule_id = make_schedule(conn, tenant)
    at = NOW + timedelta(hours=3)
    update_query_schedule(conn, workspace_id=tenant.workspace_id, schedule_id=schedule_id, actor=tenant.user("bert"),
                          now=at, recipients=[tenant.user("rita"), tenant.user("bert")], skip_when_empty=True,
                          subject_template="New {{ schedule_name }}")
    [event] = conn.execute("SELECT actor, at, detail FROM schedule_events WHERE schedule_id = %s "
                           "AND reason = 'settings_changed'", (schedule_id,)).fetchall()
    assert (event["actor"], event["at"]) == (tenant.user("bert"), at)
    changes = event["detail"]["changes"]
    assert set(changes) == {"recipients", "skip_when_empty", "subject_template"}
    assert changes["recipients"] == {"from": [tenant.user("rita")],
                                     "to": sorted([tenant.user("rita"), tenant.user("bert")])}
    assert changes["skip_when_empty"] == {"from": False, "to": True}
    # And a change that changes nothing records nothing
    update_query_schedule(conn, workspace_id=tenant.workspace_id, schedule_id=schedule_id, actor=tenant.user("bert"),
                          now=at, skip_when_empty=True)
    assert conn.execute("SELECT count(*) AS n FROM schedule_events WHERE schedule_id = %s "
                        "AND reason = 'settings_changed'", (schedule_id,)).fetchone()["n"] == 1


# ------------------------------------------------------------------------------ failed posting jobs


def test_a_failed_posting_job_tells_the_schedules_owner_and_a_retry_puts_it_back_for_the_sweep(conn):
    from tests.integration.accounting_helpers import execute, spec
    from tests.integration.test_accounting_work_kinds import standalone_batch
    from timekeeper.accounting import posting

    # Given an unbalanced batch closed by a scheduled auto-close run (the real dispatcher and
    # consumer; the run's after-commit callback starts the posting job, which fails)
    tenant = make_tenant(conn, "posting")
    close_at = datetime(2027, 2, 12, 18, 0)
    batch = standalone_batch(conn, tenant.workspace_id, close_at=close_at.replace(tzinfo=UTC),
                             amounts=("10.00", "-9.00"))
    run = execute(conn, spec("batch.auto_close", tenant.workspace_id, batch.id, close_at))
    conn.execute("UPDATE schedules SET owner_user_id = %s WHERE workspace_id = %s",
                 (tenant.user("bert"), tenant.workspace_id))
    [job] = posting.list_failed_jobs(conn, workspace_id=tenant.workspace_id)
    assert job.requested_by_run_id == run.run_id
    # When the people pass runs
    notices.tell_people(conn, now=NOW)
    # Then the schedule's owner is told which batch
    [notice] = notices_of(conn, tenant, "bert")
    assert (notice.kind, notice.reason, notice.detail["batch_id"]) == ("posting_failed", "posting_failed",
                                                                       str(batch.id))
    assert posting.count_failed_jobs(conn) >= 1
    # And a retry puts it back to pending (the sweep starts it), idempotently
    with conn.transaction():
        assert posting.request_retry(conn, workspace_id=tenant.workspace_id, job_id=job.id).status == "pending"
        assert posting.request_retry(conn, workspace_id=tenant.workspace_id, job_id=job.id).status == "pending"
    assert posting.list_failed_jobs(conn, workspace_id=tenant.workspace_id) == []
    # And failing again is a new event: a second notice
    assert posting.start_posting_job(conn, job.id, NOW + timedelta(minutes=5)) == "failed"
    notices.tell_people(conn, now=NOW + timedelta(minutes=5))
    assert len(notices_of(conn, tenant, "bert")) == 2


def test_a_notice_message_says_what_happened_and_why_the_person_gets_it():
    from timekeeper.reporting.notice_mail import compose

    stale = {"kind": "delivery_skipped_stale", "reason": "skipped_stale", "schedule_name": "Daily <invoices>",
             "detail": {"occurrence_at": "2027-03-02T06:00:00+00:00"}, "created_at": NOW}
    paused = {"kind": "schedule_paused", "reason": "consecutive_failures", "schedule_name": "Weekly",
              "detail": {}, "created_at": NOW + timedelta(minutes=5)}
    subject, markup, text = compose([stale], display_name="Olga", workspace_name="Spree")
    assert subject == "[Timekeeper] A delivery of \u201cDaily <invoices>\u201d was skipped"
    assert "due 2027-03-02 06:00 UTC" in text and "Hello Olga," in text and "you own these schedules in Spree" in text
    assert "&lt;invoices&gt;" in markup and "<invoices>" not in markup
    subject, _, text = compose([stale, paused], display_name="Olga", workspace_name="Spree")
    assert subject == "[Timekeeper] 2 notices about your schedules in Spree"
    assert "failed five times in a row" in text and text.count("\n- ") == 2


def test_a_notice_message_gives_its_instants_in_the_workspaces_zone_with_utc_beside():
    from timekeeper.reporting.notice_mail import compose

    stale = {"kind": "delivery_skipped_stale", "reason": "skipped_stale", "schedule_name": "Daily",
             "detail": {"occurrence_at": "2027-03-02T06:00:00+00:00"}, "created_at": NOW}
    paused = {"kind": "schedule_paused", "reason": "consecutive_failures", "schedule_name": "Weekly",
              "detail": {}, "created_at": NOW + timedelta(minutes=5)}
    # Berlin is UTC+1 in March before its change: 06:00 UTC is 07:00 CET
    _, markup, text = compose([stale, paused], display_name="Olga", workspace_name="Spree", zone="Europe/Berlin")
    assert "due 2027-03-02 07:00 CET (06:00 UTC)" in text
    assert "- 2027-03-01 07:00 CET (06:00 UTC) - A delivery of" in text
    assert "- 2027-03-01 07:05 CET (06:05 UTC) - \u201cWeekly\u201d was paused" in text
    assert "2027-03-01 07:00 CET (06:00 UTC)" in markup
    # New York is UTC-5 then: 03:00 UTC is the evening before there, so the UTC side names its date
    late = {**stale, "detail": {"occurrence_at": "2027-03-02T03:00:00+00:00"}}
    _, _, text = compose([late], display_name="Olga", workspace_name="Spree", zone="America/New_York")
    assert "due 2027-03-01 22:00 EST (2027-03-02 03:00 UTC)" in text
    # A workspace in UTC reads UTC alone
    _, _, text = compose([stale], display_name="Olga", workspace_name="Spree", zone="UTC")
    assert "due 2027-03-02 06:00 UTC was skipped" in text


def test_only_partition_zero_of_the_queries_dispatcher_tells_and_mails_owners(conn, db_url, mailer, ses,
                                                                               monkeypatch):
    # Given a query schedule whose stale delivery is claimed by partition 1 of the two
    # dispatcher partitions, and the real queries dispatcher function configured as in AWS
    from tests.support import scheduled_event
    from timekeeper import clock, edge
    from timekeeper.edge import adapters
    from timekeeper.local.aws import create_pipeline_queues
    from timekeeper.local.lambdas import invoke
    from timekeeper.schedules.dispatcher import Partition
    from timekeeper.topology import QUERIES

    tenant = make_tenant(conn, "parts")
    schedule_id = make_schedule(conn, tenant)
    while not Partition(1, 2).owns(schedule_id):
        service.delete_schedule(conn, workspace_id=tenant.workspace_id, schedule_id=schedule_id, actor="t", now=NOW)
        schedule_id = make_schedule(conn, tenant)
    later = NOW + timedelta(days=1, hours=10)
    for key, value in {"POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_METRICS_NAMESPACE": "Timekeeper",
                       "DATABASE_URL": db_url, "LINK_SIGNING_KEY": "k" * 40}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("RUN_QUEUE_URL_QUERIES", create_pipeline_queues(boto3.client("sqs"), QUERIES).url)
    monkeypatch.setenv("NOTIFICATION_TOPIC_ARN", boto3.client("sns").create_topic(Name="notices")["TopicArn"])
    edge.reset()
    adapters.install_mailer(mailer)
    clock.install(lambda: later)
    try:
        # When partition 1 ticks: it claims the schedule and skips the stale delivery
        assert invoke("queries_dispatcher", scheduled_event(later, {"partition": 1, "partitions": 2}))["claimed"] >= 1
        assert conn.execute("SELECT state FROM schedule_runs WHERE schedule_id = %s",
                            (schedule_id,)).fetchone()["state"] == "skipped"
        # Then nobody is told yet: the people pass is partition 0's alone
        assert notices_of(conn, tenant, "olga") == [] and notice_messages(conn, tenant, "olga") == []
        # When partition 0 ticks (twice: the next minute)
        for _ in range(2):
            invoke("queries_dispatcher", scheduled_event(later, {"partition": 0, "partitions": 2}))
        # Then the owner has one notice and one e-mail
        [notice] = notices_of(conn, tenant, "olga")
        assert (notice.kind, notice.schedule_id, notice.mailed_at) == ("delivery_skipped_stale", schedule_id, later)
        assert len(notice_messages(conn, tenant, "olga")) == 1
    finally:
        adapters.install_mailer(None)
        edge.reset()
        clock.install(None)
