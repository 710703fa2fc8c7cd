"""What the dashboard's tenant and queue pages say, in a real browser: who is signed in, what
each queue is, counts in words, the links that page on, and the move tasks an operator starts
and cancels on a queue's page.

The browser, the in-process node and the tenants are ``test_dashboard``'s fixtures (a node of
this module's own). As there, the tests wait with Playwright's ``expect``, never with sleeps.
"""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, expect

import test_dashboard as dashboard
from atomq.api.dashboard.pages import PAGE_SIZE
from support.in_process_node import InProcessNode
from test_dashboard import TenantUser, queue_url, sign_in

# test_dashboard's fixtures, for this module's tests under the same names (a node of this module's own).
browser = dashboard.browser
make_tenant = dashboard.make_tenant
node = dashboard.node
page = dashboard.page
tenant = dashboard.tenant


def test_a_tenant_is_signed_in_under_its_name(page: Page, node: InProcessNode, tenant: TenantUser) -> None:
    sign_in(page, node, tenant.key)
    expect(page.locator("#signed-in-as")).to_have_text(f"Signed in as {tenant.name} (tenant {tenant.id})")


def test_the_tenant_page_says_what_each_queue_is(page: Page, node: InProcessNode, tenant: TenantUser) -> None:
    tenant.api.put_queue("plain")
    tenant.api.put_queue("input", access="exclusive")
    tenant.api.put_queue("prices", last_value=True, last_value_key="sku")
    tenant.api.put_queue("events", topics=["shop/>", "billing/*"], message_ttl_s=600, on_expire="discard",
                         max_redeliveries=1, ack_timeout_s=5)
    tenant.api.put_queue("bounded", max_messages=1, max_bytes=2048)
    tenant.api.put_queue("jobs", dead_letter_queue="plain")
    sign_in(page, node, tenant.key)
    expected = {
        "plain": ("-", "-"),
        "input": ("exclusive", "-"),
        "prices": ("last-value by sku", "-"),
        "events": ("TTL 10 minutes, then discarded; at most 1 redelivery; ack time-out 5 s", "shop/>, billing/*"),
        "bounded": ("holds at most 1 message and 2.0 KiB", "-"),
        "jobs": ("dead letters to plain", "-"),
    }
    for name, (settings, topics) in expected.items():
        row = page.locator("table#queues tbody tr", has=page.get_by_role("link", name=name, exact=True))
        expect(row.locator("td.settings")).to_have_text(settings)
        expect(row.locator("td.topics")).to_have_text(topics)

    page.goto(queue_url(node, tenant.id, "events"))
    expect(page.get_by_text("at most 1 redelivery;")).to_be_visible()
    page.goto(queue_url(node, tenant.id, "bounded"))
    expect(page.locator("#limits")).to_contain_text("Holds at most 1 message and 2.0 KiB not yet acked")
    expect(page.locator("#dead-letter-queue")).to_contain_text("stay in this queue's own dead letter queue")
    page.goto(queue_url(node, tenant.id, "jobs"))
    expect(page.locator("#dead-letter-queue")).to_contain_text("Dead letters move to the queue plain")
    page.locator("#dead-letter-queue").get_by_role("link", name="plain").click()
    expect(page.get_by_role("heading", name="Queue plain")).to_be_visible()


