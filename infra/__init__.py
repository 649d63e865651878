"""CDK constructs and stacks of Timekeeper, built from the topology.

Everything here is shape, not behaviour: the numbers come from :mod:`timekeeper.topology`,
the metric names from :mod:`timekeeper.observability`, and the few infrastructure-only
settings (memory sizes, database capacity, retention) from :mod:`infra.settings`.
"""
