"""Monthly snapshots: a generic ledger that any owner module registers snapshot types with.

A snapshot type turns a workspace's data as of a workspace-local month end into rows
(generated in resumable chunks), validated and published as an immutable version. The
ledger plans each completed month, admits runs under a cap, runs their jobs, and keeps one
current version per period; staff request reasoned re-runs and backfills.
"""
