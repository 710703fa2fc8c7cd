"""The dashboard's listener page, its controls, and every page at a phone's width, in a real browser.

The browser, the in-process node and the tenants are ``test_dashboard``'s fixtures (a node of
this module's own). A listener fails for real: a supervision round schedules its execution and
rq's SimpleWorker runs it here (``support.in_process_executions``), running the registered
``always_fail`` process. As in ``test_dashboard``, the tests wait with Playwright's ``expect``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Locator, Page, Response, expect

from atomq.workers import processes
from atomq.workers.liveness import FORK_MISSING
from atomq.workers.supervisor import Supervisor, SupervisorConfig
from support.in_process_executions import run_executions
from support.in_process_node import InProcessNode
from support.listener_processes import always_fail, registered
import test_dashboard as dashboard
from test_dashboard import OWNER_KEY, PNG_SIGNATURE, REFRESH_WAIT_MS, TenantUser, artifacts_dir, queue_url, sign_in

# test_dashboard's fixtures, for this module's tests under the same names (a node of this module's own).
browser = dashboard.browser
make_tenant = dashboard.make_tenant
node = dashboard.node
page = dashboard.page
tenant = dashboard.tenant

PHONE_WIDTH = 420


def listener_url(node: InProcessNode, tenant_id: str, name: str) -> str:
    return f"{node.url}/dashboard/tenants/{tenant_id}/listeners/{name}"


def screenshot(page: Page, name: str) -> None:
    shot = artifacts_dir() / name
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes().startswith(PNG_SIGNATURE)


def page_width(page: Page) -> int:
    """How wide the whole page is: wider than the viewport, and it scrolls sideways."""
    return int(page.evaluate("document.documentElement.scrollWidth"))


@pytest.fixture
def failing_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Registers ``always_fail`` as the fork process ``fail`` while the test runs."""
    monkeypatch.setenv(processes.FORK.env, registered(fail=always_fail))
    processes.FORK.clear()
    yield "fail"
    monkeypatch.undo()
    processes.FORK.clear()


def test_the_listener_page_shows_its_definition_and_enables_the_controls_that_apply(
        page: Page, node: InProcessNode, tenant: TenantUser) -> None:
    tenant.api.put_queue("in")
    tenant.api.put_queue("out")
    tenant.api.put_listener("fwd", "in", "forward", batch_size=5, max_concurrent_executions=2,
                            settings={"to": "out"})
    sign_in(page, node, tenant.key)
    page.get_by_role("link", name="fwd", exact=True).click()
    expect(page.get_by_role("heading", name="Listener fwd")).to_be_visible()
    definition = page.locator("#definition")
    expect(definition).to_contain_text("the queue in")
    expect(definition).to_contain_text("forward")
    expect(definition).to_contain_text("up to 5 messages an execution")
    expect(definition).to_contain_text("at most 2")
    expect(page.locator("#settings")).to_have_text("to: out")
    expect(page.locator("#engine")).to_contain_text("fork: each execution runs the process in a forked work horse")
    expect(page.locator("#state")).to_have_text("running")
    expect(page.locator("#executions")).to_have_text("0")
    expect(page.locator("#execution-chart svg polyline")).to_have_count(2)

    pause, resume = (page.get_by_role("button", name=n, exact=True) for n in ("Pause", "Resume"))
    expect(pause).to_be_enabled()
    expect(resume).to_be_disabled()
    pause.click()
    expect(page.get_by_role("status")).to_have_text("Paused the listener fwd.")
    expect(page.get_by_role("heading", name="Listener fwd")).to_be_visible()
    expect(page.locator("#state")).to_have_text("paused")
    expect(resume).to_be_enabled()
    expect(pause).to_be_disabled()
    assert tenant.api.listener("fwd")["state"] == "paused"
    screenshot(page, "dashboard-listener-paused.png")

    page.get_by_role("link", name=tenant.name).click()
    expect(page.get_by_role("button", name="Resume listener fwd")).to_be_enabled()
    expect(page.get_by_role("button", name="Pause listener fwd")).to_be_disabled()
    page.get_by_role("link", name="fwd", exact=True).click()

    resume.click()
    expect(page.get_by_role("status")).to_have_text("Resumed the listener fwd.")
    expect(page.locator("#state")).to_have_text("running")
    expect(pause).to_be_enabled()
    expect(resume).to_be_disabled()
    screenshot(page, "dashboard-listener.png")


