"""The MLflow 3 UI on a sweep's store, in a real browser: a real `mlflow server` on the store two
small sweeps wrote (an oom and two unavailable jobs among them), opened in headless Chromium
through Playwright at the README's URL; then a job's run page, whose Model metrics tab holds the
training and no host or GPU figure, and whose System metrics tab holds those. With
SWEEPS_UPDATE_SCREENSHOT=1 it saves the README's screenshot, docs/mlflow_runs.png.

Needs `pip install playwright` (the dev extra) and Debian's Chromium (`apt-get install -y
chromium`; the test installs it when it runs as root and it is missing — Playwright's own
browser download is not used). Without either it skips with one line."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from conftest import TEST_CONF, REPO, StartedCli, seed_store, store
from test_tracking_server import START_S, _free_port, _stop_server

SCREENSHOT = REPO / "docs" / "mlflow_runs.png"
TINY = ["model=oom_above", "batch=16,64", "dataset=synthetic", "dataset.shape=[1,8,8]", "dataset.train_size=64",
        "dataset.test_size=16", "epochs=1", "resume=false", TEST_CONF]
SWEEPS = (["-m", *TINY, "device=cpu"], ["-m", *TINY, "device=cpu,cuda"])  # cuda: unavailable (GPUs hidden)
COLUMNS = ("Models", "outcome", "batch", "time/total_s")  # "Models" (an empty default) off, the rest on

# ms an assertion waits for the UI to render (Playwright's default is 5 s): on a VM running
# 1.5-2x slow the run table once took longer than that to appear
UI_WAIT_MS = 30_000


def _chromium() -> str:
    """Debian's Chromium, installed with apt-get where this runs as root and it is missing."""
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")

    def find() -> str | None:
        return next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)

    if find() is None and hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["sh", "-c", "apt-get install -y chromium || (apt-get update && apt-get install -y chromium)"],
                       capture_output=True, timeout=900, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    path = find()
    if path is None:
        pytest.skip("no Chromium here and it cannot be installed (apt-get install -y chromium, as root)")
    return path


def _serve(db: Path, cwd: Path) -> tuple[subprocess.Popen, str]:
    """``mlflow server`` (1 worker) on the sqlite store ``db``, on a free loopback port."""
    port = _free_port()
    uri = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                               "--workers", "1", "--backend-store-uri", f"sqlite:///{db}"],
                              cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline and server.poll() is None:
        try:
            if requests.get(f"{uri}/health", timeout=2).ok:
                return server, uri
        except requests.RequestException:
            pass
        time.sleep(0.5)
    _stop_server(server)
    raise AssertionError(f"mlflow server did not answer /health within {START_S} s (exit {server.poll()})")


