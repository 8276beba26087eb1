"""The web page in a real browser: headless Chromium (Debian's chromium and chromium-driver) drives the live page.
Its figures match the REST API and change as the topology runs, in the 10-minute window as in all time; its
charts grow a point a second; it lists the workers and the configuration with its secrets masked; and its
activate, deactivate and kill buttons, given the token the run wrote for its user, act on the topology. The
screenshot in docs/operations.md is taken here (``SQUALL_UI_SCREENSHOT=path`` writes it there as well)."""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.request
from functools import partial

import pytest
import servers
from selenium.webdriver.common.by import By
from servers import require

from squall import Bolt, LocalCluster, Spout, TopologyBuilder

FIGURES = ("emitted", "acked", "failed")


class Words(Spout):
    """Emits the words fed to it through a file, one a line, msg id = its position; it reads the file where it
    runs (on a worker)."""

    outputs = ("word",)

    def __init__(self, path: str) -> None:
        self.path = path
        open(path, "w").close()

    def feed(self, words: list[str]) -> None:
        with open(self.path, "a") as fed:
            fed.write("".join(f"{word}\n" for word in words))

    def open(self, conf, context, collector):
        self.collector, self.next, self.partial = collector, 0, ""
        self.file = open(self.path)  # noqa: SIM115 -- read until close()

    def next_tuple(self):
        line = self.partial + self.file.readline()
        if not line.endswith("\n"):  # nothing more yet, or a line still being written
            self.partial = line
            return
        self.partial = ""
        self.collector.emit([line[:-1]], msg_id=self.next)
        self.next += 1

    def close(self):
        self.file.close()


class Count(Bolt):
    """Counts words and acks them, but fails the word "storm" (a known failure to see on the page)."""

    outputs = ("word", "count")

    def prepare(self, conf, context, collector):
        self.collector, self.counts = collector, {}

    def execute(self, tup):
        word = tup["word"]
        if word == "storm":
            self.collector.fail(tup)
            return
        self.counts[word] = self.counts.get(word, 0) + 1
        self.collector.emit([word, self.counts[word]], anchors=tup)
        self.collector.ack(tup)


class Sink(Bolt):
    outputs = ()

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.collector.ack(tup)


