"""The edge's answer to a run the per-workspace cap released: a delayed copy of its message
is sent and the received one acknowledged; when the copy cannot be sent, the item fails
with the release delay, except on its final receive (acknowledged: never dead-lettered)."""

from __future__ import annotations

import uuid

import pytest

from timekeeper.edge import adapters, batch
from timekeeper.edge.runs import _released
from timekeeper.schedules.consumer import ConsumerSettings, Delivery, Released
from timekeeper.schedules.messages import RunMessage
from timekeeper.topology import QUERIES

SETTINGS = ConsumerSettings.from_pipeline(QUERIES)


def _delivery(receive_count: int) -> Delivery:
    message = RunMessage(run_id=uuid.uuid4(), schedule_id=uuid.uuid4(), workspace_id=uuid.uuid4(),
                         owner="queries", work_kind="queries.deliver")
    return Delivery("m1", message, receive_count)


@pytest.fixture
def sends():
    """The releases the edge asked for; ``accept`` decides whether the queue takes them."""
    state = {"accept": True, "sent": []}

    def release(pipeline, message, delay_s):
        state["sent"].append((pipeline, message.run_id, delay_s))
        return state["accept"]

    adapters.install_run_releaser(release)
    yield state
    adapters.install_run_releaser(None)


def test_a_released_run_is_sent_again_delayed_and_its_message_acknowledged(sends):
    delivery = _delivery(1)
    result = Released(delivery.message, delay_s=17)
    assert _released("queries", delivery, result, SETTINGS) is True
    assert sends["sent"] == [("queries", delivery.message.run_id, 17)]


@pytest.mark.parametrize("receive_count", [1, 2])
def test_a_copy_the_queue_refused_fails_the_item_with_the_release_delay(sends, receive_count):
    sends["accept"] = False
    delivery = _delivery(receive_count)
    assert _released("queries", delivery, Released(delivery.message, delay_s=12), SETTINGS) == batch.Retry(12)


def test_on_the_final_receive_a_refused_copy_still_acknowledges_so_it_never_reaches_the_dead_letter_queue(sends):
    sends["accept"] = False
    delivery = _delivery(QUERIES.consumer.max_receive_count)
    assert _released("queries", delivery, Released(delivery.message, delay_s=12), SETTINGS) is True


def test_release_delays_are_jittered_within_the_topology_range():
    low, high = QUERIES.cap_release_delay_s
    delays = {SETTINGS.release_delay_s() for _ in range(200)}
    assert min(delays) >= low and max(delays) <= high and len(delays) > 1
