"""Deterministic Platform data: the sample tenant set and benchmark volumes.

Everything here is a pure function of its arguments: the same seed (and ``now``) gives
byte-identical rows, ids included (ids are UUIDs derived from the seed, never
``gen_random_uuid()``; every timestamp is written explicitly, never ``now()``).

* :func:`load_sample` -- the sample tenant set the local stack, the tests and the docs
  use: four workspaces in different zones and currencies (one ``loading``, one with
  snapshots disabled, one ``disabled``), users with each access-rule persona, a few
  hundred members with three years of memberships, invoices and payments. Idempotent:
  every row is inserted with ``ON CONFLICT DO NOTHING``.
* :func:`load_volume` -- benchmark volumes for one existing workspace (members, invoices,
  payments) streamed with ``COPY``; ids are sequential under a seed-derived prefix so the
  indexes grow at their right edge.

The data's invariants (checked by ``tests/integration/test_platform_generator.py``):
a paid invoice's payments sum to its amount; an open invoice's payments sum to less
(partially paid ones exist); draft and void invoices have no payments; a void invoice
has ``voided_on`` on or after its issue day; no payment is received before its invoice
was issued or after the data's last day; a membership is ``pending`` when it starts
after that day, ``active`` when it covers it, ``lapsed`` when it ended before it, and
``cancelled`` with ``cancelled_on`` (its end) between its start and that day.
"""

from __future__ import annotations

import hashlib
import random
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from uuid import UUID, uuid5
from zoneinfo import ZoneInfo

import psycopg
from psycopg import sql
from psycopg.copy import QueuedLibpqWriter
from psycopg.rows import tuple_row

from timekeeper.db.sql import load_queries
from timekeeper.platform.directory import DEFAULT_LOCALE, check_locale, check_timezone

SQL = load_queries("timekeeper.local", "platform_data.sql")

#: The namespace of every sample id (uuid5 of ``"<seed>/<kind>/<key>"``).
SAMPLE_NAMESPACE = UUID("0b7c6f0e-4d0a-5c39-9a51-6a0e2f1d7c11")

#: How far back the sample's data reaches, in days before ``now`` (about three years).
SPAN_DAYS = 1096

PAYMENT_METHODS = ("card", "bank_transfer", "cash", "check")


# ------------------------------------------------------------------------------ the sample set


@dataclass(frozen=True)
class _WorkspaceSpec:
    key: str
    name: str
    timezone: str
    currency: str
    status: str
    snapshots_enabled: bool
    members: int
    cities: tuple[str, ...]
    #: (name, annual fee in minor units, active)
    types: tuple[tuple[str, int, bool], ...]
    #: Amounts (minor units) of invoices that are not annual fees (events, courses).
    extras: tuple[int, ...]
    domain: str


WORKSPACES: tuple[_WorkspaceSpec, ...] = (
    _WorkspaceSpec("berlin", "Ruderverein Spree", "Europe/Berlin", "EUR", "active", True, 180,
                   ("Berlin", "Potsdam", "Leipzig", "Dresden"),
                   (("Full", 12000, True), ("Youth", 4800, True), ("Family", 21000, True), ("Supporter", 6000, False)),
                   (1500, 2500, 4000, 7500), "spree.example.org"),
    _WorkspaceSpec("new_york", "Hudson Valley Makers Guild", "America/New_York", "USD", "loading", True, 130,
                   ("New York", "Yonkers", "Newark", "Albany"),
                   (("Maker", 18000, True), ("Student", 6000, True), ("Founding", 50000, False)),
                   (2000, 3500, 9900), "hvmg.example.com"),
    _WorkspaceSpec("sydney", "Harbour Swimming Club", "Australia/Sydney", "AUD", "active", False, 100,
                   ("Sydney", "Parramatta", "Manly"),
                   (("Adult", 26000, True), ("Junior", 11000, True)),
                   (1800, 4500), "harbourswim.example.net"),
    _WorkspaceSpec("tokyo", "Tokyo Go Society", "Asia/Tokyo", "JPY", "disabled", True, 20,
                   ("Tokyo", "Yokohama"),
                   (("Regular", 6000, True),),
                   (1000, 3000), "tokyogo.example.jp"),
)
#: Each sample workspace's locale (how its files write money): the language of its place.
SAMPLE_LOCALES = {"berlin": "de_DE", "new_york": "en_US", "sydney": "en_AU", "tokyo": "ja_JP"}

