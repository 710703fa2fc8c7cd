"""What the dashboard's tenant and queue pages say, in a real browser: who is signed in, what
each queue is, counts in words, and the links that page on.

The browser, the in-process node and the tenants are ``test_dashboard``'s fixtures (a node of
this module's own). As there, the tests wait with Playwright's ``expect``, never with sleeps.
"""

from __future__ import annotations

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
