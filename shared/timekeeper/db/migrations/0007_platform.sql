-- Platform: workspaces, users, workspace memberships, and the business data of an
-- association-management SaaS that saved queries and monthly snapshots read.
-- PostgreSQL 15 compatible.
--
-- Conventions (as in the accounting tables): every tenant table carries workspace_id and a
-- UNIQUE (workspace_id, id) key, references between tenant rows are composite
-- (workspace_id, x_id) foreign keys, instants are timestamptz (UTC), calendar days are
-- date, and money is an integer amount of minor units (cents) with its ISO 4217 currency.
--
-- Row-level security: the tenant tables get the API's tenant_isolation policy and the
-- workers' pass-through policy (timekeeper_enable_tenant_rls). Two tables are keyed
-- differently and get their own policies below: a workspace is visible to the API when
-- it is the entered one; a user (global: one person may belong to several workspaces) when
-- they have or had a membership of the entered workspace.

CREATE TABLE workspaces (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name               text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    -- IANA zone name (checked against zoneinfo by the application): where "a month" is.
    timezone           text NOT NULL CHECK (length(timezone) BETWEEN 1 AND 64),
    -- active: in use. loading: data is being imported (periods are not snapshotted yet).
    -- disabled: switched off by staff.
    status             text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'loading', 'disabled')),
    -- The workspace's policy flag for monthly snapshots (false: periods are planned with a
    -- skip reason, never generated).
    snapshots_enabled  boolean NOT NULL DEFAULT true,
    -- The currency its invoices and reports are in.
    currency           char(3) NOT NULL DEFAULT 'USD' CHECK (currency ~ '^[A-Z]{3}$'),
    created_at         timestamptz NOT NULL DEFAULT now()
);

-- A person, identified by the identity provider's opaque id (the authorizer's user_id).
CREATE TABLE users (
    id            text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 200),
    display_name  text NOT NULL DEFAULT '',
    -- May be missing (a user invited by phone, an address that bounced and was removed).
    email         text CHECK (email IS NULL OR email ~ '^[^@\s]+@[^@\s]+$'),
    status        text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'deactivated')),
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- A user's membership of a workspace with the roles it grants there (names such as
-- queries:read; timekeeper.platform.access says what each grants). A user who left keeps
-- the row with left_at set; rejoining reopens it (left_at NULL, joined_at the new date).
CREATE TABLE workspace_memberships (
    workspace_id  uuid NOT NULL REFERENCES workspaces (id),
    user_id       text NOT NULL REFERENCES users (id),
    roles         text[] NOT NULL DEFAULT '{}',
    joined_at     timestamptz NOT NULL DEFAULT now(),
    left_at       timestamptz,
    CHECK (left_at IS NULL OR left_at >= joined_at),
    PRIMARY KEY (workspace_id, user_id)
);
CREATE INDEX workspace_memberships_user_idx ON workspace_memberships (user_id);

