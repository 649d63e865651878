-- Accounting owner module tables: calendars, batches, ledger, posting, billing. PostgreSQL 15 compatible.
--
-- Every table carries workspace_id and a UNIQUE (workspace_id, id) key; references between
-- accounting rows are composite (workspace_id, x_id) foreign keys, so a row can never point
-- at another workspace's row (a tenant wall below the scoped queries; row-level security is the other).
-- Instants are timestamptz (UTC); calendar days are date; money is numeric(18,2).

-- Accounting calendars and their periods. A calendar's COVERAGE is exactly the set of
-- generated periods: a date after the last period (or before the first) is uncovered,
-- and no handler ever generates periods (a roll past the last period fails "outside calendar coverage").
CREATE TABLE accounting_calendars (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id  uuid NOT NULL,
    name          text NOT NULL,
    timezone      text NOT NULL,
    frequency     text NOT NULL CHECK (frequency IN ('weekly', 'monthly', 'quarterly')),
    -- Start of the first period; later starts are anchor + k * frequency (month ends clamp).
    anchor_date   date NOT NULL,
    UNIQUE (workspace_id, id)
);

CREATE TABLE accounting_periods (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id  uuid NOT NULL,
    calendar_id   uuid NOT NULL,
    seq           integer NOT NULL CHECK (seq >= 0),
    name          text NOT NULL,
    starts_on     date NOT NULL,
    ends_on       date NOT NULL,        -- inclusive
    CHECK (ends_on >= starts_on),
    UNIQUE (workspace_id, id),
    CONSTRAINT accounting_periods_calendar_start UNIQUE (calendar_id, starts_on),
    CONSTRAINT accounting_periods_calendar_seq UNIQUE (calendar_id, seq),
    FOREIGN KEY (workspace_id, calendar_id) REFERENCES accounting_calendars (workspace_id, id)
);

CREATE TABLE recurring_batches (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id     uuid NOT NULL,
    calendar_id      uuid NOT NULL,
    name             text NOT NULL,
    active_batch_id  uuid,               -- FK added below (the two tables refer to each other)
    auto_post        boolean NOT NULL DEFAULT true,
    UNIQUE (workspace_id, id),
    FOREIGN KEY (workspace_id, calendar_id) REFERENCES accounting_calendars (workspace_id, id)
);
CREATE INDEX recurring_batches_calendar_idx ON recurring_batches (calendar_id);

CREATE TABLE batches (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id        uuid NOT NULL,
    recurring_batch_id  uuid,
    period_id           uuid,
    name                text NOT NULL,
    status              text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'closed', 'posted')),
    -- Copied from the recurring batch when a roll opens it; standalone batches set it.
    auto_post           boolean NOT NULL DEFAULT true,
    opened_at           timestamptz NOT NULL,
    close_at            timestamptz,     -- scheduled close instant (batch.auto_close)
    closed_at           timestamptz,
    posted_at           timestamptz,
    opened_by_run_id    uuid,
    closed_by_run_id    uuid,
    CHECK ((status = 'open') = (closed_at IS NULL)),
    CHECK ((status = 'posted') = (posted_at IS NOT NULL)),
    UNIQUE (workspace_id, id),
    FOREIGN KEY (workspace_id, recurring_batch_id) REFERENCES recurring_batches (workspace_id, id),
    FOREIGN KEY (workspace_id, period_id) REFERENCES accounting_periods (workspace_id, id)
);
-- One batch per recurring batch and period.
CREATE UNIQUE INDEX batches_recurring_period_key ON batches (recurring_batch_id, period_id)
    WHERE recurring_batch_id IS NOT NULL;
-- batch.roll's and batch.auto_close's repeat detection ("already done by this run").
CREATE INDEX batches_opened_by_run_idx ON batches (opened_by_run_id) WHERE opened_by_run_id IS NOT NULL;
CREATE INDEX batches_closed_by_run_idx ON batches (closed_by_run_id) WHERE closed_by_run_id IS NOT NULL;
CREATE INDEX batches_workspace_close_at_idx ON batches (workspace_id, close_at) WHERE status = 'open';

ALTER TABLE recurring_batches
    ADD CONSTRAINT recurring_batches_active_batch_fkey
    FOREIGN KEY (workspace_id, active_batch_id) REFERENCES batches (workspace_id, id);

CREATE TABLE ledger_entries (
    id                          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id                uuid NOT NULL,
    batch_id                    uuid NOT NULL,
    account                     text NOT NULL,
    amount                      numeric(18, 2) NOT NULL CHECK (amount <> 0),
    entry_date                  date NOT NULL,
    reference                   text,
    posted                      boolean NOT NULL DEFAULT false,
    posted_at                   timestamptz,
    reconciled_by_bank_line_id  uuid,   -- FK added after bank_lines
    reconciled_at               timestamptz,
    CHECK (posted = (posted_at IS NOT NULL)),
    CHECK ((reconciled_by_bank_line_id IS NULL) = (reconciled_at IS NULL)),
    CHECK (reconciled_by_bank_line_id IS NULL OR posted),
    UNIQUE (workspace_id, id),
    FOREIGN KEY (workspace_id, batch_id) REFERENCES batches (workspace_id, id)
);
CREATE INDEX ledger_entries_batch_idx ON ledger_entries (batch_id);
-- reconciliation.sweep's candidate lookup: posted, unreconciled entries by account and amount.
CREATE INDEX ledger_entries_unreconciled_idx ON ledger_entries (workspace_id, account, amount, entry_date)
    WHERE posted AND reconciled_by_bank_line_id IS NULL;
