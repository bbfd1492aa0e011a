"""The attention explorer, the online-softmax stepper and the mask builder in a real browser (issue 32, item 7).

Headless Chromium, as in tests/test_next_token_explorer_browser.py: each figure alone on a page of its own, from
``file://``, in the book's light and dark themes. The checks drive the figures as a learner would and fail on the
details that misled: a tie reported as one key, an explorer that cannot open on a chosen query, a selection that
follows the mouse, a mask without row and column numbers or padding marks, a stepper without blocks or V.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_next_token_explorer_browser import _theme_css, check_the_static_image_shows_without_scripts
from test_site import _contrast, _over, browser  # noqa: F401 (browser is a fixture)

import selfattention as sa
from selfattention import interactive as ia

pytestmark = pytest.mark.slow  # a browser: make test runs it, make unit does not


def _four_words() -> np.ndarray:
    """Chapter 1's weights: query 2 ties exactly between keys 1 and 3, [0.455, 0.045, 0.455, 0.045]."""
    words = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]])
    q = words @ np.array([[2, 0, 2], [2, 0, 0], [2, 1, 2]])
    k = words @ np.array([[2, 2, 2], [0, 2, 1], [0, 1, 1]])
    return sa.softmax(q @ k.T / np.sqrt(3))


WORDS = ["word 1", "word 2", "word 3", "word 4"]
RNG = np.random.default_rng(32)
SENTENCE = ["[CLS]", "the", "striker", "scored", "twice", "in", "the", "second", "half", ".", "[SEP]"]
HEADS = sa.softmax(RNG.normal(size=(2, 3, 11, 11)) * 3)
SCORES, VALUES = 3 * RNG.standard_normal(10), RNG.standard_normal((10, 2))


@pytest.fixture(scope="module")
def figures():
    return {
        "words": ia.attention_explorer([("the four words", WORDS, _four_words())], title="Four words", alt="a" * 50),
        "heads": ia.attention_explorer(
            [
                ("short", SENTENCE[:5], HEADS[..., :5, :5] / HEADS[..., :5, :5].sum(-1, keepdims=True)),
                ("the sentence", SENTENCE, HEADS),
            ],
            title="Heads",
            alt="b" * 50,
            layer=1,
            head=2,
            text=1,
            query=3,
        ),
        "stepper": ia.softmax_stepper(SCORES, VALUES, 4, title="Online softmax", alt="c" * 50),
        "mask": ia.mask_builder(8, windows=(2, 3), lengths=(8, 6, 5), title="Masks", alt="d" * 50),
    }


@pytest.fixture(scope="module")
def pages(figures, tmp_path_factory):
    folder = tmp_path_factory.mktemp("widgets")
    found = {}
    for name, figure in figures.items():
        for theme in ("light", "dark"):
            page = folder / f"{name}-{theme}.html"
            page.write_text(
                f'<!DOCTYPE html><html lang="en" data-theme="{theme}"><head><meta charset="utf-8">'
                '<meta name="viewport" content="width=device-width, initial-scale=1"><title>A figure</title>'
                f"<style>{_theme_css()}</style></head><body><main><p><a href='#'>before</a></p>{figure.html()}"
                "</main></body></html>",
                encoding="utf-8",
            )
            found[name, theme] = page.as_uri()
    return found


def _open(driver, url: str):
    from selenium.webdriver.common.by import By

    driver.get_log("browser")
    driver.get(url)
    root = driver.find_element(By.CSS_SELECTOR, ".sa-widget")
    assert root.get_attribute("data-ready") == "true", "the script did not build the figure"
    return root


