/* Self-Attention from Scratch: interactive figures. No dependencies, no network.
 * Each figure is a <div class="sa-widget" data-kind="..."> holding its data in a
 * JSON script element of class sa-data, and a static fallback figure,
 * which stays visible where scripts do not run. Every number shown comes from the
 * data, which the chapter's NumPy code exported. Written for the course; MIT licence. */
(function () {
  "use strict";
  if (window.SAWidgets) { window.SAWidgets.scan(); return; }

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (key) {
      if (key === "text") node.textContent = attrs[key];
      else if (key === "class") node.className = attrs[key];
      else node.setAttribute(key, attrs[key]);
    });
    (children || []).forEach(function (child) { node.appendChild(child); });
    return node;
  }

  function fmt(x, digits) { return Number(x).toFixed(digits); }

  function labelled(text, control) {
    var id = "sa-" + Math.random().toString(36).slice(2, 9);
    control.id = id;
    return el("span", { "class": "sa-control" }, [el("label", { "for": id, text: text }), control]);
  }

  function select(options, value) {
    var node = el("select");
    options.forEach(function (option) {
      var item = el("option", { value: String(option[0]), text: option[1] });
      if (String(option[0]) === String(value)) item.selected = true;
      node.appendChild(item);
    });
    return node;
  }

  /* ---------------------------------------------------------------- attention explorer */
  function explorer(root, data) {
    var state = { text: 0, layer: data.layer || 0, head: data.head || 0, query: 0 };
    var controls = el("div", { "class": "sa-controls" });
    var textSelect = select(data.texts.map(function (t, i) { return [i, t.label]; }), 0);
    var layerSelect = select(range(data.layers).map(function (i) { return [i, "layer " + i]; }), state.layer);
    var headSelect = select(range(data.heads).map(function (i) { return [i, "head " + i]; }), state.head);
    if (data.texts.length > 1) controls.appendChild(labelled("Text", textSelect));
    if (data.layers > 1) controls.appendChild(labelled("Layer", layerSelect));
    if (data.heads > 1) controls.appendChild(labelled("Head", headSelect));
    var tokens = el("div", { "class": "sa-tokens", role: "toolbar", "aria-label": "query token" });
    var status = el("p", { "class": "sa-status", "aria-live": "polite" });
    var table = el("div", { "class": "sa-rows", role: "list", "aria-label": "the query's weight on each key" });
    root.appendChild(controls);
    root.appendChild(el("p", { "class": "sa-hint", text: "Point at, click or tab to a query token; the arrow keys move along the sentence." }));
    root.appendChild(tokens);
    root.appendChild(status);
    root.appendChild(table);

    function row() {
      return data.texts[state.text].weights[state.layer][state.head][state.query];  // per-mille ints
    }
    function drawTokens() {
      tokens.innerHTML = "";
      data.texts[state.text].tokens.forEach(function (token, i) {
        var button = el("button", { type: "button", "class": "sa-token", "data-index": i, text: token });
        button.addEventListener("click", function () { setQuery(i, true); });
        button.addEventListener("mouseenter", function () { setQuery(i, false); });
        button.addEventListener("focus", function () { setQuery(i, false); });
        button.addEventListener("keydown", function (event) {
          var n = data.texts[state.text].tokens.length;
          if (event.key === "ArrowRight" || event.key === "ArrowLeft") {
            event.preventDefault();
            var next = (i + (event.key === "ArrowRight" ? 1 : n - 1)) % n;
            tokens.children[next].focus();
          }
        });
        tokens.appendChild(button);
      });
    }
    function setQuery(i, keepFocus) {
      state.query = i;
      draw();
      if (keepFocus) tokens.children[i].focus();
    }
    function draw() {
      var words = data.texts[state.text].tokens;
      var weights = row();
      var best = data.texts[state.text].best[state.layer][state.head][state.query];  // from the unrounded weights
      Array.prototype.forEach.call(tokens.children, function (button, j) {
        button.setAttribute("aria-pressed", j === state.query ? "true" : "false");
        button.style.setProperty("--sa-weight", String(weights[j] / 1000));
      });
      status.textContent = (data.layers > 1 ? "Layer " + state.layer + ", head " + state.head + ": " : "") +
        "query " + JSON.stringify(words[state.query]) + " puts most weight (" + fmt(weights[best] / 1000, 3) +
        ") on " + JSON.stringify(words[best]) + ".";
      table.innerHTML = "";
      words.forEach(function (word, j) {
        var bar = el("span", { "class": "sa-bar" });
        bar.style.width = (weights[j] / 10) + "%";
        table.appendChild(el("div", { "class": "sa-row", role: "listitem", "data-key": j }, [
          el("span", { "class": "sa-key", text: word }),
          el("span", { "class": "sa-track" }, [bar]),
          el("span", { "class": "sa-value", text: fmt(weights[j] / 1000, 3) })
        ]));
      });
    }
    textSelect.addEventListener("change", function () { state.text = +textSelect.value; state.query = 0; drawTokens(); draw(); });
    layerSelect.addEventListener("change", function () { state.layer = +layerSelect.value; draw(); });
    headSelect.addEventListener("change", function () { state.head = +headSelect.value; draw(); });
    drawTokens();
    draw();
  }

  /* ---------------------------------------------------------------- online-softmax stepper */
  function stepper(root, data) {
    var step = 0;
    var last = data.steps.length;  // step 0: nothing read; step k: blocks 0..k-1 read
    var back = el("button", { type: "button", "class": "sa-step", text: "\u2190 previous block" });
    var forward = el("button", { type: "button", "class": "sa-step", text: "next block \u2192" });
    var controls = el("div", { "class": "sa-controls" }, [back, forward]);
    var keys = el("div", { "class": "sa-keys", role: "list", "aria-label": "the query's scores, key by key" });
    var readout = el("dl", { "class": "sa-readout", "aria-live": "polite" });
    root.appendChild(el("p", { "class": "sa-hint", text: "Step through the key blocks with the buttons or the arrow keys." }));
    root.appendChild(controls);
    root.appendChild(keys);
    root.appendChild(readout);
    data.scores.forEach(function (score, j) {
      keys.appendChild(el("span", { "class": "sa-score", role: "listitem", "data-block": Math.floor(j / data.block_size), text: fmt(score, 2) }));
    });
    function item(name, value, key) {
      readout.appendChild(el("dt", { text: name }));
      readout.appendChild(el("dd", { "data-name": key, text: value }));
    }
    function vector(values) { return "[" + values.map(function (x) { return fmt(x, 4); }).join(", ") + "]"; }
    function draw() {
      back.disabled = step === 0;
      forward.disabled = step === last;
      Array.prototype.forEach.call(keys.children, function (cell) {
        var block = +cell.getAttribute("data-block");
        cell.className = "sa-score" + (block < step - 1 ? " sa-read" : block === step - 1 ? " sa-current" : "");
      });
      readout.innerHTML = "";
      item("blocks read", step + " of " + last, "step");
      if (step === 0) {
        item("running maximum m", "\u2212\u221e", "m");
        item("running sum \u2113", "0", "l");
        item("output so far", "nothing yet", "out");
        return;
      }
      var s = data.steps[step - 1];
      item("block's largest score", fmt(s.block_max, 4), "block_max");
      item("running maximum m", fmt(s.m, 4), "m");
      item("rescaling of the old sum, exp(m_old \u2212 m)", fmt(s.rescale, 4), "rescale");
      item("running sum \u2113", fmt(s.l, 4), "l");
      item("output so far, o / \u2113", vector(s.out), "out");
      if (step === last) {
        item("exact softmax(scores) @ V", vector(data.exact), "exact");
        var a = data.agreement;
        item("largest difference", (a.within ? "below " : "") + String(a.within ? a.tolerance : a.difference), "difference");
      }
    }
    function go(delta) {
      step = Math.max(0, Math.min(last, step + delta));
      var focused = document.activeElement;
      draw();
      // A button that disables itself would drop the keyboard focus to the page: hand it to the other one.
      if (focused === forward && forward.disabled) back.focus();
      if (focused === back && back.disabled) forward.focus();
    }
    back.addEventListener("click", function () { go(-1); });
    forward.addEventListener("click", function () { go(1); });
    root.addEventListener("keydown", function (event) {
      if (event.key === "ArrowRight") { event.preventDefault(); go(1); }
      if (event.key === "ArrowLeft") { event.preventDefault(); go(-1); }
    });
    draw();
  }

  /* ---------------------------------------------------------------- mask builder */
  function maskBuilder(root, data) {
    var pattern = select(data.patterns.map(function (p) { return [p[0], p[1]]; }), data.patterns[1][0]);
    var lengths = select(data.lengths.map(function (n) { return [n, n + " of " + data.T]; }), data.T);
    var controls = el("div", { "class": "sa-controls" }, [
      labelled("Pattern", pattern), labelled("Real tokens (the rest is padding)", lengths)
    ]);
    var grid = el("div", { "class": "sa-grid", role: "img" });
    var status = el("p", { "class": "sa-status", "aria-live": "polite" });
    root.appendChild(controls);
    root.appendChild(el("p", { "class": "sa-hint", text: "Rows are queries, columns keys; a tick: the query may attend to the key." }));
    root.appendChild(grid);
    root.appendChild(status);
    function draw() {
      var mask = data.masks[pattern.value + "," + lengths.value];
      grid.innerHTML = "";
      grid.style.gridTemplateColumns = "repeat(" + data.T + ", minmax(0, 1fr))";
      var allowed = 0;
      mask.forEach(function (bits, i) {
        bits.split("").forEach(function (bit, j) {
          allowed += bit === "1" ? 1 : 0;
          grid.appendChild(el("span", {
            "class": "sa-cell" + (bit === "1" ? " sa-on" : ""), "data-row": i, "data-col": j, text: bit === "1" ? "\u2713" : ""
          }));
        });
      });
      var label = pattern.options[pattern.selectedIndex].text;
      grid.setAttribute("aria-label", "The " + label + " mask with " + lengths.value + " real tokens: " +
        mask.map(function (bits, i) { return "query " + i + " sees " + bits.split("").filter(function (b) { return b === "1"; }).length; }).join(", "));
      status.textContent = allowed + " of " + (data.T * data.T) + " query-key pairs may attend.";
    }
    [pattern, lengths].forEach(function (control) { control.addEventListener("change", draw); });
    draw();
  }

  function range(n) { var out = []; for (var i = 0; i < n; i++) out.push(i); return out; }

  var KINDS = { explorer: explorer, stepper: stepper, mask: maskBuilder };

  function scan() {
    Array.prototype.forEach.call(document.querySelectorAll(".sa-widget:not([data-ready])"), function (root) {
      var source = root.querySelector("script.sa-data");
      var build = KINDS[root.getAttribute("data-kind")];
      if (!source || !build) return;
      root.setAttribute("data-ready", "true");
      var live = el("div", { "class": "sa-live" });
      root.appendChild(live);
      build(live, JSON.parse(source.textContent));
      root.classList.add("sa-has-js");  // hides the static fallback
    });
  }

  window.SAWidgets = { scan: scan };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", scan);
  else scan();
})();
