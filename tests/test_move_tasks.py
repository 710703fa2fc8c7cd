"""Move tasks: a queue's ready messages moved back to the queues they left as dead letters, or to
another queue, a step at a time by the maintenance; one task per source, cancelled at once. On
Valkey, the cluster and fakeredis."""

from __future__ import annotations

import pytest

from atomq.errors import Conflict, InvalidInput, NotFound
from atomq.platform import QueueServer
from atomq.platform.queues.move_tasks import MoveTask, MoveTaskStatus
from support.queues import browse_all, counts, msg
from support.waiting import wait_until


def dead_letters_from(qs: QueueServer, tenant: str, queue: str, *texts: str) -> list[str]:
    """Sends ``texts`` to ``queue`` (max_redeliveries 0, dead letters to "dlq") and nacks each into "dlq"."""
    ids = qs.send(tenant, queue, [msg(t, origin=queue) for t in texts])
    qs.nack(tenant, queue, [m.id for m in qs.get(tenant, queue, max_messages=len(texts))], reason="broken")
    return ids


def run_until_finished(qs: QueueServer, tenant: str, task: MoveTask) -> MoveTask:
    def finished() -> bool:
        qs.maintain(tenant)
        now = qs.move_task(tenant, task.id)
        return now is not None and now.status is not MoveTaskStatus.RUNNING
    wait_until(finished, 10, "the move task to finish")
    done = qs.move_task(tenant, task.id)
    assert done is not None
    return done


@pytest.fixture
def sources(qs: QueueServer, tenant: str) -> dict[str, list[str]]:
    """Queues a and b, whose dead letters move to dlq: three of a's and two of b's are there."""
    qs.put_queue(tenant, "dlq", "point_to_point")
    for name in ("a", "b"):
        qs.put_queue(tenant, name, "point_to_point", max_redeliveries=0, dead_letter_queue="dlq")
    return {"a": dead_letters_from(qs, tenant, "a", "a1", "a2", "a3"), "b": dead_letters_from(qs, tenant, "b", "b1", "b2")}


def test_a_task_moves_each_dead_letter_back_to_its_source_exactly(qs: QueueServer, tenant: str,
                                                                   sources: dict[str, list[str]]) -> None:
    assert counts(qs, tenant, "dlq") == (5, 0, 0)
    task = qs.start_move_task(tenant, "dlq")
    assert (task.status, task.to_move, task.moved, task.destination, task.rate) == (
        MoveTaskStatus.RUNNING, 5, 0, None, None)
    # The task lives in the store: another server (a node started later, say) runs it.
    done = run_until_finished(QueueServer(qs.client, qs.settings), tenant, task)
    assert (done.status, done.moved, done.failure) == (MoveTaskStatus.COMPLETED, 5, None)
    assert counts(qs, tenant, "dlq") == (0, 0, 0)
    assert qs.get_queue(tenant, "dlq").totals["moved"] == 5, "counted on the source"
    assert all(qs.get_queue(tenant, name).totals["moved"] == 0 for name in sources)
    for name, ids in sources.items():
        back = browse_all(qs, tenant, name)
        assert sorted(m.id for m in back) == sorted(ids)
        assert all(m.properties == {"origin": name} for m in back), "the record of the move is gone"
        assert all(m.delivery_count == 0 for m in back)
    assert qs.move_tasks(tenant, "dlq") == [done]


def test_a_task_with_a_rate_moves_that_many_a_step_and_a_cancel_stops_it(qs: QueueServer, tenant: str,
                                                                         sources: dict[str, list[str]]) -> None:
    qs.put_queue(tenant, "retry", "point_to_point")
    task = qs.start_move_task(tenant, "dlq", destination="retry", rate=2)
    assert qs.maintain(tenant)["tasks_moved"] == 2
    assert qs.maintain(tenant)["tasks_moved"] == 0, "its next step is a second away"
    cancelled, was_running = qs.cancel_move_task(tenant, task.id)
    assert was_running and (cancelled.status, cancelled.moved) == (MoveTaskStatus.CANCELLED, 2)
    assert qs.due_work([tenant])[tenant].moves == [], "no step is due any more"
    assert counts(qs, tenant, "retry")[0] == 2 and counts(qs, tenant, "dlq")[0] == 3
    [moved] = [m for m in browse_all(qs, tenant, "retry") if m.id == sources["a"][0]]
    assert "dead_letter_reason" not in moved.properties
    again, was_running = qs.cancel_move_task(tenant, task.id)
    assert not was_running and again.status is MoveTaskStatus.CANCELLED
    # A new task may start once none runs; it moves the rest.
    rest = run_until_finished(qs, tenant, qs.start_move_task(tenant, "dlq", destination="retry"))
    assert rest.moved == 3 and counts(qs, tenant, "retry")[0] == 5
    assert [t.id for t in qs.move_tasks(tenant, "dlq")] == [rest.id, task.id]


