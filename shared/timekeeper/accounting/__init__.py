"""Accounting's scheduled work.

``books`` (calendars, periods, recurring batches, batches, entries; setup services),
``posting`` (posting jobs), ``reconciliation`` (bank line matching), ``billing``
(recurring billing preparation) and ``work_kinds`` (the four handlers and ``register``).
"""
