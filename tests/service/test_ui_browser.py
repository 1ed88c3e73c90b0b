"""The web UI in a real browser: headless Chromium (Debian's chromium and chromedriver)
through Selenium opens the pages of a finished CPU job that a real worker tuned through the
API, checks the table rows and the plot's lines, and saves screenshots.

Screenshots go to the test's tmp dir and, when ``TUNEHUB_TEST_ARTIFACTS`` names a folder, there
too (CI keeps that folder; ``bench/ui_screenshot.py`` copies the job page to docs/). Skipped,
saying why, only where chromium or chromedriver is not installed:
``apt-get install -y chromium chromium-driver``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service as ChromeService
from selenium.webdriver.common.by import By

from service.agent import WorkerAgent
from service.cli.serve import create_token_in_db
from service.client import TunehubClient
from service.schemas.jobs import JobCreate
from service.settings import Settings
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


def test_a_finished_cpu_job_in_the_browser(
    tmp_path: Path,
    _sqlite_template: Path,
    live_service: Callable[[Settings], Any],
    browser: webdriver.Chrome,
) -> None:
    database = tmp_path / "tunehub.db"
    shutil.copyfile(_sqlite_template, database)
    settings = Settings(
        database_url=f"sqlite:///{database}", data_dir=tmp_path / "d", cache_dir=tmp_path / "c"
    )
    service = live_service(settings)
    submit = create_token_in_db(settings.database_url, "user", ["submit"])
    worker = create_token_in_db(settings.database_url, "worker", ["worker"])
    user = TunehubClient(service.url, submit)
    problems = [{"m": 64, "k": k, "kind": "sum"} for k in KS]
    job = user.submit(
        JobCreate.model_validate(
            {
                "op": "reduce",
                "dtype": "f32",
                "problems": problems,
                "device": {"backend": "cpu"},
                "budget": {"max_variants": MAX_VARIANTS},
                "strategy": "random",
            }
        )  # fmt: skip
    )
    agent = WorkerAgent(
        TunehubClient(service.url, worker),
        EngineConfig(cache_dir=str(tmp_path / "compile"), compile_workers=2, bench_seconds=0.05,
                     warmup_seconds=0.01),
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
    settings.copy_gbps = {measurements[0].device.name: 2 * max(m.throughput or 0 for m in verified)}

    browser.get(f"{service.url}/ui/jobs")
    rows = browser.find_elements(By.CSS_SELECTOR, "table#jobs tbody tr.job")
    assert len(rows) == 1 and "done" in rows[0].text
    assert not browser.find_elements(By.CSS_SELECTOR, "meta[http-equiv=refresh]")
    save_screenshot(browser, tmp_path, "ui-jobs.png")
    rows[0].find_element(By.TAG_NAME, "a").click()

    assert browser.current_url.endswith(f"/ui/jobs/{job.id}")
    candidates = browser.find_elements(By.CSS_SELECTOR, "table#candidates tbody tr.candidate")
    assert len(candidates) == len(measurements)
    assert len(browser.find_elements(By.CSS_SELECTOR, "table#problems tbody tr")) == len(KS)
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr.candidate.winner")) == len(KS)
    lines = browser.find_elements(By.CSS_SELECTOR, "#plots svg polyline.series")
    assert lines, "no plot line drawn"
    labels = {line.get_attribute("data-series") for line in lines}
    assert all(label.startswith("pack=") for label in labels), labels
    for line in lines:  # drawn: the browser laid out a non-empty box for every line
        assert line.size["width"] > 0 or line.size["height"] > 0
    ceiling = browser.find_elements(By.CSS_SELECTOR, "#plots svg line.ceiling")
    assert len(ceiling) == 1
    save_screenshot(browser, tmp_path, "ui-job.png")

    browser.find_element(By.CSS_SELECTOR, "table#candidates a").click()
    assert "/ui/measurements/" in browser.current_url
    assert browser.find_elements(By.CSS_SELECTOR, "table#readings tr.reading")
    assert "cpu" in browser.find_element(By.CSS_SELECTOR, "table#device").text

    browser.get(f"{service.url}/ui/best")
    best = browser.find_elements(By.CSS_SELECTOR, "table#best tbody tr.best")
    assert len(best) == len(KS)
    save_screenshot(browser, tmp_path, "ui-best.png")
