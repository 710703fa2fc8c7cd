"""The keys of listeners and their executions: definitions, state, leases, the rq queues that
carry executions and the workers' records. Built here, beside ``keys`` (the queues' keys), and
nowhere else."""

from __future__ import annotations

from dataclasses import dataclass

from atomq.platform.store.keys import PREFIX, tenant_prefix

LISTENER_TENANTS_KEY = f"{PREFIX}:listener:tenants"
LISTENERS_VERSION_KEY = f"{PREFIX}:listener:version"
"""A counter that goes up after every deploy and delete of a listener of any tenant: a supervisor
reads the listeners' definitions again only when it moved (or every ``DEFINITIONS_REFRESH_S``)."""


def listener_wake_key(holder: str) -> str:
    """The list one listener supervisor (``holder``: ``<node id>:<pid>``) blocks on between its rounds:
    a finished execution pushes to the list of the supervisor that holds its listener's lease, so the
    next execution of that listener (one at a time, on an exclusive queue) is scheduled at once."""
    return f"{PREFIX}:listener:wake:{holder}"


SPARK_LISTENER_TENANTS_KEY = f"{PREFIX}:listener:spark:tenants"
WORKER_PROBLEMS_KEY = f"{PREFIX}:workers:problems"
SPARK_WORKERS_KEY = f"{PREFIX}:spark:workers"
SPARK_RUNNING_KEY = f"{PREFIX}:spark:running"
"""In rq's Redis: a Spark worker's name -> what it runs now, a JSON list of ``<tenant>/<listener>``,
written with its heartbeat."""
EXECUTION_SECRET_KEY = f"{PREFIX}:exec:secret"
RQ_TENANTS_KEY = f"{PREFIX}:rq:tenants"


def rq_queue_name(tenant: str) -> str:
    """The rq queue of one tenant's fork executions (rq builds its own keys from it)."""
    return f"{PREFIX}.{tenant}"


def rq_spark_queue_name(tenant: str) -> str:
    """The rq queue of one tenant's Spark executions."""
    return f"{PREFIX}.spark.{tenant}"


def listener_lease_name(tenant: str, listener: str) -> str:
    """The lease of one listener's supervision (see :func:`lease_key`)."""
    return f"listener:{tenant}:{listener}"


def execution_record(tenant: str, execution: str) -> str:
    """The batch a started execution took: what its finish settles, whatever became of its listener."""
    return f"{tenant_prefix(tenant)}:exec:{execution}"


def tenant_listeners(tenant: str) -> str:
    """The hash of a tenant's listener definitions."""
    return f"{tenant_prefix(tenant)}:listeners"


def tenant_spark_listeners(tenant: str) -> str:
    """How many of a tenant's listeners have engine "spark" (a node starts its Spark worker for the first)."""
    return f"{tenant_prefix(tenant)}:listeners:spark"


def worker_problem_field(node_id: str, engine: str) -> str:
    """A node's field in :data:`WORKER_PROBLEMS_KEY`, for its worker of ``engine``."""
    return f"{node_id}:{engine}"


@dataclass(frozen=True)
class ListenerKeys:
    """The keys of one listener's state."""

    tenant: str
    name: str

    @property
    def _p(self) -> str:
        return f"{tenant_prefix(self.tenant)}:l:{self.name}"

    @property
    def definitions(self) -> str:
        return tenant_listeners(self.tenant)

    @property
    def stat(self) -> str:
        return f"{self._p}:stat"

    @property
    def executions(self) -> str:
        return f"{self._p}:exec"

    @property
    def pending(self) -> str:
        return f"{self._p}:pending"

    @property
    def done(self) -> str:
        return f"{self._p}:done"

    @property
    def spark_count(self) -> str:
        return tenant_spark_listeners(self.tenant)

    def as_list(self) -> list[str]:
        """The five keys in the order the listener scripts expect them."""
        return [self.definitions, self.stat, self.executions, self.pending, self.done]