def test_a_queue_ordered_by_group_says_so_and_shows_each_messages_group(page: Page, node: InProcessNode,
                                                                        tenant: TenantUser) -> None:
    tenant.api.put_queue("payments", ordering="group")
    tenant.api.send("payments", [{"documents": [{"data": "open"}], "group": "acct-17"},
                                 {"documents": [{"data": "debit"}], "group": "acct-17"},
                                 {"documents": [{"data": "loose"}]}])
    sign_in(page, node, tenant.key)
    row = page.locator("table#queues tbody tr", has=page.get_by_role("link", name="payments", exact=True))
    expect(row.locator("td.settings")).to_have_text("ordered by group")
    page.goto(queue_url(node, tenant.id, "payments"))
    expect(page.get_by_text("ordered by group: one message of a group out at a time, in send order")).to_be_visible()
    rows = page.locator("table.messages tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(1)).to_contain_text("acct-17")
    expect(rows.nth(2).locator("td").nth(3)).to_have_text("-")


def test_a_page_that_holds_the_last_dead_letter_links_to_no_next_page(page: Page, node: InProcessNode,
                                                                       tenant: TenantUser) -> None:
    tenant.api.put_queue("jobs", max_redeliveries=0)
    tenant.api.send_texts("jobs", [f"dead {i}" for i in range(PAGE_SIZE)])
    got = tenant.api.get("jobs", max_messages=PAGE_SIZE)
    tenant.api.nack("jobs", receipts=[d["receipt"] for d in got], reason="bad input")
    tenant.api.send_texts("jobs", [f"waiting {i}" for i in range(PAGE_SIZE)])  # after the dead letters
    sign_in(page, node, tenant.key)
    page.goto(queue_url(node, tenant.id, "jobs"))
    dead, messages = page.locator("table.dead-letters tbody tr"), page.locator("table.messages tbody tr")
    next_dead = page.get_by_role("link", name="Next page of dead letters")
    next_messages = page.get_by_role("link", name="Next page of messages")
    expect(dead).to_have_count(PAGE_SIZE)
    expect(messages).to_have_count(PAGE_SIZE)
    expect(next_dead).to_have_count(0)
    expect(next_messages).to_have_count(0)

    (first,) = tenant.api.get("jobs", max_messages=1)
    tenant.api.nack("jobs", receipts=[first["receipt"]], reason="bad input")
    page.reload()
    expect(dead).to_have_count(PAGE_SIZE)
    expect(messages).to_have_count(PAGE_SIZE - 1)
    expect(next_messages).to_have_count(0)
    next_dead.click()
    expect(dead).to_have_count(1)
    expect(dead).to_contain_text(first["id"])
    expect(next_dead).to_have_count(0)


def test_an_operator_starts_and_cancels_a_move_task_of_a_dead_letter_queue(page: Page, node: InProcessNode,
                                                                          make_tenant: Any) -> None:
    mine, theirs = make_tenant(), make_tenant()
    mine.api.put_queue("dlq")
    mine.api.put_queue("retry")
    mine.api.put_queue("work", max_redeliveries=0, dead_letter_queue="dlq")
    mine.api.send_texts("work", ["a", "b", "c"])
    assert mine.api.nack("work", ids=[m["id"] for m in mine.api.get("work", max_messages=3)])["dead_lettered"] == 3
    sign_in(page, node, mine.key)
    page.goto(queue_url(node, mine.id, "dlq"))
    expect(page.get_by_text("No move task has run from this queue.")).to_be_visible()
    page.get_by_label("Move the waiting messages to").fill("retry")
    page.get_by_label("at most, a second").fill("1")
    page.get_by_role("button", name="Start moving").click()
    expect(page.get_by_role("status")).to_have_text("Started moving 3 waiting messages to retry.")
    [task] = mine.api.moves("dlq")
    row = page.locator(f"table#moves tbody tr[data-task='{task['id']}']")
    expect(row).to_contain_text("running")
    expect(page.get_by_role("button", name="Start moving")).to_have_count(0)  # one task at a time

    node.services.queues.maintain(mine.id)  # the node's maintenance: one step of one message
    page.reload()
    expect(row.locator("td").nth(1)).to_have_text("1")
    # Another tenant, with a form token of its own, cannot cancel it.
    other = page.context.browser.new_context().new_page()  # type: ignore[union-attr]
    sign_in(other, node, theirs.key)
    token = other.locator("input[name=csrf_token]").first.get_attribute("value")
    for tenant_id in (theirs.id, mine.id):
        refused = other.request.post(f"{queue_url(node, tenant_id, 'dlq')}/moves/{task['id']}/cancel",
                                     form={"csrf_token": token or ""}, max_redirects=0)
        assert refused.status == 404
    other.context.close()
    assert mine.api.move("dlq", task["id"])["status"] == "running"

    row.get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("status")).to_have_text("Cancelled the move task after 1 message moved.")
    expect(row).to_contain_text("cancelled")
    expect(row.get_by_role("button", name="Cancel")).to_have_count(0)
    assert (mine.api.queue("dlq")["depth"], mine.api.queue("retry")["depth"]) == (2, 1)

    page.get_by_label("at most, a second").fill("0")
    page.get_by_role("button", name="Start moving").click()  # the browser holds a rate below 1 back
    expect(page.locator("#move-rate:invalid")).to_have_count(1)
    page.get_by_label("at most, a second").fill("")
    page.get_by_role("button", name="Start moving").click()
    expect(page.get_by_role("status")).to_have_text("Started moving 2 waiting messages to their sources.")
    node.services.queues.maintain(mine.id)
    page.reload()
    expect(page.locator("table#moves tbody tr").first).to_contain_text("completed")
    assert mine.api.queue("work")["depth"] == 2
    bad = page.request.post(f"{queue_url(node, mine.id, 'dlq')}/moves/start", max_redirects=0, form={
        "csrf_token": page.locator("#move-form input[name=csrf_token]").get_attribute("value") or "",
        "max_per_second": "²"})
    assert bad.status == 400 and "whole number" in bad.text()
