"""The web UI in a real browser: headless Chromium (Debian's chromium and chromedriver)
through Selenium opens the pages of a finished CPU job that a real worker tuned through the
API: table rows, the plot's lines and winner markers, sorting by a header click, the search
views (time per parameter, best so far), the compare page, pagination, a job waiting for a
device, a window 800 px wide, the API docs with no network, and ``/``. It saves screenshots.

Screenshots go to the test's tmp dir and, when ``TUNEHUB_TEST_ARTIFACTS`` names a folder, there
too (CI keeps that folder; ``bench/ui_screenshot.py`` copies the job page to docs/). Skipped,
saying why, only where chromium or chromedriver is not installed:
``apt-get install -y chromium chromium-driver``.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service as ChromeService
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from service.agent import WorkerAgent
from service.api.ui import data
from service.cli.serve import create_token_in_db
from service.client import TunehubClient
from service.schemas.configs import MeasurementOut
from service.schemas.jobs import JobCreate
from service.settings import Settings
from tests.service.conftest import LiveService
from tuner.types import EngineConfig

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
KS = (256, 1024, 4096)
MAX_VARIANTS = 6

pytestmark = pytest.mark.skipif(
    not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
    reason="chromium and chromedriver are not installed "
    "(apt-get install -y chromium chromium-driver)",
)


@dataclass
class Tuned:
    """A live service with one finished CPU reduce job over KS, tuned by a real worker."""

    service: LiveService
    user: TunehubClient
    job_id: str
    measurements: list[MeasurementOut]

    @property
    def url(self) -> str:
        return self.service.url


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory, _sqlite_template: Path) -> Iterator[Tuned]:
    tmp_path = tmp_path_factory.mktemp("ui-browser")
    database = tmp_path / "tunehub.db"
    shutil.copyfile(_sqlite_template, database)
    settings = Settings(
        database_url=f"sqlite:///{database}", data_dir=tmp_path / "d", cache_dir=tmp_path / "c"
    )
    service = LiveService(settings).start()
    try:
        submit = create_token_in_db(settings.database_url, "user", ["submit"])
        worker = create_token_in_db(settings.database_url, "worker", ["worker"])
        user = TunehubClient(service.url, submit)
        job = user.submit(
            JobCreate.model_validate(
                {
                    "op": "reduce",
                    "dtype": "f32",
                    "problems": [{"m": 64, "k": k, "kind": "sum"} for k in KS],
                    "device": {"backend": "cpu"},
                    "budget": {"max_variants": MAX_VARIANTS},
                    "strategy": "random",
                }
            )  # fmt: skip
        )
        agent = WorkerAgent(
            TunehubClient(service.url, worker),
            EngineConfig(cache_dir=str(tmp_path / "compile"), compile_workers=2,
                         bench_seconds=0.05, warmup_seconds=0.01),
            ("cpu",),
            name="browser-test",
        )  # fmt: skip
        while agent.run_once():
            pass
        finished = user.wait(job.id, timeout_s=30)
        assert finished.status == "done"
        measurements = user.measurements(job_id=job.id)
        verified = [m for m in measurements if m.outcome == "ok"]
        assert verified, [(m.variant_name, m.outcome, m.log[-200:]) for m in measurements]
        # the ceiling: a copy rate for this CPU, as an operator would set TUNEHUB_COPY_GBPS
        top = 2 * max(m.throughput or 0 for m in verified)
        settings.copy_gbps = {measurements[0].device.name: top}
        yield Tuned(service, user, job.id, measurements)
    finally:
        service.stop()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--window-size=1400,2400",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=ChromeService(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def save_screenshot(driver: webdriver.Chrome, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    assert driver.save_screenshot(str(path)), "chromium took no screenshot"
    assert path.stat().st_size > 10_000  # a rendered page, not a blank one
    artifacts = os.environ.get("TUNEHUB_TEST_ARTIFACTS")
    if artifacts:
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(artifacts) / name)
    return path


def drawn(element: WebElement) -> bool:
    """The browser laid out a non-empty box for the element."""
    return element.size["width"] > 0 or element.size["height"] > 0


def column(browser: webdriver.Chrome, table: str, index: int) -> list[str]:
    cells = browser.find_elements(By.CSS_SELECTOR, f"table#{table} tbody tr td:nth-child({index})")
    return [cell.text for cell in cells]


def header(browser: webdriver.Chrome, table: str, text: str) -> WebElement:
    for th in browser.find_elements(By.CSS_SELECTOR, f"table#{table} thead th"):
        if th.text.strip().startswith(text):
            return th
    raise AssertionError(f"no header {text!r} in table#{table}")


def k_of(label: str) -> int:
    match = re.search(r"\bk=(\d+)", label)
    assert match, label
    return int(match.group(1))


def follow(browser: webdriver.Chrome, link: WebElement, url_part: str) -> None:
    """Clicks a link and waits until the browser is on the page it leads to."""
    link.click()
    WebDriverWait(browser, 20).until(lambda b: url_part in b.current_url)


def test_a_finished_cpu_job_in_the_browser(
    tuned: Tuned, browser: webdriver.Chrome, tmp_path: Path
) -> None:
    browser.get(f"{tuned.url}/ui/jobs?status=done")
    rows = browser.find_elements(By.CSS_SELECTOR, "table#jobs tbody tr.job")
    assert len(rows) == 1 and "done" in rows[0].text
    assert not browser.find_elements(By.CSS_SELECTOR, "meta[http-equiv=refresh]")
    save_screenshot(browser, tmp_path, "ui-jobs.png")
    follow(browser, rows[0].find_element(By.TAG_NAME, "a"), f"/ui/jobs/{tuned.job_id}")

    assert browser.current_url.endswith(f"/ui/jobs/{tuned.job_id}")
    candidates = browser.find_elements(By.CSS_SELECTOR, "table#candidates tbody tr.candidate")
    assert len(candidates) == len(tuned.measurements)
    assert [k_of(p) for p in column(browser, "problems", 1)] == list(KS)  # numeric order
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr.candidate.winner")) == len(KS)
    lines = browser.find_elements(By.CSS_SELECTOR, "#plots svg polyline.series")
    assert lines, "no plot line drawn"
    labels = {line.get_attribute("data-series") for line in lines}
    assert all(label.startswith("pack=") for label in labels), labels
    assert all(drawn(line) for line in lines)
    marks = browser.find_elements(By.CSS_SELECTOR, "#plots svg path.winner-mark")
    assert sorted(int(m.get_attribute("data-x") or 0) for m in marks) == sorted(KS)
    assert all(drawn(mark) for mark in marks)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#plots svg line.ceiling")) == 1
    save_screenshot(browser, tmp_path, "ui-job.png")

    follow(
        browser, browser.find_element(By.CSS_SELECTOR, "table#candidates a"), "/ui/measurements/"
    )
    assert "/ui/measurements/" in browser.current_url
    assert browser.find_elements(By.CSS_SELECTOR, "table#readings tr.reading")
    assert "cpu" in browser.find_element(By.CSS_SELECTOR, "table#device").text


def test_tables_sort_by_a_click_with_numbers_as_numbers(
    tuned: Tuned, browser: webdriver.Chrome
) -> None:
    browser.get(f"{tuned.url}/ui/best")
    assert len(browser.find_elements(By.CSS_SELECTOR, "table#best tbody tr.best")) == len(KS)
    header(browser, "best", "median").click()
    medians = [float(text) for text in column(browser, "best", 7)]
    assert medians == sorted(medians)
    problem = header(browser, "best", "problem")
    problem.click()  # as text, k=1024 would come before k=256
    assert problem.get_attribute("aria-sort") == "ascending"
    assert [k_of(p) for p in column(browser, "best", 4)] == [256, 1024, 4096]
    problem.click()
    assert problem.get_attribute("aria-sort") == "descending"
    assert [k_of(p) for p in column(browser, "best", 4)] == [4096, 1024, 256]


def test_the_search_views_and_the_compare_page(
    tuned: Tuned, browser: webdriver.Chrome, tmp_path: Path
) -> None:
    browser.get(f"{tuned.url}/ui/jobs/{tuned.job_id}")
    follow(
        browser,
        browser.find_elements(By.CSS_SELECTOR, "table#problems a.search-link")[1],
        "/problems/",
    )
    assert "/problems/" in browser.current_url
    scatters = browser.find_elements(By.CSS_SELECTOR, "#scatters svg.scatter")
    assert scatters, "no scatter of time against a parameter"
    for scatter in scatters:
        assert scatter.get_attribute("data-param")
        dots = scatter.find_elements(By.CSS_SELECTOR, "circle.point")
        assert dots and all(drawn(dot) for dot in dots)
    line = browser.find_element(By.CSS_SELECTOR, "#best-so-far svg polyline.best-so-far")
    assert drawn(line) and int(line.get_attribute("data-steps") or 0) >= 1
    assert browser.find_elements(By.CSS_SELECTOR, "#best-so-far svg path.winner-mark")
    rows = browser.find_elements(By.CSS_SELECTOR, "table#search-candidates tbody tr")
    assert len(rows) == len([m for m in tuned.measurements if m.problem["k"] == KS[1]])
    save_screenshot(browser, tmp_path, "ui-search.png")

    browser.get(f"{tuned.url}/ui/compare")
    options = browser.find_elements(By.CSS_SELECTOR, "datalist#recent-jobs option")
    assert tuned.job_id in {o.get_attribute("value") for o in options}
    browser.find_element(By.NAME, "a").send_keys(tuned.job_id)
    browser.find_element(By.NAME, "b").send_keys(tuned.job_id)
    browser.find_element(By.CSS_SELECTOR, "form.compare button").click()
    # the click submits a GET form: wait for the answer page, not the form still shown
    rows = WebDriverWait(browser, 20).until(
        lambda b: b.find_elements(By.CSS_SELECTOR, "table#compare tbody tr.compare-row")
    )
    assert len(rows) == len(KS)
    assert column(browser, "compare", 8) == ["1.00×"] * len(KS)  # a job against itself
    save_screenshot(browser, tmp_path, "ui-compare.png")


def test_best_configs_page_by_page(
    tuned: Tuned, browser: webdriver.Chrome, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(data, "PAGE_SIZE", 2)  # the live server runs in this process
    browser.get(f"{tuned.url}/ui/best")
    assert len(browser.find_elements(By.CSS_SELECTOR, "table#best tbody tr.best")) == 2
    assert browser.find_element(By.CSS_SELECTOR, ".count .total").text == str(len(KS))
    first = column(browser, "best", 4)
    follow(browser, browser.find_element(By.CSS_SELECTOR, "nav.pager a[rel=next]"), "page=2")
    assert "page=2" in browser.current_url
    assert column(browser, "best", 4) == [f"m=64 k={KS[-1]} kind=sum"]
    assert [k_of(p) for p in first] == list(KS[:2])
    assert not browser.find_elements(By.CSS_SELECTOR, "nav.pager a[rel=next]")


def test_a_window_800_px_wide_keeps_every_column(
    tuned: Tuned, browser: webdriver.Chrome, tmp_path: Path
) -> None:
    browser.set_window_size(800, 1200)
    first_task = tuned.measurements[0].task_id
    for path in (
        "/ui/jobs",
        f"/ui/jobs/{tuned.job_id}",
        f"/ui/jobs/{tuned.job_id}/problems/{first_task}",
        "/ui/best",
        f"/ui/compare?a={tuned.job_id}&b={tuned.job_id}",
    ):
        browser.get(tuned.url + path)
        width = browser.execute_script("return window.innerWidth")
        page_width = browser.execute_script("return document.documentElement.scrollWidth")
        assert page_width <= width, f"{path}: the page is {page_width} px wide in {width}"
        for svg in browser.find_elements(By.CSS_SELECTOR, "svg.chart"):
            assert 0 < svg.size["width"] <= width, path
        for table in browser.find_elements(By.CSS_SELECTOR, "table"):
            wrap = table.find_element(By.XPATH, "..")
            assert "table-wrap" in (wrap.get_attribute("class") or ""), path
            # the wrapper scrolls: its last column can be brought into view
            browser.execute_script("arguments[0].scrollLeft = arguments[0].scrollWidth", wrap)
            cells = table.find_elements(By.CSS_SELECTOR, "tr:first-child > *")
            box = browser.execute_script(
                "const w = arguments[0].getBoundingClientRect(), "
                "c = arguments[1].getBoundingClientRect(); "
                "return [c.left - w.left, w.right - c.right, c.width];",
                wrap,
                cells[-1],
            )
            assert box[0] >= -1 and box[1] >= -1 and box[2] > 0, (path, box)
    browser.get(f"{tuned.url}/ui/jobs/{tuned.job_id}")
    save_screenshot(browser, tmp_path, "ui-job-800px.png")


def test_a_waiting_job_offline_docs_and_the_root(
    tuned: Tuned, browser: webdriver.Chrome, tmp_path: Path
) -> None:
    waiting = tuned.user.submit(
        JobCreate.model_validate(
            {
                "op": "reduce",
                "dtype": "f32",
                "problems": [{"m": 64, "k": 512, "kind": "sum"}],
                "device": {"backend": "cuda", "name": "H200"},
            }
        )  # fmt: skip
    )
    try:
        browser.get(f"{tuned.url}/ui/jobs")
        row = browser.find_element(By.CSS_SELECTOR, "table#jobs tr.status-queued")
        text = row.find_element(By.CSS_SELECTOR, ".waiting").text
        assert text.startswith("waiting for a worker with a cuda device named like 'H200'")
        browser.get(f"{tuned.url}/ui/jobs/{waiting.id}")
        assert browser.find_element(By.ID, "waiting-for").text == text
        assert "0/0 candidates" in browser.page_source  # and now it says why
    finally:
        tuned.user.cancel_job(waiting.id)

    browser.get(f"{tuned.url}/docs")  # no network here: Swagger UI must come from the server
    WebDriverWait(browser, 20).until(
        lambda b: b.find_elements(By.CSS_SELECTOR, ".swagger-ui .opblock")
    )
    assert "tunehub" in browser.find_element(By.CSS_SELECTOR, ".swagger-ui .info").text
    loaded: list[Any] = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    assert loaded and all(name.startswith(tuned.url) for name in loaded), loaded
    save_screenshot(browser, tmp_path, "ui-docs.png")

    browser.get(tuned.url + "/")
    assert browser.current_url == f"{tuned.url}/ui/jobs"