def test_one_task_at_a_time_from_a_queue(qs: QueueServer, tenant: str, sources: dict[str, list[str]]) -> None:
    qs.start_move_task(tenant, "dlq", rate=1)
    with pytest.raises(Conflict):
        qs.start_move_task(tenant, "dlq")
    with pytest.raises(InvalidInput):
        qs.start_move_task(tenant, "dlq", destination="dlq")
    with pytest.raises(NotFound):
        qs.start_move_task(tenant, "dlq", destination="nowhere")
    with pytest.raises(InvalidInput):
        qs.start_move_task(tenant, "a", rate=501)


def test_a_message_with_no_source_fails_the_task_where_it_stands(qs: QueueServer, tenant: str,
                                                                  sources: dict[str, list[str]]) -> None:
    [stray] = qs.send(tenant, "dlq", [msg("sent here")])
    done = run_until_finished(qs, tenant, qs.start_move_task(tenant, "dlq"))
    assert (done.status, done.moved, done.failure, done.failed_on) == (MoveTaskStatus.FAILED, 5, "no_source", stray)
    assert done.failure_text is not None and stray in done.failure_text
    assert [m.id for m in browse_all(qs, tenant, "dlq")] == [stray]


def test_a_full_target_makes_the_task_wait_not_fail(qs: QueueServer, tenant: str,
                                                     sources: dict[str, list[str]]) -> None:
    qs.put_queue(tenant, "narrow", "point_to_point", max_messages=2)
    task = qs.start_move_task(tenant, "dlq", destination="narrow")
    assert qs.maintain(tenant)["tasks_moved"] == 2
    running = qs.move_task(tenant, task.id)
    assert running is not None and running.status is MoveTaskStatus.RUNNING and running.moved == 2
    qs.ack(tenant, "narrow", [m.id for m in qs.get(tenant, "narrow", max_messages=2)])
    assert qs.maintain(tenant)["tasks_moved"] == 2
    qs.ack(tenant, "narrow", [m.id for m in qs.get(tenant, "narrow", max_messages=2)])
    done = run_until_finished(qs, tenant, task)
    assert (done.status, done.moved) == (MoveTaskStatus.COMPLETED, 5)


def test_a_deleted_queue_fails_the_task_and_moves_nothing(qs: QueueServer, tenant: str,
                                                            sources: dict[str, list[str]]) -> None:
    qs.delete_queue(tenant, "a")  # where the oldest dead letter would go back to
    done = run_until_finished(qs, tenant, qs.start_move_task(tenant, "dlq"))
    assert (done.status, done.moved, done.failure, done.failed_on) == (MoveTaskStatus.FAILED, 0, "no_queue", "a")
    assert counts(qs, tenant, "dlq") == (5, 0, 0)
    task = qs.start_move_task(tenant, "dlq", destination="b", rate=1)
    qs.delete_queue(tenant, "dlq")
    gone = run_until_finished(qs, tenant, task)
    assert (gone.status, gone.moved, gone.failure, gone.failed_on) == (MoveTaskStatus.FAILED, 0, "no_queue", "dlq")


def test_a_tenant_sees_and_cancels_only_its_own_tasks(qs: QueueServer, tenant: str,
                                                      sources: dict[str, list[str]]) -> None:
    task = qs.start_move_task(tenant, "dlq", rate=1)
    other = f"{tenant[:-1]}{'x' if tenant[-1] != 'x' else 'y'}"
    qs.put_queue(other, "dlq", "point_to_point")
    assert qs.move_tasks(other, "dlq") == [] and qs.move_task(other, task.id) is None
    with pytest.raises(NotFound):
        qs.cancel_move_task(other, task.id)
    with pytest.raises(InvalidInput):
        qs.cancel_move_task(tenant, "not-an-id")
    assert qs.cancel_move_task(tenant, task.id)[1]
