"""book/_ext/code_breaks.py: break opportunities in inline code, and none inside hyphenated heading words (issue 32)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "book" / "_ext"))
from code_breaks import add_breaks, keep_hyphenated_words  # noqa: E402


def test_breaks_go_after_underscores_dots_and_slashes_and_at_camel_humps_only():
    html = '<code class="docutils literal"><span class="pre">torch.nn.functional.scaled_dot_product_attention</span></code>'
    assert add_breaks(html) == (
        '<code class="docutils literal"><span class="pre">torch.<wbr>nn.<wbr>functional.<wbr>'
        "scaled_<wbr>dot_<wbr>product_<wbr>attention</span></code>"
    )
    slash = '<span class="pre">nreimers/MiniLM-L6</span>'
    assert add_breaks(slash) == '<span class="pre">nreimers/<wbr>MiniLM-L6</span>'  # a short part keeps its humps
    camel = '<span class="pre">nn.TransformerEncoderLayer</span>'
    assert add_breaks(camel) == '<span class="pre">nn.<wbr>Transformer<wbr>Encoder<wbr>Layer</span>'
    for whole in ("softmax BLAS", "ValueError", "LayerNormParams"):  # parts of 16 or fewer
        assert add_breaks(f'<span class="pre">{whole}</span>') == f'<span class="pre">{whole}</span>'


@pytest.mark.parametrize(
    "text",
    ["__init__", "x.", "a_", "1.5e-3", "softmax", "(B, T, D)", "a.b_c/d", "&lt;a_b&gt;", ""],
)
def test_text_is_unchanged_apart_from_the_breaks_and_adding_them_twice_changes_nothing(text):
    html = f'<p>{text} <span class="pre">{text}</span></p>'
    once = add_breaks(html)
    assert once.replace("<wbr>", "") == html
    assert add_breaks(once) == once
    assert "<wbr></span>" not in once and "<wbr><wbr>" not in once


def test_only_sphinx_literal_spans_are_touched():
    html = '<pre><span class="n">a_b</span></pre><p>a_b.c</p><span class="prefix">a_b</span>'
    assert add_breaks(html) == html


def test_a_body_that_is_not_text_is_refused():
    with pytest.raises(ValueError, match="expects the page body as a str, got bytes"):
        add_breaks(b"<p></p>")


def test_hyphenated_words_in_headings_stay_whole_and_nothing_else_changes():
    heading = (
        '<h1><span class="section-number">13. </span>A real pretrained transformer: all-MiniLM-L6-v2 in NumPy'
        '<a class="headerlink" href="#a-real-pretrained-transformer" title="Link to this heading">#</a></h1>'
    )
    body = f'{heading}\n<p>all-MiniLM-L6-v2 in a paragraph</p>\n<h3>Without <span class="math notranslate">\\(d_k-1\\)</span> x-y</h3>'
    after = keep_hyphenated_words(body)
    assert 'transformer: <span class="nobreak">all-MiniLM-L6-v2</span> in NumPy<a class="headerlink"' in after
    assert 'href="#a-real-pretrained-transformer"' in after  # attributes are not text
    assert "<p>all-MiniLM-L6-v2 in a paragraph</p>" in after  # only headings
    assert '\\(d_k-1\\)</span> <span class="nobreak">x-y</span></h3>' in after  # TeX is left to MathJax
    assert keep_hyphenated_words(after) == after
    with pytest.raises(ValueError, match="expects the page body as a str, got bytes"):
        keep_hyphenated_words(body.encode())
