"""The invariants a fault campaign audits at its end (the list: the package's docstring,
:mod:`timekeeper.local.chaos`), each a :class:`~timekeeper.local.chaos.records.Check`;
their queries are the named blocks of ``audit.sql``."""

from __future__ import annotations

import collections
from datetime import timedelta
from typing import Any, Protocol
from uuid import UUID

from timekeeper.db.sql import load_queries
from timekeeper.local.chaos.api import audit_api
from timekeeper.local.chaos.records import ChaosResult, Check, Execution

SQL = load_queries("timekeeper.local.chaos", "audit.sql")


class Campaign(Protocol):
    """What the audit reads of a campaign (:class:`timekeeper.local.chaos.injector.Campaign`,
    which calls the audit at its end): the handler executions, the receives of each message
    and the killed ones by run, the mailer's record (``sends``, ``notice_sends``,
    ``refused``), the API driver (None: no API requests), the result (stalls, notes, the
    counts the audit fills in) and two questions about an invocation's database and a
    message's last receive."""

    executions: list[Execution]
    killed_receives: collections.Counter
    receives: collections.defaultdict[str, list[tuple[int, str]]]
    mailer: Any
    api: Any
    result: ChaosResult

    def lost_database(self, invocation: int) -> bool: ...

    def lost_final_receive(self, message_id: str) -> bool: ...


def audit(conn: Any, stack: Any, campaign: Campaign) -> list[Check]:
    """Check the campaign's invariants (see the package docstring); returns one
    :class:`Check` per invariant."""
    return [_occurrences(conn), _terminal(conn), _no_concurrent_execution(campaign), _stalled_attempts(conn, campaign),
            _accounting_effects(conn),
            _delivery_effects(conn, campaign), _snapshot_effects(conn), _streaks(conn, campaign),
            _queues(conn, stack, campaign), audit_api(conn, campaign.api)]


def _occurrences(conn: Any, last_pass: Any = None) -> Check:
    """Every due occurrence of every schedule has exactly one run, or was counted in a
    run's skipped backlog; an active schedule has nothing left due. An occurrence is due
    once the instant its run is due has passed by the campaign's ``last_pass`` (aware UTC;
    default: the last run queued): its own instant, or with a flexible window the instant
    the window gave it (an occurrence whose window is still open at the end is not owed)."""
    from timekeeper.schedules.recurrence import given_instant, parse_rule_text

    check = Check("every due occurrence has exactly one run (or is counted as skipped backlog)")
    last_pass = last_pass or conn.execute(SQL["last_queued_at"]).fetchone()["at"]
    pauses = {r["schedule_id"]: r["at"] for r in conn.execute(
        SQL["first_pause_by_schedule"]).fetchall()}
    runs: dict[UUID, list[dict[str, Any]]] = collections.defaultdict(list)
    for run in conn.execute(SQL["scheduled_runs"]).fetchall():
        runs[run["schedule_id"]].append(run)
    for schedule in conn.execute(SQL["live_schedules"]).fetchall():
        mine = runs.get(schedule["id"], [])
        if schedule["status"] == "active" and schedule["next_due_at"] is not None \
                and schedule["next_due_at"] <= last_pass:
            check.failures.append(f"{schedule['name']}: still due at {schedule['next_due_at']:%Y-%m-%d %H:%M}")
        if not mine:
            continue
        first = mine[0]["first_skipped_at"] or mine[0]["occurrence_at"]
        until = min(pauses.get(schedule["id"], last_pass), last_pass)
        until = max(until, mine[-1]["occurrence_at"])
        covered: collections.Counter = collections.Counter()
        for run in mine:
            covered[run["occurrence_at"]] += 1
        backlog = [(r["first_skipped_at"], r["occurrence_at"], r["skipped_backlog"]) for r in mine
                   if r["skipped_backlog"]]
        counted = collections.Counter()
        rule = parse_rule_text(schedule["rule_text"])
        occurrences = rule.occurrences_after(first - timedelta(microseconds=1))
        occurrence, following = next(occurrences, None), None
        while occurrence is not None:
            following = next(occurrences, None)
            due = occurrence.at if rule.window is None else given_instant(
                schedule["id"], occurrence.at, rule.window, following.at if following else None)
            if occurrence.at > until or (due > until and occurrence.at > mine[-1]["occurrence_at"]):
                break
            check.checked += 1
            windows = [i for i, (low, high, _) in enumerate(backlog) if low <= occurrence.at < high]
            total = covered[occurrence.at] + len(windows)
            for i in windows:
                counted[i] += 1
            if total != 1:
                check.failures.append(f"{schedule['name']}: occurrence {occurrence.at:%Y-%m-%d %H:%M} has "
                                      f"{covered[occurrence.at]} runs and is in {len(windows)} skipped backlogs")
            occurrence = following
        for i, (low, _high, skipped) in enumerate(backlog):
            if counted[i] != skipped:
                check.failures.append(f"{schedule['name']}: backlog from {low:%Y-%m-%d %H:%M} counts {skipped}, "
                                      f"the rule has {counted[i]}")
    return check


