"""The dashboard at /dashboard/, driven by a real browser, and its sessions.

The browser tests run Chromium headless through Playwright against an
in-process node (a real Valkey, the app on a real HTTP server) and make their
data through the HTTP API, as a tenant would. They wait on what the page
shows with Playwright's auto-waiting ``expect``, never with sleeps. Chromium
is Debian's (``apt-get install chromium``), or the binary ``ATOMQ_CHROMIUM``
names; without it these tests are skipped and the skip says what to install (with
``ATOMQ_REQUIRE_BROWSER`` set, as CI sets it, they fail instead). Without playwright they fail.

The session tests after them need no browser: Flask's test client on the
session's Valkey.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from atomq.api import create_app
from atomq.api.dashboard.sessions import SESSION_COOKIE
from atomq.api.services import LongPollLimiter, Services
from atomq.client import AtomqClient, wire
from atomq.platform import QueueServer
from atomq.platform.store import keys as k
from atomq.platform.store.lease import Lease
from atomq.platform.watch.nodes import KeptWorkerState, NodeRecord, NodeRecords
from atomq.platform.watch.overview import OverviewStore, Sampler
from atomq.tenants import TenantStore, api_keys
from atomq.tenants.dashboard_sessions import SessionStore
from support.in_process_node import InProcessNode

try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError as exc:  # a clear failure, not a skip: CI must run these
    raise ImportError("the dashboard tests need playwright: pip install -e '.[test]'") from exc

OWNER_KEY = f"aq_owner_{secrets.token_urlsafe(32)}"
REFRESH_WAIT_MS = 15_000
"""Long enough for the pages' refresh (every 3 s) to come round at least twice."""
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


REQUIRE_BROWSER = "ATOMQ_REQUIRE_BROWSER"
"""Set (by ``.ci/run``) where a missing Chromium must fail the run rather than skip its tests."""


def chromium_path() -> str:
    """Debian's Chromium, or the binary ``ATOMQ_CHROMIUM`` names. Without one these tests are skipped
    with what to install (a newcomer's machine need not have a browser), unless ``ATOMQ_REQUIRE_BROWSER``
    is set: CI installs Chromium, and there a missing one is a failure, not a silent skip."""
    path = os.environ.get("ATOMQ_CHROMIUM") or shutil.which("chromium")
    if not path or not os.access(path, os.X_OK):
        why = (f"the dashboard's browser tests need Chromium ({path or 'no chromium on PATH'}): install "
               "Debian's or Ubuntu's package (sudo apt-get install chromium) or set ATOMQ_CHROMIUM to a Chromium "
               "binary")
        if os.environ.get(REQUIRE_BROWSER):
            pytest.fail(f"{why}; {REQUIRE_BROWSER} is set, so a missing browser fails the run", pytrace=False)
        pytest.skip(why)
    return path


