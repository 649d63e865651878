"""The SES adapter's request: every message names the configuration set when one is set
(its event destination reports the message's later states), and none otherwise."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from timekeeper.aws.ses import SesMailer


@pytest.mark.parametrize("configuration_set", ["timekeeper-deliveries", None])
def test_a_message_is_sent_under_the_configuration_set_when_one_is_set(configuration_set):
    client = boto3.client("ses", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    expected = {"Source": "reports@mail.acme-saas.dev", "Destination": {"ToAddresses": ["ana@acme-saas.dev"]},
                "Message": {"Subject": {"Data": "s", "Charset": "UTF-8"},
                            "Body": {"Html": {"Data": "<p>h</p>", "Charset": "UTF-8"},
                                     "Text": {"Data": "t", "Charset": "UTF-8"}}}}
    if configuration_set:
        expected["ConfigurationSetName"] = configuration_set
    with Stubber(client) as stub:
        stub.add_response("send_email", {"MessageId": "m-1"}, expected)
        mailer = SesMailer(client, "reports@mail.acme-saas.dev", configuration_set)
        assert mailer.send(to="ana@acme-saas.dev", subject="s", html="<p>h</p>", text="t") == "m-1"
        stub.assert_no_pending_responses()
