"""The client's calls of a queue's move tasks (``/v1/queues/{name}/moves``), mixed into
``AtomqClient``: a task moves a queue's waiting messages back to the queues they left as dead
letters, or to another queue, a step a second on the node."""

from __future__ import annotations

from typing import Any, Protocol


class _Requests(Protocol):
    def request(self, method: str, path: str, body: Any = None, *, timeout: float | None = None,
                **query: Any) -> Any: ...

    def _whole_list(self, path: str, member: str, **query: Any) -> list[Any]: ...


class MoveTaskCalls:
    """Start, list, read and cancel move tasks."""

    def start_move(self: _Requests, queue: str, destination: str | None = None,
                   max_per_second: int | None = None) -> Any:
        """Starts moving ``queue``'s waiting messages to ``destination``, or (None) back to the
        queues they left as dead letters, at most ``max_per_second`` a second (None: no bound).
        Returns the task: ``{"id", "status", "moved", "to_move", ...}``. Conflict while one runs."""
        body: dict[str, Any] = {}
        if destination is not None:
            body["destination"] = destination
        if max_per_second is not None:
            body["max_per_second"] = max_per_second
        return self.request("POST", f"/v1/queues/{queue}/moves", body)

    def moves(self: _Requests, queue: str) -> list[Any]:
        """The queue's newest move tasks (the running one among them), the newest first."""
        return self._whole_list(f"/v1/queues/{queue}/moves", "moves")

    def move(self: _Requests, queue: str, task_id: str) -> Any:
        """One move task of the queue, as it stands."""
        return self.request("GET", f"/v1/queues/{queue}/moves/{task_id}")

    def cancel_move(self: _Requests, queue: str, task_id: str) -> Any:
        """Cancels a running task (nothing moves after this returns); returns it with what it moved.
        Conflict when it is not running."""
        return self.request("DELETE", f"/v1/queues/{queue}/moves/{task_id}")
