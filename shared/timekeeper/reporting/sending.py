"""The delivery sender: each recipient's message submitted at the mail provider's pace, with
bounded concurrency, and journalled.

- **Pace.** The account's sending rate is read from the provider (SES ``GetSendQuota``'s
  ``MaxSendRate``, messages per second; the mailer's ``max_send_rate()``), cached per
  container for :attr:`SendPolicy.quota_ttl_s`, and a :class:`TokenBucket` at
  :data:`RATE_HEADROOM` of that rate, one token at a time, admits each submission, retries
  included. A mailer without ``max_send_rate`` (a test's or
  the local stack's wrapper) is not paced unless :attr:`SendPolicy.send_rate` is set.
- **Concurrency.** At most :attr:`SendPolicy.concurrency` submissions are in flight, each on
  a worker thread of a small pool (boto3 clients are thread-safe). Only the calling thread
  touches the journal connection (psycopg connections are not shared between threads): it
  composes, claims, submits to the pool and records each answer.
- **Throttling** (SES ``Throttling`` "Maximum sending rate exceeded", ``ThrottlingException``,
  ``TooManyRequestsException``) is retried in the worker after an exponential backoff with
  full jitter (:attr:`SendPolicy.backoff_base_s` doubling up to
  :attr:`SendPolicy.backoff_cap_s`, at most :attr:`SendPolicy.throttle_retries` times); each
  throttle is counted (``on_throttled``, the ``SesThrottled`` metric). A daily quota
  exhausted ("Daily message quota exceeded") is not retried within the receive.
- **The 'sending' claim.** Just before a message is handed to a worker, its outbox row gets a
  'sending' claim in a committed, flushed statement (:func:`claim_sending`); an error answer
  from the provider releases it (the message was not accepted), a recorded provider id
  settles it. A claim a later attempt finds without a provider id is a submission whose
  outcome is not known: that recipient is recorded ``failed`` / ``unconfirmed`` and never
  submitted again (:func:`settle_unconfirmed`). So each recipient gets at most one message
  from the sender; a process that dies after the claim and before the provider accepted
  loses that message (shown in the history), at most :attr:`SendPolicy.concurrency` of them.
- **Budget.** Before each submission the sender asks whether the receive's remaining time
  (``time_left_s``, seconds) minus :attr:`SendPolicy.reserve_s` still covers one submission
  as measured so far in this receive (the slowest seen, at least :data:`SEND_COST_S`). When
  it does not, no further submission starts: the ones in flight are recorded and the run
  is handed back (:class:`DeliveryContinues`), the next receive sending only to the rest.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from timekeeper import observability as obs
from timekeeper.faults import crash_point
from timekeeper.reporting.delivery_journal import (
    DeliveryJournal,
    Recipient,
    RunTakenOver,
    claim_sending,
    record_failed,
    record_sent,
    unconfirmed_submissions,
)
from timekeeper.reporting.delivery_store import QuerySchedule
from timekeeper.schedules.work import RetryableFault

#: The first estimate of one submission (seconds) before any is measured in a receive: the
#: per-recipient cost measured against moto SES under load (benchmarks/delivery.py).
SEND_COST_S = 0.02
#: The share of the sending rate the sender paces to: submissions reach SES a network
#: latency after their token is taken (tens of milliseconds, varying), so pacing at the full
#: rate would let some one-second windows hold one message too many and be throttled.
RATE_HEADROOM = 0.9
#: Messages per second when the quota cannot be read and none was read before: SES's
#: sandbox rate, the lowest an account has.
FALLBACK_RATE = 1.0
#: The provider error codes of a throttled submission (retried after a backoff).
THROTTLING_CODES = frozenset({"Throttling", "ThrottlingException", "TooManyRequestsException"})
#: A throttling error whose message says this is the daily quota: not retried in the receive.
DAILY_QUOTA = "daily message quota"
#: The outcome code of a submission whose outcome is not known (a 'sending' claim without a
#: record): never submitted again.
UNCONFIRMED = "unconfirmed"
#: The run's failure code when its last receive still had recipients it could not reach.
RECIPIENTS_UNFINISHED = "recipients_unfinished"


class DeliveryContinues(RetryableFault):
    """The receive's remaining time cannot cover another submission: the run is handed back
    (received again after the pipeline's backoff, like an unfinished render) and the next
    receive sends only to the recipients not yet journalled; ``recipients_unfinished`` if it
    still has recipients left on its last receive."""

    code = RECIPIENTS_UNFINISHED


@dataclass(frozen=True)
class SendPolicy:
    """How the sender paces itself. ``concurrency``: submissions in flight (1-16);
    ``send_rate``: messages per second when set (else the provider's quota); ``quota_ttl_s``:
    how long a read quota is reused (seconds); ``throttle_retries``, ``backoff_base_s``,
    ``backoff_cap_s``: the throttling backoff (seconds); ``reserve_s``: the part of the
    receive kept for recording the last answers and settling (seconds)."""

    concurrency: int = 4
    send_rate: float | None = None
    quota_ttl_s: float = 300.0
    throttle_retries: int = 5
    backoff_base_s: float = 0.2
    backoff_cap_s: float = 5.0
    reserve_s: float = 30.0


_EPSILON = 1e-6


class TokenBucket:
    """A token bucket of ``rate`` tokens per second holding at most ``capacity`` (at least
    one), full at first; thread-safe. ``monotonic``/``sleep`` are the clock (seconds), so a
    test drives it with an injected clock."""

    def __init__(self, rate: float, *, capacity: float | None = None, monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self.capacity = max(1.0, capacity if capacity is not None else rate)
        self._tokens = self.capacity
        self._monotonic, self._sleep = monotonic, sleep
        self._at = monotonic()
        self._lock = threading.Lock()

    def acquire(self) -> None:
        """Take one token, sleeping until one is available."""
        while True:
            with self._lock:
                now = self._monotonic()
                self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate)
                self._at = now
                if self._tokens >= 1 - _EPSILON:  # a refill's rounding must not wait forever
                    self._tokens = max(0.0, self._tokens - 1)
                    return
                wait_s = (1 - self._tokens) / self.rate
            self._sleep(wait_s)


_quota_lock = threading.Lock()
_quota_cache: dict[str, tuple[float, float]] = {}


def forget_send_rates() -> None:
    """Forget the cached quotas (a test's or a new configuration's fresh start)."""
    with _quota_lock:
        _quota_cache.clear()


def send_rate(mailer: Any, policy: SendPolicy, *, monotonic: Callable[[], float]) -> float | None:
    """Messages per second the sender may submit: ``policy.send_rate`` when set, else the
    mailer's ``max_send_rate()`` (the provider's quota), cached per container and sender for
    ``policy.quota_ttl_s`` seconds; None (not paced) for a mailer that cannot tell. A quota
    read that fails (logged) keeps the cached rate, or paces at :data:`FALLBACK_RATE` until
    the next read."""
    if policy.send_rate is not None:
        return policy.send_rate
    read = getattr(mailer, "max_send_rate", None)
    if read is None:
        return None
    key = str(getattr(mailer, "sender", ""))
    now = monotonic()
    with _quota_lock:
        cached = _quota_cache.get(key)
    if cached is not None and now - cached[1] < policy.quota_ttl_s:
        return cached[0]
    try:
        rate = float(read())
    except Exception as error:  # noqa: BLE001 - paced at the last known rate, or the sandbox's
        obs.logger.warning("SES send quota not read", extra={"error_type": type(error).__name__})
        if cached is not None:
            return cached[0]
        rate = FALLBACK_RATE
    with _quota_lock:
        _quota_cache[key] = (rate, now)
    return rate


def _error_code(error: BaseException) -> str | None:
    response = getattr(error, "response", None)
    code = (response.get("Error") or {}).get("Code") if isinstance(response, dict) else None
    return str(code) if code is not None else None


def is_throttle(error: BaseException) -> bool:
    """Whether ``error`` is the provider's rate throttling (retried after a backoff); the
    daily quota's throttling is not (it lasts until the quota's window moves)."""
    if _error_code(error) not in THROTTLING_CODES:
        return False
    message = str(((getattr(error, "response", None) or {}).get("Error") or {}).get("Message") or "")
    return DAILY_QUOTA not in message.lower()


@dataclass
class _Answer:
    """A worker's result: the provider's message id or the error, the throttles it met and
    its duration (seconds)."""

    message_id: str | None = None
    error: BaseException | None = None
    throttles: int = 0
    seconds: float = 0.0


def _submit(send: Callable[[], str], bucket: TokenBucket | None, policy: SendPolicy,
            sleep: Callable[[float], None], monotonic: Callable[[], float], rng: random.Random) -> _Answer:
    """One submission on a worker thread, its throttling retried (each retry paced too)."""
    answer, started = _Answer(), monotonic()
    for retry in range(policy.throttle_retries + 1):
        if retry and bucket is not None:
            bucket.acquire()
        try:
            answer.message_id = send()
            answer.error = None
            break
        except Exception as error:  # noqa: BLE001 - returned to the journalling thread
            answer.error = error
            if not is_throttle(error):
                break
            answer.throttles += 1
            if retry < policy.throttle_retries:
                sleep(rng.uniform(0, min(policy.backoff_cap_s, policy.backoff_base_s * 2 ** retry)))
    answer.seconds = monotonic() - started
    return answer


@dataclass
class Prepared:
    """One recipient's message ready to submit: ``send()`` submits it and returns the
    provider's id; ``expires`` is its link's expiry (aware UTC)."""

    recipient: Recipient
    send: Callable[[], str]
    expires: Any


@dataclass
class SendReport:
    """What one receive's sender did: each recipient's outcome (``sent``, ``failed`` with a
    transient code, or a permanent code), the throttles met, and whether the run was
    handed back for lack of time."""

    outcomes: dict[str, tuple[str, str]] = field(default_factory=dict)
    throttles: int = 0
    handed_back: bool = False
    slowest_s: float = SEND_COST_S


@contextmanager
def _pool(workers: int) -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="delivery-send")
    try:
        yield pool
    finally:
        pool.shutdown(wait=True)


def settle_unconfirmed(journal: DeliveryJournal, schedule: QuerySchedule, recipients: list[Recipient]) -> set[str]:
    """Record ``failed`` / ``unconfirmed`` for each of ``recipients`` whose 'sending' claim an
    earlier attempt left without a record (never submitted again); returns their ids."""
    unconfirmed = unconfirmed_submissions(journal) & {r.user_id for r in recipients}
    for recipient in recipients:
        if recipient.user_id in unconfirmed:
            record_failed(journal, schedule, recipient, UNCONFIRMED, next_user=None, release=False)
    return unconfirmed


def send_all(journal: DeliveryJournal, schedule: QuerySchedule, items: Iterator[Prepared | tuple[Recipient, str]],
             *, mailer: Any, policy: SendPolicy, time_left_s: Callable[[], float], sleep: Callable[[float], None],
             monotonic: Callable[[], float], classify: Callable[[BaseException], tuple[str, bool]],
             on_error: Callable[[Recipient, BaseException, str, bool], None] | None = None,
             rng: random.Random | None = None) -> SendReport:
    """Submit the prepared messages (``items``: a :class:`Prepared`, or ``(recipient,
    provider id)`` for a submission an earlier attempt recorded, which is recorded again and
    not sent) at the provider's pace, at most ``policy.concurrency`` at a time, journalling
    each answer from this thread. ``classify`` maps a submission's error to ``(code,
    permanent)``. Stops starting submissions when ``time_left_s()`` (seconds) minus
    ``policy.reserve_s`` no longer covers the slowest submission measured so far
    (``handed_back``). Raises :class:`RunTakenOver` when the attempt lost its run (after
    recording the answers in flight)."""
    rate = send_rate(mailer, policy, monotonic=monotonic)
    # One token at a time (no burst) at RATE_HEADROOM of the quota: a submission reaches SES
    # a network latency after its token, so arrivals jitter around the pace.
    bucket = None if rate is None else TokenBucket(rate * RATE_HEADROOM, capacity=1, monotonic=monotonic,
                                                   sleep=sleep)
    report, rng = SendReport(), rng or random.Random()
    in_flight: dict[Future[_Answer], Prepared] = {}
    taken_over = False

    def record(done: Future[_Answer]) -> None:
        nonlocal taken_over
        prepared = in_flight.pop(done)
        answer = done.result()
        report.throttles += answer.throttles
        report.slowest_s = max(report.slowest_s, answer.seconds)
        user = prepared.recipient.user_id
        if answer.error is None:
            assert answer.message_id is not None
            crash_point("delivery.after_send", (journal.ctx.run_id, user))
            held = record_sent(journal, schedule, prepared.recipient, answer.message_id, prepared.expires,
                               submitted=True, next_user=None)
            report.outcomes[user] = ("sent", "")
        else:
            code, permanent = classify(answer.error)
            held = record_failed(journal, schedule, prepared.recipient, code, next_user=None)
            if on_error is not None:
                on_error(prepared.recipient, answer.error, code, permanent)
            report.outcomes[user] = (code if permanent else "failed", code)
        taken_over = taken_over or not held

    def drain() -> None:
        while in_flight:
            for done in wait(in_flight, return_when=FIRST_COMPLETED).done:
                record(done)

    with _pool(max(1, policy.concurrency)) as pool:
        try:
            for item in items:
                if isinstance(item, tuple):  # recorded by an earlier attempt: never made again
                    recipient, message_id = item
                    taken_over = not record_sent(journal, schedule, recipient, message_id, None, submitted=False,
                                                 next_user=None) or taken_over
                    report.outcomes[recipient.user_id] = ("sent", "")
                    continue
                while len(in_flight) >= max(1, policy.concurrency):
                    for done in wait(in_flight, return_when=FIRST_COMPLETED).done:
                        record(done)
                if taken_over:
                    break
                if time_left_s() - policy.reserve_s < report.slowest_s:
                    report.handed_back = True
                    break
                journal.keepalive()
                if bucket is not None:
                    bucket.acquire()
                try:
                    claim_sending(journal, item.recipient.user_id)
                except RunTakenOver:
                    taken_over = True
                    break
                in_flight[pool.submit(_submit, item.send, bucket, policy, sleep, monotonic, rng)] = item
        except Exception:
            # Record the answers in flight before the error propagates: an accepted message
            # left unrecorded would be settled unconfirmed by the next attempt.
            drain()
            raise
        drain()
    if taken_over:
        raise journal.taken_over()
    return report


__all__ = ["DAILY_QUOTA", "FALLBACK_RATE", "RATE_HEADROOM", "RECIPIENTS_UNFINISHED", "SEND_COST_S",
           "THROTTLING_CODES", "UNCONFIRMED", "DeliveryContinues", "Prepared", "SendPolicy", "SendReport",
           "TokenBucket", "forget_send_rates", "is_throttle", "send_rate", "send_all", "settle_unconfirmed"]