def test_a_failed_listener_says_why_and_restarts(page: Page, node: InProcessNode, tenant: TenantUser,
                                                failing_process: str) -> None:
    tenant.api.put_queue("jobs", max_redeliveries=0)
    tenant.api.put_listener("picky", "jobs", failing_process)
    tenant.api.send_texts("jobs", ["rejected"])
    run_executions(node, tenant.id, lambda: tenant.api.listener("picky")["state"] == "error", "a failed execution")
    sign_in(page, node, tenant.key)
    page.goto(listener_url(node, tenant.id, "picky"))
    expect(page.locator("#state")).to_have_text("error")
    reason = page.get_by_role("row", name=re.compile("^Why it failed"))
    expect(reason).to_contain_text("refusing 1 message(s)")
    expect(page.locator("#failures")).to_have_text("1")
    expect(page.locator("#execution-chart polyline.line.failures")).to_have_count(1)
    expect(page.locator("#recent-failures tbody tr")).to_have_count(1)
    expect(page.locator("#recent-failures tbody tr")).to_contain_text(re.compile(
        r"UTC.*refusing 1 message\(s\)"))
    live = page.request.get(f"{listener_url(node, tenant.id, 'picky')}/live").json()
    buckets = live["execution_rates"]
    assert (sum(b["executions"] for b in buckets), sum(b["failures"] for b in buckets)) == (1, 1), \
        "the one failed execution, in the chart's buckets"
    expect(page.get_by_role("button", name="Restart", exact=True)).to_be_enabled()
    expect(page.get_by_role("button", name="Resume", exact=True)).to_be_disabled()
    screenshot(page, "dashboard-listener-error.png")

    page.get_by_role("button", name="Restart", exact=True).click()
    expect(page.get_by_role("status")).to_have_text("Restarted the listener picky.")
    expect(page.locator("#state")).to_have_text("running")
    expect(reason).to_have_count(0)
    expect(page.locator("#last-error")).to_have_text("-")
    expect(page.locator("#failures")).to_have_text("1")


def test_the_controls_keep_their_order_whatever_the_listeners_state(page: Page, node: InProcessNode,
                                                                    tenant: TenantUser, failing_process: str) -> None:
    tenant.api.put_queue("in")
    tenant.api.put_queue("out")
    tenant.api.put_queue("jobs", max_redeliveries=0)
    tenant.api.put_listener("fwd", "in", "forward", settings={"to": "out"})
    tenant.api.put_listener("held", "in", "forward", settings={"to": "out"})
    tenant.api.pause_listener("held")
    tenant.api.put_listener("picky", "jobs", failing_process)
    tenant.api.send_texts("jobs", ["rejected"])
    run_executions(node, tenant.id, lambda: tenant.api.listener("picky")["state"] == "error", "a failed execution")
    offered = {"fwd": ("running", [True, False, True]), "held": ("paused", [False, True, False]),
               "picky": ("error", [True, False, True])}
    sign_in(page, node, tenant.key)

    def controls(buttons: Locator) -> tuple[list[str], list[bool]]:
        expect(buttons).to_have_count(3)
        return buttons.all_inner_texts(), [b.is_enabled() for b in buttons.all()]

    for name, (state, enabled) in offered.items():
        row = page.locator("table#listeners tbody tr", has=page.get_by_role("link", name=name, exact=True))
        expect(row.locator('[data-live$=".state"]')).to_have_text(state)
        assert controls(row.get_by_role("button")) == (["Pause", "Resume", "Restart"], enabled), name
    for name, (state, enabled) in offered.items():
        page.goto(listener_url(node, tenant.id, name))
        expect(page.locator("#state")).to_have_text(state)
        assert controls(page.locator("#controls").get_by_role("button")) == (["Pause", "Resume", "Restart"],
                                                                             enabled), name


