"""Delivery e-mail's SES side in the synthesized app: a sender is required and must be
able to receive mail, the identity is created (a DKIM-signed domain, or an address) or
referenced, every message goes under the stack's configuration set, and the set's event
destination publishes the message states to an encrypted topic only SES may publish to."""

from __future__ import annotations

import aws_cdk as cdk
import pytest

from infra.settings import DeploymentConfig, reserved_mail_domain
from tests.infra.conftest import DEPLOYMENT, cdk_json_context, functions_by_folder, resources, synthesize
from timekeeper.topology import MESSAGE_EVENTS, QUERIES

SENDER = DEPLOYMENT["timekeeper:mailSender"]


def _config(**context):
    return DeploymentConfig.from_node(cdk.App(context={**cdk_json_context(), **context}).node)


def test_a_deployment_without_a_sender_is_refused_at_synth_naming_the_setting():
    with pytest.raises(ValueError, match="timekeeper:mailSender"):
        _config()


@pytest.mark.parametrize("sender", ["reports@example.com", "a@mail.example.org", "a@example.net",
                                    "a@acme.test", "a@x.example", "a@host.invalid", "a@localhost"])
def test_a_sender_where_mail_cannot_arrive_is_refused_at_synth(sender):
    with pytest.raises(ValueError, match="timekeeper:mailSender"):
        _config(**{"timekeeper:mailSender": sender})


@pytest.mark.parametrize("sender", ["reports", "reports@", "@acme.dev", "a b@acme.dev", "a@acme"])
def test_a_sender_that_is_no_address_is_refused(sender):
    with pytest.raises(ValueError, match="is not an e-mail address"):
        _config(**{"timekeeper:mailSender": sender})


def test_a_sender_outside_the_mail_domain_is_refused():
    with pytest.raises(ValueError, match="is not at timekeeper:mailDomain"):
        _config(**{"timekeeper:mailSender": "reports@acme.dev", "timekeeper:mailDomain": "mail.acme.dev"})
    assert _config(**{"timekeeper:mailSender": "reports@eu.mail.acme.dev",
                      "timekeeper:mailDomain": "mail.acme.dev"}).mail.domain == "mail.acme.dev"


def test_reserved_domains():
    assert [d for d in ["example.com", "EXAMPLE.com.", "a.example.org", "x.test", "example", "acme.dev",
                        "examples.com", "example.company"] if reserved_mail_domain(d)] == [
        "example.com", "EXAMPLE.com.", "a.example.org", "x.test", "example"]


def test_a_mail_domain_is_a_dkim_signed_identity_using_the_configuration_set(synth):
    template = synth.app_template
    [identity] = resources(template, "AWS::SES::EmailIdentity").values()
    props = identity["Properties"]
    assert props["EmailIdentity"] == DEPLOYMENT["timekeeper:mailDomain"]
    assert props.get("DkimAttributes", {}).get("SigningEnabled", True) is True
    [(set_id, configuration_set)] = resources(template, "AWS::SES::ConfigurationSet").items()
    assert props["ConfigurationSetAttributes"]["ConfigurationSetName"] == {"Ref": set_id}
    set_props = configuration_set["Properties"]
    assert set_props["ReputationOptions"]["ReputationMetricsEnabled"] is True
    assert set(set_props["SuppressionOptions"]["SuppressedReasons"]) == {"BOUNCE", "COMPLAINT"}


def test_without_a_domain_the_sender_address_is_the_identity():
    template = synthesize({"timekeeper:mailDomain": "", "timekeeper:mailSender": "ops@acme.dev"}).app_template
    [identity] = resources(template, "AWS::SES::EmailIdentity").values()
    assert identity["Properties"]["EmailIdentity"] == "ops@acme.dev"


def test_an_existing_identity_is_referenced_not_created():
    template = synthesize({"timekeeper:mailIdentityExists": "true"}).app_template
    assert resources(template, "AWS::SES::EmailIdentity") == {}
    assert len(resources(template, "AWS::SES::ConfigurationSet")) == 1