#: persona -> (display name, email local part or None, status,
#:             ((workspace key, roles, has left), ...))
PERSONAS: dict[str, tuple[str, str | None, str, tuple[tuple[str, tuple[str, ...], bool], ...]]] = {
    "admin": ("Ada Admin", "ada", "active", (("berlin", ("workspace:admin",), False),)),
    "analyst": ("Ana Analyst", "ana", "active", (("berlin", ("queries:write", "reports:write"), False),)),
    "viewer": ("Vic Viewer", "vic", "active", (("berlin", ("queries:read", "reports:read"), False),)),
    "no_email": ("Noor Nomail", None, "active", (("berlin", ("queries:read", "reports:read"), False),)),
    "deactivated": ("Dee Gone", "dee", "deactivated", (("berlin", ("queries:write", "reports:write"), False),)),
    "left": ("Lee Left", "lee", "active", (("berlin", ("queries:write", "reports:write"), True),)),
    "multi": ("Max Both", "max", "active", (("berlin", ("reports:read",), False),
                                             ("new_york", ("workspace:admin",), False))),
    "sydney_admin": ("Sam Harbour", "sam", "active", (("sydney", ("workspace:admin",), False),)),
    "tokyo_admin": ("Kenji Go", "kenji", "active", (("tokyo", ("workspace:admin",), False),)),
    "outsider": ("Otto Outside", "otto", "active", ()),
}

_FIRST = ("Anna", "Ben", "Chloe", "David", "Emma", "Felix", "Grace", "Hugo", "Ines", "Jonas", "Kira", "Liam",
          "Mia", "Noah", "Olga", "Paul", "Quinn", "Rosa", "Sven", "Tara", "Uma", "Victor", "Wen", "Yusuf", "Zoe")
_LAST = ("Abe", "Becker", "Costa", "Dubois", "Evans", "Fischer", "Garcia", "Hansen", "Ito", "Jensen", "Kowalski",
         "Lopez", "Meyer", "Nguyen", "O'Brien", "Patel", "Quispe", "Rossi", "Schmidt", "Tanaka", "Ueda", "Vargas",
         "Weber", "Young", "Zhang")


@dataclass(frozen=True)
class SampleSet:
    """What :func:`load_sample` describes (the same whether or not this call inserted it).

    ``workspaces``: workspace id by key (``berlin`` Europe/Berlin EUR active;
    ``new_york`` America/New_York USD loading; ``sydney`` Australia/Sydney AUD active with
    snapshots disabled; ``tokyo`` Asia/Tokyo JPY disabled). ``users``: user id by persona
    (``admin``, ``analyst`` (queries:write + reports:write), ``viewer`` (queries:read + reports:read),
    ``no_email``, ``deactivated``, ``left`` (left berlin), ``multi`` (berlin reports:read
    and new_york admin), ``sydney_admin``, ``tokyo_admin``, ``outsider`` (no workspace);
    all but the last three belong to berlin). ``membership_types``: type id by
    (workspace key, type name). ``counts``: rows per table; ``workspace_counts``: rows per
    workspace key and table. ``now``: the instant the data ends at (aware, UTC).
    """

    seed: int
    now: datetime
    workspaces: dict[str, UUID]
    users: dict[str, str]
    membership_types: dict[tuple[str, str], UUID]
    counts: dict[str, int]
    workspace_counts: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def first_workspace(self) -> UUID:
        """The id of the first (and largest) workspace, ``berlin``."""
        return self.workspaces[WORKSPACES[0].key]


def sample_id(seed: int, *parts: object) -> UUID:
    """The sample's id of the object named by ``parts`` under ``seed`` (a uuid5)."""
    return uuid5(SAMPLE_NAMESPACE, "/".join([str(seed), *(str(p) for p in parts)]))


def _at(day: date, hour: int, cap: datetime) -> datetime:
    """``day`` at ``hour``:00 UTC, not later than ``cap``."""
    return min(datetime.combine(day, time(hour), tzinfo=UTC), cap)