def _terminal(conn: Any) -> Check:
    """Every run and every snapshot run is terminal, or waits for a documented reason."""
    check = Check("every run is terminal (or explained)")
    check.checked = conn.execute(SQL["count_runs"]).fetchone()["n"]
    for run in conn.execute(SQL["unfinished_runs"]).fetchall():
        check.failures.append(f"run {run['id']} of {run['name']} is {run['state']} (attempts {run['attempts']})")
    check.checked += conn.execute(SQL["count_snapshot_runs"]).fetchone()["n"]
    for run in conn.execute(SQL["unfinished_snapshot_runs"]).fetchall():
        check.failures.append(f"snapshot run {run['id']} ({run['snapshot_type']} {run['period']:%Y-%m}) "
                              f"is {run['state']}")
    return check


def _no_concurrent_execution(campaign: Campaign) -> Check:
    """No two attempts of one run executed at once."""
    check = Check("no run executed concurrently (fencing: attempts increase, killed leases respected)")
    by_run: dict[UUID, list[Execution]] = collections.defaultdict(list)
    for execution in campaign.executions:
        by_run[execution.run_id].append(execution)
    for run_id, executions in by_run.items():
        check.checked += len(executions)
        for earlier, later in zip(executions, executions[1:], strict=False):
            if later.attempt <= earlier.attempt:
                check.failures.append(f"run {run_id}: attempt {later.attempt} executed after attempt "
                                      f"{earlier.attempt}")
            if earlier.killed and not earlier.settled and later.started_at < earlier.lease_until:
                check.failures.append(f"run {run_id}: attempt {later.attempt} started at {later.started_at} while "
                                      f"the killed attempt {earlier.attempt} held its lease until "
                                      f"{earlier.lease_until}")
    return check


def _stalled_attempts(conn: Any, campaign: Campaign) -> Check:
    """A stalled attempt whose run was taken over acted no more: the run's outcome is not
    its settlement (a settlement records the attempt's instant as ``finished_at``, and the
    stalled attempt's instant is earlier than every later attempt's), and no delivery
    journal row carries its attempt (it stalled before its first write, so any such row
    was written after it lost its lease). The effect checks count its other writes."""
    check = Check("a stalled attempt never settles or writes after its run was taken over")
    for stall in campaign.result.stalls:
        if not stall.taken_over:
            continue
        check.checked += 1
        run = conn.execute(SQL["run_state"],
                           (stall.run_id,)).fetchone()
        if run["finished_at"] is not None and run["finished_at"] <= stall.stalled_at:
            check.failures.append(f"run {stall.run_id}: settled {run['state']} at {run['finished_at']} by the "
                                  f"stalled attempt {stall.attempt} after attempt {run['attempts']} took it over")
        written = conn.execute(SQL["writes_of_attempt"],
                               {"run": stall.run_id, "attempt": stall.attempt}).fetchone()["n"]
        if written:
            check.failures.append(f"run {stall.run_id}: {written} delivery journal rows written by the stalled "
                                  f"attempt {stall.attempt} after the run was taken over")
    return check


def _accounting_effects(conn: Any) -> Check:
    """Batches opened and closed only by succeeded runs and as they report; one finished
    posting job per closed auto-posting batch; invoices prepared only by succeeded runs."""
    check = Check("accounting effects exist once (batches, posting jobs, invoices)")
    for row in conn.execute(SQL["batches_opened_by_runs"]).fetchall():
        check.checked += 1
        if row["state"] != "succeeded" or row["reported"] != str(row["id"]):
            check.failures.append(f"batch {row['name']} opened by a run that is {row['state']} and reports "
                                  f"{row['reported']}")
    for row in conn.execute(SQL["batch_rolls_succeeded"]).fetchall():
        check.checked += 1
        if (row["reported"] is not None) != (row["opened"] == 1):
            check.failures.append(f"roll run {row['id']} reports {row['reported']} and opened {row['opened']}")
    for row in conn.execute(SQL["closed_auto_posting_batches"]).fetchall():
        check.checked += 1
        if row["jobs"] != 1 or row["job_status"] != "succeeded" or row["status"] != "posted":
            check.failures.append(f"closed batch {row['name']} is {row['status']} with {row['jobs']} posting "
                                  f"job(s) ({row['job_status']})")
    for row in conn.execute(SQL["prepared_invoices"]).fetchall():
        check.checked += 1
        if row["state"] != "succeeded":
            check.failures.append(f"invoice {row['id']} prepared by a run that is {row['state']}")
    return check


