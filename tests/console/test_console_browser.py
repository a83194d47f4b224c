"""The console in a real browser (Debian's chromium, driven through chromium-driver by
selenium): the pages link up, the charts draw from the console's samples, records show.
One browser session for the module.  With ``TRILOG_SCREENSHOTS=1`` it also writes the
screenshots of docs/console.md to docs/images/."""

from __future__ import annotations

import base64
import os
import shutil
import threading
from pathlib import Path

import pytest

from console_helpers import GROUP, TOPIC, ConsoleProcess, seed
from wait_helpers import wait_for

pytest.importorskip("h11", reason="the console needs h11 (the console extra)")
webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the test extra)")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="needs Debian's chromium and chromium-driver (make test installs them)")

IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
SCREENSHOTS = os.environ.get("TRILOG_SCREENSHOTS") == "1"


@pytest.fixture(scope="module")
def console(module_broker_process, tmp_path_factory):
    from kafka import KafkaProducer

    broker = module_broker_process(overrides={"group.initial.rebalance.delay.ms": 0})
    seed(broker.bootstrap)
    process = ConsoleProcess(broker.bootstrap,
                             log=tmp_path_factory.mktemp("console") / "console.log")
    stop = threading.Event()

    def produce() -> None:  # a steady trickle, so the rate charts have something to draw
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20)
        i = 0
        while not stop.wait(0.02):
            producer.send(TOPIC, key=f"live-{i}".encode(), value=b'{"live": true}')
            i += 1
        producer.close()

    def consume() -> None:  # a member of the group, a little slower than the producer
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(TOPIC, bootstrap_servers=broker.bootstrap, group_id=GROUP,
                                 enable_auto_commit=False, max_poll_records=15,
                                 client_id="billing-worker")
        while not stop.wait(0.3):
            if consumer.poll(timeout_ms=200):
                consumer.commit()
        consumer.close()

    threads = [threading.Thread(target=f, daemon=True) for f in (produce, consume)]
    for thread in threads:
        thread.start()
    try:
        yield process
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        assert process.stop() == 0, process.log()


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900", "--hide-scrollbars"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()


def _chart_drawn(driver, points: int = 2) -> bool:
    """A chart of the page has a line of at least ``points`` points."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('figure[data-chart] polyline'))"
        ".some(p => p.getAttribute('points').trim().split(' ').length >= arguments[0]);",
        points)


def _screenshot(driver, name: str) -> None:
    """The whole page (up to 1600 px tall) as docs/images/console-NAME.png."""
    if not SCREENSHOTS:
        return
    IMAGES.mkdir(parents=True, exist_ok=True)
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": size["width"],
                 "height": min(size["height"], 1600), "scale": 1}})
    (IMAGES / f"console-{name}.png").write_bytes(base64.b64decode(shot["data"]))


def test_the_overview_draws_its_chart(console, browser):
    from selenium.webdriver.common.by import By

    browser.get(console.url + "/")
    assert "Overview" in browser.title
    labels = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".card .label")]
    assert "brokers" in labels and "under-replicated" in labels
    wait_for(lambda: _chart_drawn(browser, 8), what="the overview's chart")
    legend = browser.find_element(By.CSS_SELECTOR, "figure.chart .legend").text
    assert "produced" in legend
    # The figures are kept current like the charts: one made stale is set again.
    browser.execute_script(
        "document.querySelector('[data-live=produce_rate]').textContent = 'stale';")
    wait_for(lambda: browser.find_element(By.CSS_SELECTOR, "[data-live=produce_rate]").text
          .endswith("/s"), what="the produced figure set again from /api/cluster")
    _screenshot(browser, "overview")


def _follow(driver, element, url_part: str) -> None:
    """Click ``element`` and wait until the browser is on the page it leads to."""
    element.click()
    wait_for(lambda: url_part in driver.current_url
          and driver.execute_script("return document.readyState") == "complete",
          what=f"a page at ...{url_part}")


def test_from_the_topic_list_to_a_partitions_records(console, browser):
    from selenium.webdriver.common.by import By

    browser.get(console.url + "/")
    _follow(browser, browser.find_element(By.LINK_TEXT, "Topics"), "/topics")
    _follow(browser, browser.find_element(By.LINK_TEXT, TOPIC), f"/topics/{TOPIC}")
    assert browser.title.startswith(f"Topic {TOPIC}")
    rows = browser.find_elements(By.CSS_SELECTOR, "table.partitions tbody tr")
    assert len(rows) == 3
    wait_for(lambda: _chart_drawn(browser, 3), what="the topic's chart")
    _screenshot(browser, "topic")
    _follow(browser, rows[0].find_element(By.LINK_TEXT, "browse"), "/records?partition=0")
    browser.find_element(By.NAME, "offset").send_keys("10")
    browser.find_element(By.NAME, "limit").clear()
    browser.find_element(By.NAME, "limit").send_keys("8")
    _follow(browser, browser.find_element(By.CSS_SELECTOR, "form.browse button"),
            "offset=10")
    offsets = [r.find_element(By.CSS_SELECTOR, "td").text
               for r in browser.find_elements(By.CSS_SELECTOR, "table.records tbody tr")]
    assert offsets == [str(n) for n in range(10, 18)]
    values = browser.find_elements(By.CSS_SELECTOR, "table.records pre.json")
    assert values and '"n": 10' in values[0].text
    _screenshot(browser, "records")


def test_a_groups_lag_chart(console, browser):
    from selenium.webdriver.common.by import By

    browser.get(console.url + "/groups")
    _follow(browser, browser.find_element(By.LINK_TEXT, GROUP), f"/groups/{GROUP}")
    assert browser.title.startswith(f"Group {GROUP}")
    wait_for(lambda: _chart_drawn(browser, 3), what="the group's lag chart")
    cells = browser.find_elements(By.CSS_SELECTOR, "table.lag tbody tr")
    assert len(cells) == 3
    # the member shows once the group has settled (the page is as of its loading)
    wait_for(lambda: browser.refresh() or "billing-worker" in browser.find_element(
        By.CSS_SELECTOR, "table.members").text, what="the group's member")
    wait_for(lambda: _chart_drawn(browser, 3), what="the group's lag chart again")
    _screenshot(browser, "group")