-- Business data of the association (the tenant's customers are its members).
CREATE TABLE membership_types (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id      uuid NOT NULL REFERENCES workspaces (id),
    name              text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    annual_fee_minor  bigint NOT NULL CHECK (annual_fee_minor >= 0),
    currency          char(3) NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    active            boolean NOT NULL DEFAULT true,
    UNIQUE (workspace_id, id),
    UNIQUE (workspace_id, name)
);

CREATE TABLE members (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id   uuid NOT NULL REFERENCES workspaces (id),
    member_number  text NOT NULL CHECK (length(member_number) BETWEEN 1 AND 40),
    display_name   text NOT NULL,
    email          text,
    city           text,
    joined_on      date NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (workspace_id, id),
    UNIQUE (workspace_id, member_number)
);
CREATE INDEX members_name_idx ON members (workspace_id, display_name);
CREATE INDEX members_joined_idx ON members (workspace_id, joined_on);

-- A member's membership of a type over [start_date, end_date] (end NULL: open-ended).
-- status is the current one; cancelled_on records when a cancellation took effect, so a
-- month-end count can tell what the status was then.
CREATE TABLE memberships (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id        uuid NOT NULL,
    member_id           uuid NOT NULL,
    membership_type_id  uuid NOT NULL,
    status              text NOT NULL CHECK (status IN ('pending', 'active', 'lapsed', 'cancelled')),
    start_date          date NOT NULL,
    end_date            date,
    cancelled_on        date,
    CHECK (end_date IS NULL OR end_date >= start_date),
    CHECK ((status = 'cancelled') = (cancelled_on IS NOT NULL)),
    UNIQUE (workspace_id, id),
    FOREIGN KEY (workspace_id, member_id) REFERENCES members (workspace_id, id),
    FOREIGN KEY (workspace_id, membership_type_id) REFERENCES membership_types (workspace_id, id)
);
CREATE INDEX memberships_member_idx ON memberships (workspace_id, member_id);
CREATE INDEX memberships_start_idx ON memberships (workspace_id, start_date);
CREATE INDEX memberships_type_idx ON memberships (workspace_id, membership_type_id);

-- An invoice to a member: amount in minor units of its currency. status: draft (not sent),
-- open (sent, not fully paid), paid, void (voided_on says when).
CREATE TABLE invoices (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id  uuid NOT NULL,
    member_id     uuid NOT NULL,
    number        text NOT NULL CHECK (length(number) BETWEEN 1 AND 40),
    issue_date    date NOT NULL,
    due_date      date NOT NULL,
    amount_minor  bigint NOT NULL CHECK (amount_minor >= 0),
    currency      char(3) NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    status        text NOT NULL CHECK (status IN ('draft', 'open', 'paid', 'void')),
    voided_on     date,
    created_at    timestamptz NOT NULL DEFAULT now(),
    CHECK (due_date >= issue_date),
    CHECK ((status = 'void') = (voided_on IS NOT NULL)),
    UNIQUE (workspace_id, id),
    UNIQUE (workspace_id, number),
    FOREIGN KEY (workspace_id, member_id) REFERENCES members (workspace_id, id)
);
-- The saved queries' usual filters and sorts (by date, by status then date, by member);
-- each ends in id so a sorted export has a stable order.
CREATE INDEX invoices_issue_idx ON invoices (workspace_id, issue_date, id);
CREATE INDEX invoices_due_idx ON invoices (workspace_id, due_date, id);
CREATE INDEX invoices_status_due_idx ON invoices (workspace_id, status, due_date, id);
CREATE INDEX invoices_member_idx ON invoices (workspace_id, member_id);

CREATE TABLE payments (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id  uuid NOT NULL,
    invoice_id    uuid NOT NULL,
    received_on   date NOT NULL,
    amount_minor  bigint NOT NULL CHECK (amount_minor > 0),
    currency      char(3) NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    method        text NOT NULL CHECK (method IN ('card', 'bank_transfer', 'cash', 'check')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (workspace_id, id),
    FOREIGN KEY (workspace_id, invoice_id) REFERENCES invoices (workspace_id, id)
);
CREATE INDEX payments_invoice_idx ON payments (workspace_id, invoice_id);
CREATE INDEX payments_received_idx ON payments (workspace_id, received_on, id);

SELECT timekeeper_enable_tenant_rls(t) FROM unnest(ARRAY[
    'workspace_memberships', 'membership_types', 'members', 'memberships', 'invoices', 'payments'
]::regclass[]) AS t;

ALTER TABLE workspaces ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON workspaces AS PERMISSIVE FOR ALL TO timekeeper_api
    USING (id = timekeeper_current_workspace()) WITH CHECK (id = timekeeper_current_workspace());
SELECT timekeeper_allow_workers('workspaces');

ALTER TABLE users ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON users AS PERMISSIVE FOR SELECT TO timekeeper_api
    USING (EXISTS (SELECT FROM workspace_memberships m
                    WHERE m.user_id = users.id AND m.workspace_id = timekeeper_current_workspace()));
SELECT timekeeper_allow_workers('users');

-- The API reads who belongs to the workspace (the access rule, recipients) and the
-- workspace itself (its timezone); it changes none of them. Business data is read by the
-- export consumer and the renderer (workers), not by the API.
GRANT SELECT ON workspaces, users, workspace_memberships TO timekeeper_api;