def _split(rng: random.Random, amount: int, parts: int) -> list[int]:
    """``amount`` (>= ``parts``) as ``parts`` positive integers summing to it."""
    cuts = sorted(rng.sample(range(1, amount), parts - 1)) if parts > 1 else []
    bounds = [0, *cuts, amount]
    return [b - a for a, b in zip(bounds, bounds[1:], strict=False)]


def _generate(seed: int, now: datetime) -> tuple[dict[str, list[tuple]], SampleSet]:
    """Every row of the sample set, by table, and its description.

    The random draws depend on ``seed`` only (the structure, the counts and every day
    offset); ``now`` only anchors the offsets, so two ``now`` give the same ids and counts.
    """
    rng = random.Random(seed)
    rows: dict[str, list[tuple]] = {t: [] for t in (
        "workspaces", "users", "workspace_memberships", "membership_types", "members", "memberships",
        "invoices", "payments")}
    workspaces = {spec.key: sample_id(seed, "workspace", spec.key) for spec in WORKSPACES}
    created = now - timedelta(days=SPAN_DAYS)
    for spec in WORKSPACES:
        check_timezone(spec.timezone)
        check_locale(SAMPLE_LOCALES.get(spec.key, DEFAULT_LOCALE))
        rows["workspaces"].append((workspaces[spec.key], spec.name, spec.timezone, spec.status,
                                   spec.snapshots_enabled, spec.currency, created,
                                   SAMPLE_LOCALES.get(spec.key, DEFAULT_LOCALE)))

    users: dict[str, str] = {}
    for index, (persona, (name, local, status, memberships)) in enumerate(PERSONAS.items()):
        user_id = users[persona] = f"sample-{seed}-{persona.replace('_', '-')}"
        email = f"{local}.{seed}@people.example.com" if local else None
        rows["users"].append((user_id, name, email, status, created + timedelta(days=index)))
        for ws_key, roles, has_left in memberships:
            joined = created + timedelta(days=rng.randint(1, 400), minutes=rng.randint(0, 1439))
            left = joined + timedelta(days=rng.randint(30, 300)) if has_left else None
            rows["workspace_memberships"].append((workspaces[ws_key], user_id, list(roles), joined, left))

    types: dict[tuple[str, str], UUID] = {}
    workspace_counts: dict[str, dict[str, int]] = {}
    for spec in WORKSPACES:
        ws = workspaces[spec.key]
        before = {t: len(r) for t, r in rows.items()}
        for name, fee, active in spec.types:
            types[(spec.key, name)] = sample_id(seed, spec.key, "type", name)
            rows["membership_types"].append((types[(spec.key, name)], ws, name, fee, spec.currency, active))
        _members(rng, seed, spec, ws, now, types, rows)
        workspace_counts[spec.key] = {t: len(r) - before[t] for t, r in rows.items()}
    counts = {t: len(r) for t, r in rows.items()}
    return rows, SampleSet(seed=seed, now=now, workspaces=workspaces, users=users, membership_types=types,
                           counts=counts, workspace_counts=workspace_counts)