def test_a_waiting_listener_says_what_is_missing(page: Page, node: InProcessNode, tenant: TenantUser) -> None:
    tenant.api.put_queue("in")
    tenant.api.put_queue("out")
    tenant.api.put_listener("fwd", "in", "forward", settings={"to": "out"})
    supervisor = Supervisor(node.services.queues, node.services.tenants.execution_tokens, node.rq,
                            SupervisorConfig(api_url=node.url, worker_liveness=True), holder="test-node",
                            tenant_exists=node.services.tenants.exists)
    supervisor.round()
    supervisor.release_all()
    assert tenant.api.listener("fwd")["state"] == "waiting"
    sign_in(page, node, tenant.key)
    page.goto(listener_url(node, tenant.id, "fwd"))
    expect(page.locator("#state")).to_have_text("waiting")
    expect(page.get_by_role("row", name=re.compile("^Why it waits"))).to_contain_text(FORK_MISSING)
    expect(page.get_by_role("button", name="Pause", exact=True)).to_be_enabled()
    expect(page.get_by_role("button", name="Resume", exact=True)).to_be_disabled()
    screenshot(page, "dashboard-listener-waiting.png")


def test_a_tenant_cannot_open_or_control_another_tenants_listener(page: Page, node: InProcessNode,
                                                                  make_tenant: Any) -> None:
    mine, theirs = make_tenant(), make_tenant()
    theirs.api.put_queue("in")
    theirs.api.put_queue("out")
    theirs.api.put_listener("secret", "in", "forward", settings={"to": "out"})
    sign_in(page, node, mine.key)
    answer = page.goto(listener_url(node, theirs.id, "secret"))
    assert answer is not None and answer.status == 404
    expect(page.get_by_role("heading", name=re.compile("Not found"))).to_be_visible()
    expect(page.locator("main")).not_to_contain_text("secret")
    missing = page.goto(listener_url(node, mine.id, "secret"))
    assert missing is not None and missing.status == 404

    page.goto(f"{node.url}/dashboard/")
    token = page.locator("input[name=csrf_token]").first.get_attribute("value") or ""
    refused = page.request.post(listener_url(node, theirs.id, "secret") + "/pause",
                                form={"csrf_token": token}, max_redirects=0)
    assert refused.status == 404
    assert theirs.api.listener("secret")["state"] == "running"


def test_a_listener_control_goes_back_only_to_a_page_of_the_same_tenant(page: Page, node: InProcessNode,
                                                                       make_tenant: Any) -> None:
    mine, theirs = make_tenant(), make_tenant()
    mine.api.put_queue("in")
    mine.api.put_queue("out")
    mine.api.put_listener("fwd", "in", "forward", settings={"to": "out"})
    sign_in(page, node, mine.key)
    token = page.locator("input[name=csrf_token]").first.get_attribute("value") or ""
    home = f"/dashboard/tenants/{mine.id}/"
    for given, expected in ((f"{home}listeners/fwd", f"{home}listeners/fwd"), (home, home),
                            ("https://elsewhere.example/", home), ("//elsewhere.example/", home),
                            (f"/dashboard/tenants/{theirs.id}/", home), (f"{home}listeners/../../", home),
                            ("", home)):
        answer = page.request.post(listener_url(node, mine.id, "fwd") + "/restart",
                                   form={"csrf_token": token, "next": given}, max_redirects=0)
        assert answer.status == 303, given
        assert answer.headers["location"] in (expected, node.url + expected), given


