"""The clock the handlers read. Real UTC time in Lambda; the local stack installs a
simulated clock so that the same handlers run over simulated days.

Domain code never reads a clock itself: the edge calls :func:`now` once per event and
passes the instant down.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

_source: Callable[[], datetime] = lambda: datetime.now(UTC)  # noqa: E731


def now() -> datetime:
    """The current instant (aware, UTC)."""
    return _source()


def installed() -> Callable[[], datetime]:
    """The clock source now installed (to put it back after a temporary one)."""
    return _source


def install(source: Callable[[], datetime] | None) -> None:
    """Replace the clock (``None`` restores real time). Used by the local stack only."""
    global _source
    _source = source or (lambda: datetime.now(UTC))