def _delivery_effects(conn: Any, campaign: Campaign) -> Check:
    """Each delivery message sent once per (run, recipient), and the recorded one is among
    the sends. An extra message is allowed only in the documented window: the provider
    accepted it, and the invocation that sent it died or lost its database before the
    message id was recorded (the next attempt cannot know it went out). Every ``sent`` row
    is backed by a send, and every succeeded delivery run's recipients are sent, skipped,
    refused permanently by the provider (``failed`` with a permanent ``error_code``) or
    ``unconfirmed`` (a 'sending' claim left by an attempt that died: never sent again).

    The mail provider's refusals (:meth:`.injector.Campaign.refuse_mail`): a recipient the provider
    rejected is recorded ``failed`` / ``rejected`` and never submitted again after the
    recorded rejection (only an attempt that died before recording its rejection is
    followed by another submission); a throttled recipient is retried until it is sent
    (once, as above), skipped or refused, unless its run failed; an owner notice message
    the provider rejected keeps no message id and its notices are closed (never retried).
    """
    from timekeeper.reporting.delivery import NOT_RETRIED_CODES

    check = Check("delivery messages sent once per (run, recipient) (twice only in the documented window)")
    sends = campaign.mailer.sends if campaign.mailer else {}
    recorded = {(str(r["run_id"]), r["user_id"]): r["provider_message_id"] for r in conn.execute(
        SQL["recorded_delivery_messages"]).fetchall()}
    # Owner notice messages (no run): each one recorded was sent once; one sent and not
    # recorded is the documented window (the pass that sent it lost its database before
    # the record committed; the next pass sends it again).
    notices = collections.defaultdict(set)
    for r in conn.execute(SQL["sent_notice_messages"]).fetchall():
        notices[r["email"]].add(r["provider_message_id"])
    notice_sends = campaign.mailer.notice_sends if campaign.mailer else {}
    for address, made in notice_sends.items():
        check.checked += 1
        recorded_ids = notices.get(address, set())
        sent_ids = [message_id for message_id, _ in made]
        unexplained = [message_id for message_id, invocation in made
                       if message_id not in recorded_ids and not campaign.lost_database(invocation)]
        if unexplained or not recorded_ids <= set(sent_ids) or len(sent_ids) != len(set(sent_ids)):
            check.failures.append(f"notice messages to {address}: {len(made)} sent, {len(recorded_ids)} recorded, "
                                  f"{len(unexplained)} unrecorded by passes that kept their database")
        campaign.result.resent_in_window += len(made) - len(recorded_ids)
    for (run_id, user_id), made in sends.items():
        check.checked += 1
        kept = recorded.get((run_id, user_id))
        unrecorded_in_failed = sum(1 for message_id, invocation in made
                                   if message_id != kept and campaign.lost_database(invocation))
        recorded_a_send = kept in {m for m, _ in made} or (kept is None and unrecorded_in_failed == len(made))
        if run_id == "?" or len(made) - unrecorded_in_failed > 1 or not recorded_a_send:
            check.failures.append(f"run {run_id} recipient {user_id}: {len(made)} messages sent, "
                                  f"{unrecorded_in_failed} by attempts that died or lost their database before "
                                  "recording them")
        campaign.result.resent_in_window += len(made) - 1
    deliveries = {}
    for row in conn.execute(SQL["deliveries_with_run_state"]).fetchall():
        check.checked += 1
        key = (str(row["run_id"]), row["user_id"])
        deliveries[key] = row
        if row["status"] == "sent" and not sends.get(key):
            check.failures.append(f"run {key[0]} recipient {key[1]}: recorded sent, never sent")
    refused = campaign.mailer.refused if campaign.mailer else {}
    for key, refusals in refused.items():
        if key[0] == "notice":
            continue  # the notice messages' outbox rows are checked below
        check.checked += 1
        row = deliveries.get(key)
        rejections = [r for r in refusals if r[0] == "MessageRejected"]
        lived = [r for r in rejections if not campaign.lost_database(r[1])]
        if row is not None and row["status"] == "failed" and row["error_code"] == "rejected":
            if refusals[-1][0] != "MessageRejected" or len(sends.get(key, ())) > refusals[-1][2]:
                check.failures.append(f"run {key[0]} recipient {key[1]}: recorded rejected, submitted again after "
                                      f"the rejection")
            if len(lived) > 1:
                check.failures.append(f"run {key[0]} recipient {key[1]}: rejected {len(lived)} times by attempts "
                                      f"that lived (a permanent refusal was retried)")
        elif lived:
            check.failures.append(f"run {key[0]} recipient {key[1]}: rejected by an attempt that lived, recorded "
                                  f"{row['status'] + '/' + str(row['error_code']) if row else 'nothing'}")
        elif row is None or (row["status"] == "failed" and row["error_code"] not in NOT_RETRIED_CODES):
            state = row["run_state"] if row is not None else conn.execute(
                SQL["state_of_run"], (key[0],)).fetchone()["state"]
            if state != "failed":
                check.failures.append(f"run {key[0]} recipient {key[1]}: refused {len(refusals)} times "
                                      f"({refusals[-1][0]} last), left {row['status'] if row else 'unrecorded'} "
                                      f"by a run that is {state}")
    for row in conn.execute(SQL["rejected_notice_messages"]).fetchall():
        check.checked += 1
        seen = [r for r in refused.get(("notice", row["email"]), []) if r[0] == "MessageRejected"]
        if row["provider_message_id"] is not None or row["open"] or not seen:
            check.failures.append(f"notice message {row['communication_key']}: recorded rejected with "
                                  f"{row['open']} notices left open, message id {row['provider_message_id']}, "
                                  f"{len(seen)} rejections made")
    refusals = (sorted(NOT_RETRIED_CODES),)
    for row in conn.execute(SQL["succeeded_runs_with_open_deliveries"], refusals).fetchall():
        check.checked += 1
        if row["open"]:
            check.failures.append(f"succeeded delivery run {row['id']} has {row['open']} undelivered recipients")
    return check


