"""The delivery history shows each attempt's outcome per recipient: a submission that
failed on the first attempt and was sent on the second keeps both. Real PostgreSQL through
the API's own login, moto S3 and SES, the real consumer."""

from __future__ import annotations

import pytest

from tests.api import test_delivery_routes as base
from tests.api.test_delivery_routes import BUCKET, KEY, NOW, SENDER, body, olga
from timekeeper.aws.ses import SesMailer
from timekeeper.db.connection import connect
from timekeeper.reporting import delivery as dl
from timekeeper.reporting.links import LinkSigner
from timekeeper.reporting.work_kinds import register
from timekeeper.schedules.consumer import ConsumerSettings, RetryLater, process_run
from timekeeper.schedules.work import WorkKindRegistry
from timekeeper.topology import QUERIES

#: The query schedule routes' fixtures.
tenants, aws, app = base.tenants, base.aws, base.app


def test_the_history_keeps_the_failed_first_attempt_beside_the_sent_second(call, tenants, publisher, aws, db_url):
    s3, ses = aws
    schedule_id = call("POST", "/query-schedules", body(tenants, recipients=["rita"]), as_=olga(tenants)).body["id"]
    call("POST", f"/query-schedules/{schedule_id}/run", headers={"Idempotency-Key": "a1"}, as_=olga(tenants))
    (message,) = publisher.sent
    mailer = SesMailer(ses, SENDER)

    class FailsOnce:
        failed = False

        def send(self, **kwargs):
            if not self.failed:
                self.failed = True
                raise ConnectionError("provider unavailable")
            return mailer.send(**kwargs)

    kinds = WorkKindRegistry()
    register(kinds)
    with connect(db_url) as conn, connect(db_url) as journal:
        services = dl.DeliveryServices(journal=lambda: journal, s3=s3, bucket=BUCKET, mailer=FailsOnce(),
                                       links=LinkSigner(KEY), download_base_url="https://api.test/")
        def run(receive: int):
            return process_run(conn, message, receive_count=receive, now=NOW, registry=kinds,
                               settings=ConsumerSettings.from_pipeline(QUERIES), services={"delivery": services})

        with pytest.raises(RetryLater):
            run(1)
        run(2)
    history = call("GET", f"/query-schedules/{schedule_id}/runs", as_=olga(tenants)).body["items"]
    (delivery,) = history[0]["deliveries"]
    assert (delivery["status"], delivery["error_code"]) == ("sent", None)
    assert [(a["attempt"], a["status"], a["error_code"]) for a in delivery["attempts"]] == [
        (1, "failed", "submission_error"), (2, "sent", None)]
    assert delivery["attempts"][1]["provider_message_id"] == delivery["provider_message_id"]