def _members(rng: random.Random, seed: int, spec: _WorkspaceSpec, ws: UUID, now: datetime,
             types: dict[tuple[str, str], UUID], rows: dict[str, list[tuple]]) -> None:
    """One workspace's members, memberships, invoices and payments (appended to ``rows``)."""
    today = now.astimezone(ZoneInfo(spec.timezone)).date()
    current_types = [(types[(spec.key, n)], fee) for n, fee, active in spec.types if active]
    old_types = [(types[(spec.key, n)], fee) for n, fee, active in spec.types if not active] or current_types
    invoices: list[tuple[int, int, int, int, UUID]] = []  # (issue offset, member index, k, amount, member id)
    for i in range(spec.members):
        member_id = sample_id(seed, spec.key, "member", i)
        first, last = rng.choice(_FIRST), rng.choice(_LAST)
        email = (f"{first}.{last}.{i}@{spec.domain}".lower().replace("'", "")
                 if rng.random() < 0.85 else None)
        city = rng.choice(spec.cities) if rng.random() < 0.9 else None
        joined_offset = rng.randint(10, SPAN_DAYS - 1)
        joined_on = today - timedelta(days=joined_offset)
        rows["members"].append((member_id, ws, f"M-{i + 1:05d}", f"{first} {last}", email, city, joined_on,
                                _at(joined_on, 8, now)))

        # The first membership starts on the joining day; it may end, and some members rejoin.
        outcome = rng.choices(("active", "lapsed", "cancelled", "pending"), weights=(55, 20, 15, 10))[0]
        type_id, fee = rng.choice(old_types if outcome == "lapsed" and rng.random() < 0.5 else current_types)
        start = joined_on
        end: date | None = None
        cancelled: date | None = None
        if outcome == "lapsed" and joined_offset <= 366:
            outcome = "active"  # too recent to have run out
        if outcome == "pending":
            start = today + timedelta(days=rng.randint(1, 30))
        elif outcome == "active":
            years = rng.choice((None, 1, 2, 3, 4))
            if years is not None:
                end = start + timedelta(days=365 * max(years, joined_offset // 365 + 1) - 1)
        elif outcome == "lapsed":
            end = start + timedelta(days=364)
        else:
            end = cancelled = start + timedelta(days=rng.randint(0, joined_offset))
        memberships = [(type_id, outcome, start, end, cancelled)]
        if outcome in ("lapsed", "cancelled") and rng.random() < 0.35:
            assert end is not None
            restart = end + timedelta(days=rng.randint(1, 120))
            type_id, fee = rng.choice(current_types)
            memberships.append((type_id, "active" if restart <= today else "pending", restart, None, None))
        for k, (t, status, s, e, c) in enumerate(memberships):
            rows["memberships"].append((sample_id(seed, spec.key, "membership", i, k), ws, member_id, t, status,
                                        s, e, c))

        # Invoices: the annual fee each year since joining, and a few others (events, courses).
        for year in range(joined_offset // 365 + 1):
            invoices.append((joined_offset - 365 * year, i, year, fee, member_id))
        for k in range(rng.randint(0, 9)):
            invoices.append((rng.randint(0, joined_offset), i, 100 + k, rng.choice(spec.extras), member_id))

    invoices.sort(key=lambda v: (-v[0], v[1], v[2]))
    for number, (age, _i, _k, amount, member_id) in enumerate(invoices, start=1):
        issued = today - timedelta(days=age)
        draw = rng.random()
        if age <= 10:
            status = "draft" if draw < 0.3 else "open" if draw < 0.8 else "paid"
        elif age <= 60:
            status = "open" if draw < 0.4 else "paid" if draw < 0.95 else "void"
        else:
            status = "paid" if draw < 0.85 else "open" if draw < 0.93 else "void"
        invoice_id = sample_id(seed, spec.key, "invoice", number)
        voided = issued + timedelta(days=rng.randint(0, min(age, 45))) if status == "void" else None
        rows["invoices"].append((invoice_id, ws, member_id, f"INV-{number:06d}", issued,
                                 issued + timedelta(days=rng.choice((14, 30))), amount, spec.currency, status,
                                 voided, _at(issued, 9, now)))
        if status == "paid":
            parts = _split(rng, amount, rng.choices((1, 2, 3), weights=(75, 20, 5))[0])
        elif status == "open" and rng.random() < 0.5:
            parts = [rng.randint(1, amount - 1)]  # partially paid
        else:
            parts = []
        received = sorted(rng.randint(0, min(age, 60)) for _ in parts)
        for k, (part, delay) in enumerate(zip(parts, received, strict=True)):
            day = issued + timedelta(days=delay)
            rows["payments"].append((sample_id(seed, spec.key, "payment", number, k), ws, invoice_id, day, part,
                                     spec.currency, rng.choice(PAYMENT_METHODS), _at(day, 12, now)))


_COLUMNS: dict[str, tuple[str, ...]] = {
    "workspaces": ("id", "name", "timezone", "status", "snapshots_enabled", "currency", "created_at", "locale"),
    "users": ("id", "display_name", "email", "status", "created_at"),
    "workspace_memberships": ("workspace_id", "user_id", "roles", "joined_at", "left_at"),
    "membership_types": ("id", "workspace_id", "name", "annual_fee_minor", "currency", "active"),
    "members": ("id", "workspace_id", "member_number", "display_name", "email", "city", "joined_on", "created_at"),
    "memberships": ("id", "workspace_id", "member_id", "membership_type_id", "status", "start_date", "end_date",
                    "cancelled_on"),
    "invoices": ("id", "workspace_id", "member_id", "number", "issue_date", "due_date", "amount_minor", "currency",
                 "status", "voided_on", "created_at"),
    "payments": ("id", "workspace_id", "invoice_id", "received_on", "amount_minor", "currency", "method",
                 "created_at"),
}


def _insert_missing(conn: psycopg.Connection, table: str, rows: Sequence[tuple]) -> int:
    """Insert ``rows`` (in :data:`_COLUMNS` order) into ``table``, skipping every row that
    conflicts with an existing one: COPY into a temporary table, then INSERT ... SELECT
    ... ON CONFLICT DO NOTHING. Returns the rows inserted."""
    stage = sql.Identifier(f"_tk_sample_{table}")
    columns = sql.SQL(", ").join(map(sql.Identifier, _COLUMNS[table]))
    conn.execute(sql.SQL(SQL["create_stage_table"]).format(stage, sql.Identifier(table)))
    try:
        with conn.cursor() as cur:
            with cur.copy(sql.SQL(SQL["copy_into_stage"]).format(stage, columns)) as copy:
                for row in rows:
                    copy.write_row(row)
            cur.execute(sql.SQL(SQL["insert_missing_from_stage"]).format(
                sql.Identifier(table), columns, columns, stage))
            return cur.rowcount
    finally:
        conn.execute(sql.SQL(SQL["drop_stage_table"]).format(stage))


def load_sample(conn: psycopg.Connection, *, seed: int = 7, now: datetime) -> SampleSet:
    """Load the sample tenant set whose data ends at ``now`` (aware) into ``conn``'s
    database, in one transaction (a savepoint when the caller's transaction is open).

    About 430 members, 700 memberships, 4,000 invoices and 3,500 payments over four
    workspaces and ten users (see :class:`SampleSet` for what is where); dates reach
    :data:`SPAN_DAYS` days back from ``now`` (each workspace's local date), workspaces are
    created that long before ``now``. Idempotent: rows that exist (by any unique key) are
    left as they are, so loading again -- with any ``now`` -- inserts nothing; ids and
    counts depend on ``seed`` only. Needs a login that may insert into the Platform
    tables (the schema owner or the workers' login). Raises ``ValueError`` for a naive
    ``now``, ``psycopg.Error`` when the database refuses.
    """
    if now.tzinfo is None:
        raise ValueError("now must be an aware datetime")
    now = now.astimezone(UTC)
    rows, sample = _generate(seed, now)
    with conn.transaction():
        for table in _COLUMNS:
            _insert_missing(conn, table, rows[table])
    return sample


# ------------------------------------------------------------------------------ volumes


class _SequentialIds:
    """Text UUIDs ``prefix + counter``: a 64-bit prefix derived from the seed, workspace and
    kind, and a 48-bit counter (version 4 and RFC 4122 variant bits set). Sequential ids
    keep each B-tree insert at the index's right edge."""

    def __init__(self, seed: int, workspace_id: UUID, kind: str) -> None:
        digest = hashlib.sha256(f"{seed}/{workspace_id}/{kind}".encode()).digest()
        high = (int.from_bytes(digest[:8], "big") & ~0xF000) | 0x4000
        text = f"{high:016x}"
        self._head = f"{text[:8]}-{text[8:12]}-{text[12:16]}-8000-"

    def __call__(self, counter: int) -> str:
        return f"{self._head}{counter:012x}"


#: Invoice amounts of a volume load, in minor units.
VOLUME_AMOUNTS = (1500, 2500, 4000, 6000, 7500, 9900, 12000, 18000, 21000, 26000)
_CHUNK = 50_000


def load_volume(conn: psycopg.Connection, *, workspace_id: UUID, invoices: int, seed: int = 11,
                members: int | None = None, now: datetime | None = None) -> int:
    """Fill the existing workspace ``workspace_id`` with ``members`` members (default
    ``invoices // 10``, at least 1), ``invoices`` invoices and their payments, streamed
    with ``COPY`` in one transaction; returns the number of invoices inserted (0 when this
    seed's volume is already in the workspace).

    Invoices are spread evenly over the :data:`SPAN_DAYS` days ending on ``now``'s UTC date
    (default: the workspace's ``created_at`` plus ``SPAN_DAYS`` days, so a sample
    workspace's volume ends where its sample data does); statuses and payments follow the
    invariants of this module (older invoices mostly paid, recent ones open or draft).
    Member and invoice numbers are ``V<seed>-<n>``, in the workspace's currency; ids are
    sequential under a prefix derived from ``seed``, the workspace and the kind. The
    login's statement timeout is lifted for the load (restored after it); the per-row
    foreign-key checks are skipped when that is safe and allowed (see
    :func:`_skip_reference_checks`). Deterministic in (``seed``, workspace, ``invoices``,
    ``members``, ``now``). Runs ``ANALYZE`` on the three tables after loading.

    Cost, measured for 1,000,000 invoices (about 1,050,000 payments, 100,000 members):
    about 41 s of the server backend's CPU (mostly the tables' indexes) and 7 s of this
    process's, which overlap (a queued writer sends while the next chunk is generated).

    Needs a login row-level security does not apply to (the schema owner): PostgreSQL
    refuses ``COPY FROM`` into a table whose policies apply to the login
    (``psycopg.errors.FeatureNotSupported`` for the workers' and the API's logins).
    Raises ``LookupError`` for an unknown workspace, ``ValueError`` for a negative count or
    a naive ``now``, ``psycopg.Error`` when the database refuses.
    """
    if invoices < 0 or (members is not None and members < 1):
        raise ValueError("invoices must be >= 0 and members >= 1")
    if now is not None and now.tzinfo is None:
        raise ValueError("now must be an aware datetime")
    members = members if members is not None else max(1, invoices // 10)
    with conn.transaction():
        with conn.cursor(row_factory=tuple_row) as cur:
            found = cur.execute(SQL["workspace_currency"],
                                (workspace_id,)).fetchone()
            if found is None:
                raise LookupError(f"no workspace {workspace_id}")
            currency, created_at = found
            if cur.execute(SQL["volume_member_exists"],
                           (workspace_id, f"V{seed}-{0:07d}")).fetchone():
                return 0
            anchor = (now or (created_at + timedelta(days=SPAN_DAYS))).astimezone(UTC).date()
            # A bulk load outlasts any statement timeout the login may have.
            timeout = cur.execute(SQL["lift_statement_timeout"]).fetchone()
            previous_role = _skip_reference_checks(conn, cur)
            _copy_volume(cur, seed=seed, workspace_id=workspace_id, currency=currency.strip(), anchor=anchor,
                         invoices=invoices, members=members)
            if previous_role is not None:
                cur.execute(SQL["set_replication_role"], (previous_role,))
            cur.execute(SQL["set_statement_timeout"], (timeout[0] if timeout else "0",))
            for table in ("members", "invoices", "payments"):
                cur.execute(sql.SQL(SQL["analyze_table"]).format(sql.Identifier(table)))
    return invoices


def _skip_reference_checks(conn: psycopg.Connection, cur: psycopg.Cursor) -> str | None:
    """Skip the per-row foreign-key checks of the load when that is both safe and allowed;
    return the ``session_replication_role`` to restore afterwards (None: nothing changed).

    Every reference the load writes points at a row the same transaction inserted (its
    members, its invoices) or at the workspace it just read, so the checks cannot fail;
    they are half the server's work. Skipped only when the three tables have no triggers
    but the foreign keys' own (``session_replication_role = replica`` would silence any
    other trigger too) and the login may set the parameter (a superuser, such as the
    embedded server's, or one granted ``SET`` on it); otherwise the checks run.
    """
    triggers = cur.execute(
        SQL["count_user_triggers"]).fetchone()
    if triggers is None or triggers[0]:
        return None
    previous = cur.execute(SQL["replication_role"]).fetchone()
    try:
        with conn.transaction():
            cur.execute(SQL["set_replication_role_replica"])
    except psycopg.errors.InsufficientPrivilege:
        return None
    return previous[0] if previous else "origin"


def _copy_volume(cur: psycopg.Cursor, *, seed: int, workspace_id: UUID, currency: str, anchor: date,
                 invoices: int, members: int) -> None:
    """Stream the volume rows: members, then invoices (their payments' lines spooled to a
    temporary file meanwhile), then payments. A queued writer sends each chunk on a
    thread of its own, so the server ingests one chunk while the next is generated."""
    rng = random.Random(f"{seed}/{workspace_id}")
    rand = rng.random
    ws = str(workspace_id)
    days = [(anchor - timedelta(days=SPAN_DAYS - 1 - k)).isoformat() for k in range(SPAN_DAYS + 31)]
    member_id = _SequentialIds(seed, workspace_id, "member")
    invoice_id = _SequentialIds(seed, workspace_id, "invoice")
    payment_id = _SequentialIds(seed, workspace_id, "payment")

    member_ids = [member_id(i) for i in range(members)]
    with cur.copy(SQL["copy_volume_members"], writer=QueuedLibpqWriter(cur)) as copy:
        for start in range(0, members, _CHUNK):
            lines = []
            for i in range(start, min(start + _CHUNK, members)):
                first, last = _FIRST[int(rand() * len(_FIRST))], _LAST[int(rand() * len(_LAST))]
                joined = (anchor - timedelta(days=SPAN_DAYS + int(rand() * 730))).isoformat()
                email = f"m{i}@volume.example.org" if rand() < 0.9 else "\\N"
                lines.append(f"{member_ids[i]}\t{ws}\tV{seed}-{i:07d}\t{first} {last}\t{email}\t\\N\t{joined}\t"
                             f"{joined} 08:00:00+00\n")
            copy.write("".join(lines))

    amounts = VOLUME_AMOUNTS
    methods = PAYMENT_METHODS
    payment = 0
    with tempfile.TemporaryFile() as spool:
        with cur.copy(SQL["copy_volume_invoices"], writer=QueuedLibpqWriter(cur)) as copy:
            for start in range(0, invoices, _CHUNK):
                invoice_lines: list[str] = []
                payment_lines: list[str] = []
                for i in range(start, min(start + _CHUNK, invoices)):
                    k = i * SPAN_DAYS // invoices  # issue days ascend with the invoice number
                    age = SPAN_DAYS - 1 - k
                    amount = amounts[int(rand() * 10)]
                    draw = rand()
                    voided = "\\N"
                    if age <= 10:
                        status = "draft" if draw < 0.3 else "open" if draw < 0.8 else "paid"
                    elif age <= 60:
                        status = "open" if draw < 0.4 else "paid" if draw < 0.95 else "void"
                    else:
                        status = "paid" if draw < 0.85 else "open" if draw < 0.93 else "void"
                    if status == "void":
                        voided = days[k + min(age, int(rand() * 30))]
                    ident = invoice_id(i)
                    invoice_lines.append(
                        f"{ident}\t{ws}\t{member_ids[int(rand() * members)]}\tV{seed}-{i:08d}\t{days[k]}\t"
                        f"{days[k + (14 if draw < 0.5 else 30)]}\t{amount}\t{currency}\t{status}\t{voided}\t"
                        f"{days[k]} 09:00:00+00\n")
                    if status == "paid":
                        if rand() < 0.8:
                            parts: tuple[tuple[int, int], ...] = ((amount, min(age, int(rand() * 30))),)
                        else:
                            first_part = 1 + int(rand() * (amount - 1))
                            parts = ((first_part, min(age, int(rand() * 15))),
                                     (amount - first_part, min(age, 15 + int(rand() * 30))))
                    elif status == "open" and rand() < 0.5:
                        parts = ((1 + int(rand() * (amount - 1)), min(age, int(rand() * 30))),)  # partially paid
                    else:
                        continue
                    for part, delay in parts:
                        day = days[k + delay]
                        payment_lines.append(f"{payment_id(payment)}\t{ws}\t{ident}\t{day}\t{part}\t{currency}\t"
                                             f"{methods[int(rand() * 4)]}\t{day} 12:00:00+00\n")
                        payment += 1
                copy.write("".join(invoice_lines))
                spool.write("".join(payment_lines).encode())
        spool.seek(0)
        with cur.copy(SQL["copy_volume_payments"], writer=QueuedLibpqWriter(cur)) as copy:
            while block := spool.read(1 << 20):
                copy.write(block)
