"""The built website checked with axe-core, in headless Chromium, in both colour themes.

Every page in _toc.yml, plus index.html and search.html, is opened as tests/test_site.py opens it (served
on 127.0.0.1, MathJax finished), axe-core is injected from the pinned pip package axe-playwright-python
(its axe.min.js only: no network, and Playwright is not needed), and axe runs with its default rules,
once with the light theme and once with the dark one (colour contrast, including the code highlighting,
differs between them). A test fails on any violation of impact serious or critical, and on any violation
of the rules that issue 32 fixed (FIXED_RULES), naming the rule, its impact and the elements' selectors.

Without Chromium these tests are skipped, except under CI=true, where they fail (the `browser` fixture of
tests/test_site.py). SITE_DIR=/path/to/_build/html checks another build instead of _build/html.
"""

from __future__ import annotations

import functools
import http.server
import os
import threading
from importlib.resources import files
from pathlib import Path

import pytest
import test_site
from test_site import PAGES, _open, browser  # noqa: F401  (browser is a fixture)

pytestmark = pytest.mark.slow  # a browser: make test runs it, make unit does not

SITE = Path(os.environ["SITE_DIR"]) if os.environ.get("SITE_DIR") else test_site.SITE
FAILING_IMPACTS = ("serious", "critical")
# Rules with a lower impact that issue 32 fixed; they must not come back. region: the sidebar's logo
# outside every landmark (book/_templates/navbar-logo.html); the other three: the bibliography's entries
# (book/_ext/accessible_html.py).
FIXED_RULES = ("region", "aria-allowed-role", "aria-deprecated-role", "aria-required-children")
THEMES = ("light", "dark")
# axe on the longest page takes minutes on a busy 2-core machine; Selenium's defaults are 30 s and 120 s.
AXE_SECONDS = 600


@functools.cache
def _axe_source() -> str:
    return (files("axe_playwright_python") / "axe.min.js").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def site_url():
    if not (SITE / "index.html").is_file():
        pytest.fail(f"no built site in {SITE}: run `make book` first (`make test` builds it)")

    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # keep pytest's output clean
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(SITE)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def axe_browser(browser):  # noqa: F811  (the fixture imported above)
    browser.set_script_timeout(AXE_SECONDS)
    config = browser.command_executor.client_config
    timeout, config.timeout = config.timeout, AXE_SECONDS + 30
    yield browser
    config.timeout = timeout


def _axe(driver, theme: str) -> list[dict]:
    """axe-core's violations on the open page with ``theme``: [{id, impact, help, targets}]."""
    if theme not in THEMES:
        raise ValueError(f"theme must be one of {THEMES}, got {theme!r}")
    if not driver.execute_script("return typeof window.axe === 'object';"):
        driver.execute_script(_axe_source())
    return driver.execute_async_script(
        "const [theme, done] = [arguments[0], arguments[arguments.length - 1]];"
        "document.documentElement.dataset.theme = theme;"
        # The themes' colour transitions last up to 0.35 s; measure the colours after them.
        "setTimeout(() => axe.run(document, {resultTypes: ['violations']})"
        "  .then(r => done(r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,"
        "    targets: v.nodes.map(n => n.target.join(' '))}))))"
        "  .catch(e => done([{id: 'axe-error', impact: 'critical', help: String(e), targets: []}])), 500);",
        theme,
    )


def _failures(violations: list[dict]) -> list[str]:
    return [
        f"{v['id']} ({v['impact']}, {len(v['targets'])} elements: {v['help']}): {', '.join(v['targets'][:5])}"
        + (" ..." if len(v["targets"]) > 5 else "")
        for v in violations
        if v["impact"] in FAILING_IMPACTS or v["id"] in FIXED_RULES
    ]


@pytest.mark.parametrize("page", [*PAGES, "index", "search"])
def test_page_has_no_serious_accessibility_violation_in_either_theme(axe_browser, site_url, page):
    assert (SITE / f"{page}.html").is_file(), f"{page}.html is not in the built site {SITE}"
    _open(axe_browser, f"{site_url}/{page}.html")
    if page == "index":  # index.html sends the reader on to the root page with a meta refresh
        axe_browser.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "const check = () => location.pathname.endsWith('/index.html') || document.readyState !== 'complete'"
            "  ? setTimeout(check, 50) : done(true); check();"
        )
    problems = {theme: _failures(_axe(axe_browser, theme)) for theme in THEMES}
    report = "\n".join(f"  {theme} theme: {line}" for theme, lines in problems.items() for line in lines)
    assert not report, f"{page}: axe-core violations\n{report}"


def test_the_check_finds_a_planted_violation(axe_browser, site_url):
    """The check can fail: a list holding a link directly, and grey text on grey, are both found."""
    _open(axe_browser, f"{site_url}/search.html")
    axe_browser.execute_script(
        "const main = document.querySelector('main');"
        "main.insertAdjacentHTML('beforeend', '<div role=\"list\"><a href=\"#x\">planted link</a></div>'"
        "  + '<p style=\"color: #777; background: #888\">planted low-contrast text</p>');"
    )
    found = {line.split(" ")[0] for line in _failures(_axe(axe_browser, "dark"))}
    assert {"aria-required-children", "color-contrast"} <= found, found
