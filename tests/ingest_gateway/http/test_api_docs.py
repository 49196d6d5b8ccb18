"""``/docs`` (Swagger UI) and ``/redoc`` over ``/openapi.json``, served wholly by the gateway.

Over HTTP: the pages and the vendored scripts they load answer with the right media
types, every URL in them is relative (no CDN), only the listed files are served.
In a real browser (Debian's Chromium driven by Selenium, skipped with a reason
when it is not installed; ``make test`` installs it): Swagger UI lists the
gateway's operations and runs one against the gateway ("Try it out"), Redoc
renders the reference, and every resource either page loaded came from the
gateway itself (Redoc's sidebar asks for a logo on a CDN: the pages' CSP refuses it,
which the test checks, rather than letting the browser try the network).
"""

from __future__ import annotations

import re

import pytest

from ingest_gateway.http.docs import FILES
from tests.ingest_gateway.http import browser



@pytest.fixture(scope="module")
def gw(shared_gateway, shared_log):
    """The session's shared gateway, holding a topic (the pages only read)."""
    if "docs-topic" not in shared_log.topics():
        shared_log.create_topic("docs-topic", {"partitions": 1})
    return shared_gateway


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_pages_load_only_relative_urls_the_gateway_serves(gw, page):
    status, html, headers = gw.request("GET", page)
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in headers["content-security-policy"]
    html = html.decode()
    urls = re.findall(r'(?:src|href|spec-url)="([^"]+)"', html)
    assert urls and all("//" not in u and not u.startswith("/") for u in urls), urls
    for u in urls:
        if u == "openapi.json":
            assert gw.request("GET", "/openapi.json")[0] == 200
            continue
        status, body, headers = gw.request("GET", "/" + u)
        assert status == 200 and len(body) > 100, u
        assert headers["content-type"].split(";")[0] in ("text/javascript", "text/css"), u
        assert headers["cache-control"] == "public, max-age=86400"


def test_only_the_listed_files_are_served(gw):
    for name in FILES:
        assert gw.request("GET", f"/docs/static/{name}")[0] == 200
    for bad in ["docs.py", "..%2Fdocs.py", "VENDORED.md", "swagger-ui-bundle.js.LICENSE.txt",
                "%2e%2e%2f%2e%2e%2fapp.py", "x" * 300]:
        status, body, _ = gw.request("GET", f"/docs/static/{bad}")
        assert status == 404 and body["error_code"] == 40400, bad


def test_every_route_is_in_the_openapi_document_the_pages_show(gw):
    doc = gw.request("GET", "/openapi.json")[1]
    for path in ["/docs", "/redoc", "/brokers", "/topics/{topic}/partitions/{partition}",
                 "/v3/clusters/{cluster_id}/topics/{topic}/records",
                 "/v3/clusters/{cluster_id}/consumer-groups/{group}/lag-summary",
                 "/consumers/{group}/instances/{instance}/positions/beginning"]:
        assert path in doc["paths"], path


# -- in a browser ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def driver():
    d = browser.chromium()
    d.set_page_load_timeout(60)
    yield d
    d.quit()


def _record_csp_violations(driver) -> None:
    """From the next page on, ``window.__blocked`` lists what its CSP refused to load."""
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": (
        "window.__blocked = []; document.addEventListener('securitypolicyviolation', "
        "e => window.__blocked.push(e.blockedURI));")})


def _loaded_from_elsewhere(driver, gw) -> list[str]:
    """What the page fetched from anywhere but the gateway: resources it asked for
    that are neither the gateway's nor refused by its Content-Security-Policy."""
    names = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)")
    blocked = driver.execute_script("return window.__blocked || []")
    return [n for n in names if not n.startswith(gw.url) and n not in blocked]


def test_swagger_ui_lists_the_operations_and_runs_one(gw, driver):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    _record_csp_violations(driver)
    driver.get(f"{gw.url}/docs")
    wait = WebDriverWait(driver, 60)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".opblock")) > 60)
    doc = gw.request("GET", "/openapi.json")[1]
    shown = len(driver.find_elements(By.CSS_SELECTOR, ".opblock"))
    assert shown == sum(len([m for m in item if m != "parameters"])
                        for item in doc["paths"].values())
    # try GET /brokers against the gateway from the page
    block = next(b for b in driver.find_elements(By.CSS_SELECTOR, ".opblock-get")
                 if b.find_element(By.CSS_SELECTOR, ".opblock-summary-path").text == "/brokers")
    block.find_element(By.CSS_SELECTOR, ".opblock-summary").click()
    wait.until(lambda d: block.find_elements(By.CSS_SELECTOR, ".try-out__btn"))
    block.find_element(By.CSS_SELECTOR, ".try-out__btn").click()
    wait.until(ec.element_to_be_clickable(block.find_element(By.CSS_SELECTOR, ".execute")))
    block.find_element(By.CSS_SELECTOR, ".execute").click()
    wait.until(lambda d: block.find_elements(By.CSS_SELECTOR, ".live-responses-table pre"))
    answer = " ".join(e.text for e in block.find_elements(By.CSS_SELECTOR,
                                                          ".live-responses-table pre"))
    assert '"brokers"' in answer and "0" in answer, answer
    assert _loaded_from_elsewhere(driver, gw) == []


def test_redoc_renders_the_reference(gw, driver):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _record_csp_violations(driver)
    driver.get(f"{gw.url}/redoc")
    WebDriverWait(driver, 60).until(
        lambda d: "sparklog ingest gateway" in d.find_element(By.TAG_NAME, "body").text)
    text = driver.find_element(By.TAG_NAME, "body").text
    assert "produce one record" in text.lower() and "/brokers" in text
    assert _loaded_from_elsewhere(driver, gw) == []