CREATE UNIQUE INDEX ledger_entries_bank_line_key ON ledger_entries (reconciled_by_bank_line_id)
    WHERE reconciled_by_bank_line_id IS NOT NULL;

-- One posting job per batch (request_posting is idempotent through batch_id UNIQUE).
CREATE TABLE posting_jobs (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id         uuid NOT NULL,
    batch_id             uuid NOT NULL UNIQUE,
    status               text NOT NULL DEFAULT 'pending'
                         CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
    error                text,
    attempts             integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    requested_by_run_id  uuid,
    created_at           timestamptz NOT NULL,
    started_at           timestamptz,
    finished_at          timestamptz,
    CHECK (status <> 'failed' OR error IS NOT NULL),
    UNIQUE (workspace_id, id),
    FOREIGN KEY (workspace_id, batch_id) REFERENCES batches (workspace_id, id)
);
-- Jobs that still need a (re)try: closed, unposted batches are visible through this index.
CREATE INDEX posting_jobs_unfinished_idx ON posting_jobs (workspace_id, created_at)
    WHERE status IN ('pending', 'running', 'failed');

CREATE TABLE bank_lines (
    id                    uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id          uuid NOT NULL,
    bank_account          text NOT NULL,
    amount                numeric(18, 2) NOT NULL CHECK (amount <> 0),
    booked_on             date NOT NULL,
    reference             text,
    matched_entry_id      uuid,
    reconciled_at         timestamptz,
    reconciled_by_run_id  uuid,
    CHECK ((matched_entry_id IS NULL) = (reconciled_at IS NULL)),
    UNIQUE (workspace_id, id),
    FOREIGN KEY (workspace_id, matched_entry_id) REFERENCES ledger_entries (workspace_id, id)
);
-- reconciliation.sweep reads the workspace's unreconciled lines through this index.
CREATE INDEX bank_lines_unreconciled_idx ON bank_lines (workspace_id, booked_on)
    WHERE matched_entry_id IS NULL;
CREATE UNIQUE INDEX bank_lines_matched_entry_key ON bank_lines (matched_entry_id)
    WHERE matched_entry_id IS NOT NULL;
CREATE INDEX bank_lines_reconciled_by_run_idx ON bank_lines (reconciled_by_run_id)
    WHERE reconciled_by_run_id IS NOT NULL;

ALTER TABLE ledger_entries
    ADD CONSTRAINT ledger_entries_bank_line_fkey
    FOREIGN KEY (workspace_id, reconciled_by_bank_line_id) REFERENCES bank_lines (workspace_id, id);

-- Recurring billing: a plan bills `amount` every `interval_months` months on its anchor
-- day of month (clamped to shorter months, returning to the anchor day afterwards).
CREATE TABLE billing_plans (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id     uuid NOT NULL,
    customer         text NOT NULL,
    amount           numeric(18, 2) NOT NULL CHECK (amount > 0),
    currency         char(3) NOT NULL,
    interval_months  integer NOT NULL CHECK (interval_months BETWEEN 1 AND 120),
    anchor_day       smallint NOT NULL CHECK (anchor_day BETWEEN 1 AND 31),
    next_bill_date   date NOT NULL,
    active           boolean NOT NULL DEFAULT true,
    UNIQUE (workspace_id, id)
);
-- billing.prepare's due-plan lookup.
CREATE INDEX billing_plans_due_idx ON billing_plans (workspace_id, next_bill_date) WHERE active;

CREATE TABLE draft_invoices (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id        uuid NOT NULL,
    billing_plan_id     uuid NOT NULL,
    billing_date        date NOT NULL,
    amount              numeric(18, 2) NOT NULL,
    currency            char(3) NOT NULL,
    status              text NOT NULL DEFAULT 'draft' CHECK (status IN ('draft', 'issued', 'void')),
    prepared_at         timestamptz NOT NULL,
    prepared_by_run_id  uuid,
    CONSTRAINT draft_invoices_plan_date_key UNIQUE (billing_plan_id, billing_date),
    UNIQUE (workspace_id, id),
    FOREIGN KEY (workspace_id, billing_plan_id) REFERENCES billing_plans (workspace_id, id)
);
CREATE INDEX draft_invoices_prepared_by_run_idx ON draft_invoices (prepared_by_run_id)
    WHERE prepared_by_run_id IS NOT NULL;