def test_every_page_fits_a_phone_without_scrolling_sideways(browser: Browser, page: Page, node: InProcessNode,
                                                            tenant: TenantUser) -> None:
    tenant.api.put_queue("orders-from-the-web-shop-europe", max_redeliveries=0)
    tenant.api.send("orders-from-the-web-shop-europe", [
        {"documents": [{"data": '{"order": 1, "lines": ["' + "a-long-product-code-" * 8 + '"]}'}],
         "properties": {"source": "web-shop", "customer": "c-0123456789abcdef"}}])
    tenant.api.put_queue("out")
    tenant.api.put_listener("forward-orders-to-billing", "orders-from-the-web-shop-europe", "forward",
                            settings={"to": "out"})
    page.set_viewport_size({"width": PHONE_WIDTH, "height": 800})
    sign_in(page, node, tenant.key)
    for name, url, heading in (
            ("tenant", f"{node.url}/dashboard/tenants/{tenant.id}/", tenant.name),
            ("queue", queue_url(node, tenant.id, "orders-from-the-web-shop-europe"),
             "Queue orders-from-the-web-shop-europe"),
            ("listener", listener_url(node, tenant.id, "forward-orders-to-billing"),
             "Listener forward-orders-to-billing")):
        page.goto(url)
        expect(page.get_by_role("heading", name=heading)).to_be_visible()
        assert page_width(page) <= PHONE_WIDTH, name
        screenshot(page, f"dashboard-{name}-420px.png")
    listeners = page.locator("table#listeners")
    page.goto(f"{node.url}/dashboard/tenants/{tenant.id}/")
    expect(listeners.get_by_role("button", name="Pause listener forward-orders-to-billing")).to_be_attached()
    assert listeners.evaluate("table => table.getBoundingClientRect().right") <= PHONE_WIDTH

    owner = browser.new_context(viewport={"width": PHONE_WIDTH, "height": 800})
    try:
        owner_page = owner.new_page()
        sign_in(owner_page, node, OWNER_KEY)
        owner_page.goto(f"{node.url}/dashboard/")  # waits for the page's load, styles included
        expect(owner_page.get_by_role("heading", name="Server")).to_be_visible()
        assert page_width(owner_page) <= PHONE_WIDTH, "overview"
        screenshot(owner_page, "dashboard-overview-420px.png")
    finally:
        owner.close()


def test_pages_log_no_console_errors_and_the_favicon_loads(page: Page, node: InProcessNode,
                                                           tenant: TenantUser) -> None:
    errors: list[str] = []
    failed: list[str] = []

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    def answered(response: Response) -> None:
        if response.status >= 400:
            failed.append(f"{response.status} {response.url}")

    page.on("console", console)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("response", answered)
    tenant.api.put_queue("in")
    tenant.api.put_queue("out")
    tenant.api.put_listener("fwd", "in", "forward", settings={"to": "out"})
    with page.expect_response(lambda r: r.url.endswith("/favicon.svg")) as favicon:
        sign_in(page, node, tenant.key)
    assert favicon.value.status == 200
    assert favicon.value.headers["content-type"].startswith("image/svg+xml")
    for url in (f"{node.url}/dashboard/tenants/{tenant.id}/", queue_url(node, tenant.id, "in"),
                listener_url(node, tenant.id, "fwd")):
        page.goto(url)
        # A refresh came back: the page's script ran its fetch, and says when, in UTC.
        expect(page.locator("#live-status")).to_have_text(re.compile(r"^Updated at \d\d:\d\d:\d\d UTC"),
                                                          timeout=REFRESH_WAIT_MS)
    assert errors == [] and failed == []


def test_the_owner_reads_server_durations_in_human_units(page: Page, node: InProcessNode) -> None:
    sign_in(page, node, OWNER_KEY)
    expect(page.locator('[data-live="server.document_retention"]')).to_have_text("7 days")
    expect(page.locator('[data-live="server.rate_limit_window"]')).to_have_text("1 minute")
    expect(page.locator('[data-live="server.dedupe_window"]')).to_have_text("5 minutes")
    node.owner.update_server(dedupe_window_s=5400)
    try:
        expect(page.locator('[data-live="server.dedupe_window"]')).to_have_text("1 hour 30 minutes",
                                                                               timeout=REFRESH_WAIT_MS)
    finally:
        node.owner.update_server(dedupe_window_s=300)
    screenshot(page, "dashboard-overview.png")
