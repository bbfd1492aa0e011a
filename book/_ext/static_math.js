'use strict';
// Typesets TeX into MathJax's CommonHTML markup at build time, for book/_ext/static_math.py.
//
// Reads one JSON request per line on stdin and writes one JSON reply per line on stdout:
//   request: {"math": [[tex, display], ...], "fontURL": "../_static/mathjax-fonts", "scale": 1.2}
//   reply:   {"html": [markup, ...], "css": "...", "errors": ["...", ...]}
// One request is one page: the stylesheet in the reply holds the rules for the characters that
// page uses and no others. A formula MathJax cannot parse (an undefined macro, a missing brace)
// is an error, reported with its source, never a red box on the site.
//
// MathJax 3.2.2 from the npm package mathjax-full (package.json at the repository's root):
// TeX input with the base and ams packages, CommonHTML output, and the assistive MathML that
// screen readers read (the visible markup is aria-hidden).

const readline = require('readline');
const {mathjax} = require('mathjax-full/js/mathjax.js');
const {TeX} = require('mathjax-full/js/input/tex.js');
const {CHTML} = require('mathjax-full/js/output/chtml.js');
const {liteAdaptor} = require('mathjax-full/js/adaptors/liteAdaptor.js');
const {RegisterHTMLHandler} = require('mathjax-full/js/handlers/html.js');
const {AssistiveMmlHandler} = require('mathjax-full/js/a11y/assistive-mml.js');
require('mathjax-full/js/input/tex/base/BaseConfiguration.js');
require('mathjax-full/js/input/tex/ams/AmsConfiguration.js');

const adaptor = liteAdaptor();
AssistiveMmlHandler(RegisterHTMLHandler(adaptor));

// The metrics MathJax would otherwise measure in a browser: 16 px text, MathJax's own ex height
// (scaled by `scale` instead), and the 80-em column the site's text is at most.
const METRICS = {em: 16, ex: 8, containerWidth: 80 * 16};

// Every container gets the same inline style (the scale, and the relative position the assistive
// MathML is placed against): one rule in the page's stylesheet instead, about 45 bytes a formula.
function containerRule(scale) {
  const style = `font-size: ${Math.round(scale * 1000) / 10}%; position: relative;`;
  return {style, rule: `mjx-container.MathJax[jax="CHTML"] {${style}}`};
}

function typesetPage(request) {
  if (!Array.isArray(request.math) || typeof request.fontURL !== 'string' || typeof request.scale !== 'number') {
    throw new Error(`expected {math: [[tex, display], ...], fontURL: string, scale: number}, got ${JSON.stringify(request).slice(0, 200)}`);
  }
  const errors = [];
  const tex = new TeX({packages: ['base', 'ams'], formatError: (jax, err) => { throw err; }});
  const chtml = new CHTML({fontURL: request.fontURL, scale: request.scale, adaptiveCSS: true});
  const doc = mathjax.document('', {InputJax: tex, OutputJax: chtml});
  const shared = containerRule(request.scale);
  const html = request.math.map(([source, display]) => {
    try {
      const node = doc.convert(source, {display: Boolean(display), ...METRICS});
      if (adaptor.getAttribute(node, 'style') === shared.style) {
        adaptor.removeAttribute(node, 'style');
      }
      // A display formula wider than a phone scrolls sideways (book/_static/course.css), and a
      // region that scrolls must be reachable by keyboard: each display formula is a tab stop, as
      // every formula is when MathJax runs in a browser with its menu.
      if (display) {
        adaptor.setAttribute(node, 'tabindex', '0');
      }
      return adaptor.outerHTML(node);
    } catch (err) {
      errors.push(`${display ? 'display' : 'inline'} math ${JSON.stringify(source)}: ${err.message}`);
      return '';
    }
  });
  // The stylesheet without its line breaks and indentation (no rule holds a line break of its own).
  const css = (adaptor.textContent(chtml.styleSheet(doc)) + shared.rule).replace(/\n\s*/g, '');
  return {html, css, errors};
}

readline.createInterface({input: process.stdin}).on('line', (line) => {
  let reply;
  try {
    reply = typesetPage(JSON.parse(line));
  } catch (err) {
    reply = {html: [], css: '', errors: [String((err && err.message) || err)]};
  }
  process.stdout.write(JSON.stringify(reply) + '\n');
});
