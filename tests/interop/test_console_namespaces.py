"""The console across namespaces, in Chromium: the root token, which acts in
every namespace, finds a call waiting for approval outside the namespace
the console opens on by following links from /ui, and switches namespace
from a page's header. (Fixtures and helpers: test_console.py.)"""

from __future__ import annotations

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from conftest import NAMESPACE
from test_console import ROOT, browser, check_page, setup, sign_in, ticket_tool, wait  # noqa: F401

OTHER = "payments"


def test_a_call_waiting_in_another_namespace_is_found_from_ui(setup, browser):  # noqa: F811
    joch, webhook, _ = setup
    tool = ticket_tool("payments.refund", webhook.url, {})
    tool["spec"]["sideEffects"]["requiresApproval"] = True
    joch.apply(tool, namespace=OTHER)
    call = {"metadata": {"name": "c-refund"},
            "spec": {"toolRef": {"name": "payments.refund"}, "input": {"subject": "refund 12345"}}}
    made = joch.ok("POST", f"/v1/namespaces/{OTHER}/toolcalls?wait=false", call)
    assert made["status"]["phase"] == "AwaitingApproval"

    sign_in(browser, joch.base, ROOT)
    browser.get(f"{joch.base}/ui")
    counts = browser.find_element(By.CSS_SELECTOR, "nav.namespaces")
    assert f"{OTHER} · 1 waiting" in counts.text
    counts.find_element(By.LINK_TEXT, OTHER).click()
    wait(browser, lambda d: d.current_url.endswith(f"/ui/inbox?ns={OTHER}"))
    item = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, '[data-approval="c-refund"]'))[0]
    check_page(browser, "inbox-namespaces")
    item.find_element(By.LINK_TEXT, "c-refund").click()
    wait(browser, lambda d: "/ui/calls/c-refund?ns=payments" in d.current_url)
    assert "AwaitingApproval" in browser.find_element(By.ID, "main").text

    # From this page, straight to another namespace's ledger.
    field = browser.find_element(By.ID, "switch-ns")
    field.clear()
    field.send_keys(NAMESPACE, Keys.ENTER)
    wait(browser, lambda d: d.current_url.endswith(f"/ui/calls?ns={NAMESPACE}"))
    assert browser.find_element(By.CSS_SELECTOR, ".who strong").text == NAMESPACE
