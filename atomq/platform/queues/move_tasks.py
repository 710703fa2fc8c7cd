"""Move tasks: a queue's ready messages moved, a few at a time, to another queue, or back to the
queues they left as dead letters (their ``dead_letter_source``): what SQS's StartMessageMoveTask
does to redrive a dead letter queue, for any point-to-point queue.

A task is a record in the tenant's keyspace (``keys.TenantKeys.move_tasks``), and an entry in
the tenant's index of due tasks that the maintenance round reads with the rest of the tenant's due
work; each step is one script (``move_step.lua``) that moves up to the task's rate (or a chunk)
and sets when the next step is due. So a task outlives the node that started it: it goes on
wherever the maintenance lease is held, a second a step, and a restart only pauses it. One task at
a time runs from a queue; a cancel takes effect in one script, so nothing moves after it answers.
Each message arrives at its target as a dead letter moved there does (``_lib_failures.lua``): a
first delivery at its priority, the target's limits holding (a full target makes the task wait,
not fail), without the record of its move as a dead letter.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from enum import Enum
from typing import Any

from atomq.errors import Conflict, InvalidInput, NotFound
from atomq.integer_range import check_integer_range
from atomq.platform.models import QueueModel
from atomq.platform.queues.components import Components
from atomq.platform.queues.dead_letter_targets import target_keys
from atomq.platform.queues.names import check_queue_name, check_tenant_id
from atomq.platform.shared import ChunkBudget, Shared, docs_and_config, queue_keys, queue_not_found
from atomq.platform.store import keys as k

MAX_RATE = 500
"""Most messages a second a task may be given (SQS's bound)."""
KEPT_PER_SOURCE = 10
"""Tasks of one source queue whose records are kept, the newest (SQS lists at most 10)."""
STEP_EVERY_MS = 1000
"""How long a task with a rate waits between two steps, each moving that many messages."""
TASK_ID_CHARS = 32


class MoveTaskStatus(str, Enum):
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"


FAILURES = {"no_queue": "queue {} does not exist or is not a point-to-point queue",
            "no_source": "message {} has no queue to go back to: it was not moved here as a dead letter",
            "holds_copy": "the target holds a copy of message {} already"}
"""Why a task failed (the record's ``failure``), in words, of what it failed on."""


@dataclass(frozen=True)
class MoveTask:
    """A move task as its record holds it. ``destination`` None: each message goes back to its
    ``dead_letter_source``; ``rate`` None: as fast as the maintenance moves them."""

    id: str
    source: str
    destination: str | None
    rate: int | None
    status: MoveTaskStatus
    moved: int
    to_move: int
    """The source's ready messages when the task started."""
    started_at: float
    failure: str | None = None
    """Why it failed: a key of ``FAILURES``."""
    failed_on: str | None = None
    """The queue or message it failed on."""

    @property
    def failure_text(self) -> str | None:
        return None if self.failure is None else FAILURES.get(self.failure, self.failure).format(self.failed_on)

    @classmethod
    def from_record(cls, raw: bytes | str) -> MoveTask:
        rec: dict[str, Any] = json.loads(raw)
        return cls(id=rec["id"], source=rec["source"], destination=rec.get("destination"),
                   rate=None if rec.get("rate") is None else int(rec["rate"]),
                   status=MoveTaskStatus(rec["status"]), moved=int(rec["moved"]), to_move=int(rec["to_move"]),
                   started_at=int(rec["started"]) / 1000, failure=rec.get("failure"), failed_on=rec.get("failed_on"))


class MoveTasks:
    """Starts, lists and cancels the tenants' move tasks, and runs their steps for the maintenance."""

    def __init__(self, shared: Shared, components: Components) -> None:
        self._shared = shared
        self._components = components

    def start(self, tenant: str, source: str, destination: str | None = None, rate: int | None = None) -> MoveTask:
        """Starts moving the ready messages of point-to-point queue ``source`` to ``destination``
        (another point-to-point queue), or back to the queue each left as a dead letter; at most
        ``rate`` a second. Conflict when a task of ``source`` is running."""
        tk, qk = queue_keys(tenant, source)
        self._point_to_point(tenant, source, "source")
        if destination is not None:
            check_queue_name(destination, field="destination")
            if destination == source:
                raise InvalidInput("a task moves messages to another queue than its source", field="destination")
            self._point_to_point(tenant, destination, "destination")
        if rate is not None:
            check_integer_range(rate, "rate", 1, MAX_RATE)
        d = qk.destination()
        task_id = uuid.uuid4().hex
        text = self._shared.storage.run(
            "move_start", docs_and_config(tk, qk) + [d.ready, d.ordered, tk.move_tasks(), tk.move_tasks(due=True)],
            [task_id, source, destination or "", rate or 0, KEPT_PER_SOURCE],
            errors={"NOQUEUE": lambda _: queue_not_found(source),
                    "MOVEBUSY": lambda words: Conflict(f"a move task of queue {source} is running: cancel it or let "
                                                       "it finish first", queue=source, task=words[0])})
        return MoveTask.from_record(text)

    def _point_to_point(self, tenant: str, name: str, field: str) -> None:
        if self._components.get_queue(tenant, name).model is not QueueModel.POINT_TO_POINT:
            raise InvalidInput(f"{field} {name} is a publish/subscribe queue: a task moves the messages of "
                               "point-to-point queues", field=field)

    def cancel(self, tenant: str, task_id: str) -> tuple[MoveTask, bool]:
        """Stops a running task at once (nothing moves after this returns); returns the task and
        whether it was running. NotFound for no such task of the tenant."""
        tk = k.TenantKeys(check_tenant_id(tenant))
        _check_id(task_id)
        was, text = self._shared.storage.run(
            "move_cancel", [tk.move_tasks(), tk.move_tasks(due=True)], [task_id],
            errors={"NOTASK": lambda _: NotFound(f"move task {task_id} does not exist", task=task_id)})
        return MoveTask.from_record(text), bool(was)

    def of(self, tenant: str, task_id: str) -> MoveTask | None:
        """One task of the tenant, or None."""
        tk = k.TenantKeys(check_tenant_id(tenant))
        _check_id(task_id)
        raw = self._shared.storage.call(self._shared.client.hget, tk.move_tasks(), task_id)
        return None if raw is None else MoveTask.from_record(raw)

    def list(self, tenant: str, source: str, limit: int = KEPT_PER_SOURCE) -> list[MoveTask]:
        """The tasks of queue ``source`` whose records are kept, the newest first."""
        tk, _ = queue_keys(tenant, source)
        held = self._shared.storage.call(self._shared.client.hgetall, tk.move_tasks())
        tasks = [MoveTask.from_record(raw) for name, raw in held.items() if not name.startswith(b"src:")]
        mine = sorted((t for t in tasks if t.source == source), key=lambda t: (t.started_at, t.id), reverse=True)
        return mine[:limit]

    def running(self, tenant: str) -> dict[str, str]:
        """The tenant's queues a task runs from, with that task's id (read from the record's
        ``src:<queue>`` entries, which a task holds while it runs)."""
        tk = k.TenantKeys(check_tenant_id(tenant))
        names = self._shared.storage.call(self._shared.client.hkeys, tk.move_tasks())
        held = [n.decode() for n in names if n.startswith(b"src:")]
        if not held:
            return {}
        ids = self._shared.storage.call(self._shared.client.hmget, tk.move_tasks(), held)
        return {n[4:]: i.decode() for n, i in zip(held, ids) if i is not None}

    def step(self, tk: k.TenantKeys, task_id: str, budget: ChunkBudget) -> int:
        """Runs a due task's step for the maintenance: moves up to its rate, or chunk after chunk
        while ``budget`` lasts when it has none. Returns the messages moved."""
        raw = self._shared.storage.call(self._shared.client.hget, tk.move_tasks(), task_id)
        task = None if raw is None else MoveTask.from_record(raw)
        if task is None or task.status is not MoveTaskStatus.RUNNING:
            self._shared.storage.call(self._shared.client.zrem, tk.move_tasks(due=True), task_id)
            return 0
        qk = tk.queue(task.source)
        base = docs_and_config(tk, qk) + qk.destination().as_list() + [tk.usage, tk.move_tasks(), tk.move_tasks(due=True)]
        most = task.rate or self._shared.settings.chunk_size
        target, moved = task.destination, 0
        while budget.take():
            n, status, need = self._shared.storage.run(
                "move_step", base + (target_keys(tk, target) if target else []),
                [task_id, most - moved if task.rate else most, target or "", STEP_EVERY_MS if task.rate else 0])
            moved += int(n)
            if need:
                target = need.decode()
                continue
            if status.decode() != MoveTaskStatus.RUNNING.value or task.rate or not n:
                break
        return moved


def _check_id(task_id: str) -> None:
    if not isinstance(task_id, str) or len(task_id) != TASK_ID_CHARS or not all(
            c in "0123456789abcdef" for c in task_id):
        raise InvalidInput(f"a move task's id is {TASK_ID_CHARS} lower-case hex digits", field="task")
