"""The web console (``/ui``) in a real browser: Debian's Chromium driven by Selenium
against a real gateway subprocess with real data (topics with keyed JSON records and
headers, a consumer group with lag, a maintenance run).

``make test`` installs chromium and chromium-driver when /usr/bin/chromium is missing;
without them these tests skip, saying so. Each page's screenshot goes to a temporary
folder, or to docs/console/ with ``SPARKLOG_CONSOLE_SCREENSHOTS=docs/console`` (the
README's pictures: ``make console-screenshots``).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import pytest
import urllib3

from jobs.gateway_process import ROOT, GatewayProcess
from log_layout import open_log
from tests.ingest_gateway.http import browser

XSS_KEY = "<script>window.__xss = 1</script>"
XSS_VALUE = '<img src=x onerror="window.__xss = 2">'
XSS_HEADER = '<svg onload="window.__xss = 3">'
T0 = 1_764_000_000_000  # 2025-11-24 16:00:00 UTC: the first record's timestamp


def _browser(binary: str = browser.CHROMIUM):
    return browser.chromium(binary=binary, console_log=True,
                            extra_args=("--force-device-scale-factor=1",))


@pytest.fixture(scope="module")
def driver():
    d = _browser()
    d.set_page_load_timeout(60)
    yield d
    d.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    """Where screenshots go (docs/console/ when asked for, see the module doc)."""
    target = os.environ.get("SPARKLOG_CONSOLE_SCREENSHOTS")
    if target:
        path = os.path.join(ROOT, target)
        os.makedirs(path, exist_ok=True)
        return path
    return str(tmp_path_factory.mktemp("console-shots"))


def shoot(driver, folder: str, name: str) -> str:
    """A full-page PNG of what the browser shows, reduced to a 256-colour palette."""
    from PIL import Image

    height = int(driver.execute_script(
        "return document.querySelector('main').getBoundingClientRect().bottom + 16"))
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": 1280, "height": min(height, 2400), "scale": 1}})
    path = os.path.join(folder, f"{name}.png")
    with open(path, "wb") as f:
        f.write(base64.b64decode(shot["data"]))
    Image.open(path).convert("RGB").quantize(256).save(path, optimize=True)
    assert os.path.getsize(path) < 400_000
    return path


class Http:
    def __init__(self, url: str):
        self.url = url
        self.pool = urllib3.PoolManager(retries=False, timeout=30)

    def post(self, path: str, doc, content_type="application/json") -> dict:
        r = self.pool.request("POST", self.url + path, body=json.dumps(doc).encode(),
                              headers={"Content-Type": content_type})
        assert r.status in (200, 204), (path, r.status, r.data[:500])
        return json.loads(r.data) if r.data else {}

    def get(self, path: str, accept: str = "application/json"):
        r = self.pool.request("GET", self.url + path, headers={"Accept": accept})
        assert r.status == 200, (path, r.status, r.data[:500])
        return json.loads(r.data)


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A gateway over a store with: ``orders`` (3 partitions, 30 keyed JSON records with a
    header and timestamps T0 + i s, retention.ms overridden), ``xss`` (one record whose
    key, value and header try to run script), group ``billing`` (one member, committed
    behind the log end: lag 4 / 3 / 2), ``profiles`` (compacted, 5 x the same 20 keys), and
    a maintenance run of ``xss`` and ``profiles`` (not of ``orders``: its timestamps are a
    year old, retention would empty it)."""
    url = str(tmp_path_factory.mktemp("console") / "store")
    log = open_log(url)
    log.create_topic("orders", {"partitions": 3, "retention.ms": 86_400_000})
    log.create_topic("xss", {"partitions": 1})
    log.create_topic("profiles", {"partitions": 1, "cleanup.policy": "compact",
                                  "min.cleanable.dirty.ratio": 0.01})
    with GatewayProcess(url) as gw:
        http = Http(gw.url)
        ends = {}
        for i in range(30):
            p = i % 3
            doc = {"records": [{"key": b64(f"user-{i}"),
                                "value": b64(json.dumps({"order": i, "amount": 10 * i})),
                                "headers": [{"key": "source", "value": b64("web")}],
                                "timestamp": T0 + i * 1000}]}
            got = http.post(f"/topics/orders/partitions/{p}", doc,
                            "application/vnd.kafka.binary.v2+json")
            ends[p] = got["offsets"][0]["offset"] + 1
        http.post("/topics/xss", {"records": [{"key": b64(XSS_KEY), "value": b64(XSS_VALUE),
                                               "headers": [{"key": XSS_HEADER,
                                                            "value": b64(XSS_VALUE)}]}]},
                  "application/vnd.kafka.binary.v2+json")
        member = http.post("/groups/billing/members",
                           {"topics": ["orders"], "client_id": "billing-app",
                            "session_timeout_ms": 1_800_000})
        committed = {p: ends[p] - (4 - p) for p in range(3)}
        http.post("/groups/billing/offsets", {
            "member_id": member["member_id"], "generation": member["generation"],
            "offsets": [{"topic": "orders", "partition": p, "offset": o}
                        for p, o in committed.items()]})
        for _ in range(5):  # five segments of the same 20 keys: compaction keeps one of each
            http.post("/topics/profiles", {"records": [
                {"key": f"user-{i}", "value": {"name": f"user {i}", "visits": i}}
                for i in range(20)]}, "application/vnd.kafka.json.v2+json")
        subprocess.run([sys.executable, "-m", "jobs.cli", "--store", url, "maintain",
                        "--no-spark", "--force", "--topic", "xss", "--topic", "profiles"],
                       cwd=ROOT, check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": ROOT})
        yield {"gw": gw, "http": http, "ends": ends, "committed": committed,
               "member": member["member_id"]}


def wait(driver, condition, what: str, timeout: float = 20):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(condition, message=what)


def by(css: str):
    from selenium.webdriver.common.by import By

    return (By.CSS_SELECTOR, css)


def rows(driver, table_id: str) -> list[list[str]]:
    from selenium.webdriver.common.by import By

    out = []
    for tr in driver.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr"):
        out.append([td.text for td in tr.find_elements(By.TAG_NAME, "td")])
    return out


def open_page(driver, url: str) -> None:
    driver.get(url)
    wait(driver, lambda d: d.execute_script("return document.readyState") == "complete",
         f"{url} to load")


def no_script_ran(driver) -> None:
    assert driver.execute_script("return window.__xss === undefined"), "injected script ran"


def test_overview_shows_topics_groups_and_throughput_charts(driver, world, shots):
    gw = world["gw"]
    # the gateway samples its throughput every second: wait for a few samples,
    # reloading, with records flowing in and out meanwhile
    http = world["http"]

    ticks = []

    def charted(d):
        ticks.append(len(ticks))
        n = 1 + len(ticks) % 7  # an uneven load, so the chart has a shape
        http.post("/topics/orders", {"records": [{"value": {"tick": i}} for i in range(n)]},
                  "application/vnd.kafka.json.v2+json")
        http.get(f"/topics/orders/partitions/0/messages?offset=0&count={8 - n}",
                 "application/vnd.kafka.binary.v2+json")
        open_page(d, gw.url + "/ui")
        lines = d.find_elements(*by("#chart-records polyline"))
        return len(lines) == 2 and all(int(x.get_attribute("data-points")) >= 6 for x in lines)
    # the gateway samples once a second: six rates take about seven seconds
    wait(driver, charted, "six throughput samples in the overview's chart", timeout=60)
    summary = driver.find_element(*by("#summary")).text
    assert "TOPICS\n3" in summary and "CONSUMER GROUPS\n1" in summary
    topics = {r[0]: r for r in rows(driver, "topics")}
    assert set(topics) == {"orders", "profiles", "xss"}
    assert topics["orders"][1] == "3" and int(topics["orders"][2].replace(",", "")) >= 30
    assert topics["xss"][2] == "1"
    groups = rows(driver, "groups")
    assert groups[0][0] == "billing" and groups[0][1] == "Stable" and groups[0][2] == "1"
    # 4 + 3 + 2 behind when committed, plus the ticks produced above
    ends = {p: world["http"].get(f"/topics/orders/partitions/{p}/offsets")["end_offset"]
            for p in range(3)}
    assert groups[0][4] == f"{sum(ends[p] - world['committed'][p] for p in range(3)):,}"
    assert driver.find_element(*by("#chart-bytes svg")).is_displayed()
    # the page's own stylesheet and script loaded under its Content-Security-Policy
    assert driver.execute_script(
        "return getComputedStyle(document.querySelector('header')).display") == "flex"
    refused = [e["message"] for e in driver.get_log("browser")
               if "Content Security Policy" in e["message"] or "Refused" in e["message"]]
    assert not refused
    shoot(driver, shots, "overview")


def shown_bytes(text: str) -> tuple[float, int]:
    """A size as the console shows it ("1.5 KiB") as (bytes, the unit's size)."""
    value, unit = text.split()
    scale = 1024 ** ["B", "KiB", "MiB", "GiB", "TiB"].index(unit)
    return float(value) * scale, scale


def test_topics_page_lists_each_topic_with_partitions_records_size_and_links(
        driver, world, shots):
    gw, http = world["gw"], world["http"]
    open_page(driver, gw.url + "/ui")
    driver.find_element(*by("header nav a[href='/ui/topics']")).click()
    wait(driver, lambda d: d.title.startswith("Topics"), "the topics page")
    assert driver.find_element(*by("header nav a.active")).get_attribute("href") \
        == gw.url + "/ui/topics"
    shown = rows(driver, "topics")
    assert [r[0] for r in shown] == ["orders", "profiles", "xss"]  # sorted by name
    for name, parts, records, size, segments in shown:
        # the same facts through the REST API (REST Proxy v2 partitions, sparklog's fields)
        api = http.get(f"/topics/{name}/partitions", "application/vnd.kafka.v2+json")
        assert parts == str(len(api)), name
        assert records == f"{sum(p['high_watermark'] - p['log_start_offset'] for p in api):,}"
        assert segments == f"{sum(p['segments'] for p in api):,}", name
        got, unit = shown_bytes(size)
        assert abs(got - sum(p["bytes"] for p in api)) <= unit * 0.05, (name, size)
    by_name = {r[0]: r for r in shown}
    assert by_name["orders"][1] == "3" and by_name["xss"][1:3] == ["1", "1"]
    # profiles: 100 records written; maintenance removed 60 but keeps their offsets
    assert by_name["profiles"][2] == "100" and by_name["profiles"][4] == "2"
    shoot(driver, shots, "topics")
    for name, parts, *_ in shown:  # each name leads to its topic's page
        open_page(driver, gw.url + "/ui/topics")
        driver.find_element(*by(f"#topics a[href='/ui/topics/{name}']")).click()
        wait(driver, lambda d, n=name: d.title.startswith(f"Topic {n}"), f"{name}'s page")
        assert len(rows(driver, "partitions")) == int(parts)


def test_topic_page_shows_partitions_configs_and_leads_to_the_browser(driver, world, shots):
    open_page(driver, world["gw"].url + "/ui")
    driver.find_element(*by("#topics a[href='/ui/topics/orders']")).click()
    wait(driver, lambda d: d.title.startswith("Topic orders"), "the topic page")
    parts = rows(driver, "partitions")
    assert [r[0] for r in parts] == ["0", "1", "2"]
    end = world["gw"].http.request("GET", world["gw"].url + "/topics/orders/partitions/1/offsets")
    assert parts[1][3] == f'{json.loads(end.data)["end_offset"]:,}'
    assert all(r[2] == "0" and int(r[6]) >= 1 and r[5].endswith("B") for r in parts)
    configs = {r[0]: r for r in rows(driver, "configs")}
    assert configs["retention.ms"][1:] == ["86400000", "override"]
    assert configs["cleanup.policy"][1:] == ["delete", "default"]
    assert "partitions" not in configs and len(configs) == 12
    # this topic's own throughput: the overview's test produced to it and read from it
    lines = driver.find_elements(*by("#chart-records polyline"))
    assert len(lines) == 2 and all(int(x.get_attribute("data-points")) >= 2 for x in lines)
    assert "of this topic" in driver.find_element(*by("#chart-records figcaption")).text
    assert driver.find_element(*by("form#produce button")).is_displayed()
    shoot(driver, shots, "topic")
    parts_links = driver.find_elements(*by("#partitions a"))
    parts_links[2].click()
    wait(driver, lambda d: "Messages of orders" in d.title, "the message browser")
    assert "Partition 2: log start 0" in driver.find_element(*by("#range")).text


def test_message_browser_by_offset_and_timestamp_in_text_json_and_hex(driver, world, shots):
    base = world["gw"].url + "/ui/topics/orders/messages"
    open_page(driver, f"{base}?partition=1&offset=0&count=3")
    recs = rows(driver, "records")
    assert [r[0] for r in recs] == ["0", "1", "2"]
    # partition 1 holds records 1, 4, 7, ...: key, value and header as text
    assert recs[0][2] == "user-1" and recs[0][3] == '{"order": 1, "amount": 10}'
    assert recs[0][4] == "source: web"
    assert recs[0][1] == "2025-11-24 16:00:01.000 UTC"
    driver.find_element(*by("#format-json")).click()
    wait(driver, lambda d: "format=json" in d.current_url, "the JSON view")
    assert driver.find_elements(*by("#records pre.json"))[0].text == \
        '{\n  "order": 1,\n  "amount": 10\n}'
    assert "not JSON" in rows(driver, "records")[0][2]  # the key is not JSON: said so
    shoot(driver, shots, "messages")
    driver.find_element(*by("#format-hex")).click()
    wait(driver, lambda d: "format=hex" in d.current_url, "the hex view")
    assert rows(driver, "records")[0][2] == "75 73 65 72 2d 31"  # "user-1"
    # by timestamp: the first record at or after T0 + 10 s in partition 1 is record 10
    # (its 4th: records 1, 4, 7, 10)
    field = driver.find_element(*by("#browse input[name=timestamp]"))
    driver.execute_script("arguments[0].value = '2025-11-24T16:00:10'", field)
    driver.find_element(*by("#browse button")).click()
    wait(driver, lambda d: "timestamp=" in d.current_url, "the search by time")
    first = rows(driver, "records")[0]
    assert first[0] == "3" and first[1] == "2025-11-24 16:00:10.000 UTC"
    assert "from 2025-11-24 16:00:10.000 UTC" in driver.find_element(*by("#range")).text


def test_produce_form_writes_a_record_shown_by_the_browser_and_the_api(driver, world):
    open_page(driver, world["gw"].url + "/ui/topics/orders")
    form = driver.find_element(*by("form#produce"))
    from selenium.webdriver.support.select import Select

    Select(form.find_element(*by("select[name=partition]"))).select_by_value("2")
    form.find_element(*by("input[name=key]")).send_keys("from-the-form")
    form.find_element(*by("textarea[name=value]")).send_keys('{"made": "in a browser"}')
    form.find_element(*by("textarea[name=headers]")).send_keys("trace: abc-123\nsource: ui")
    form.find_element(*by("button")).click()
    wait(driver, lambda d: d.find_elements(*by("#notice")), "the produce notice")
    notice = driver.find_element(*by("#notice")).text
    assert notice.startswith("Produced to partition 2 at offset ")
    offset = int(notice.rsplit(" ", 1)[1])
    rec = rows(driver, "records")[0]
    assert rec[0] == f"{offset:,}" and rec[2] == "from-the-form"
    assert rec[3] == '{"made": "in a browser"}' and rec[4] == "trace: abc-123\nsource: ui"
    got = world["http"].get(f"/topics/orders/partitions/2/messages?offset={offset}&count=1",
                            "application/vnd.kafka.binary.v2+json")
    assert base64.b64decode(got[0]["value"]) == b'{"made": "in a browser"}'


def test_a_large_value_is_cut_and_its_size_said(driver, world):
    http = world["http"]
    got = http.post("/topics/profiles", {"records": [{"key": "big", "value": "y" * 20_000}]},
                    "application/vnd.kafka.json.v2+json")
    offset = got["offsets"][0]["offset"]
    for fmt, shown in (("text", 8192), ("json", 8192), ("hex", 2048)):
        open_page(driver, world["gw"].url + f"/ui/topics/profiles/messages?partition=0"
                                            f"&offset={offset}&count=1&format={fmt}")
        value = rows(driver, "records")[0][3]
        # the JSON string "yyy..." is 20,002 bytes
        assert value.endswith(f"{20_002 - shown:,} more bytes of 20,002")
        assert len(value) < 3 * shown + 60


def test_produce_form_sent_from_another_site_is_refused(world):
    """A cross-site form post (no CORS needed for urlencoded forms) writes nothing."""
    gw, http = world["gw"], world["http"]
    end = http.get("/topics/orders/partitions/0/offsets")["end_offset"]
    for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        r = http.pool.request("POST", gw.url + "/ui/topics/orders/produce",
                              body=b"partition=0&value=forged", headers={
                                  "Content-Type": "application/x-www-form-urlencoded",
                                  **headers})
        assert r.status == 403 and b"another site" in r.data
    assert http.get("/topics/orders/partitions/0/offsets")["end_offset"] == end
    # the same post from the console's own page is accepted
    host = gw.url.split("://", 1)[1]
    r = http.pool.request("POST", gw.url + "/ui/topics/orders/produce", redirect=False,
                          body=b"partition=0&value=ok", headers={
                              "Content-Type": "application/x-www-form-urlencoded",
                              "Origin": f"http://{host}", "Sec-Fetch-Site": "same-origin"})
    assert r.status == 303
    assert http.get("/topics/orders/partitions/0/offsets")["end_offset"] == end + 1


def test_pages_forbid_other_origins_scripts_and_frames(world):
    http = world["http"]
    for path in ("/ui", "/ui/topics/orders", "/ui/topics/nope", "/ui/groups/billing"):
        r = http.pool.request("GET", world["gw"].url + path)
        csp = r.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp, path
        assert "form-action 'self'" in csp and "default-src 'none'" in csp
        assert r.headers["X-Frame-Options"] == "DENY"
        assert r.headers["Content-Type"].startswith("text/html")


def test_user_controlled_strings_are_shown_as_text_never_run(driver, world):
    for fmt in ("text", "json", "hex"):
        open_page(driver, world["gw"].url + f"/ui/topics/xss/messages?partition=0&offset=0"
                                            f"&format={fmt}")
        no_script_ran(driver)
        assert not driver.find_elements(*by("#records script, #records img, #records svg"))
    open_page(driver, world["gw"].url + "/ui/topics/xss/messages?partition=0&offset=0")
    rec = rows(driver, "records")[0]
    assert rec[2] == XSS_KEY and rec[3] == XSS_VALUE and rec[4] == f"{XSS_HEADER}: {XSS_VALUE}"
    # a hostile name in a path or a query comes back escaped in the error page
    open_page(driver, world["gw"].url + "/ui/topics/%3Cimg%20src%3Dx%20onerror%3D%22window."
                                        "__xss%3D4%22%3E")
    no_script_ran(driver)
    assert '<img src=x onerror="window.__xss=4">' in driver.find_element(*by("#error")).text
    open_page(driver, world["gw"].url + "/ui/topics/orders/messages?offset=%22%3E%3Cscript%3E")
    no_script_ran(driver)
    assert 'offset must be a whole number' in driver.find_element(*by("#error")).text


def test_groups_page_shows_members_assignment_lag_and_a_lag_chart(driver, world, shots):
    gw = world["gw"]
    open_page(driver, gw.url + "/ui/groups")
    assert rows(driver, "groups")[0][:4] == ["billing", "Stable", "1", "orders"]
    shoot(driver, shots, "groups")
    driver.find_element(*by("#groups a")).click()
    wait(driver, lambda d: d.title.startswith("Group billing"), "the group page")
    lag = rows(driver, "lag")
    ends, committed = world["ends"], world["committed"]
    for p, r in enumerate(lag):
        assert r[:3] == ["orders", str(p), f"{committed[p]:,}"]
        assert int(r[4].replace(",", "")) >= ends[p]  # the overview test produced more
        assert int(r[5].replace(",", "")) == int(r[4].replace(",", "")) - committed[p]
        assert r[6] == world["member"]
    members = rows(driver, "members")
    assert members[0][0] == world["member"] and members[0][1] == "billing-app"
    assert members[0][2:4] == ["classic", "–"]  # protocol; an epoch only for KIP-848
    assert members[0][5] == "orders-0, orders-1, orders-2"
    summary = driver.find_element(*by("#group-summary")).text
    assert "STATE\nStable" in summary and "GENERATION\n1" in summary
    assert "TYPE\nclassic" in summary
    # each look at the group samples its lag: a second look draws the chart's line
    open_page(driver, gw.url + "/ui/groups/billing")
    wait(driver, lambda d: d.find_elements(*by("#chart-lag polyline")), "the lag chart")
    line = driver.find_element(*by("#chart-lag polyline"))
    assert int(line.get_attribute("data-points")) >= 2
    shoot(driver, shots, "group")


def test_maintenance_page_lists_the_run(driver, world, shots):
    open_page(driver, world["gw"].url + "/ui")
    driver.find_element(*by("header nav a[href='/ui/maintenance']")).click()
    wait(driver, lambda d: d.title.startswith("Maintenance"), "the maintenance page")
    runs = rows(driver, "runs")
    assert len(runs) == 1
    assert runs[0][1:3] == ["maintain", "profiles, xss"] and runs[0][8:] == ["", "–"]
    assert runs[0][4] == "2"  # partitions
    # 100 records of 20 keys in 5 segments; the newest segment is not cleaned (as Kafka's
    # active segment): 60 removed
    assert runs[0][5] == "60"
    assert runs[0][6] != "0 B"  # bytes reclaimed
    assert runs[0][0].endswith("UTC")
    shoot(driver, shots, "maintenance")



def test_schemas_pages_and_a_diff_of_two_versions(driver, world, shots):
    """Two versions of ``orders-value`` registered; through the nav, the subject's page
    and its diff form (a GET form: the browser sends the subject back as it got it)."""
    from selenium.webdriver.support.ui import Select

    ct = "application/vnd.schemaregistry.v1+json"
    for fields in (["order"], ["order", "amount"]):
        schema = {"type": "record", "name": "Order", "fields": [
            {"name": f, "type": "long", "default": 0} for f in fields]}
        world["http"].post("/schema-registry/subjects/orders-value/versions",
                           {"schema": json.dumps(schema)}, ct)
    open_page(driver, world["gw"].url + "/ui")
    driver.find_element(*by("header nav a[href='/ui/schemas']")).click()
    wait(driver, lambda d: d.title.startswith("Schemas"), "the schemas page")
    assert rows(driver, "subjects")[0][:3] == ["orders-value", "AVRO", "2"]
    driver.find_element(*by("#subjects a")).click()
    wait(driver, lambda d: d.title.startswith("Subject orders-value"), "the subject's page")
    assert '"amount"' in driver.find_element(*by("#schema")).text
    Select(driver.find_element(*by("#diff-form select[name=from]"))).select_by_value("1")
    Select(driver.find_element(*by("#diff-form select[name=to]"))).select_by_value("2")
    driver.find_element(*by("#diff-form button")).click()
    wait(driver, lambda d: d.find_elements(*by("#diff .add")), "the diff")
    added = [e.text for e in driver.find_elements(*by("#diff .add"))]
    assert any('"name": "amount"' in line for line in added), added
    assert not driver.find_elements(*by("#diff .del"))[1:]  # the header only
    shoot(driver, shots, "schemas")

def test_without_chromium_the_browser_tests_skip_saying_why():
    with pytest.raises(pytest.skip.Exception, match="chromium and chromium-driver are not "
                                                    "installed .make test installs them"):
        _browser("/nonexistent/chromium")


def test_static_files_are_packaged_and_served():
    """The stylesheet and script ship as package data (no CDN, no build step)."""
    import importlib.resources

    folder = importlib.resources.files("ingest_gateway.http") / "console_static"
    names = {p.name for p in folder.iterdir()}
    assert {"console.css", "console.js"} <= names
