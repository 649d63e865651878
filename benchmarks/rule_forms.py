"""Claim-path cost per distinct rule of each rule form.

What the dispatcher does for a schedule whose rule it has not compiled yet: compile the
stored JSON text (``parse_rule_text``, cold cache) and collapse its due occurrences
(``compute_due`` from the last due instant to now, then the next occurrence). Each rule
is distinct (a different minute and zone), so every evaluation pays the compile; the
figure is microseconds per rule, median of the repeats.

    PYTHONPATH=shared python3 benchmarks/rule_forms.py --rules 2000 --repeats 3
    PYTHONPATH=shared python3 benchmarks/rule_forms.py --rules 1200 --repeats 3 --only business_day --only nth_weekday
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import datetime, timedelta, timezone

from timekeeper.schedules.dues import compute_due
from timekeeper.schedules.recurrence import _compile_cached, parse_rule_text

ZONES = ["Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Sydney", "America/Sao_Paulo"]
NOW = datetime(2027, 3, 15, 12, 0, 30, tzinfo=timezone.utc)
# Business-day rules name one of these; each calendar's years are loaded once per process
# (the first rule of a calendar pays it: a warm-up pass below, as in a long-lived dispatcher).
HOLIDAY_CALENDARS = ["DE-BE", "DE-BY", "US-NY", "GB", "FR", "JP"]

FORMS = {
    "cron (plain)": lambda m, z: {"cron": f"{m} 9 * * 1-5", "timezone": z},
    "cron d#n": lambda m, z: {"cron": f"{m} 9 * * 1#3", "timezone": z},
    "cron dL": lambda m, z: {"cron": f"{m} 18 * * 5L", "timezone": z},
    "cron LW": lambda m, z: {"cron": f"{m} 18 LW * *", "timezone": z},
    "cron L-n": lambda m, z: {"cron": f"{m} 18 L-2 * *", "timezone": z},
    "cron nW": lambda m, z: {"cron": f"{m} 9 15W * *", "timezone": z},
    "calendar monthly nth_weekday": lambda m, z: {
        "calendar": {"frequency": "monthly", "nth_weekday": [3, "MO"], "times": [f"09:{m:02d}"]}, "timezone": z},
    "calendar monthly business_day (holidays)": lambda m, z: {
        "calendar": {"frequency": "monthly", "business_day": 3, "times": [f"09:{m:02d}"],
                     "holidays": HOLIDAY_CALENDARS[m % len(HOLIDAY_CALENDARS)]}, "timezone": z},
    "rrule monthly BYSETPOS=-1": lambda m, z: {
        "rrule": f"FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=18;BYMINUTE={m}", "timezone": z,
        "start": "2027-01-01"},
    "rrule weekly BYDAY": lambda m, z: {
        "rrule": f"FREQ=WEEKLY;BYDAY=MO,WE,FR;BYHOUR=9;BYMINUTE={m}", "timezone": z, "start": "2027-01-01"},
    "rrule yearly BYWEEKNO": lambda m, z: {
        "rrule": f"FREQ=YEARLY;BYWEEKNO=1,27;BYDAY=MO;BYHOUR=9;BYMINUTE={m}", "timezone": z, "start": "2027-01-01"},
    "rrule daily COUNT=500": lambda m, z: {
        "rrule": f"FREQ=DAILY;COUNT=500;BYHOUR=9;BYMINUTE={m}", "timezone": z, "start": "2027-01-01"},
    "rrule monthly EXDATE": lambda m, z: {
        "rrule": f"FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=18;BYMINUTE={m}", "timezone": z, "start": "2027-01-01",
        "exdate": ["2027-12-31", "2028-12-31"]},
}


def texts(form, count: int) -> list[str]:
    out = []
    for i in range(count):
        rule = FORMS[form](i % 60, ZONES[(i // 60) % len(ZONES)])
        rule["_n"] = i  # distinct text, so each is compiled: stripped before compiling below
        out.append(json.dumps(rule))
    return out


def one_pass(form: str, count: int) -> float:
    """Microseconds per distinct rule: compile + compute_due from the previous due instant."""
    rules = [json.dumps({k: v for k, v in json.loads(t).items() if k != "_n"}) + " " * (i // 300)
             for i, t in enumerate(texts(form, count))]
    _compile_cached.cache_clear()
    start = time.perf_counter()
    for text in rules:
        rule = parse_rule_text(text)
        previous = rule.latest_at_or_before(NOW, NOW - timedelta(days=400)) or rule.next_after(NOW)
        compute_due(rule, previous.at, NOW)
    return (time.perf_counter() - start) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", action="append", help="time only the forms whose name contains this")
    args = parser.parse_args()
    print(f"| form | us per distinct rule (median of {args.repeats}, {args.rules} rules) |")
    print("|---|---:|")
    for form in FORMS:
        if args.only and not any(part in form for part in args.only):
            continue
        one_pass(form, 60)  # warm-up: imports and the holiday calendars' years, once per process
        times = [one_pass(form, args.rules) for _ in range(args.repeats)]
        print(f"| {form} | {statistics.median(times):.0f} |")


if __name__ == "__main__":
    main()