def artifacts_dir() -> Path:
    """Where screenshots go: ``ATOMQ_TEST_ARTIFACTS``, else ``test-artifacts/`` at the repository root."""
    path = Path(os.environ.get("ATOMQ_TEST_ARTIFACTS") or Path(__file__).resolve().parent.parent / "test-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessNode]:
    with InProcessNode(tmp_path_factory.mktemp("dashboard"), OWNER_KEY) as n:
        yield n


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = chromium_path()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser context (no cookies) per test."""
    context = browser.new_context()
    yield context.new_page()
    context.close()


@dataclass
class TenantUser:
    id: str
    name: str
    key: str
    key_id: str
    api: AtomqClient


@pytest.fixture
def make_tenant(node: InProcessNode) -> Iterator[Any]:
    made: list[TenantUser] = []

    def make() -> TenantUser:
        created = node.owner.create_tenant(f"acme-{uuid.uuid4().hex[:6]}")
        user = TenantUser(created["id"], created["name"], created["api_key"], created["key_id"],
                          AtomqClient(node.url, created["api_key"]))
        made.append(user)
        return user

    yield make
    for user in made:
        user.api.close()
        node.owner.delete_tenant(user.id)


@pytest.fixture
def tenant(make_tenant: Any) -> TenantUser:
    return make_tenant()  # type: ignore[no-any-return]


def sign_in(page: Page, node: InProcessNode, key: str) -> None:
    page.goto(f"{node.url}/dashboard/signin")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()


def queue_url(node: InProcessNode, tenant_id: str, queue: str) -> str:
    return f"{node.url}/dashboard/tenants/{tenant_id}/queues/{queue}"


def dead_letter(api: AtomqClient, queue: str, text: str, reason: str) -> str:
    """Sends one message to ``queue`` (max_redeliveries 0) and nacks it into its dead letters."""
    (message_id,) = api.send_texts(queue, [text])
    (delivery,) = api.get(queue)
    assert api.nack(queue, receipts=[delivery["receipt"]], reason=reason) == {"requeued": 0, "dead_lettered": 1}
    return message_id


# -- in the browser -------------------------------------------------------------------------


def test_a_tenant_signs_in_and_sees_a_queue_refresh(page: Page, node: InProcessNode, tenant: TenantUser) -> None:
    tenant.api.put_queue("orders")
    tenant.api.send("orders", [{"documents": [{"data": '{"msgId": 1}', "properties": {"kind": "json"}}],
                                "properties": {"source": "test"}}])
    tenant.api.send_texts("orders", ["two", "three"])
    sign_in(page, node, tenant.key)
    expect(page.get_by_role("heading", name=tenant.name)).to_be_visible()
    page.get_by_role("link", name="orders").click()
    expect(page.locator("#depth")).to_have_text("3")
    messages = page.locator("table.messages tbody tr")
    expect(messages).to_have_count(3)
    expect(messages.first).to_contain_text('{"msgId": 1}')
    expect(messages.first).to_contain_text('{"source": "test"}')
    expect(messages.first).to_contain_text('{"kind": "json"}')

    tenant.api.send_texts("orders", ["four", "five"])
    expect(page.locator("#depth")).to_have_text("5", timeout=REFRESH_WAIT_MS)
    expect(page.locator("#rate-chart svg polyline.sent")).to_have_count(1)
    expect(page.locator("#rate-chart svg polyline.acked")).to_have_count(1)
    expect(page.locator("#rate-rows tr")).to_have_count(30)
    (delivery,) = tenant.api.get("orders", max_messages=1)
    tenant.api.ack("orders", receipts=[delivery["receipt"]])
    live = page.request.get(queue_url(node, tenant.id, "orders") + "/live").json()
    assert sum(bucket["sent"] for bucket in live["rates"]) == 5
    assert sum(bucket["acked"] for bucket in live["rates"]) == 1
    assert [b["start"] for b in live["rates"]] == sorted(b["start"] for b in live["rates"])

    shot = artifacts_dir() / "dashboard-queue.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes().startswith(PNG_SIGNATURE)


def test_a_wrong_key_gets_the_form_again_with_401(page: Page, node: InProcessNode) -> None:
    page.goto(f"{node.url}/dashboard/signin")
    page.get_by_label("API key").fill("aq_0123456789abcdef_" + "x" * 43)
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.get_by_role("button", name="Sign in").click()
    assert answer.value.status == 401
    expect(page.get_by_role("alert")).to_have_text(re.compile("That key does not work"))
    expect(page.get_by_label("API key")).to_be_visible()


def test_resending_a_dead_letter_puts_it_back(page: Page, node: InProcessNode, tenant: TenantUser) -> None:
    tenant.api.put_queue("jobs", max_redeliveries=0)
    dead_id = dead_letter(tenant.api, "jobs", "broken", "the process failed: boom")
    dead_letter(tenant.api, "jobs", "also broken", "another reason")
    sign_in(page, node, tenant.key)
    page.goto(queue_url(node, tenant.id, "jobs"))
    expect(page.locator("#dead-letters")).to_have_text("2")
    expect(page.locator("#depth")).to_have_text("0")
    row = page.locator("table.dead-letters tbody tr", has_text=dead_id)
    expect(row).to_contain_text("the process failed: boom")
    row.get_by_role("checkbox").check()
    page.get_by_role("button", name="Resend selected").click()
    expect(page.get_by_role("status")).to_have_text("Resent 1 dead letter.")
    expect(page.locator("#dead-letters")).to_have_text("1")
    expect(page.locator("#depth")).to_have_text("1")
    expect(page.locator("table.messages tbody tr")).to_contain_text(dead_id)
    assert tenant.api.queue("jobs")["dead_letters"] == 1

    page.get_by_role("button", name="Resend all dead letters").click()
    expect(page.get_by_role("status")).to_have_text("Resent 1 dead letter.")
    expect(page.locator("#dead-letters")).to_have_text("0")
    expect(page.locator("#depth")).to_have_text("2")


def test_a_queue_page_shows_topics_priorities_expiry_consumers_and_dead_letters_by_reason(
        page: Page, node: InProcessNode, tenant: TenantUser) -> None:
    tenant.api.put_queue("events", max_redeliveries=0, topics=["shop/>"], message_ttl_s=600)
    (stale_id,) = tenant.api.send("events", [wire.message([wire.document("stale")], expires_at=time.time() - 1)])
    assert tenant.api.get("events", max_messages=10) == [], "expired before any get"
    nacked_id = dead_letter(tenant.api, "events", "broken", "bad input")
    published = tenant.api.publish("shop/orders/eu", [wire.message([wire.document("urgent")], priority=9)])
    assert published["queues"] == ["events"]
    tenant.api.send_texts("events", ["plain"])
    sign_in(page, node, tenant.key)
    page.goto(queue_url(node, tenant.id, "events"))
    expect(page.locator("#topics")).to_contain_text("shop/>")
    expect(page.get_by_text("messages expire 10 minutes after their send")).to_be_visible()
    expect(page.locator("#by-priority")).to_have_text("9: 1 · 4: 1")
    expect(page.locator("#total-expired")).to_have_text("1")
    expect(page.locator("#total-dead_lettered")).to_have_text("2")
    urgent = page.locator("table.messages tbody tr").first
    expect(urgent).to_contain_text("shop/orders/eu")
    expect(urgent.locator("td.num").first).to_have_text("9")

    choice = page.get_by_label("Only the reason")
    expect(choice.locator("option")).to_have_text(["every reason", "bad input (1)", "expired (1)"])
    choice.select_option("expired")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_role("heading", name=re.compile("given the reason “expired”"))).to_be_visible()
    expect(page.locator("table.dead-letters tbody tr")).to_have_count(1)
    expect(page.locator("table.dead-letters tbody tr")).to_contain_text(stale_id)
    page.get_by_role("button", name="Resend all dead letters given this reason").click()
    expect(page.get_by_role("status")).to_have_text("Resent 1 dead letter.")
    expect(page.get_by_text("No dead letters given that reason.")).to_be_visible()
    expect(choice.locator("option")).to_have_text(["every reason", "bad input (1)", "expired"])
    expect(choice).to_have_value("expired")
    expect(page.locator("#dead-letters")).to_have_text("1")
    assert [d["id"] for d in tenant.api.dead_letters("events")] == [nacked_id]
    assert [d["id"] for d in tenant.api.dead_letters("events", reason="bad input")] == [nacked_id]

    tenant.api.put_queue("prices", last_value=True, last_value_key="sku")
    tenant.api.send("prices", [wire.message([wire.document(f"{sku} {n}")], {"sku": sku})
                               for n in (1, 2) for sku in ("apple", "pear")])
    page.goto(queue_url(node, tenant.id, "prices"))
    expect(page.get_by_text("a last-value queue: one waiting message per value of the property sku")).to_be_visible()
    expect(page.locator("#total-superseded")).to_have_text("2")
    expect(page.locator("table.messages tbody tr")).to_have_count(2)

    tenant.api.put_queue("input", access="exclusive")
    assert tenant.api.take("input", consumer="first")["active"] is True
    page.goto(queue_url(node, tenant.id, "input"))
    expect(page.get_by_text("exclusive: one consumer at a time, in send order")).to_be_visible()
    expect(page.locator("#active-consumer")).to_have_text("first")
    expect(page.locator("#standby-consumers")).to_have_text("none")
    assert tenant.api.take("input", consumer="second")["active"] is False
    expect(page.locator("#standby-consumers")).to_have_text("second", timeout=REFRESH_WAIT_MS)


def test_a_queue_page_shows_its_limits_in_words_and_how_full_it_is(page: Page, node: InProcessNode,
                                                                   tenant: TenantUser) -> None:
    tenant.api.put_queue("bounded", max_messages=4, max_bytes=1024, overflow="drop_oldest",
                         overflow_to_dead_letters=True, max_message_bytes=512, max_dead_letters=100)
    tenant.api.send_texts("bounded", ["a", "b", "c"])
    sign_in(page, node, tenant.key)
    page.goto(queue_url(node, tenant.id, "bounded"))
    expect(page.locator("#limits")).to_have_text(
        "Holds at most 4 messages and 1.0 KiB not yet acked; a send past that drops the oldest waiting messages "
        "to the dead letter queue. A message of more than 512 B is refused. The dead letter queue keeps the "
        "newest 100.")
    expect(page.locator("#held")).to_contain_text("3 of 4 (75%)")
    expect(page.locator("#held meter")).to_have_attribute("value", "3")
    tenant.api.send_texts("bounded", ["d", "e"])
    expect(page.locator("#held")).to_contain_text("4 of 4 (100%)", timeout=REFRESH_WAIT_MS)
    expect(page.locator("#total-dropped")).to_have_text("1")
    expect(page.locator("#held-bytes")).to_contain_text("44 B of 1.0 KiB (4%)")  # 11 bytes a message (1|{"v":1}ta)
    shot = artifacts_dir() / "dashboard-queue-limits.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes().startswith(PNG_SIGNATURE)

    tenant.api.put_queue("open")
    page.goto(queue_url(node, tenant.id, "open"))
    expect(page.locator("#limits")).to_have_text("No limit on the messages it holds.")
    expect(page.locator("#held")).to_have_text("0 (no limit)")


def test_pause_resume_and_restart_a_listener(page: Page, node: InProcessNode, tenant: TenantUser) -> None:
    tenant.api.put_queue("in")
    tenant.api.put_queue("out")
    tenant.api.put_listener("fwd", "in", "forward", settings={"to": "out"})
    sign_in(page, node, tenant.key)
    state = page.locator('[data-live="listener.fwd.state"]')
    expect(state).to_have_text("running")
    page.get_by_role("button", name="Pause listener fwd").click()
    expect(page.get_by_role("status")).to_have_text("Paused the listener fwd.")
    expect(state).to_have_text("paused")
    assert tenant.api.listener("fwd")["state"] == "paused"
    page.get_by_role("button", name="Resume listener fwd").click()
    expect(state).to_have_text("running")
    page.get_by_role("button", name="Restart listener fwd").click()
    expect(page.get_by_role("status")).to_have_text("Restarted the listener fwd.")
    expect(state).to_have_text("running")
    expect(page.locator('[data-live="listener.fwd.executions"]')).to_have_text("0")

    tenant.api.pause_listener("fwd")
    expect(state).to_have_text("paused", timeout=REFRESH_WAIT_MS)


def test_revoking_the_key_signs_an_open_page_out(page: Page, node: InProcessNode, tenant: TenantUser) -> None:
    sign_in(page, node, tenant.key)
    node.owner.revoke_key(tenant.id, tenant.key_id)
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible(timeout=REFRESH_WAIT_MS)


def test_a_tenant_cannot_open_another_tenants_pages(page: Page, node: InProcessNode, make_tenant: Any) -> None:
    mine, theirs = make_tenant(), make_tenant()
    theirs.api.put_queue("secret")
    sign_in(page, node, mine.key)
    answer = page.goto(queue_url(node, theirs.id, "secret"))
    assert answer is not None and answer.status == 404
    expect(page.get_by_role("heading", name=re.compile("Not found"))).to_be_visible()
    expect(page.locator("main")).not_to_contain_text("secret")
    for path in (f"/dashboard/tenants/{theirs.id}/", f"/dashboard/tenants/{theirs.id}/live",
                 f"/dashboard/tenants/{theirs.id}/queues/secret/live", "/dashboard/tenants/t_000000000000/",
                 "/dashboard/live"):
        assert page.request.get(node.url + path).status == 404, path
    token = page.locator("input[name=csrf_token]").first.get_attribute("value")
    refused = page.request.post(f"{node.url}/dashboard/tenants/{theirs.id}/queues/secret/delete",
                                form={"csrf_token": token or "", "confirm_name": "secret"}, max_redirects=0)
    assert refused.status == 404
    assert theirs.api.queue("secret")["name"] == "secret"


def test_an_action_without_the_csrf_token_is_refused_and_changes_nothing(page: Page, node: InProcessNode,
                                                                           tenant: TenantUser) -> None:
    tenant.api.put_queue("orders")
    ids = tenant.api.send_texts("orders", ["one", "two"])
    sign_in(page, node, tenant.key)
    page.goto(queue_url(node, tenant.id, "orders"))
    action = queue_url(node, tenant.id, "orders") + "/messages/delete"
    for form in ({"id": ids[0]}, {"id": ids[0], "csrf_token": secrets.token_urlsafe(32)}, {"id": ids[0], "csrf_token": ""}):
        refused = page.request.post(action, form=form, max_redirects=0)
        assert refused.status == 403, form
        assert "CSRF" in refused.text()
    assert tenant.api.queue("orders")["depth"] == 2

    token = page.locator("#messages-form input[name=csrf_token]").get_attribute("value")
    done = page.request.post(action, form={"id": ids[0], "csrf_token": token or ""}, max_redirects=0)
    assert done.status == 303
    assert tenant.api.queue("orders")["depth"] == 1


def test_deleting_selected_messages(page: Page, node: InProcessNode, tenant: TenantUser) -> None:
    tenant.api.put_queue("orders")
    first, second, third = tenant.api.send_texts("orders", ["a", "b", "c"])
    sign_in(page, node, tenant.key)
    page.goto(queue_url(node, tenant.id, "orders"))
    page.get_by_role("checkbox", name=f"Select message {first}").check()
    page.get_by_role("checkbox", name=f"Select message {third}").check()
    page.get_by_role("button", name="Delete selected messages").click()
    expect(page.get_by_role("status")).to_have_text("Deleted 2 messages.")
    expect(page.locator("#depth")).to_have_text("1")
    expect(page.locator("table.messages tbody tr")).to_have_count(1)
    expect(page.locator("table.messages tbody tr")).to_contain_text(second)


def test_an_operator_frees_a_delivery_stuck_in_flight(page: Page, node: InProcessNode, tenant: TenantUser) -> None:
    tenant.api.put_queue("jobs", access="exclusive", ack_timeout_s=300, max_redeliveries=0)
    first, second, third = tenant.api.send_texts("jobs", ["a", "b", "c"])
    taken = tenant.api.get("jobs", max_messages=2, consumer="gone")
    assert [m["id"] for m in taken] == [first, second]
    sign_in(page, node, tenant.key)
    page.goto(queue_url(node, tenant.id, "jobs"))
    stuck = page.locator("#in-flight-form tbody tr")
    expect(stuck).to_have_count(2)
    expect(stuck.first).to_contain_text(re.compile(r"UTC \(in [45] minutes"))
    expect(stuck.first.locator("td").nth(1)).to_have_text("gone")
    expect(stuck.first.locator("td").nth(2)).to_contain_text(re.compile(r"UTC \(\d+ s ago\)"))
    expect(page.get_by_text("whichever consumer holds them")).to_be_visible()
    expect(page.locator("#oldest")).to_have_text(re.compile(r"^\d+ s \(sent \d{4}-\d\d-\d\d [\d:]+ UTC\)$"))
    page.get_by_role("checkbox", name=f"Select delivery {first}").check()
    page.get_by_role("button", name="Release selected").click()
    expect(page.get_by_role("status")).to_have_text("Released 1 delivery: delivered again next, not counted as failed.")
    expect(stuck).to_have_count(1)
    expect(stuck).to_contain_text(second)
    shot = artifacts_dir() / "dashboard-in-flight.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes().startswith(PNG_SIGNATURE)
    again = tenant.api.get("jobs", max_messages=5, consumer="gone")
    assert [(m["id"], m["redelivered"]) for m in again] == [(first, True), (third, False)], \
        "back first, not dead: a release is no failed delivery"


def test_a_checkbox_selection_survives_the_refresh(page: Page, node: InProcessNode, tenant: TenantUser) -> None:
    tenant.api.put_queue("orders")
    first, _ = tenant.api.send_texts("orders", ["a", "b"])
    sign_in(page, node, tenant.key)
    page.goto(queue_url(node, tenant.id, "orders"))
    box = page.get_by_role("checkbox", name=f"Select message {first}")
    box.check()
    tenant.api.send_texts("orders", ["c"])
    expect(page.locator("#depth")).to_have_text("3", timeout=REFRESH_WAIT_MS)
    expect(box).to_be_checked()


def test_clearing_a_queue_and_deleting_it_each_ask_for_a_confirmation(page: Page, node: InProcessNode,
                                                                      tenant: TenantUser) -> None:
    tenant.api.put_queue("orders", max_redeliveries=0)
    dead_letter(tenant.api, "orders", "dead", "kept")
    tenant.api.send_texts("orders", ["a", "b", "c"])
    sign_in(page, node, tenant.key)
    page.goto(queue_url(node, tenant.id, "orders"))
    expect(page.locator("#depth")).to_have_text("3")

    page.get_by_label(re.compile("Yes, delete every waiting and in-flight message")).check()
    page.get_by_role("button", name="Clear the queue").click()
    expect(page.get_by_role("status")).to_have_text("Cleared the queue: deleted 3 messages.")
    expect(page.locator("#depth")).to_have_text("0")
    expect(page.locator("#dead-letters")).to_have_text("1")
    page.get_by_role("button", name="Delete all dead letters").click()
    expect(page.get_by_role("status")).to_have_text("Deleted 1 dead letter.")
    expect(page.locator("#dead-letters")).to_have_text("0")

    page.get_by_label(re.compile("type its name")).fill("not-orders")
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.get_by_role("button", name="Delete the queue").click()
    assert answer.value.status == 400
    expect(page.get_by_role("alert")).to_contain_text("type the queue's name")
    assert tenant.api.queue("orders")["name"] == "orders"

    page.goto(queue_url(node, tenant.id, "orders"))
    page.get_by_label(re.compile("type its name")).fill("orders")
    page.get_by_role("button", name="Delete the queue").click()
    expect(page.get_by_role("status")).to_have_text("Deleted the queue orders.")
    expect(page.get_by_role("heading", name=tenant.name)).to_be_visible()
    expect(page.get_by_role("link", name="orders")).to_have_count(0)
    assert tenant.api.queues() == []


def test_publish_subscribe_queues_show_the_chosen_subscriber(page: Page, node: InProcessNode,
                                                              tenant: TenantUser) -> None:
    tenant.api.put_queue("events", "publish_subscribe")
    tenant.api.put_subscriber("events", "audit")
    tenant.api.put_subscriber("events", "billing")
    tenant.api.send_texts("events", ["one", "two"])
    tenant.api.get("events", max_messages=1, subscriber="billing")
    sign_in(page, node, tenant.key)
    page.goto(queue_url(node, tenant.id, "events"))
    expect(page.get_by_role("heading", name="Messages of subscriber audit")).to_be_visible()
    expect(page.locator("#depth")).to_have_text("3")
    expect(page.locator('[data-live="queue.events.sub.billing.in_flight"]')).to_have_text("1")
    page.get_by_label("Show the messages of subscriber").select_option("billing")
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_role("heading", name="Messages of subscriber billing")).to_be_visible()
    expect(page.locator("table.messages tbody tr", has_text="in flight")).to_have_count(1)


def test_the_owner_sees_the_server_and_every_tenant(page: Page, node: InProcessNode, tenant: TenantUser) -> None:
    node.owner.update_tenant(tenant.id, disk_quota_bytes=1_000_000, rate_limit_per_minute=600)
    tenant.api.put_queue("orders")
    tenant.api.send_texts("orders", ["x" * 1000])
    sample_the_platform(node)
    sign_in(page, node, OWNER_KEY)
    expect(page.get_by_role("heading", name="Server")).to_be_visible()
    expect(page.locator('[data-live="server.memory_state"]')).to_have_text(re.compile("^(green|yellow|orange|red)$"))
    expect(page.locator('[data-live="server.status"]')).to_have_text("ok")
    expect(page.locator('[data-live="server.redelivery_delays"]')).to_have_text("1 s, 2 s, 3 s, 5 s, 8 s, 24 s")
    row = page.locator("table.list tbody tr", has_text=tenant.id)
    expect(row).to_contain_text(tenant.name)
    expect(row).to_contain_text("of 976.6 KiB")
    expect(row.locator("meter")).to_have_count(1)
    row.get_by_role("link", name=tenant.name).click()
    expect(page.get_by_role("heading", name=tenant.name)).to_be_visible()
    page.get_by_role("link", name="orders").click()
    expect(page.locator("#depth")).to_have_text("1")


def sample_the_platform(node: InProcessNode) -> None:
    """What the maintenance lease holder of a served node does every 10 s or more (a sample is dated
    10 s after the one before, as the node spaces them: the history leaves out closer ones)."""
    s = node.services
    store = OverviewStore(s.queues.storage)
    sample = Sampler(s.queues, s.tenants.list, s.listeners).read()
    latest, _ = store.latest()
    if latest is not None:
        sample.at = max(sample.at, latest.at + 10)
    store.record(sample)


def test_the_owner_finds_the_loud_the_stuck_and_the_full_and_sees_the_platform_and_its_nodes(
        page: Page, node: InProcessNode, make_tenant: Any) -> None:
    loud, dead, full = make_tenant(), make_tenant(), make_tenant()
    node.owner.update_tenant(full.id, disk_quota_bytes=4000)
    for user in (loud, dead, full):
        user.api.put_queue("work", max_redeliveries=0)
    full.api.send_texts("work", ["x" * 2500])
    dead.api.send_texts("work", [f"bad {i}" for i in range(40)])
    taken = dead.api.get("work", max_messages=40)
    assert dead.api.nack("work", receipts=[m["receipt"] for m in taken], reason="broken")["dead_lettered"] == 40
    sample_the_platform(node)
    loud.api.send_texts("work", [f"m{i}" for i in range(300)])
    sample_the_platform(node)
    s = node.services
    lease = Lease(s.queues.storage, k.MAINTENANCE_LEASE, f"{s.node_id}:1", ttl_s=600)
    assert lease.acquire()
    NodeRecords(s.queues.storage).beat(NodeRecord(
        id=s.node_id, url=node.url, version="0.1.0", pid=os.getpid(), started_at=time.time() - 7200,
        workers=[KeptWorkerState("fork", 4242, "running", time.time() - 3600, 0),
                 KeptWorkerState("spark", None, "not started", 0.0, 0, "no Java runtime was found")]))
    now = float(int(time.time()))  # whole seconds: the durations below are exact
    killed = NodeRecord(id=f"n_{uuid.uuid4().hex[:12]}", url="http://10.0.0.9:61717", version="0.1.0", pid=4242,
                        started_at=now - 7200, seen_at=now - 300,
                        workers=[KeptWorkerState("fork", 4343, "running", now - 3600, 0)])
    s.queues.storage.client.hset(k.NODES_KEY, killed.id, json.dumps(asdict(killed)))  # left by a killed node
    try:
        sign_in(page, node, OWNER_KEY)
        first = page.locator("#tenants tbody tr").first
        expect(first).to_contain_text(loud.name)  # by traffic, the default order
        expect(first.locator(f'[data-live="tenant.{loud.id}.traffic"]')).to_have_text(re.compile(r"^[1-9][\d,.]*/s$"))
        expect(page.locator("#platform-chart svg polyline")).to_have_count(5)
        for series in ("sent", "delivered", "acked", "dead_lettered", "refused"):
            expect(page.locator(f"#platform-chart polyline.line.{series}")).to_have_count(1)
        nodes = page.locator("#nodes tbody tr", has_text=s.node_id)
        expect(nodes).to_contain_text("maintenance lease")
        expect(nodes).to_contain_text("2 hours")
        # The record was written an hour before: the page, rendered a few seconds later on a busy machine,
        # may count them too.
        expect(nodes).to_contain_text(re.compile(r"fork running for 1 hour( \d+ s)? \(pid 4242\)"))
        expect(nodes).to_contain_text("spark not started: no Java runtime was found")
        silent = page.locator("#nodes tbody tr", has_text=killed.id)
        expect(silent).to_contain_text("silent")
        expect(silent).to_contain_text(re.compile(r"5 minutes( \d+ s)? ago"))
        # Up, and its worker running, until it was last heard: neither goes on counting.
        expect(silent).to_contain_text("1 hour 55 minutes")
        expect(silent).to_contain_text("fork running for 55 minutes (pid 4343)")
        shot = artifacts_dir() / "dashboard-overview.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.read_bytes().startswith(PNG_SIGNATURE)
        page.get_by_role("link", name="dead letters").click()
        expect(page.locator("#tenants tbody tr").first).to_contain_text(dead.name)
        expect(page.locator(f'[data-live="tenant.{dead.id}.dead_letters"]')).to_have_text("40")
        page.get_by_role("link", name="stored bytes against the quota").click()
        expect(page.locator("#tenants tbody tr").first).to_contain_text(full.name)
        expect(page.locator("#tenants tbody tr").first.locator("meter")).to_have_count(1)
    finally:
        lease.release()
        NodeRecords(s.queues.storage).forget(s.node_id)
        NodeRecords(s.queues.storage).forget(killed.id)


def test_the_owner_sees_the_memory_state_what_it_refuses_and_its_changes(page: Page, node: InProcessNode) -> None:
    memory = node.client.info("memory")
    share = int(memory["used_memory"]) / int(memory["maxmemory"])
    sign_in(page, node, OWNER_KEY)
    expect(page.locator("#memory-rule")).to_have_text("every send is taken")
    expect(page.get_by_text("yellow at 70%, orange at 85%, red at 95% of the memory limit")).to_be_visible()
    node.owner.request("PATCH", "/v1/server", {"memory_thresholds": {"yellow": share / 8, "orange": share / 4,
                                                                     "red": share / 2}})
    try:
        expect(page.locator("#memory-state")).to_have_text("red", timeout=REFRESH_WAIT_MS)
        expect(page.locator("#memory-rule")).to_have_text(
            "every send, and the creation of queues, subscribers and listeners, is refused")
        expect(page.locator("#memory-history")).to_contain_text(re.compile(r"UTC red"))
        shot = artifacts_dir() / "dashboard-memory-red.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.read_bytes().startswith(PNG_SIGNATURE)
    finally:
        node.owner.request("PATCH", "/v1/server", {"memory_thresholds": {"yellow": 0.7, "orange": 0.85,
                                                                         "red": 0.95}})
    expect(page.locator("#memory-state")).to_have_text("green", timeout=REFRESH_WAIT_MS)
    expect(page.locator("#memory-history")).to_contain_text(re.compile(r"UTC green · .* UTC red"))


# -- sessions, without a browser ------------------------------------------------------------


@pytest.fixture(scope="module")
def app_services(valkey: Any) -> Iterator[Services]:
    client = valkey.client()
    yield Services(queues=QueueServer(client), tenants=TenantStore(client, OWNER_KEY), longpolls=LongPollLimiter(2))
    client.close()


@pytest.fixture
def http(app_services: Services) -> Any:
    return create_app(app_services).test_client()


def form_token(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, html
    return match.group(1)


def signed_in(http: Any, key: str) -> Any:
    """Signs ``http`` in with ``key``; the sign-in answer."""
    token = form_token(http.get("/dashboard/signin").text)
    answer = http.post("/dashboard/signin", data={"csrf_token": token, "key": key})
    assert answer.status_code == 303, answer.text
    return answer


def test_the_session_cookie_is_http_only_secure_strict_and_holds_no_key(http: Any, app_services: Services) -> None:
    tenant, _, key = app_services.tenants.create("cookies")
    answer = signed_in(http, key)
    (cookie,) = [c for c in answer.headers.getlist("Set-Cookie") if c.startswith(f"{SESSION_COOKIE}=")]
    attributes = {part.strip().split("=")[0].lower(): part.strip() for part in cookie.split(";")[1:]}
    assert {"httponly", "secure", "samesite", "path"} <= set(attributes)
    assert attributes["samesite"] == "SameSite=Strict" and attributes["path"] == "Path=/dashboard"
    session_id = cookie.split(";")[0].split("=", 1)[1]
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", session_id) and key not in cookie
    record = app_services.queues.client.hgetall(k.dashboard_session(session_id))
    assert record and not any(key.encode() in value or session_id.encode() in value for value in record.values())
    assert 0 < app_services.queues.client.ttl(k.dashboard_session(session_id)) <= 30 * 60
    app_services.tenants.delete(tenant.id)


def test_a_revoked_key_ends_its_session_at_the_next_request(http: Any, app_services: Services) -> None:
    tenant, key_id, key = app_services.tenants.create("revoked")
    answer = signed_in(http, key)
    session_id = http.get_cookie(SESSION_COOKIE, path="/dashboard").value
    assert http.get(answer.headers["Location"], follow_redirects=True).status_code == 200
    assert http.get(f"/dashboard/tenants/{tenant.id}/live").status_code == 200
    app_services.tenants.revoke_key(tenant.id, key_id)
    ended = http.get(f"/dashboard/tenants/{tenant.id}/")
    assert ended.status_code == 303 and ended.headers["Location"].endswith("/dashboard/signin")
    assert not app_services.queues.client.exists(k.dashboard_session(session_id))
    assert http.get_cookie(SESSION_COOKIE, path="/dashboard") is None
    assert http.get(f"/dashboard/tenants/{tenant.id}/live").status_code == 401
    app_services.tenants.delete(tenant.id)


def test_page_views_renew_the_idle_time_and_the_pages_refreshes_do_not(http: Any, app_services: Services) -> None:
    signed_in(http, OWNER_KEY)
    record = k.dashboard_session(http.get_cookie(SESSION_COOKIE, path="/dashboard").value)
    client = app_services.queues.client
    client.expire(record, 100)
    assert http.get("/dashboard/live").status_code == 200
    assert client.ttl(record) <= 100
    assert http.get("/dashboard/").status_code == 200
    assert client.ttl(record) > 100


def test_sign_out_deletes_the_session_record(http: Any, app_services: Services) -> None:
    signed_in(http, OWNER_KEY)
    session_id = http.get_cookie(SESSION_COOKIE, path="/dashboard").value
    token = form_token(http.get("/dashboard/").text)
    assert http.post("/dashboard/signout", data={}).status_code == 403
    assert http.post("/dashboard/signout", data={"csrf_token": token}).status_code == 303
    assert not app_services.queues.client.exists(k.dashboard_session(session_id))
    assert http.get("/dashboard/").status_code == 303


def test_sign_in_needs_the_forms_own_token(http: Any) -> None:
    """Login CSRF: a sign-in posted from elsewhere has no pre-session cookie and token to match."""
    assert http.post("/dashboard/signin", data={"key": OWNER_KEY}).status_code == 403
    http.get("/dashboard/signin")
    assert http.post("/dashboard/signin", data={"key": OWNER_KEY, "csrf_token": "forged"}).status_code == 403
    assert http.get_cookie(SESSION_COOKIE, path="/dashboard") is None


def test_a_session_ends_at_its_absolute_lifetime_however_busy(app_services: Services) -> None:
    owner_digest = api_keys.digest(OWNER_KEY)
    short = SessionStore(app_services.queues.storage, idle_s=60, max_age_s=3600)
    session = short.create(app_services.tenants.reauthenticate(None, owner_digest), owner_digest)
    assert short.load(session.id) == session
    ended = SessionStore(app_services.queues.storage, idle_s=60, max_age_s=0)
    assert ended.load(session.id) is None
    assert not app_services.queues.client.exists(k.dashboard_session(session.id))


def test_the_api_keeps_its_json_errors_and_the_dashboard_answers_pages(http: Any) -> None:
    assert http.get("/v1/queues").get_json()["error"]["code"] == "unauthorized"
    owner = {"Authorization": f"Bearer {OWNER_KEY}"}
    assert http.get("/v1/nothing-here", headers=owner).get_json()["error"]["code"] == "not_found"
    assert http.get("/v1/tenants/t_000000000000", headers=owner).get_json()["error"]["code"] == "not_found"
    assert "/dashboard" not in str(http.get("/openapi.json").get_json()["paths"])
    signed_in(http, OWNER_KEY)
    missing = http.get("/dashboard/tenants/t_000000000000/")
    assert missing.status_code == 404 and missing.mimetype == "text/html"
    assert http.get("/dashboard/no/such/page").status_code == 404
    headers = http.get("/dashboard/").headers
    assert headers["X-Frame-Options"] == "DENY" and headers["Cache-Control"] == "no-store"
