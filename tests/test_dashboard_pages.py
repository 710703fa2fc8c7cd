"""What the dashboard's tenant and queue pages say, in a real browser: who is signed in, what
each queue is, counts in words, and the links that page on.

The browser, the in-process node and the tenants are ``test_dashboard``'s fixtures (a node of
this module's own). As there, the tests wait with Playwright's ``expect``, never with sleeps.
"""

from __future__ import annotations

from playwright.sync_api import Page, expect

import test_dashboard as dashboard
from support.in_process_node import InProcessNode
from test_dashboard import TenantUser, sign_in

# test_dashboard's fixtures, for this module's tests under the same names (a node of this module's own).
browser = dashboard.browser
make_tenant = dashboard.make_tenant
node = dashboard.node
page = dashboard.page
tenant = dashboard.tenant


def test_a_tenant_is_signed_in_under_its_name(page: Page, node: InProcessNode, tenant: TenantUser) -> None:
    sign_in(page, node, tenant.key)
    expect(page.locator("#signed-in-as")).to_have_text(f"Signed in as {tenant.name} (tenant {tenant.id})")
