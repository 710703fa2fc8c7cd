"""The run of ``atomq demo``: the seed's worked example (seed 002, version 3), end to end, on the
embedded defaults.

It starts ``atomq serve`` in a throw-away data directory (as a user would),
makes a tenant with the seed's queues (an exclusive input queue attracting
``boomi/test/>``, a last-value queue holding the checkpoint published to
``boomi/checkpoint/echo-service``, an errors queue attracting
``boomi/errors/echo-service/>``, and a queue for the echo events published
under ``boomi/echo/``), deploys the ``echo-service`` listener (version 3:
topics and the checkpoint), publishes test messages of which a share lack
their ``msgId`` and a share are not JSON at all, and reports what arrived
where, with the throughput. On the fork engine one execution dies on purpose
mid-run, after its outputs and checkpoint are stored and before its batch is
acknowledged; its messages come back redelivered, are recognised through the
checkpoint and are not processed twice, and the demo shows it. Every step
prints a line.

It fails fast and says why: without a usable Java runtime before it starts
anything, and when the listener stays ``waiting`` (or in ``error``) past a
short grace, with the listener's own reason. Whatever way it ends (done,
failed, Ctrl-C or SIGTERM) it stops the node it started, Valkey with it; a
failed run keeps the node's log and prints where it is.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypedDict

from atomq import defaults
from atomq.client import AtomqClient, wire
from atomq.errors import JavaMissing, StorageError
from atomq.spark_workers.session import find_java
from atomq.workers.liveness import SPARK_STARTING

INPUT = "q.Boomi-Message-Echo-Service"
CHECKPOINTS = "lvq.Boomi-Message-Echo-Service"
ERRORS = "q.Boomi-Message-Echo-Service.Errors"
ECHOES = "q.Boomi-Echo-Events"
TEST_TOPIC = "boomi/test/echo-service"
TOPOLOGY: dict[str, dict[str, Any]] = {
    INPUT: {"access": "exclusive", "topics": ["boomi/test/>"], "ack_timeout_s": 5},
    CHECKPOINTS: {"last_value": True, "topics": ["boomi/checkpoint/echo-service"]},
    ERRORS: {"topics": ["boomi/errors/echo-service/>"]},
    ECHOES: {"topics": ["boomi/echo/>"]},
}
"""Seed 002's queues (and one for the echo events the next service would read). The input's
short ack time-out brings the batch of the execution that dies back within seconds."""
SETTINGS = {"echo_topic": "boomi/echo", "errors_topic": "boomi/errors/echo-service",
            "checkpoint_queue": CHECKPOINTS, "checkpoint_topic": "boomi/checkpoint/echo-service"}
DYING_PROCESS = "echo-service-demo"
"""The echo-service that dies once on purpose, registered on the demo's node only (fork engine)."""
WARM_UP = 10
"""Valid messages sent and processed before the timed run (they go to echo, and are not counted)."""
STUCK_GRACE_S = 15.0
"""How long the listener may wait for a worker (or be in error) during the warm-up before the
demo gives up with its reason; a Spark worker that is still starting is not stuck."""
LOG_TAIL_LINES = 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_messages(count: int, seed: int = 7) -> list[str]:
    """The example's input: 80% valid test messages, 10% without msgId, 10% not JSON."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        roll = rng.random()
        if roll < 0.8:
            out.append(json.dumps({"msgId": f"m-{i}", "text": f"test message {i}"}))
        elif roll < 0.9:
            out.append(json.dumps({"text": f"test message {i} without an id"}))
        else:
            out.append(f"<test id='{i}'>not JSON</test>")
    return out


class DemoSummary(TypedDict):
    """What arrived where, and how fast: the demo's last lines, and the figures a benchmark keeps."""

    echo: int
    errors: int
    error_reasons: dict[str, int]
    killed: int
    recognised: bool
    dead_letters: int
    left_in_tests: int
    executions: int
    failures: int
    seconds: float
    messages_per_second: float


