"""The exported logs in Inspect's own viewer (`inspect view`), rendered by Chromium in real time.

Playwright drives the system Chromium (no browser download) and waits for text, so the viewer's app
has fetched and rendered the sample before anything is asserted. The run is scripted with tokens that
only its Challenger critiques, specialist turns and moderator vote carry (tests/inspect_fixtures.py).
"""

from __future__ import annotations

import importlib.util
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from medpanel.experiments.cli.main import app

from .inspect_fixtures import CRITIQUE_TOKEN, GRID_QUESTIONS, TOKEN_ANSWER, TURN_TOKEN, grid_run, token_responder

pytest.importorskip("inspect_ai.log", reason="the [inspect] extra is not installed")
CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.xdist_group("inspect-viewer"),  # both tests on one worker, sharing one server and browser
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)"),
    pytest.mark.skipif(importlib.util.find_spec("playwright") is None,
                       reason="the playwright package is not installed (pip install playwright; no browser download "
                              "is needed: the test drives the system Chromium)"),
]
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]
WAIT_MS = 60_000  # the longest wait for one piece of text (a loaded machine renders slowly)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(base URL of `inspect view` serving the export of a token-scripted 2x2 grid, the c1r1 log's name)."""
    base = tmp_path_factory.mktemp("inspect-view")
    run_dir = grid_run(base, questions=GRID_QUESTIONS[:1], responder=token_responder(), name="tokens")
    out = base / "logs"
    res = CliRunner().invoke(app, ["export", str(run_dir), "--format", "inspect", "--out", str(out)])
    assert res.exit_code == 0, res.output
    c1r1 = next(p.name for p in out.glob("*.eval") if "-c1r1-" in p.name)
    port = _free_port()
    errors = base / "inspect-view.log"
    with open(errors, "w") as err:
        server = subprocess.Popen([sys.executable, "-m", "inspect_ai", "view", "--log-dir", str(out),
                                   "--host", "127.0.0.1", "--port", str(port)], stdout=err, stderr=err)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/logs", timeout=5).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"inspect view did not start: {errors.read_text()[-2000:]}")
                time.sleep(0.3)
        yield url, c1r1
    finally:
        server.terminate()
        server.wait(timeout=20)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        try:
            yield b
        finally:
            b.close()


def _scroll_to(page: Any, target: Any, what: str) -> Any:
    """`target` (a locator), scrolling the tab's list under the mouse until it is rendered: the viewer
    renders only the messages or events in view. Fails when the list ends without it."""
    page.mouse.move(600, 700)
    still = 0
    for _ in range(600):
        if target.count():
            return target.first
        before = _scroll_tops(page)
        page.mouse.wheel(0, 700)
        page.wait_for_timeout(100)
        still = still + 1 if _scroll_tops(page) == before else 0
        if still >= 50:  # five seconds without moving: the end of the list (a loaded machine lays out slowly)
            break
    pytest.fail(f"no {what} in the list")


def _scroll_tops(page: Any) -> list[int]:
    return list(page.evaluate("() => [...document.querySelectorAll('*')].filter(e => e.scrollTop > 0)"
                              ".map(e => e.scrollTop)"))


def _shows(page: Any, text: str, where: str) -> None:
    """Wait until `text` is rendered on the page (innerText: what is laid out, not hidden copies); fail
    naming `where` and showing what the page did render."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    # The viewer renders a long span's events lazily, as they scroll into view: an agent's later call
    # (a specialist's turn after its recruitment check) is laid out only once the list reaches it.
    for _ in range(40):
        try:
            page.wait_for_function("t => document.body.innerText.includes(t)", arg=text, timeout=WAIT_MS // 40)
            return
        except PlaywrightTimeout:
            page.mouse.wheel(0, 700)
    shown = page.evaluate("() => document.body.innerText")
    pytest.fail(f"{where}: {text!r} was not rendered; the page shows:\n{shown[-3000:]}")


def _has_text(card: Any, *texts: str) -> None:
    """Wait until `card`'s rendered text holds each of `texts`: the viewer lays a card out first and
    renders its markdown after (`**challenger** · ...` for a moment, then a bold `challenger · ...`)."""
    from playwright.sync_api import expect  # the [dev] extra; this module is skipped without it

    for t in texts:
        expect(card).to_contain_text(t, use_inner_text=True, timeout=WAIT_MS)


def _card(page: Any, *texts: str) -> Any:
    """The Messages tab's card holding all `texts`."""
    cards = page.locator("[data-message-role]")
    for t in texts:
        cards = cards.filter(has_text=t)
    return _scroll_to(page, cards, f"message card with {texts!r}")


@pytest.mark.timeout(600)
def test_the_messages_tab_shows_the_challenger_a_specialist_and_the_moderators_decision(
        viewer: tuple[str, str], browser: Any, tmp_path: Path) -> None:
    url, c1r1 = viewer
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(WAIT_MS)
    page.goto(f"{url}/#/logs/{c1r1}/samples/sample/medqa%3At1/1/messages")
    page.get_by_text("Sample medqa:t1 (Epoch 1)").first.wait_for()
    critique = page.locator("[data-message-role]").filter(has_text=CRITIQUE_TOKEN).first
    critique.wait_for()
    # each card names the agent that spoke under the viewer's role header
    _has_text(critique, "challenger · challenger · critique")
    turn = _card(page, f"{TURN_TOKEN} vexillologist r2t3")
    _has_text(turn, "vexillologist · specialist · turn · round 2, turn 3")
    decision = _card(page, "moderator · moderator · final")
    _has_text(decision, '"rule": "majority"', f'"{TOKEN_ANSWER}": 2', '"vexillologist": "C"')
    decision.scroll_into_view_if_needed()
    png = tmp_path / "messages.png"
    page.screenshot(path=str(png))
    from matplotlib.image import imread

    pixels = imread(png)
    assert pixels.shape[:2] == (1000, 1280) and float(pixels[..., :3].std()) > 0.02, "blank screenshot"
    page.close()


@pytest.mark.timeout(600)
def test_the_transcript_tab_shows_each_agents_calls_and_the_decision(viewer: tuple[str, str], browser: Any) -> None:
    url, c1r1 = viewer
    transcript = f"{url}/#/logs/{c1r1}/samples/sample/medqa%3At1/1/transcript"
    # (span opened, what its model call or info event shows)
    for agent, heading, shown in [
        ("challenger", re.compile(r"model call \(challenger\): scripted/scripted", re.I), CRITIQUE_TOKEN),
        ("vexillologist", re.compile(r"model call \(specialist\): scripted/scripted", re.I),
         f"{TURN_TOKEN} vexillologist r1t1"),
        ("moderator", re.compile(r"info: moderator", re.I), '"rule": "majority"'),
    ]:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})  # the viewer keeps the open span
        page.set_default_timeout(WAIT_MS)
        page.goto(transcript)
        # The list is scrolled only once its first span is laid out: a wheel turned while the sample still
        # loads lands the list past the agent's first span, and its later span (a recruitment check) opens.
        page.get_by_text("SUB-AGENT: selector").first.wait_for()
        _scroll_to(page, page.get_by_text(f"SUB-AGENT: {agent}"), f"span of {agent}").click()
        page.get_by_text(heading).first.wait_for()
        _shows(page, shown, f"the span of {agent}")
        page.close()
