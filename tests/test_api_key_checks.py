"""Key checks: the owner key is long, and failed key checks are throttled per address.

Mostly on the app in this process (fast, on real Valkey); the throttle's
count across gunicorn's workers and ``atomq serve`` refusing a short owner
key run as real processes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from atomq.api.key_checks import MAX_FAILURES, WINDOW_S
from atomq.errors import InvalidInput
from atomq.node.owner_key import MIN_OWNER_KEY_CHARS, OWNER_KEY_ENV, load_owner_key
from atomq.platform.store import keys as k
from atomq.platform.store.embedded import EmbeddedValkey
from support.in_process_app import InProcessApp, error_of
from support.ports import free_port
from support.processes import REPO
from support.served_node import AtomqServe, ServeFactory


@pytest.fixture(scope="module")
def app(valkey: EmbeddedValkey) -> Iterator[InProcessApp]:
    with InProcessApp(valkey.client()) as app:
        yield app


def test_a_short_owner_key_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OWNER_KEY_ENV, "admin")
    with pytest.raises(InvalidInput) as refused:
        load_owner_key(tmp_path)
    assert "at least 32" in refused.value.message and "secrets.token_urlsafe(32)" in refused.value.message
    monkeypatch.setenv(OWNER_KEY_ENV, "k" * MIN_OWNER_KEY_CHARS)
    assert load_owner_key(tmp_path) == ("k" * MIN_OWNER_KEY_CHARS, None)

    monkeypatch.delenv(OWNER_KEY_ENV)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    made, path = load_owner_key(fresh)  # a generated key is long enough, and read back the same
    assert len(made) >= MIN_OWNER_KEY_CHARS and path == fresh / "owner.key"
    assert load_owner_key(fresh) == (made, path)
    (tmp_path / "owner.key").write_text("hunter2\n")
    with pytest.raises(InvalidInput, match="at least 32"):
        load_owner_key(tmp_path)


def test_atomq_serve_refuses_a_short_owner_key(tmp_path: Path) -> None:
    env = {**{k_: v for k_, v in os.environ.items() if not k_.startswith("ATOMQ_")}, OWNER_KEY_ENV: "admin"}
    done = subprocess.run([sys.executable, "-m", "atomq", "serve", "--data-dir", str(tmp_path / "data"),
                           "--port", str(free_port())], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0
    assert "at least 32" in done.stderr and "secrets.token_urlsafe(32)" in done.stderr, done.stderr
    assert not (tmp_path / "data" / "valkey" / "valkey.pid").exists()


def test_failed_key_checks_are_throttled_per_address_and_key(app: InProcessApp) -> None:
    """Guessing one key's secret is throttled; the other keys presented from that address (everyone
    behind one proxy) still work."""
    attacker, owner_guesser, neighbour, regular, keyless = "10.9.0.1", "10.9.0.5", "10.9.0.2", "10.9.0.3", "10.9.0.4"
    # A request without a key guesses nothing: it is refused, not counted.
    for _ in range(2 * MAX_FAILURES):
        error_of(app.call("GET", "/v1/queues", key=None, address=keyless), 401)
    assert app.call("GET", "/v1/queues", address=keyless).status_code == 200
    for i in range(MAX_FAILURES):
        error_of(app.call("GET", "/v1/queues", key=f"aq_0123456789abcdef_guess{i:038d}", address=attacker), 401)
    # That key is refused from that address before it is looked at: a right guess gets the same 429.
    response = app.call("GET", "/v1/queues", key="aq_0123456789abcdef_" + "g" * 43, address=attacker)
    assert error_of(response, 429)["code"] == "rate_limited"
    assert 1 <= int(response.headers["Retry-After"]) <= WINDOW_S
    # Every other key from the same address works.
    assert app.call("GET", "/v1/queues", address=attacker).status_code == 200
    assert app.owner("GET", "/v1/tenants", address=attacker).status_code == 200
    error_of(app.call("GET", "/v1/queues", key=None, address=attacker), 401)
    # Long strings that name no key id are guesses of the owner key: they lock out the owner key
    # from that address, not the tenants' keys.
    for i in range(MAX_FAILURES):
        error_of(app.call("GET", "/v1/tenants", key=f"guess-{i:032d}", address=owner_guesser), 401)
    error_of(app.owner("GET", "/v1/tenants", address=owner_guesser), 429)
    assert app.call("GET", "/v1/queues", address=owner_guesser).status_code == 200
    assert app.owner("GET", "/v1/tenants", address=neighbour).status_code == 200
    for _ in range(3 * MAX_FAILURES):
        assert app.call("GET", "/v1/queues", address=regular).status_code == 200
    # The window expires on its own: no key is left behind for good.
    ttl = app.client.ttl(k.failed_key_checks(app.services.node_id, attacker, "0123456789abcdef"))
    assert 0 < ttl <= WINDOW_S


def test_the_dashboard_sign_in_is_throttled_as_the_api_is(app: InProcessApp) -> None:
    form = app.http.get("/dashboard/signin", environ_base={"REMOTE_ADDR": "10.9.1.1"})

    def sign_in(key: str) -> int:
        """Signs in with the form the last answer showed (each shows a new token, also in its cookie)."""
        nonlocal form
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.get_data(as_text=True)).group(1)
        form = app.http.post("/dashboard/signin", data={"key": key, "csrf_token": token},
                             environ_base={"REMOTE_ADDR": "10.9.1.1"})
        return form.status_code

    assert [sign_in(f"aq_0123456789abcdef_{i:043d}") for i in range(MAX_FAILURES)] == [401] * MAX_FAILURES
    assert sign_in("aq_0123456789abcdef_" + "x" * 43) == 429
    # The API counts the same failures: that key is refused there too, from that address.
    error_of(app.call("GET", "/v1/queues", key="aq_0123456789abcdef_" + "y" * 43, address="10.9.1.1"), 429)
    assert sign_in(app.key) == 303, "another key from the same address signs in"


# -- a served node: several worker processes, gunicorn in front -------------------------------


@pytest.fixture
def served(serve: ServeFactory) -> AtomqServe:
    """A node per test: the throttle test leaves its address refused for a minute."""
    return serve(http_workers=2)


def test_served_failed_key_checks_are_counted_across_workers(served: AtomqServe) -> None:
    """Each request on a new connection, so both workers answer some; the count is the node's.
    A worker learns an address is over the limit when it counts one of its failures, so past
    the limit each worker lets at most one more guess through; then every guess gets 429
    (a throttled address guesses no faster). Malformed keys count as one key; a key that works
    is another and is let in."""
    with served.owner() as owner:
        tenant = owner("POST", "/v1/tenants", {"name": "throttled"}, 201)
    for i in range(MAX_FAILURES):
        answer = requests.get(served.url + "/v1/queues", headers={"Authorization": f"Bearer wrong{i}"}, timeout=10)
        assert answer.status_code == 401
    # Until six 429s in a row: a worker that has not yet answered one of these (the second
    # worker may start answering late) lets one more guess through, once.
    late: list[int] = []
    while late[-6:] != [429] * 6:
        assert len(late) < 60, late
        answer = requests.get(served.url + "/v1/queues", headers={"Authorization": f"Bearer late{len(late)}"},
                              timeout=10)
        late.append(answer.status_code)
    assert late.count(401) <= served.http_workers and set(late) <= {401, 429}, late
    assert answer.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(answer.headers["Retry-After"]) <= WINDOW_S
    works = requests.get(served.url + "/v1/queues", headers={"Authorization": f"Bearer {tenant['api_key']}"},
                         timeout=10)
    assert works.status_code == 200, "another key from the same address still works"
    with served.redis() as client:
        (counter,) = client.keys(f"{k.PREFIX}:keyfail:*:127.0.0.1|-")
        assert MAX_FAILURES <= int(client.get(counter)) <= MAX_FAILURES + served.http_workers
