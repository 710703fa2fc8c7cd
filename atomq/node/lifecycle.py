"""How the main node, ``atomq serve``, starts and stops (``serve``).

The node is the HTTP API on a threaded WSGI server (``atomq.node.http_server``),
the maintenance loop and the listener supervisor under leases
(``atomq.node.worker_loops``), the execution workers (``--workers N``, 2 by
default, and a Spark worker once a Spark listener exists:
``atomq.node.master``), and (unless given a Redis URL) the embedded Valkey
that holds the data.

gunicorn's threaded workers serve the API: a blocking get holds one thread,
not the process. The embedded Valkey belongs to the master process; each
worker process connects to it, builds its own services after the fork and
runs the maintenance loop and the supervisor, whose work only the holders of
the leases (one node or worker at a time, per listener) actually do. The
execution workers are ``atomq worker`` processes started by the master.

Those loops run under ``run_loop``: an error makes one back off and shows in
``/v1/ready`` (each worker records its failing loops in ``DIR/health``, which
every worker reads), never ends it. The master holds the data directory's
lock (``DIR/atomq.lock``) for the node's life, so that no second node, audit
or selftest starts another Valkey on the node's files.

On SIGTERM: the execution workers finish their executions (which still need
the API) and stop; then the HTTP workers stop taking connections, end their
long-polls (within a second), finish the requests in flight, stop their
loops and give up their leases; then the master stops the embedded Valkey,
which fsyncs.
"""

from __future__ import annotations

import os
import shutil

from atomq.node.config import NodeConfig
from atomq.node.http_server import HEALTH_DIR, Node
from atomq.node.listening import bind_listener
from atomq.node.owner_key import load_owner_key
from atomq.node.rq_redis import rq_connection
from atomq.node.shared_setup import check_shared_setup
from atomq.platform import QueueServer
from atomq.platform.store.connection import open_redis
from atomq.platform.store.data_dir import DataDirLock
from atomq.platform.store.embedded import EmbeddedValkey


def serve(config: NodeConfig) -> None:
    """Runs the main node until SIGTERM or SIGINT; stops the embedded Valkey last.

    The node owns its data directory for its life: a second node, an audit or a
    selftest on it meets the lock (see ``atomq.platform.store.data_dir``). Its port is bound
    first, so a taken one stops it before anything else starts (``atomq.node.listening``).
    """
    lock = DataDirLock(config.data_dir)
    lock.acquire("serve")
    master = os.getpid()
    server = None
    listener = None
    try:
        listener = bind_listener(config.host, config.port)
        owner_key, key_path = load_owner_key(config.data_dir)
        if key_path is not None:
            print(f"atomq: the owner key is in {key_path}", flush=True)
        health_dir = config.data_dir / HEALTH_DIR
        shutil.rmtree(health_dir, ignore_errors=True)  # a previous owner's workers are gone
        health_dir.mkdir(mode=0o700)
        redis_url = config.redis_url
        if redis_url is None:
            server = EmbeddedValkey(config.data_dir / "valkey", appendfsync=config.appendfsync)
            server.start()
            redis_url = server.url
            lock.note_valkey(server.socket_path, server.port)
            print(f"atomq: embedded Valkey (pid {server.pid}) keeps its data in {server.data_dir}", flush=True)
        else:
            lock.note_redis_url()
        # Fail here, once, on an unusable Redis, a newer data format, or an owner key or rq Redis
        # that differs from the other nodes'; not in every worker.
        queues = QueueServer(open_redis(redis_url, allow_eviction=config.allow_eviction))
        rq_redis_url = config.rq_redis_url or redis_url
        rq = rq_connection(rq_redis_url)
        try:
            check_shared_setup(queues.storage, rq, owner_key, config.replace_owner_key)
            if queues.storage.is_cluster and not config.advertise_url:
                print(f"atomq: WARNING: this node serves a cluster store without --advertise-url: its execution "
                      f"workers, which may run on other machines, reach it at {config.api_url}", flush=True)
        finally:
            rq.close()
            queues.client.close()
        print(f"atomq: serving http://{config.host}:{config.port}", flush=True)
        Node(config, redis_url, owner_key, rq_redis_url, listener).run()
    finally:
        # gunicorn's forked workers leave through this frame too (SystemExit);
        # only the master owns the embedded Valkey and the directory.
        if os.getpid() == master:
            try:
                if listener is not None:
                    listener.close()  # gunicorn's once handed over: this copy is then detached
                if server is not None:
                    server.stop()
            finally:
                lock.release()