class Demo:
    """One run of the demo; ``say`` prints each step."""

    def __init__(self, messages: int, engine: str, spark_master: str, batch_size: int,
                 data_dir: Path | None, say: Callable[[str], None], fork_workers: int | None = None,
                 timed: Callable[[str, int], None] | None = None) -> None:
        self.messages, self.engine, self.spark_master, self.batch_size = messages, engine, spark_master, batch_size
        self.say = say
        self.fork_workers = fork_workers
        self.timed = timed
        """Called with ``"start"`` and ``"end"`` and the node's pid around the timed run (a benchmark's meter)."""
        self.temp = data_dir is None
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="atomq-demo-"))
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.owner_key = f"aq_owner_demo_{os.urandom(12).hex()}"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "serve.log"

    def start(self, timeout: float = 60) -> None:
        args = [sys.executable, "-m", "atomq", "serve", "--data-dir", str(self.data_dir / "node"),
                "--port", str(self.port)]
        if self.engine == "spark":
            args += ["--workers", "0", "--spark", "--spark-master", self.spark_master]
        elif self.fork_workers is not None:
            args += ["--workers", str(self.fork_workers)]
        env = {**os.environ, "ATOMQ_OWNER_KEY": self.owner_key}
        if self.engine == "fork":
            env["ATOMQ_PROCESSES"] = f"{DYING_PROCESS}=atomq.cli.demo.processes:echo_service_dying_once"
        runs_on = f"a Spark worker on {self.spark_master}" if self.engine == "spark" else \
            f"{self.fork_workers or defaults.EXECUTION_WORKERS} fork workers"
        self.say(f"starting atomq serve on {self.url} with {runs_on}")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        with AtomqClient(self.url, self.owner_key, timeout=2) as owner:
            while True:
                try:
                    owner.request("GET", "/v1/health")
                    return
                except StorageError:
                    self._check_node()
                    if time.monotonic() > deadline:
                        raise StorageError(f"atomq serve did not answer within {timeout:.0f} s") from None
                    time.sleep(0.2)

    def _check_node(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise StorageError(f"atomq serve exited with status {self.proc.returncode}")

    def stop(self, failed: bool) -> None:
        """Stops the node (SIGTERM, then SIGKILL to its process group); removes the temporary
        directory, but after a failure keeps the node's log there and says where it is."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    # Its workers and Valkey get SIGTERM when it dies (a parent-death signal).
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait()
        if failed and self.log_path.exists():
            lines = self.log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            self.say(f"the node's log is kept in {self.log_path}; its last lines:")
            for line in lines:
                self.say(f"  | {line}")
            if self.temp:
                shutil.rmtree(self.data_dir / "node", ignore_errors=True)
        elif self.temp:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _warm_up(self, api: AtomqClient, timeout: float = 180) -> None:
        """A first small batch, so that the figures leave out the JVM's and the workers' start."""
        started = time.monotonic()
        api.publish(TEST_TOPIC, [wire.message([wire.document(json.dumps({"msgId": f"warm-up-{i}"}))])
                                 for i in range(WARM_UP)])
        self.say(f"warming up: {WARM_UP} messages while the {self.engine} workers start ...")
        stuck_since: float | None = None
        while api.queue(ECHOES)["depth"] < WARM_UP:
            self._check_node()
            now = time.monotonic()
            listener = api.listener("echo-service")
            stuck = listener["state"] in ("waiting", "error") and not listener["last_error"].startswith(SPARK_STARTING)
            stuck_since = (stuck_since or now) if stuck else None
            if stuck_since is not None and now - stuck_since > STUCK_GRACE_S:
                raise StorageError(f"the listener cannot run ({listener['state']}): {listener['last_error']}")
            if now - started > timeout:
                raise StorageError(f"the listener did not run within {timeout:.0f} s "
                                   f"(state {listener['state']}: {listener['last_error'] or 'no error'})")
            time.sleep(0.5)
        self.say(f"warmed up in {time.monotonic() - started:.1f} s")

    @property
    def marker(self) -> Path:
        """Where the dying process notes what its batch held (see ``demo_processes``)."""
        return self.data_dir / "killed-execution.json"

    def run(self) -> DemoSummary:
        with AtomqClient(self.url, self.owner_key) as owner:
            tenant = owner.create_tenant("demo")
        self.say(f"tenant {tenant['id']} created")
        with AtomqClient(self.url, tenant["api_key"]) as api:
            for queue, settings in TOPOLOGY.items():
                api.put_queue(queue, **settings)
                self.say(f"queue {queue}: " + ", ".join(f"{k} {v}" for k, v in settings.items()))
            process = DYING_PROCESS if self.engine == "fork" else "echo-service"
            settings = {**SETTINGS, "die_once_marker": str(self.marker)} if self.engine == "fork" else SETTINGS
            # One execution at a time on the exclusive input: the seed's setup, in which the
            # checkpoint of the execution that died is still the newest when its batch comes back.
            listener = api.put_listener("echo-service", INPUT, process, engine=self.engine,
                                        batch_size=self.batch_size, max_concurrent_executions=1,
                                        settings=settings)
            self.say(f"listener echo-service deployed on {INPUT} (engine {listener['engine']}, "
                     f"batch size {listener['batch_size']}), publishing echoes under boomi/echo/ and errors "
                     f"under boomi/errors/echo-service/, its checkpoint to boomi/checkpoint/echo-service")
            self._warm_up(api)
            if self.engine == "fork":
                self.marker.with_name(self.marker.name + ".armed").touch()
                self.say("armed: one execution will die after storing its outputs and its checkpoint, "
                         "before its batch is acknowledged")
            inputs = test_messages(self.messages)
            self._timed("start")
            started = time.monotonic()
            per_request = defaults.MAX_SEND_DOCUMENTS
            for first in range(0, len(inputs), per_request):
                api.publish(TEST_TOPIC, [wire.message([wire.document(t)]) for t in inputs[first:first + per_request]])
            self.say(f"published {len(inputs)} test messages to {TEST_TOPIC} in "
                     f"{(len(inputs) + per_request - 1) // per_request} requests in {time.monotonic() - started:.1f} s")
            done, settled, last_report = 0, False, 0.0
            deadline = started + max(120.0, len(inputs) / 50)
            # Outputs are stored before their inputs are acked: done when both are.
            while done < len(inputs) + WARM_UP or not settled:
                if time.monotonic() > deadline:
                    raise StorageError(f"only {done - WARM_UP} of {len(inputs)} messages arrived within "
                                       f"{deadline - started:.0f} s")
                time.sleep(0.5)
                self._check_node()
                done = api.queue(ECHOES)["depth"] + api.queue(ERRORS)["depth"]
                tests = api.queue(INPUT)
                settled = tests["depth"] + tests["in_flight"] == 0
                state = api.listener("echo-service")
                if state["state"] == "error" and state["failures"] > 5:
                    raise StorageError(f"the listener keeps failing: {state['last_error']}")
                if time.monotonic() - last_report >= 2 or done >= len(inputs) + WARM_UP:
                    last_report = time.monotonic()
                    rate = (done - WARM_UP) / (time.monotonic() - started)
                    self.say(f"processed {done - WARM_UP}/{len(inputs)} ({rate:.0f} messages/s)")
            elapsed = time.monotonic() - started
            self._timed("end")
            return self._summary(api, len(inputs), elapsed)

    def _timed(self, phase: str) -> None:
        if self.timed is not None and self.proc is not None:
            self.timed(phase, self.proc.pid)

    def _recognised(self, killed: list[str]) -> int:
        """How many of ``killed`` the echo-service logged as recognised through its checkpoint
        (its work horses log to the node's log)."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return sum(1 for i in killed if f"message {i} is redelivered and named by the checkpoint" in text)

    def _summary(self, api: AtomqClient, sent: int, elapsed: float) -> DemoSummary:
        """What went where; for the execution that died, whether its messages were processed once."""
        errors = list(api.browse(ERRORS))
        reasons = Counter(m["topic"].rsplit("/", 1)[1] for m in errors)
        echoes = [json.loads(m["documents"][0]["data"])["message_id"] for m in api.browse(ECHOES)]
        killed = json.loads(self.marker.read_text())["messages"] if self.marker.exists() else []
        once = True
        if killed:
            outputs = Counter(echoes) + Counter(json.loads(m["documents"][0]["data"])["message_id"] for m in errors)
            once = all(outputs[i] == 1 for i in killed)
            self.say(f"the execution that died had processed {len(killed)} messages and stored their outputs and "
                     f"its checkpoint; they came back redelivered, "
                     f"{self._recognised(killed)} were recognised through the checkpoint, and "
                     f"{'each has one output' if once else 'SOME WERE PROCESSED TWICE'}")
        tests = api.queue(INPUT)
        state = api.listener("echo-service")
        return {"echo": len(echoes) - WARM_UP, "errors": len(errors), "error_reasons": dict(reasons),
                "killed": len(killed), "recognised": once, "dead_letters": tests["dead_letters"],
                "left_in_tests": tests["depth"] + tests["in_flight"], "executions": state["executions"],
                "failures": state["failures"], "seconds": round(elapsed, 1),
                "messages_per_second": round(sent / elapsed, 1)}


def run_demo(messages: int, engine: str, spark_master: str, batch_size: int, data_dir: Path | None,
             say: Callable[[str], None], fork_workers: int | None = None,
             timed: Callable[[str, int], None] | None = None) -> DemoSummary:
    """The whole demo; the summary it printed. ``fork_workers``: the node's fork workers (fork
    engine; None: ``atomq serve``'s default); ``timed``: see :class:`Demo`."""
    if engine == "spark":
        try:
            find_java()
        except JavaMissing as exc:
            raise JavaMissing(f"the Spark worker cannot start: {exc.message} (or run the demo with --engine fork)") \
                from None
    demo = Demo(messages, engine, spark_master, batch_size, data_dir, say, fork_workers, timed)
    failed = True
    with _signals_end_the_run():
        try:
            demo.start()
            summary = demo.run()
            failed = False
        finally:
            with _signals_ignored():
                say("stopping atomq serve")
                demo.stop(failed)
    say(f"echo: {summary['echo']}  errors: {summary['errors']} {summary['error_reasons']}  "
        f"dead letters: {summary['dead_letters']}  left in tests: {summary['left_in_tests']}  "
        f"killed mid-batch: {summary['killed']} (processed once: {'yes' if summary['recognised'] else 'NO'})")
    say(f"{summary['executions']} executions, {summary['failures']} failed; "
        f"{messages} messages in {summary['seconds']} s: {summary['messages_per_second']} messages/s end to end")
    return summary


STOP_TIMEOUT_S = 60.0
ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _end_the_run(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _signals_end_the_run() -> Iterator[None]:
    """SIGTERM (and SIGINT, as Python does anyway) end the run through its ``finally``, which
    stops the node: by default SIGTERM would end this process and leave the node running."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _end_the_run) for sig in ENDING_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """While the node is being stopped a second Ctrl-C must not leave it half stopped
    (the stop is bounded: past ``STOP_TIMEOUT_S`` it is killed)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in ENDING_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
