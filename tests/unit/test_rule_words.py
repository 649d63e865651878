"""Every rule form in words (English), ending with its zone and, for business days, the holiday calendar."""

from __future__ import annotations

import pytest

from timekeeper.schedules.recurrence import describe_rule, parse_rule

NY, BERLIN = "America/New_York", "Europe/Berlin"


@pytest.mark.parametrize(("rule", "words"), [
    ({"cron": "30 2 * * *", "timezone": NY}, "At 02:30, every day, America/New_York"),
    ({"cron": "0 9 * * 1#3", "timezone": NY}, "At 09:00, on the third Monday of the month, America/New_York"),
    ({"cron": "0 18 * * 5L", "timezone": NY}, "At 18:00, on the last Friday of the month, America/New_York"),
    ({"cron": "0 9 15W * *", "timezone": NY},
     "At 09:00, on the weekday nearest day 15 of the month, America/New_York"),
    ({"cron": "0 18 LW * *", "timezone": NY}, "At 18:00, on the last weekday of the month, America/New_York"),
    ({"cron": "0 18 L-2 * *", "timezone": NY}, "At 18:00, 2 days before the last day of the month, America/New_York"),
    ({"cron": "0 18 L * *", "timezone": NY}, "At 18:00, on the last day of the month, America/New_York"),
    ({"cron": "*/15 * * * 1-5", "timezone": NY},
     "Every 15 minutes, Monday through Friday, America/New_York"),
    ({"cron": "*/15 * * * *", "timezone": BERLIN}, "Every 15 minutes, Europe/Berlin"),
    ({"cron": "0 */6 * * *", "timezone": BERLIN}, "Every 6 hours, Europe/Berlin"),
    ({"interval": {"hours": 6}, "anchor": "2027-01-01T00:00:00Z"}, "Every 6 hours from 2027-01-01 00:00 UTC"),
    ({"interval": {"minutes": 1}, "anchor": "2027-01-01T00:00:00Z", "timezone": BERLIN},
     "Every minute from 2027-01-01 00:00 UTC (local dates in Europe/Berlin)"),
    ({"calendar": {"frequency": "daily", "times": ["18:00", "06:00"]}, "timezone": BERLIN},
     "At 06:00 and 18:00 every day, Europe/Berlin"),
    ({"calendar": {"frequency": "daily", "interval": 3, "start_date": "2027-01-01", "times": ["06:00"]},
      "timezone": BERLIN}, "At 06:00 every 3 days from 2027-01-01, Europe/Berlin"),
    ({"calendar": {"frequency": "weekly", "weekdays": ["FR", "MO", "WE"], "times": ["09:00"]}, "timezone": BERLIN},
     "At 09:00 on Monday, Wednesday and Friday every week, Europe/Berlin"),
    ({"calendar": {"frequency": "weekly", "weekdays": ["MO", "TU", "WE", "TH", "FR"], "times": ["09:00"]},
      "timezone": BERLIN}, "At 09:00 on Monday to Friday every week, Europe/Berlin"),
    ({"calendar": {"frequency": "monthly", "month_day": 31, "times": ["18:00"]}, "timezone": BERLIN},
     "At 18:00 on day 31 of every month, Europe/Berlin"),
    ({"calendar": {"frequency": "monthly", "month_day": "last", "times": ["18:00"]}, "timezone": "Asia/Kolkata"},
     "At 18:00 on the last day of every month, Asia/Kolkata"),
    ({"calendar": {"frequency": "monthly", "nth_weekday": [-1, "FR"], "times": ["18:00"]}, "timezone": BERLIN},
     "At 18:00 on the last Friday of every month, Europe/Berlin"),
    ({"calendar": {"frequency": "yearly", "month": 3, "month_day": 15, "times": ["18:00"]}, "timezone": BERLIN},
     "At 18:00 on 15 March every year, Europe/Berlin"),
    ({"calendar": {"frequency": "monthly", "business_day": 3, "times": ["09:00"], "holidays": "DE-BE"},
      "timezone": BERLIN},
     "At 09:00 on the third business day of every month, Europe/Berlin, public holidays of Germany (Berlin)"),
    ({"calendar": {"frequency": "monthly", "business_day": -1, "times": ["18:00"], "holidays": "US-NY"},
      "timezone": NY},
     "At 18:00 on the last business day of every month, America/New_York, "
     "public holidays of the United States (New York)"),
    ({"calendar": {"frequency": "monthly", "business_day": -2, "weekdays": ["SU", "MO", "TU", "WE", "TH"],
                   "times": ["09:00"]}, "timezone": "Asia/Jerusalem"},
     "At 09:00 on the second last business day of every month (business days Sunday to Thursday), "
     "Asia/Jerusalem"),
    ({"rrule": "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=18;BYMINUTE=0", "timezone": BERLIN,
      "start": "2027-01-01"}, "At 18:00 on the last of the days Monday to Friday every month from 2027-01-01, "
                              "Europe/Berlin"),
    ({"rrule": "FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU;BYHOUR=1;BYMINUTE=30;COUNT=5", "timezone": BERLIN,
      "start": "2027-01-01", "exdate": ["2028-03-26"]},
     "At 01:30 on the last Sunday in March every year from 2027-01-01 (5 times) except 1 excluded date, "
     "Europe/Berlin"),
    ({"rrule": "FREQ=WEEKLY;INTERVAL=2;BYDAY=TU", "timezone": BERLIN, "start": "2027-01-05"},
     "At 00:00 on Tuesday every 2 weeks from 2027-01-05, Europe/Berlin"),
])
def test_each_form_in_words(rule, words):
    assert describe_rule(parse_rule(rule)) == words


def test_a_window_reads_as_applying_to_every_run_before_the_dst_choice():
    rule = {"cron": "30 1 * * *", "timezone": NY, "window_minutes": 30, "dst": {"gap": "skip", "overlap": "both"}}
    assert describe_rule(parse_rule(rule)) == (
        "At 01:30, every day, America/New_York, each run at some time within 30 minutes after its scheduled time; "
        "on DST gap days a time the clock skips does not run (recorded as skipped); "
        "when the clock falls back, a repeated time runs at both instants")
