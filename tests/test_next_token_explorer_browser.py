"""The next-token explorer (chapter 14) in a real browser: headless Chromium, as in tests/test_site.py.

Chapter 14's page is not part of the built site yet, so this writes pages of its own: the figure alone, from
``file://``, in the book's light and dark themes (pydata-sphinx-theme's colours, read from the installed theme).
It drives the figure as a learner would, with the mouse and the keyboard, and checks that every number shown is
the one :func:`selfattention.next_token_probabilities` gives, that nothing is fetched, that greyed tokens stay
readable, that the figure fits a phone, and that the static image shows where scripts do not run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from test_site import _contrast, _over, browser  # noqa: F401 (browser is a fixture)

import selfattention as sa
from selfattention import interactive as ia

pytestmark = pytest.mark.slow  # a browser: make test runs it, make unit does not

V = 2_000
RNG = np.random.default_rng(14)
PROMPTS = {
    "confident": ("The capital of France is", np.concatenate([[9.0, 6.5, 6.0], RNG.normal(size=V - 3)])),
    "open-ended": ("Once upon a time, there was a", RNG.normal(size=V) * 1.5),
    "chat": ("<|im_start|>user\nTell me a joke.<|im_end|>\n<|im_start|>assistant\n", RNG.normal(size=V) * 2.5),
}
VOCABULARY = [" Paris", "\n", "$5", *(f"tok{i}" for i in range(3, V))]
PROBES = [
    (0, 1.0, None, None),
    (0, 0.3, 3, None),
    (1, 0.7, 10, 0.5),
    (1, 2.0, None, 0.9),
    (2, 1.5, 50, 0.95),
    (2, 0.1, 1, 0.8),
]


def _theme_css() -> str:
    """The book's colours in both themes: pydata-sphinx-theme's own variables, read from its stylesheet."""
    import pydata_sphinx_theme

    sheet = next(Path(pydata_sphinx_theme.__file__).parent.rglob("pydata-sphinx-theme.css")).read_text()
    rules = []
    for theme in ("light", "dark"):
        block = re.search(rf"html\[data-theme={theme}\]\{{([^}}]*)\}}", sheet)[1]
        names = ("text-base", "text-muted", "background", "surface", "border", "accent")
        found = {name: re.search(rf"--pst-color-{name}:([^;]+)", block)[1] for name in names}
        variables = ";".join(f"--pst-color-{name}:{value}" for name, value in found.items())
        rules.append(
            f"html[data-theme={theme}]{{{variables}}} html[data-theme={theme}] body{{background:{found['background']}}}"
        )
    return "\n".join(rules)


@pytest.fixture(scope="module")
def figure():
    return ia.next_token_explorer(PROMPTS, VOCABULARY, title="What comes next", alt="Bars: " + "x" * 40, probes=PROBES)


@pytest.fixture(scope="module")
def pages(figure, tmp_path_factory):
    folder = tmp_path_factory.mktemp("next_token_explorer")
    found = {}
    for theme in ("light", "dark"):
        page = folder / f"{theme}.html"
        page.write_text(
            f'<!DOCTYPE html><html lang="en" data-theme="{theme}"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1"><title>Next-token explorer</title>'
            f"<style>{_theme_css()}</style></head><body><main>{figure.html()}</main></body></html>",
            encoding="utf-8",
        )
        found[theme] = page.as_uri()
    return found


def _open(driver, url: str):
    from selenium.webdriver.common.by import By

    driver.get_log("browser")
    driver.get_log("performance")
    driver.get(url)
    root = driver.find_element(By.CSS_SELECTOR, ".sa-widget")
    assert root.get_attribute("data-ready") == "true", "the script did not build the figure"
    assert not root.find_element(By.CSS_SELECTOR, ".sa-fallback").is_displayed()
    return root


def _slider(root, key: str):
    from selenium.webdriver.common.by import By

    return root.find_element(By.CSS_SELECTOR, f"input[type='range'][data-setting='{key}']")


def _set(root, key: str, index: int) -> None:
    """Move a slider by the keyboard: Home, then the right arrow ``index`` times."""
    from selenium.webdriver.common.keys import Keys

    _slider(root, key).send_keys(Keys.HOME, *[Keys.ARROW_RIGHT] * index)


def _shown(root) -> dict:
    from selenium.webdriver.common.by import By

    values = [cell.text for cell in root.find_elements(By.CSS_SELECTOR, ".sa-next .sa-row .sa-value")]
    readout = {
        key: root.find_element(By.CSS_SELECTOR, f"dd[data-name='{key}']").text for key in ("kept", "cut", "rest")
    }
    return {
        "probabilities": [None if value == "dropped" else float(value) for value in values],
        "kept": int(readout["kept"].split(" of ")[0].replace(",", "")),
        "of": readout["kept"].split(" of ")[1],
        "cut": float(readout["cut"]),
        "rest": float(readout["rest"]),
        "tokens": [cell.text for cell in root.find_elements(By.CSS_SELECTOR, ".sa-next .sa-row .sa-key")],
        "dropped": len(root.find_elements(By.CSS_SELECTOR, ".sa-next .sa-row.sa-dropped")),
    }


def check_the_figure_shows_its_probes(root, data: dict, expected: dict) -> list[dict]:
    """Set each probe's prompt and sliders (by the keyboard) and compare what the figure shows with ``expected``.

    Also used for the chapter's figure on the built site. Returns what was shown, probe by probe.
    """
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    assert expected["rows"], "the figure was built without probes: nothing to compare"
    found = []
    for row in expected["rows"]:
        menu = root.find_elements(By.CSS_SELECTOR, "select")
        if menu:  # one prompt: no menu
            Select(menu[0]).select_by_value(str(row["prompt"]))
        setting = (row["temperature"], row["top_k"], row["top_p"])
        for key, name, value in zip("tkp", ("temperatures", "top_k", "top_p"), setting, strict=True):
            _set(root, key, data[name].index(value))
        outputs = [root.find_element(By.CSS_SELECTOR, f"output[data-setting='{key}']").text for key in "tkp"]
        assert outputs == [f"{setting[0]:g}", *("off" if x is None else str(x) for x in setting[1:])], row
        shown = _shown(root)
        assert shown["probabilities"] == row["probabilities"], row
        assert (shown["kept"], shown["cut"], shown["rest"]) == (row["kept"], row["cut"], row["rest"]), row
        assert shown["of"] == f"{data['vocabulary']:,}" and shown["dropped"] == row["probabilities"].count(None), row
        text = data["prompts"][row["prompt"]]["text"]
        assert root.find_element(By.CSS_SELECTOR, ".sa-prompt").text == text.replace("\n", "↵\n").rstrip()
        found.append(shown)
    return found


def test_the_sliders_show_next_token_probabilities_numbers(browser, pages, figure):  # noqa: F811
    root = _open(browser, pages["light"])
    shown = check_the_figure_shows_its_probes(root, figure.data, figure.expected)
    for (n, tau, top_k, top_p), seen in zip(PROBES, shown, strict=True):
        # next_token_probabilities' own numbers, computed again here over all V logits
        z = PROMPTS[list(PROMPTS)[n]][1]
        q = sa.next_token_probabilities(z, temperature=tau, top_k=top_k, top_p=top_p)
        listed = np.argsort(z, kind="stable")[::-1][:10]
        assert seen["probabilities"] == [round(float(q[i]), 3) if q[i] > 0 else None for i in listed]
        assert seen["kept"] == (q > 0).sum()
        assert seen["tokens"] == [VOCABULARY[i].replace(" ", "␣").replace("\n", "↵") for i in listed]
    errors = [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == [], f"console errors while driving the figure: {errors}"


def test_the_tokens_show_their_spaces_and_newlines(browser, pages):  # noqa: F811
    root = _open(browser, pages["light"])
    _set(root, "t", 9)
    _set(root, "k", 0)
    _set(root, "p", 0)
    assert _shown(root)["tokens"][:3] == ["␣Paris", "↵", "$5"]


def test_the_keyboard_moves_the_sliders_and_a_focus_ring_shows(browser, pages, figure):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    root = _open(browser, pages["light"])
    data = figure.data
    start = data["start"]
    assert _shown(root)["kept"] == V and _shown(root)["dropped"] == 0  # temperature 1, no cut
    slider = _slider(root, "t")
    slider.send_keys(Keys.ARROW_LEFT, Keys.ARROW_LEFT)  # 1.0 -> 0.8
    assert browser.switch_to.active_element == slider
    assert root.find_element(By.CSS_SELECTOR, "output[data-setting='t']").text == "0.8"
    assert slider.get_attribute("aria-valuetext") == "Temperature 0.8"
    outline = browser.execute_script("return getComputedStyle(document.activeElement).outlineStyle;")
    assert outline != "none", "the focused slider shows no focus ring"
    _slider(root, "k").send_keys(Keys.ARROW_RIGHT)  # top-k 1: only the most likely token is kept
    table = data["prompts"][0]
    row = table["rows"][table["settings"][((start[0] - 2) * len(data["top_k"]) + 1) * len(data["top_p"])]]
    shown = _shown(root)
    assert shown["kept"] == row[0] == 1 and shown["probabilities"] == [1.0] + [None] * 9
    assert shown["cut"] == row[2] / 1000 and shown["dropped"] == 9
    # the menu too: Tab reaches it, the arrow picks the next prompt
    menu = root.find_element(By.CSS_SELECTOR, "select")
    menu.send_keys(Keys.ARROW_DOWN)
    assert browser.find_element(By.CSS_SELECTOR, ".sa-prompt").text == PROMPTS["open-ended"][0]


def test_the_page_loads_nothing_and_works_from_a_file(browser, pages):  # noqa: F811
    _open(browser, pages["dark"])
    requested = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            requested.append(message["params"]["request"]["url"])
    assert requested and all(url.startswith(("file:", "data:")) for url in requested), requested
    errors = [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_kept_and_dropped_tokens_are_readable_in_both_themes(browser, pages, theme):  # noqa: F811
    root = _open(browser, pages[theme])
    _set(root, "k", 2)  # top-k 3: seven of the ten listed tokens are dropped, greyed
    colours = browser.execute_script(
        "const root = arguments[0], style = e => [getComputedStyle(e).color, getComputedStyle(e).backgroundColor];"
        "const pick = s => root.querySelector(s);"
        "return {root: style(root), kept: style(pick('.sa-row:not(.sa-dropped) .sa-key')),"
        "  dropped: style(pick('.sa-row.sa-dropped .sa-key')), droppedValue: style(pick('.sa-row.sa-dropped .sa-value')),"
        "  prompt: style(pick('.sa-prompt')), output: style(pick('output')), hint: style(pick('.sa-hint'))};",
        root,
    )
    page = colours["root"][1]
    for part, (colour, background) in colours.items():
        behind = _over(background, _over(colours["prompt"][1], page)) if part == "prompt" else page
        ratio = _contrast(colour, _over(background, behind) if part != "prompt" else behind)
        assert ratio >= 4.5, f"{theme} theme: {part} text {colour} on {background} has contrast {ratio:.2f}"
    if theme == "dark":
        assert _contrast(page, "rgb(0, 0, 0)") < 2, f"the figure ignores the dark theme: background {page}"


def test_the_figure_fits_a_phone(browser, pages):  # noqa: F811
    browser.set_window_size(390, 844)
    try:
        root = _open(browser, pages["light"])
        widths = browser.execute_script(
            "const r = arguments[0]; return [r.scrollWidth, r.clientWidth,"
            " document.documentElement.scrollWidth, document.documentElement.clientWidth];",
            root,
        )
    finally:
        browser.set_window_size(1280, 900)
    assert widths[0] <= widths[1] + 1 and widths[2] <= widths[3], f"wider than a phone: {widths}"


def check_the_static_image_shows_without_scripts(driver, url: str) -> None:
    """With JavaScript off, the page at ``url`` shows its figure's static fallback image, and nothing is built."""
    from selenium.webdriver.common.by import By

    driver.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})
    try:
        driver.get(url)
        root = driver.find_element(By.CSS_SELECTOR, ".sa-widget")
        image = root.find_element(By.CSS_SELECTOR, ".sa-fallback img")
        assert root.get_attribute("data-ready") is None and image.is_displayed()
        assert driver.execute_script("return arguments[0].naturalWidth;", image) > 100
    finally:
        driver.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": False})


def test_without_scripts_the_static_image_shows(browser, pages):  # noqa: F811
    check_the_static_image_shows_without_scripts(browser, pages["light"])
