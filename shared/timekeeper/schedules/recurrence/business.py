"""Business days: the business week, public holiday calendars and the Nth business day of a month.

Public holidays come from the ``holidays`` library (pinned in the requirements), by
ISO 3166 country code and optional subdivision: ``"DE"``, ``"DE-BE"``, ``"US-NY"``. The
library computes each year's holidays by rule (Easter, observed days, ...), so every year
of a rule's life has holiday data; a new release of the library may change them, and its
version is recorded with every business-day rule (:data:`HOLIDAYS_VERSION`).
"""

from __future__ import annotations

import calendar as _calendar
import re
from datetime import date
from functools import lru_cache

import holidays as _holidays

from timekeeper.schedules.recurrence.base import InvalidRecurrence

#: The version of the holiday data business-day rules are evaluated with.
HOLIDAYS_VERSION: str = _holidays.__version__
#: The default business week: Monday to Friday (``date.weekday()`` numbers).
DEFAULT_BUSINESS_WEEK = (0, 1, 2, 3, 4)
# Country names said with "the" ("public holidays of the United States").
_THE = frozenset({"United States", "United Kingdom", "United Arab Emirates", "Netherlands", "Philippines",
                  "Bahamas", "Dominican Republic", "Czech Republic", "Central African Republic", "Gambia",
                  "Maldives", "Marshall Islands", "Solomon Islands", "Comoros", "Seychelles",
                  "Democratic Republic Of The Congo", "Republic Of The Congo", "Cayman Islands",
                  "Faroe Islands", "Falkland Islands", "Virgin Islands"})
_CODE = re.compile(r"([A-Z]{2})(?:-([A-Z0-9]{1,4}))?")


@lru_cache(maxsize=1)
def _countries() -> dict[str, str]:
    """ISO 3166-1 alpha-2 code -> the country's English name, for every country the library supports."""
    names: dict[str, str] = {}
    for class_name, code, *_ in _holidays.registry.COUNTRIES.values():
        names[code] = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", class_name)
    return names


def check_holiday_code(code: str, field: str = "calendar.holidays") -> tuple[str, str | None]:
    """``(country, subdivision or None)`` of a holiday calendar code (``"DE"``, ``"DE-BE"``).

    Raises :class:`InvalidRecurrence` naming ``field`` for a malformed code, a country the
    holiday data does not cover or a subdivision the country does not have.
    """
    match = _CODE.fullmatch(code)
    if match is None:
        raise InvalidRecurrence(field, "must be an ISO 3166 country code, optionally with a subdivision "
                                       "('DE', 'DE-BE', 'US-NY')")
    country, subdivision = match[1], match[2]
    supported = _holidays.list_supported_countries()
    if country not in supported:
        raise InvalidRecurrence(field, f"no holiday calendar for country {country!r}")
    if subdivision is not None and subdivision not in supported[country]:
        raise InvalidRecurrence(field, f"country {country} has no subdivision {subdivision!r}")
    return country, subdivision


@lru_cache(maxsize=256)
def _year_holidays(code: str, year: int) -> frozenset[date]:
    """The public holidays of calendar ``code`` in ``year`` (a code :func:`check_holiday_code` accepted)."""
    country, _, subdivision = code.partition("-")
    data = _holidays.country_holidays(country, subdiv=subdivision or None, years=year)
    return frozenset(d for d in data if d.year == year)


def holidays_in_month(code: str | None, year: int, month: int) -> frozenset[date]:
    """The public holidays of calendar ``code`` in the month (empty for no calendar)."""
    if code is None:
        return frozenset()
    return frozenset(d for d in _year_holidays(code, year) if d.month == month)


def business_days(year: int, month: int, week: tuple[int, ...], closed: frozenset[date]) -> list[int]:
    """The days of the month (1-31, increasing) that are business days: on a weekday of
    ``week`` (``date.weekday()`` numbers) and not in ``closed``."""
    first_weekday, ndays = _calendar.monthrange(year, month)
    return [day for day in range(1, ndays + 1)
            if (first_weekday + day - 1) % 7 in week and date(year, month, day) not in closed]


def nth_business_day(n: int, year: int, month: int, week: tuple[int, ...], closed: frozenset[date]) -> int | None:
    """The day of the month of business day ``n`` (1 the first, -1 the last, ...).

    Rule: business day N of month M is always in month M. A month with fewer than ``|n|``
    business days (holidays or closures took some) runs on its last business day for a
    positive ``n`` and on its first for a negative one, as a calendar ``month_day`` clamps
    to a short month; a month without any business day has no occurrence (None).
    """
    days = business_days(year, month, week, closed)
    if not days:
        return None
    if n > 0:
        return days[min(n, len(days)) - 1]
    return days[max(n, -len(days))]


def most_business_days(week: tuple[int, ...]) -> int:
    """The most business days any month can have with the business week ``week`` and no
    holidays: four whole weeks plus up to three more days (a 31-day month); 23 for Monday-Friday."""
    return 4 * len(week) + min(3, len(week))


def holiday_calendar_name(code: str) -> str:
    """Words for a holiday calendar: ``"public holidays of Germany (Berlin)"``."""
    country, _, subdivision = code.partition("-")
    country_name = _countries().get(country, country)
    if country_name in _THE:
        country_name = f"the {country_name}"
    name = f"public holidays of {country_name}"
    if subdivision:
        aliases = _holidays.country_holidays(country, subdiv=subdivision, years=2000).subdivisions_aliases
        local = [alias for alias, sub in aliases.items() if sub == subdivision]
        name += f" ({local[0] if local else subdivision})"
    return name