@pytest.mark.slow  # two 2-4 job sweeps beside a server start, then a browser: ~1-2 min here
def test_the_run_table_shows_names_outcomes_inputs_and_the_sweep_description(tmp_path, monkeypatch):
    chromium = _chromium()
    from playwright.sync_api import expect, sync_playwright

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # device=cuda is unavailable on any machine
    seed_store(tmp_path)  # tables made before the server and the sweeps open it side by side
    started = [StartedCli(SWEEPS[0], tmp_path)]
    server, uri = _serve(tmp_path / "mlruns" / "mlflow.db", tmp_path)
    try:
        # one after the other: a config another live process runs is not run again (resume=false
        # or not), so the second sweep's cpu jobs run only once the first sweep's have ended
        result = started[0].result()
        assert result.returncode == 0, result.stderr[-3000:]
        started.append(StartedCli(SWEEPS[1], tmp_path))
        result = started[1].result()
        assert result.returncode == 0, result.stderr[-3000:]
        client = store(tmp_path)
        exp_id = client.get_experiment_by_name("sweeps").experiment_id
        found = client.search_runs([exp_id])
        parents = [r for r in found if r.data.tags.get("sweeps.kind") == "sweep"]
        jobs = [r for r in found if "mlflow.parentRunId" in r.data.tags]
        assert len(parents) == 2 and len(jobs) == 6
        names = [j.info.run_name for j in jobs]
        assert len(set(names)) == 6  # the two sweeps' cpu jobs are the same jobs: their sweep ids tell them apart
        outcomes = sorted(j.data.tags["outcome"] for j in jobs)
        assert outcomes == ["ok", "ok", "oom", "oom", "unavailable", "unavailable"]
        shot = tmp_path / "runs.png"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1500, "height": 760})
            page.set_default_timeout(60_000)
            page.goto(f"{uri}/#/experiments/{exp_id}/runs")  # the README's URL
            for parent in parents:
                expect(page.get_by_text(parent.info.run_name, exact=True)).to_be_visible(timeout=UI_WAIT_MS)
            close = page.get_by_role("button", name="Close")  # the assistant's side panel, where shown
            if close.count():
                close.first.click()
            for parent in parents:  # unfold each sweep: its jobs appear under it
                row = page.locator("[role=row]", has_text=parent.info.run_name)
                row.locator('[col-id*="Run Name"] button').first.click()
            for name in names:
                expect(page.get_by_text(name, exact=True)).to_be_visible(timeout=UI_WAIT_MS)
            for column in COLUMNS:  # the README's "Columns": type a name, tick it
                page.get_by_test_id("column-selection-dropdown").first.click()
                page.get_by_placeholder("Search columns").fill(column)
                page.get_by_text(column, exact=True).last.click()
                page.keyboard.press("Escape")
            outcome_cells = page.locator('[role=gridcell][col-id="tags.`outcome`"]')
            for outcome in ("oom", "unavailable", "ok"):
                expect(outcome_cells.filter(has_text=outcome)).to_have_count(2, timeout=UI_WAIT_MS)
            expect(page.get_by_text(re.compile(r"synthetic/train \(generated:synthetic-[0-9a-f]{8}\)")).first).to_be_visible(timeout=UI_WAIT_MS)  # dataset input
            _widen_run_names(page)
            page.get_by_role("button", name="Toggle sidebar").click()
            page.get_by_role("button", name="Expand rows").click()  # both inputs of each job
            expect(page.get_by_text(re.compile(r"synthetic/test \(generated:synthetic-[0-9a-f]{8}\)")).first).to_be_visible(timeout=UI_WAIT_MS)
            page.screenshot(path=str(shot))
            both = next(p for p in parents if "device" in p.info.run_name)
            page.goto(f"{uri}/#/experiments/{exp_id}/runs/{both.info.run_id}")  # the parent's run page
            expect(page.get_by_text("python -m sweeps -m model=oom_above batch=16,64").first).to_be_visible(timeout=UI_WAIT_MS)
            expect(page.get_by_text("4 job(s): 1 ok, 1 oom, 2 unavailable").first).to_be_visible(timeout=UI_WAIT_MS)
            ok = next(j for j in jobs if j.data.tags["outcome"] == "ok")
            page.goto(f"{uri}/#/experiments/{exp_id}/runs/{ok.info.run_id}")
            _metric_tabs(page)
            browser.close()
        if os.environ.get("SWEEPS_UPDATE_SCREENSHOT"):  # the README's picture, only when asked for
            SCREENSHOT.parent.mkdir(exist_ok=True)
            shutil.copyfile(shot, SCREENSHOT)  # only once every check above passed
    finally:
        for proc in started:
            proc.stop()
        _stop_server(server)


def _widen_run_names(page) -> None:
    """Drag the Run Name column's edge 130 px right, so whole names show in the screenshot."""
    handle = page.locator('[role=columnheader][col-id*="Run Name"] .ag-header-cell-resize')
    box = handle.bounding_box()
    x, y = box["x"] + 2, box["y"] + box["height"] / 2  # its left part: the right part lies under the next column
    page.mouse.move(x, y)
    page.mouse.down()
    for dx in range(10, 140, 10):
        page.mouse.move(x + dx, y)
    page.mouse.up()


def _sections(page, expected: str) -> dict[str, int]:
    """The open tab's chart sections, name → chart count ("train (3)"), once ``expected`` is
    among them (or UI_WAIT_MS passed)."""
    deadline = time.monotonic() + UI_WAIT_MS / 1000
    while True:
        text = page.locator("main").inner_text()
        found = {m[0]: int(m[1]) for m in re.findall(r"^([a-z0-9_/]+)\s*\((\d+)\)\s*$", text, re.M)}
        if expected in found or time.monotonic() > deadline:
            return found
        page.wait_for_timeout(500)


def _metric_tabs(page) -> None:
    """A job's Model metrics tab: sections of the training only (MLflow orders them by name),
    no host or GPU figure; its System metrics tab: the machine's figures, sweeps' own
    (system/host/...) and those under MLflow's names (its section "System metrics")."""
    from playwright.sync_api import expect

    page.get_by_role("tab", name="Model metrics").click()
    model = _sections(page, "train")
    assert {"train", "test", "time"} <= set(model), model
    assert not any(s.startswith(("system", "host", "gpu")) for s in model), model
    page.get_by_role("tab", name="System metrics").click()
    system = _sections(page, "system/host")
    assert system.get("system/host", 0) >= 4, system  # cpu_pct, other_cpu_pct, rss_max_mb, sys_mem_used_max_mb
    search = page.get_by_role("searchbox", name="Search metric charts")  # charts draw only once scrolled to
    for chart in ("rss_max_mb", "cpu_utilization_percentage"):  # sweeps' own, then one under MLflow's name
        search.fill(chart)
        expect(page.get_by_text(chart).first).to_be_visible(timeout=UI_WAIT_MS)