#: The block counting a run's rows in its snapshot type's table (``audit.sql``), by type.
_SNAPSHOT_ROWS = {"membership_counts": "membership_count_rows_of_run", "ar_aging": "ar_aging_rows_of_run",
                  "selftest": "selftest_rows_of_run"}


def _snapshot_effects(conn: Any) -> Check:
    """A published version's rows are exactly the rows its chunks wrote; one current version
    per period."""
    check = Check("snapshot rows written once per published version; one current version per period")
    for run in conn.execute(SQL["published_snapshot_runs"]).fetchall():
        check.checked += 1
        block = _SNAPSHOT_ROWS.get(run["snapshot_type"])
        if block is None:
            continue
        rows = conn.execute(SQL[block], (run["id"],)).fetchone()["n"]
        if rows != run["rows_written"]:
            check.failures.append(f"snapshot {run['snapshot_type']} {run['period']:%Y-%m}: {rows} rows, "
                                  f"{run['rows_written']} written")
    for row in conn.execute(SQL["duplicate_current_snapshot_versions"]).fetchall():
        check.failures.append(f"snapshot {row['snapshot_type']} {row['period']:%Y-%m}: {row['n']} current versions")
    return check


#: Pause reasons no settled run implies: the dispatcher found the saved definition
#: invalid, or the owner left or was deactivated (the owner hand-off).
_PAUSED_OUTSIDE_RUNS = frozenset({"definition_invalid", "ownerless"})


