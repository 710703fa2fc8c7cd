"""``atomq demo``: the seed's worked example, end to end, on the embedded defaults.

It starts ``atomq serve --spark`` in a throw-away data directory (as a user
would), makes a tenant with the queues ``tests``, ``echo`` and ``errors``,
deploys the ``echo-service`` listener on Spark, sends test messages of which
a share lack their ``msgId`` and a share are not JSON at all, and reports
what arrived where, with the throughput. Every step prints a line.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from atomq.client import AtomqClient
from atomq.errors import StorageError


WARM_UP = 10
"""Valid messages sent and processed before the timed run (they go to echo, and are not counted)."""


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


class Demo:
    """One run of the demo; ``say`` prints each step."""

    def __init__(self, messages: int, engine: str, spark_master: str, batch_size: int,
                 data_dir: Path | None, say: Callable[[str], None]) -> None:
        self.messages, self.engine, self.spark_master, self.batch_size = messages, engine, spark_master, batch_size
        self.say = say
        self.temp = data_dir is None
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="atomq-demo-"))
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.owner_key = f"aq_owner_demo_{os.urandom(12).hex()}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> None:
        args = [sys.executable, "-m", "atomq", "serve", "--data-dir", str(self.data_dir / "node"),
                "--port", str(self.port), "--workers", "2" if self.engine == "fork" else "0"]
        if self.engine == "spark":
            args += ["--spark", "--spark-master", self.spark_master]
        env = {**os.environ, "ATOMQ_OWNER_KEY": self.owner_key}
        log = open(self.data_dir / "serve.log", "ab")
        runs_on = f"a Spark worker on {self.spark_master}" if self.engine == "spark" else "2 fork workers"
        self.say(f"starting atomq serve on {self.url} with {runs_on}; its log: {self.data_dir / 'serve.log'}")
        self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        with AtomqClient(self.url, self.owner_key, timeout=2) as owner:
            while True:
                try:
                    owner.request("GET", "/v1/health")
                    return
                except StorageError:
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        raise StorageError(f"atomq serve did not start; see {self.data_dir / 'serve.log'}") from None
                    time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.temp:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _warm_up(self, api: AtomqClient, timeout: float = 180) -> None:
        """A first small batch, so that the figures leave out the JVM's and the workers' start."""
        started = time.monotonic()
        api.send_texts("tests", [json.dumps({"msgId": f"warm-up-{i}"}) for i in range(WARM_UP)])
        self.say(f"warming up: {WARM_UP} messages while the {self.engine} workers start ...")
        while api.queue("echo")["depth"] < WARM_UP:
            if time.monotonic() - started > timeout:
                raise StorageError(f"the listener did not run within {timeout:.0f} s; "
                                   f"see {self.data_dir / 'serve.log'}")
            time.sleep(0.2)
        self.say(f"warmed up in {time.monotonic() - started:.1f} s")

    def run(self) -> dict[str, object]:
        with AtomqClient(self.url, self.owner_key) as owner:
            tenant = owner.create_tenant("demo")
        self.say(f"tenant {tenant['id']} created")
        with AtomqClient(self.url, tenant["api_key"]) as api:
            for queue in ("tests", "echo", "errors"):
                api.put_queue(queue)
            self.say("queues tests, echo, errors created")
            listener = api.put_listener("echo-service", "tests", "echo-service", engine=self.engine,
                                        batch_size=self.batch_size,
                                        settings={"echo_queue": "echo", "errors_queue": "errors"})
            self.say(f"listener echo-service deployed on tests (engine {listener['engine']}, "
                     f"batch size {listener['batch_size']})")
            self._warm_up(api)
            inputs = test_messages(self.messages)
            started = time.monotonic()
            for first in range(0, len(inputs), 100):
                api.send_texts("tests", inputs[first:first + 100])
            self.say(f"sent {len(inputs)} test messages in {(len(inputs) + 99) // 100} requests "
                     f"in {time.monotonic() - started:.1f} s")
            done, settled, last_report = 0, False, 0.0
            deadline = started + max(120.0, len(inputs) / 50)
            # Outputs are stored before their inputs are acked: done when both are.
            while done < len(inputs) + WARM_UP or not settled:
                if time.monotonic() > deadline:
                    raise StorageError(f"only {done - WARM_UP} of {len(inputs)} messages arrived within "
                                       f"{deadline - started:.0f} s; see {self.data_dir / 'serve.log'}")
                time.sleep(0.5)
                done = api.queue("echo")["depth"] + api.queue("errors")["depth"]
                tests = api.queue("tests")
                settled = tests["depth"] + tests["in_flight"] == 0
                state = api.listener("echo-service")
                if state["state"] == "error" and state["failures"] > 5:
                    raise StorageError(f"the listener keeps failing: {state['last_error']}")
                if time.monotonic() - last_report >= 2 or done >= len(inputs) + WARM_UP:
                    last_report = time.monotonic()
                    rate = (done - WARM_UP) / (time.monotonic() - started)
                    self.say(f"processed {done - WARM_UP}/{len(inputs)} ({rate:.0f} messages/s)")
            elapsed = time.monotonic() - started
            reasons = Counter(json.loads(m["documents"][0]["data"])["reason"].split(":")[0]
                              for m in api.browse("errors"))
            tests = api.queue("tests")
            state = api.listener("echo-service")
            return {"echo": api.queue("echo")["depth"] - WARM_UP, "errors": api.queue("errors")["depth"],
                    "error_reasons": dict(reasons), "dead_letters": tests["dead_letters"],
                    "left_in_tests": tests["depth"] + tests["in_flight"], "executions": state["executions"],
                    "failures": state["failures"], "seconds": round(elapsed, 1),
                    "messages_per_second": round(len(inputs) / elapsed, 1)}


def run_demo(messages: int, engine: str, spark_master: str, batch_size: int, data_dir: Path | None,
             say: Callable[[str], None]) -> dict[str, object]:
    """The whole demo; the summary it printed."""
    demo = Demo(messages, engine, spark_master, batch_size, data_dir, say)
    try:
        demo.start()
        summary = demo.run()
    finally:
        say("stopping atomq serve")
        demo.stop()
    say(f"echo: {summary['echo']}  errors: {summary['errors']} {summary['error_reasons']}  "
        f"dead letters: {summary['dead_letters']}  left in tests: {summary['left_in_tests']}")
    say(f"{summary['executions']} executions, {summary['failures']} failed; "
        f"{messages} messages in {summary['seconds']} s: {summary['messages_per_second']} messages/s end to end")
    return summary