def _no_console_errors(driver) -> None:
    errors = [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == [], f"console errors: {errors}"


# ---------------------------------------------------------------- the attention explorer


def _status(root) -> str:
    from selenium.webdriver.common.by import By

    return root.find_element(By.CSS_SELECTOR, ".sa-status").text


def _pressed(root) -> list[int]:
    from selenium.webdriver.common.by import By

    found = root.find_elements(By.CSS_SELECTOR, ".sa-token[aria-pressed='true']")
    return [int(token.get_attribute("data-index")) for token in found]


def _values(root) -> list[float]:
    from selenium.webdriver.common.by import By

    return [float(cell.text) for cell in root.find_elements(By.CSS_SELECTOR, ".sa-row .sa-value")]


def test_a_tie_is_reported_as_a_tie(browser, pages):  # noqa: F811
    from selenium.webdriver.common.by import By

    root = _open(browser, pages["words", "light"])
    root.find_element(By.CSS_SELECTOR, ".sa-token[data-index='1']").click()
    assert _values(root) == [0.455, 0.045, 0.455, 0.045]
    assert _status(root) == 'query "word 2" puts most weight, tied at 0.455 each, on "word 1" and "word 3".'
    most = root.find_elements(By.CSS_SELECTOR, ".sa-row.sa-most .sa-key")
    assert [cell.text for cell in most] == ["word 1", "word 3"]
    root.find_element(By.CSS_SELECTOR, ".sa-token[data-index='0']").click()
    assert _status(root) == 'query "word 1" puts most weight (0.749) on "word 3".'
    _no_console_errors(browser)


def test_a_repeated_token_is_named_with_its_position(browser, pages):  # noqa: F811
    from selenium.webdriver.common.by import By

    root = _open(browser, pages["heads", "light"])
    best = root.find_element(By.CSS_SELECTOR, ".sa-row.sa-most .sa-key")
    key = int(best.find_element(By.XPATH, "..").get_attribute("data-key"))
    named = f'"{SENTENCE[key]}" (token {key})' if SENTENCE.count(SENTENCE[key]) > 1 else f'"{SENTENCE[key]}"'
    assert _status(root).startswith('Layer 1, head 2: query "scored" puts most weight') and named in _status(root)


def test_the_explorer_opens_on_the_chosen_text_layer_head_and_query(browser, pages):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    root = _open(browser, pages["heads", "light"])
    menus = [Select(menu).first_selected_option.text for menu in root.find_elements(By.CSS_SELECTOR, "select")]
    assert menus == ["the sentence", "layer 1", "head 2"]
    assert _pressed(root) == [3]
    assert _values(root) == np.round(HEADS[1, 2, 3], 3).tolist()
    # Another text keeps the query's position where the text is long enough.
    Select(root.find_element(By.CSS_SELECTOR, "select")).select_by_value("0")
    assert _pressed(root) == [3] and len(root.find_elements(By.CSS_SELECTOR, ".sa-token")) == 5


def test_pointing_and_focusing_do_not_change_the_selection(browser, pages):  # noqa: F811
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    root = _open(browser, pages["words", "light"])
    tokens = root.find_elements(By.CSS_SELECTOR, ".sa-token")
    before = (_pressed(root), _values(root), _status(root))
    assert before[0] == [0]
    ActionChains(browser).move_to_element(tokens[2]).pause(0.1).move_to_element(tokens[3]).pause(0.1).perform()
    assert (_pressed(root), _values(root), _status(root)) == before, "pointing at a token changed the selection"
    browser.execute_script("arguments[0].focus();", tokens[1])
    assert (_pressed(root), _values(root)) == before[:2], "focusing a token changed the selection"
    ActionChains(browser).click(tokens[2]).perform()
    assert _pressed(root) == [2] and _values(root) == np.round(_four_words()[2], 3).tolist()
    # One tab stop, on the selected token: Tab from the link before the figure lands on it.
    assert [token.get_attribute("tabindex") for token in tokens] == ["-1", "-1", "0", "-1"]
    browser.find_element(By.CSS_SELECTOR, "main a").send_keys(Keys.TAB)
    assert browser.switch_to.active_element.get_attribute("data-index") == "2" and _pressed(root) == [2]
    _no_console_errors(browser)


def test_click_enter_space_and_the_arrow_keys_select(browser, pages):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    root = _open(browser, pages["heads", "light"])
    tokens = root.find_elements(By.CSS_SELECTOR, ".sa-token")
    tokens[5].send_keys(Keys.ENTER)
    assert _pressed(root) == [5] and _values(root) == np.round(HEADS[1, 2, 5], 3).tolist()
    tokens[6].send_keys(Keys.SPACE)
    assert _pressed(root) == [6]
    tokens[6].send_keys(Keys.ARROW_RIGHT)
    assert _pressed(root) == [7] and browser.switch_to.active_element.get_attribute("data-index") == "7"
    browser.switch_to.active_element.send_keys(Keys.ARROW_LEFT, Keys.ARROW_LEFT)
    assert _pressed(root) == [5] and _values(root) == np.round(HEADS[1, 2, 5], 3).tolist()
    browser.switch_to.active_element.send_keys(Keys.END)
    assert _pressed(root) == [10]
    browser.switch_to.active_element.send_keys(Keys.HOME)
    assert _pressed(root) == [0]
    tokens[2].click()
    assert _pressed(root) == [2] and _values(root) == np.round(HEADS[1, 2, 2], 3).tolist()
    _no_console_errors(browser)


# ---------------------------------------------------------------- the mask builder


def _grid(root) -> dict:
    return root.parent.execute_script(
        "const root = arguments[0], all = s => Array.from(root.querySelectorAll(s));"
        "const cell = e => ({on: e.classList.contains('sa-on'), pad: e.classList.contains('sa-pad'),"
        "  hatch: getComputedStyle(e).backgroundImage});"
        "return {cols: all('.sa-index-col').map(e => e.textContent), rows: all('.sa-index-row').map(e => e.textContent),"
        "  cells: all('.sa-cell').map(cell), legend: root.querySelector('.sa-legend').textContent};",
        root,
    )


def test_the_mask_has_row_and_column_numbers_and_marks_padding(browser, pages, figures):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    root = _open(browser, pages["mask", "light"])
    pattern, length = (Select(menu) for menu in root.find_elements(By.CSS_SELECTOR, "select"))
    grid = _grid(root)
    assert grid["cols"] == grid["rows"] == [str(i) for i in range(8)]  # all 8 tokens real: no "pad"
    assert not any(cell["pad"] for cell in grid["cells"]) and "No padding" in grid["legend"]
    for key in ("causal", "window2", "none"):
        pattern.select_by_value(key)
        for real in (6, 5):
            length.select_by_value(str(real))
            grid = _grid(root)
            assert grid["cols"] == grid["rows"] == [str(i) if i < real else f"{i}pad" for i in range(8)]
            bits = ["".join("1" if grid["cells"][i * 8 + j]["on"] else "0" for j in range(8)) for i in range(8)]
            assert bits == figures["mask"].expected["masks"][f"{key},{real}"]  # the .sa-cell selectors still work
            for n, cell in enumerate(grid["cells"]):
                padded = n // 8 >= real or n % 8 >= real
                assert cell["pad"] == padded, (key, real, n)
                assert ("repeating-linear-gradient" in cell["hatch"]) == padded, (key, real, n, cell["hatch"])
            tokens = " and ".join(str(i) for i in range(real, 8)) if real == 6 else "5, 6 and 7"
            assert f"tokens {tokens}" in grid["legend"], grid["legend"]
    _no_console_errors(browser)


# ---------------------------------------------------------------- the online-softmax stepper


def _fold(root) -> dict:
    return root.parent.execute_script(
        "const root = arguments[0], all = s => Array.from(root.querySelectorAll(s));"
        "return {blocks: all('tbody.sa-block').map(b => [b.querySelector('.sa-block-head').textContent,"
        "    Array.from(b.querySelectorAll('tr[data-key]')).map(r => +r.dataset.key)]),"
        "  p: all('td.sa-p').map(e => e.textContent), v: all('tbody td.sa-v').map(e => e.textContent),"
        "  sum: root.querySelector('td[data-name=sum]').textContent};",
        root,
    )


def _vector(text: str) -> list[float]:
    return [float(x) for x in text.strip("[]").split(",")]


def test_the_stepper_shows_its_blocks_and_folds_in_v(browser, pages, figures):  # noqa: F811
    from selenium.webdriver.common.by import By

    root = _open(browser, pages["stepper", "light"])
    forward = root.find_elements(By.CSS_SELECTOR, "button.sa-step")[1]
    fold = _fold(root)
    assert [keys for _, keys in fold["blocks"]] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [head for head, _ in fold["blocks"]] == [
        "block 1: keys 0–3 (not read yet)",
        "block 2: keys 4–7 (not read yet)",
        "block 3: keys 8–9 (not read yet)",
    ]
    np.testing.assert_allclose([_vector(v) for v in fold["v"]], VALUES, atol=5e-5)  # V, row by row
    assert fold["p"] == ["—"] * 10 and fold["sum"] == "nothing yet"
    steps = figures["stepper"].data["steps"]
    for number, step in enumerate(steps, start=1):
        forward.click()
        fold = _fold(root)
        read = min(4 * number, 10)
        states = ["read"] * (number - 1) + ["read now"] + ["not read yet"] * (3 - number)
        assert [head.split("(")[1].rstrip(")") for head, _ in fold["blocks"]] == states
        p = [float(x) for x in fold["p"][:read]]
        assert fold["p"][read:] == ["—"] * (10 - read)
        assert p == pytest.approx(sa.softmax(SCORES[:read]).tolist(), abs=5e-5)  # the weights among the keys read
        assert math.fsum(p) == pytest.approx(1, abs=5e-4)
        out = _vector(fold["sum"])
        assert out == pytest.approx(step["out"], abs=5e-5)
        assert out == pytest.approx((np.array(p) @ VALUES[:read]).tolist(), abs=1e-3)  # sum p v, from what is shown
    _no_console_errors(browser)


# ---------------------------------------------------------------- all three: themes, phones, no scripts


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("name", ["words", "stepper", "mask"])
def test_the_new_parts_are_readable_and_fit_a_phone(browser, pages, name, theme):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.set_window_size(390, 844)
    try:
        root = _open(browser, pages[name, theme])
        if name == "mask":
            Select(root.find_elements(By.CSS_SELECTOR, "select")[1]).select_by_value("5")
        if name == "stepper":
            root.find_elements(By.CSS_SELECTOR, "button.sa-step")[1].click()
        if name == "words":
            root.find_element(By.CSS_SELECTOR, ".sa-token[data-index='1']").click()
        found = browser.execute_script(
            "const root = arguments[0], style = e => [getComputedStyle(e).color, getComputedStyle(e).backgroundColor];"
            "const parts = {};"
            "for (const s of ['.sa-index-col', '.sa-index-row.sa-pad', '.sa-pad-label', '.sa-legend', '.sa-corner',"
            "    '.sa-on .sa-tick', '.sa-on.sa-pad .sa-tick', '.sa-block-head th', '.sa-block-state', '.sa-current',"
            "    'td.sa-p', 'td.sa-v', 'tfoot td', 'thead th', '.sa-row.sa-most .sa-key', '.sa-status']) {"
            "  const e = root.querySelector(s); if (e) parts[s] = style(e); }"
            "return {root: style(root), parts: parts, widths: [root.scrollWidth, root.clientWidth,"
            "  document.documentElement.scrollWidth, document.documentElement.clientWidth]};",
            root,
        )
    finally:
        browser.set_window_size(1280, 900)
    page = found["root"][1]
    expected = {
        "words": {".sa-row.sa-most .sa-key", ".sa-status"},
        "stepper": {".sa-block-head th", ".sa-block-state", ".sa-current", "td.sa-p", "td.sa-v", "tfoot td"},
        "mask": {".sa-index-col", ".sa-index-row.sa-pad", ".sa-pad-label", ".sa-legend", ".sa-on.sa-pad .sa-tick"},
    }[name]
    assert expected <= set(found["parts"]), f"missing parts: {expected - set(found['parts'])}"
    for part, (colour, background) in found["parts"].items():
        behind = page
        if part.endswith(".sa-tick") or part == ".sa-current":  # on the cell's solid ink
            behind = _over(background, page)
        ratio = _contrast(colour, _over(background, behind))
        assert ratio >= 4.5, f"{name}, {theme}: {part} {colour} on {background} has contrast {ratio:.2f}"
    widths = found["widths"]
    assert widths[0] <= widths[1] + 1 and widths[2] <= widths[3], f"{name} is wider than a phone: {widths}"


@pytest.mark.parametrize("name", ["words", "stepper", "mask"])
def test_without_scripts_the_static_image_shows(browser, pages, name):  # noqa: F811
    check_the_static_image_shows_without_scripts(browser, pages[name, "dark"])