def _streaks(conn: Any, campaign: Campaign | None = None) -> Check:
    """Each schedule's failure streak and pause equal what its settled runs imply: a
    scheduled failure adds one, any success or skip resets; a schedule pauses when a
    scheduled failure brings the streak to the threshold or carries a pause reason
    (schedules paused for a reason no run implies, :data:`_PAUSED_OUTSIDE_RUNS`, or
    resumed by a person, are checked for their streak only).

    The history is taken in the order the settlements committed, which is the order of
    their ``finished_at`` but for a stalled process's takeover (``campaign``'s stalls): it
    runs on a clock past the lease (its settlement's ``finished_at`` is the stall's
    ``resumed_at``) while the simulation is still at the instant the process stalled, so
    it commits before everything later than that instant and is placed there."""
    from timekeeper.topology import PIPELINES

    thresholds = {p.owner: p.failure_pause_threshold for p in PIPELINES.values()}
    check = Check("failure streaks and pauses equal the settled history")
    committed_at = {(stall.run_id, stall.resumed_at): stall.stalled_at
                    for stall in (campaign.result.stalls if campaign is not None else [])}
    settled = conn.execute(SQL["settled_runs"]).fetchall()
    settled.sort(key=lambda r: (committed_at.get((r["id"], r["finished_at"]), r["finished_at"]), r["occurrence_at"],
                                str(r["id"])))
    history: dict[UUID, list[dict[str, Any]]] = collections.defaultdict(list)
    for run in settled:
        history[run["schedule_id"]].append(run)
    resumed = {r["schedule_id"] for r in conn.execute(
        SQL["resumed_schedules"]).fetchall()}
    for schedule in conn.execute(SQL["schedules_with_streaks"]).fetchall():
        check.checked += 1
        streak, paused_by_runs = 0, False
        for run in history.get(schedule["id"], []):
            if run["state"] != "failed":
                streak = 0
            elif run["trigger"] == "scheduled":
                streak += 1
                if streak >= thresholds[schedule["owner"]] or run["outcome_code"] == schedule["pause_reason"]:
                    paused_by_runs = True
        if streak != schedule["consecutive_failures"]:
            check.failures.append(f"{schedule['name']}: streak {schedule['consecutive_failures']}, history implies "
                                  f"{streak}")
        if schedule["id"] in resumed or schedule["pause_reason"] in _PAUSED_OUTSIDE_RUNS:
            continue
        if (schedule["status"] == "paused") != paused_by_runs:
            check.failures.append(f"{schedule['name']}: {schedule['status']} ({schedule['pause_reason']}), history "
                                  f"implies {'paused' if paused_by_runs else 'not paused'}")
    return check


def _queues(conn: Any, stack: Any, campaign: Campaign) -> Check:
    """The run and job queues are empty; the dead-letter queues hold only malformed messages,
    and messages of runs that settled after invocations carrying them died or raised (a
    consumer killed on a receive, or a final receive whose invocation failed on an injected
    disconnect or restart: SQS dead-letters the message, the run settles without it). A
    failure lists the message's receives, each with how it ended."""
    from pydantic import ValidationError

    from timekeeper.schedules.messages import RunMessage
    from timekeeper.snapshots.jobs import JobMessage

    check = Check("queues empty; dead-letter queues hold only malformed and killed-on-receive messages")
    terminal = {str(r["id"]) for r in conn.execute(
        SQL["terminal_run_ids"]).fetchall()}
    sqs = stack.aws.client("sqs")
    for name, source in stack.sources.items():
        check.checked += 1
        if source.in_flight:
            check.failures.append(f"{name}: {source.in_flight} messages waiting for their visibility timeout")
    for name, pair in {**stack.aws.queues, **stack.aws.work_queues}.items():
        attributes = sqs.get_queue_attributes(QueueUrl=pair.url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        waiting = int(attributes["ApproximateNumberOfMessages"]) + int(
            attributes["ApproximateNumberOfMessagesNotVisible"])
        if waiting and not stack.sources[name].in_flight:
            check.failures.append(f"{name}: {waiting} messages left in the queue")
        model = JobMessage if name == "snapshots" else RunMessage
        while True:
            got = sqs.receive_message(QueueUrl=pair.dlq_url, MaxNumberOfMessages=10, VisibilityTimeout=3600,
                                      WaitTimeSeconds=0).get("Messages", [])
            if not got:
                break
            for message in got:
                check.checked += 1
                try:
                    parsed = model.model_validate_json(message["Body"])
                except ValidationError:
                    continue  # a malformed message rests in the dead-letter queue by design
                run_id = str(parsed.run_id)
                history = ", ".join(f"#{count} {ending}" for count, ending in
                                    campaign.receives.get(message["MessageId"], [])) or "never delivered"
                if run_id in terminal and (campaign.killed_receives[run_id]
                                           or campaign.lost_final_receive(message["MessageId"])):
                    campaign.result.dead_lettered_killed += 1
                    campaign.result.notes.append(f"{name} dead-letter queue: run {run_id}, receives {history}")
                    continue
                check.failures.append(f"{name} dead-letter queue holds a message of run {run_id} "
                                      f"({'terminal' if run_id in terminal else 'unfinished'}, "
                                      f"{campaign.killed_receives[run_id]} killed receives; its receives: "
                                      f"{history})")
    return check