def test_the_message_states_go_to_an_encrypted_topic_only_ses_of_this_set_may_publish_to(synth):
    template = synth.app_template
    [destination] = resources(template, "AWS::SES::ConfigurationSetEventDestination").values()
    spec = destination["Properties"]["EventDestination"]
    assert set(spec["MatchingEventTypes"]) == {"delivery", "bounce", "complaint", "reject", "deliveryDelay"}
    topic_ref = spec["SnsDestination"]["TopicARN"]
    [topic_id] = [k for k in resources(template, "AWS::SNS::Topic") if {"Ref": k} == topic_ref]
    assert "KmsMasterKeyId" in template["Resources"][topic_id]["Properties"]
    policies = [p["Properties"]["PolicyDocument"]["Statement"]
                for p in resources(template, "AWS::SNS::TopicPolicy").values()
                if {"Ref": topic_id} in p["Properties"]["Topics"]]
    publish = [s for statements in policies for s in statements
               if s.get("Principal") == {"Service": "ses.amazonaws.com"} and s["Action"] == "sns:Publish"]
    assert publish and all({k.lower() for k in s["Condition"]["StringEquals"]} >= {"aws:sourceaccount", "aws:sourcearn"}
                           for s in publish)
    [key_id] = template["Resources"][topic_id]["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][:1]
    key_statements = template["Resources"][key_id]["Properties"]["KeyPolicy"]["Statement"]
    assert any(s.get("Principal") == {"Service": "ses.amazonaws.com"} for s in key_statements)
    assert "MessageEventsTopicArn" in template["Outputs"]


def test_the_delivery_consumer_sends_under_the_configuration_set(synth):
    template = synth.app_template
    [set_id] = resources(template, "AWS::SES::ConfigurationSet")
    props = template["Resources"][functions_by_folder(template)[QUERIES.consumer.function]]["Properties"]
    assert props["Environment"]["Variables"]["MAIL_CONFIGURATION_SET"] == {"Ref": set_id}
    assert props["Environment"]["Variables"]["MAIL_SENDER"] == SENDER


def test_the_message_states_reach_their_consumer_through_a_queue_subscribed_raw(synth):
    template = synth.app_template
    [topic_id] = [k for k, t in resources(template, "AWS::SNS::Topic").items()
                  if t["Properties"].get("DisplayName") == "Timekeeper message events"]
    [subscription] = [s["Properties"] for s in resources(template, "AWS::SNS::Subscription").values()
                      if s["Properties"]["TopicArn"] == {"Ref": topic_id}]
    # raw delivery: the consumer parses the SES event's JSON as the record's whole body
    assert subscription["Protocol"] == "sqs" and subscription["RawMessageDelivery"] is True
    queue_id = subscription["Endpoint"]["Fn::GetAtt"][0]
    queue = template["Resources"][queue_id]["Properties"]
    assert queue["QueueName"] == MESSAGE_EVENTS.queue_name
    assert queue["VisibilityTimeout"] == MESSAGE_EVENTS.visibility_timeout_s
    assert queue["RedrivePolicy"]["maxReceiveCount"] == MESSAGE_EVENTS.max_receive_count
    # only this topic may send to the queue
    [policy] = [p["Properties"] for p in resources(template, "AWS::SQS::QueuePolicy").values()
                if {"Ref": queue_id} in p["Properties"]["Queues"]]
    [send] = [s for s in policy["PolicyDocument"]["Statement"]
              if s.get("Principal") == {"Service": "sns.amazonaws.com"}]
    assert send["Condition"]["ArnEquals"]["aws:SourceArn"] == {"Ref": topic_id}
    # and the consumer reads it with the topology's numbers and partial batch responses
    consumer = functions_by_folder(template)[MESSAGE_EVENTS.function]
    [mapping] = [m["Properties"] for m in resources(template, "AWS::Lambda::EventSourceMapping").values()
                 if m["Properties"]["FunctionName"] == {"Ref": consumer}]
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    assert mapping["BatchSize"] == MESSAGE_EVENTS.batch_size
    assert mapping["ScalingConfig"]["MaximumConcurrency"] == MESSAGE_EVENTS.max_concurrency
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert template["Resources"][consumer]["Properties"]["Timeout"] == MESSAGE_EVENTS.timeout_s


def test_the_message_events_queue_alarms_like_every_queue(synth):
    names = {a["Properties"]["AlarmName"] for a in resources(synth.app_template, "AWS::CloudWatch::Alarm").values()}
    assert {f"Timekeeper-message-events-{n}" for n in ("queue-age", "dlq-depth", "dlq-arrivals",
                                                         "consumer-errors")} <= names