def api(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


wait_for = partial(servers.wait_for, timeout=60)


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = require("chromium", "chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1100"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(require("chromedriver", "chromium-driver")))
    yield driver
    driver.quit()


def test_the_live_page_shows_the_rest_api_figures_and_follows_the_topology(spark, browser, tmp_path):
    spout = Words(str(tmp_path / "words.txt"))
    b = TopologyBuilder()
    b.set_spout("words", spout)
    b.set_bolt("count", Count(), 2).fields_grouping("words", ["word"])
    b.set_bolt("sink", Sink(), 2).shuffle_grouping("count")
    with LocalCluster({"squall.ui.port": 0}) as cluster:
        url = cluster.ui.url
        conf = {"words.source.password": "hunter2", "words.source.url": "redis://reader:hunter3@localhost:6379"}
        run = cluster.submit_topology("words", conf, b.build())
        spout.feed(["storm", "spark", "tuple", "acker"] * 25)
        wait_for(lambda: run.stats.of("words").acked + run.stats.of("words").failed == 100, "the first 100 settled")

        browser.get(f"{url}/#words")

        def text_of(selector: str) -> str:
            """The text of the first element ``selector`` finds, read in one script: the page redraws its tables
            every second, so an element found in one call may be gone by the next."""
            script = "const e = document.querySelector(arguments[0]); return e ? e.textContent.trim() : '';"
            return browser.execute_script(script, selector)

        def shown(kind: str, component: str, figure: str) -> str:
            return text_of(f'td[data-figure="{kind}:{component}:{figure}"]')

        def page_matches_api() -> bool:
            detail = api(f"{url}/api/v1/topology/words")
            spouts = {c["id"]: c for c in detail["spouts"]}
            bolts = {c["id"]: c for c in detail["bolts"]}
            return all(shown("spout", "words", f) == str(spouts["words"][f]) for f in FIGURES) and all(
                shown("bolt", b, f) == str(bolts[b][f]) for b in ("count", "sink") for f in ("executed", "acked")
            )

        wait_for(page_matches_api, "the page's figures to match the REST API")
        assert (shown("spout", "words", "acked"), shown("spout", "words", "failed")) == ("75", "25")
        assert shown("bolt", "count", "failed") == "25" and shown("bolt", "sink", "executed") == "75"
        assert text_of('td[data-figure="status"]') == "ACTIVE"
        wait_for(lambda: re.fullmatch(r"count · \d+/s", text_of('[data-node="count"]')), "count's rate on the graph")
        assert text_of('[data-edge="words->count"]') == "fields_grouping(['word'])"

        spout.feed(["storm", "spark", "tuple", "acker"] * 50)  # the topology runs on: the page follows
        wait_for(lambda: run.stats.of("words").acked == 225, "the next 200 settled")
        wait_for(lambda: shown("spout", "words", "acked") == "225", "the page to show 225 acked")
        wait_for(page_matches_api, "the page's figures to match the REST API again")

        browser.execute_script("document.querySelector('tr[data-component=\"count\"] button').click()")
        count_rows = "return document.querySelectorAll('#bolts tr.tasks').length"
        wait_for(lambda: browser.execute_script(count_rows) == 2, "count's task rows")

        # Storm's windows: the 10-minute window holds everything so far (the run is younger), in the tables and
        # in the topology stats, as the REST API gives it
        browser.execute_script("document.querySelector('#windows button[data-window=\"600\"]').click()")
        wait_for(lambda: text_of('#windows button[aria-pressed="true"]') == "10m 0s", "the 10-minute window chosen")
        windowed = api(f"{url}/api/v1/topology/words")
        spout_600 = windowed["spouts"][0]["windows"]["600"]
        assert (spout_600["emitted"], spout_600["acked"], spout_600["failed"]) == (300, 225, 75)
        assert all(shown("spout", "words", f) == str(spout_600[f]) for f in FIGURES)
        assert shown("bolt", "count", "executed") == "300" and shown("bolt", "sink", "executed") == "225"
        assert [text_of(f'td[data-figure="window:600:{f}"]') for f in FIGURES] == ["300", "225", "75"]
        assert text_of('td[data-figure="stream:count:default:sink"]') == "225"

        # the charts: a point a second, drawn as SVG polylines by the page itself
        def points(chart: str, line: str) -> list[str]:
            script = "return document.querySelector(arguments[0]).getAttribute('points');"
            drawn = browser.execute_script(script, f'svg[data-chart="{chart}"] polyline[data-series="{line}"]')
            return drawn.split()

        before = points("throughput", "acked")
        wait_for(lambda: len(points("throughput", "acked")) >= len(before) + 2, "the throughput chart to grow")
        spout.feed(["spark", "tuple"] * 10)  # 20 more acked: the acked line rises off its floor
        wait_for(lambda: shown("spout", "words", "acked") == "245", "the page to show 245 acked")
        wait_for(lambda: len(points("pending", "pendingTrees")) >= 2, "the pending-trees chart")
        assert len(points("failures", "failed")) >= 2

        # the workers, and the configuration with its secrets masked
        workers = api(f"{url}/api/v1/topology/words")["workers"]
        assert len(workers) == 2  # LocalCluster on local[2]
        wait_for(
            lambda: browser.execute_script("return document.querySelectorAll('#workers tbody tr').length") == 2,
            "workers",
        )
        for worker in workers:
            assert text_of(f'td[data-figure="worker:{worker["worker"]}:pid"]') == str(worker["pid"])
        assert text_of('td[data-config="words.source.password"]') == "***"
        assert text_of('td[data-config="words.source.url"]') == "redis://reader:***@localhost:6379"
        assert "hunter" not in browser.page_source

        # the actions need the token: a wrong one is refused, and nothing changes
        token_box = browser.find_element(By.ID, "token")
        token_box.send_keys("not-the-token")
        browser.find_element(By.ID, "deactivate").click()
        wait_for(lambda: text_of("#action-result").startswith("deactivate: 401"), "the refusal")
        assert run.wanted_active
        # the user gives the token the run wrote for them
        token_box.clear()
        token_box.send_keys(cluster.ui.token_file.read_text())
        browser.find_element(By.ID, "deactivate").click()
        wait_for(lambda: text_of('td[data-figure="status"]') == "INACTIVE", "INACTIVE on the page")
        assert not run.wanted_active and text_of("#action-result") == "deactivate: done"
        browser.find_element(By.ID, "activate").click()
        wait_for(lambda: text_of('td[data-figure="status"]') == "ACTIVE", "ACTIVE again on the page")
        assert run.wanted_active
        spout.feed(["spark"] * 5)
        wait_for(lambda: shown("spout", "words", "acked") == "250", "the page to show 250 acked after activate")

        screenshot = tmp_path / "web-ui.png"
        assert browser.save_screenshot(str(screenshot))
        assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if os.environ.get("SQUALL_UI_SCREENSHOT"):
            shutil.copy(screenshot, os.environ["SQUALL_UI_SCREENSHOT"])

        kill_wait = browser.find_element(By.ID, "kill-wait")
        kill_wait.clear()
        kill_wait.send_keys("0")
        browser.find_element(By.ID, "kill").click()
        browser.switch_to.alert.accept()  # "Kill words? ..."
        wait_for(lambda: text_of('td[data-figure="status"]') == "KILLED", "KILLED on the page")
        assert "words" not in cluster.runs and api(f"{url}/api/v1/topology/summary") == {"topologies": []}
