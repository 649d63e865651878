"""CDK constructs and stacks of Timekeeper (DESIGN sections 1 and 6).

Everything here is shape, not behaviour: the numbers come from :mod:`timekeeper.topology`,
the metric names from :mod:`timekeeper.observability`, and the few infrastructure-only
settings (memory sizes, database capacity, retention) from :mod:`infra.settings`.
"""
