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
  function quoted(words, j) {
    // A token's text in quotes; its position too when the same text occurs twice in the sentence.
    var repeated = words.filter(function (w) { return w === words[j]; }).length > 1;
    return JSON.stringify(words[j]) + (repeated ? " (token " + j + ")" : "");
  }

  function listed(names) {
    return names.length < 3 ? names.join(" and ") : names.slice(0, -1).join(", ") + " and " + names[names.length - 1];
  }

  function explorer(root, data) {
    var state = { text: data.text || 0, layer: data.layer || 0, head: data.head || 0, query: data.query || 0 };
    var controls = el("div", { "class": "sa-controls" });
    var textSelect = select(data.texts.map(function (t, i) { return [i, t.label]; }), state.text);
    var layerSelect = select(range(data.layers).map(function (i) { return [i, "layer " + i]; }), state.layer);
    var headSelect = select(range(data.heads).map(function (i) { return [i, "head " + i]; }), state.head);
    if (data.texts.length > 1) controls.appendChild(labelled("Text", textSelect));
    if (data.layers > 1) controls.appendChild(labelled("Layer", layerSelect));
    if (data.heads > 1) controls.appendChild(labelled("Head", headSelect));
    var tokens = el("div", { "class": "sa-tokens", role: "toolbar", "aria-label": "query token" });
    var status = el("p", { "class": "sa-status", "aria-live": "polite" });
    var table = el("div", { "class": "sa-rows", role: "list", "aria-label": "the query's weight on each key" });
    root.appendChild(controls);
    root.appendChild(el("p", { "class": "sa-hint", text: "Click or tap a query token, or tab to the tokens and move with the arrow keys." }));
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
        // Click, tap, Enter and Space select (a button's click); pointing and focusing only highlight.
        button.addEventListener("click", function () { setQuery(i); });
        button.addEventListener("keydown", function (event) {
          var n = data.texts[state.text].tokens.length, next = null;
          if (event.key === "ArrowRight") next = (i + 1) % n;
          if (event.key === "ArrowLeft") next = (i + n - 1) % n;
          if (event.key === "Home") next = 0;
          if (event.key === "End") next = n - 1;
          if (next === null) return;
          event.preventDefault();
          setQuery(next);
          tokens.children[next].focus();
        });
        tokens.appendChild(button);
      });
    }
    function setQuery(i) {
      state.query = i;
      draw();
    }
    function draw() {
      var words = data.texts[state.text].tokens;
      var weights = row();
      // Every key whose weight, as shown (three decimals), equals the row's largest: a tie names them all.
      var best = data.texts[state.text].best[state.layer][state.head][state.query];
      Array.prototype.forEach.call(tokens.children, function (button, j) {
        button.setAttribute("aria-pressed", j === state.query ? "true" : "false");
        button.tabIndex = j === state.query ? 0 : -1;  // one tab stop: the selected token
        button.style.setProperty("--sa-weight", String(weights[j] / 1000));
      });
      var top = fmt(weights[best[0]] / 1000, 3);
      var names = best.map(function (j) { return quoted(words, j); });
      var prefix = (data.layers > 1 ? "Layer " + state.layer + ", head " + state.head + ": " : "") +
        "query " + quoted(words, state.query);
      if (best.length === 1) status.textContent = prefix + " puts most weight (" + top + ") on " + names[0] + ".";
      else if (best.length === words.length) status.textContent = prefix + " spreads its weight evenly: " + top + " on each of the " + words.length + " keys (a tie).";
      else status.textContent = prefix + " puts most weight, tied at " + top + " each, on " + listed(names) + ".";
      table.innerHTML = "";
      words.forEach(function (word, j) {
        var bar = el("span", { "class": "sa-bar" });
        bar.style.width = (weights[j] / 10) + "%";
        var most = best.indexOf(j) >= 0;
        table.appendChild(el("div", { "class": "sa-row" + (most ? " sa-most" : ""), role: "listitem", "data-key": j }, [
          el("span", { "class": "sa-key", text: word }),
          el("span", { "class": "sa-track" }, [bar]),
          el("span", { "class": "sa-value", text: fmt(weights[j] / 1000, 3) })
        ]));
      });
    }
    textSelect.addEventListener("change", function () {
      state.text = +textSelect.value;
      state.query = Math.min(state.query, data.texts[state.text].tokens.length - 1);
      drawTokens(); draw();
    });
    layerSelect.addEventListener("change", function () { state.layer = +layerSelect.value; draw(); });
    headSelect.addEventListener("change", function () { state.head = +headSelect.value; draw(); });
    drawTokens();
    draw();
  }

  /* ---------------------------------------------------------------- online-softmax stepper */
  function stepper(root, data) {
    var step = 0;
    var last = data.steps.length;  // step 0: nothing read; step k: blocks 0..k-1 read
    var size = data.block_size, S = data.scores.length;
    var back = el("button", { type: "button", "class": "sa-step", text: "\u2190 previous block" });
    var forward = el("button", { type: "button", "class": "sa-step", text: "next block \u2192" });
    var controls = el("div", { "class": "sa-controls" }, [back, forward]);
    // One table: the keys in their blocks (a heading row opens each block), each key's score, its weight p
    // among the keys read so far, and its value row v; the last row is the sum of p times v, the output so far.
    var table = el("table", { "class": "sa-fold" });
    var head = el("tr", {}, ["key", "score s", "weight p", "value v"].map(function (name) {
      return el("th", { scope: "col", text: name });
    }));
    table.appendChild(el("caption", { "class": "sa-hint", text: "Keys in blocks of " + size + ". p = exp(s \u2212 m) / \u2113 " +
      "over the keys read so far; the output so far is the sum of p \u00d7 v." }));
    table.appendChild(el("thead", {}, [head]));
    var blocks = [], cells = [];
    for (var b = 0; b * size < S; b++) {
      var first = b * size, end = Math.min(S, first + size) - 1;
      var label = el("span", { "class": "sa-block-state" });
      var body = el("tbody", { "class": "sa-block", "data-block": b }, [el("tr", { "class": "sa-block-head" }, [
        el("th", { scope: "rowgroup", colspan: "4" }, [
          el("span", { text: "block " + (b + 1) + ": key" + (first === end ? " " + first : "s " + first + "\u2013" + end) }), label
        ])
      ])]);
      for (var j = first; j <= end; j++) {
        var score = el("td", { "class": "sa-score", "data-block": b, text: fmt(data.scores[j], 2) });
        var weight = el("td", { "class": "sa-p", "data-key": j });
        body.appendChild(el("tr", { "data-key": j }, [
          el("th", { scope: "row", text: String(j) }), score, weight,
          el("td", { "class": "sa-v", text: vector(data.values[j]) })
        ]));
        cells.push([score, weight]);
      }
      blocks.push([body, label]);
      table.appendChild(body);
    }
    var sum = el("td", { "class": "sa-v", "data-name": "sum" });
    var sumLabel = el("th", { scope: "row", colspan: "3", text: "output so far = \u03a3 p \u00d7 v" });
    table.appendChild(el("tfoot", {}, [el("tr", {}, [sumLabel, sum])]));
    var readout = el("dl", { "class": "sa-readout", "aria-live": "polite" });
    root.appendChild(el("p", { "class": "sa-hint", text: "Step through the key blocks with the buttons or the arrow keys." }));
    root.appendChild(controls);
    root.appendChild(el("div", { "class": "sa-scroll" }, [table]));
    root.appendChild(readout);
    function item(name, value, key) {
      readout.appendChild(el("dt", { text: name }));
      readout.appendChild(el("dd", { "data-name": key, text: value }));
    }
    function vector(values, digits) { return "[" + values.map(function (x) { return fmt(x, digits || 4); }).join(", ") + "]"; }
    function draw() {
      back.disabled = step === 0;
      forward.disabled = step === last;
      var weights = step === 0 ? [] : data.steps[step - 1].weights;
      blocks.forEach(function (pair, b) {
        var state = b < step - 1 ? "read" : b === step - 1 ? "read now" : "not read yet";
        pair[0].className = "sa-block" + (b < step - 1 ? " sa-read" : b === step - 1 ? " sa-current" : "");
        pair[1].textContent = " (" + state + ")";
      });
      cells.forEach(function (pair, j) {
        var block = Math.floor(j / size);
        pair[0].className = "sa-score" + (block < step - 1 ? " sa-read" : block === step - 1 ? " sa-current" : "");
        pair[1].textContent = j < weights.length ? fmt(weights[j], 4) : "\u2014";
      });
      sum.textContent = step === 0 ? "nothing yet" : vector(data.steps[step - 1].out);
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
    var T = data.T;
    var pattern = select(data.patterns.map(function (p) { return [p[0], p[1]]; }), data.patterns[1][0]);
    var lengths = select(data.lengths.map(function (n) { return [n, n + " of " + T]; }), T);
    var controls = el("div", { "class": "sa-controls" }, [
      labelled("Pattern", pattern), labelled("Real tokens (the rest is padding)", lengths)
    ]);
    // The grid has a row of key numbers on top and a column of query numbers on the left; padding rows and
    // columns are hatched and their numbers read "pad".
    var grid = el("div", { "class": "sa-grid", role: "img" });
    var legend = el("p", { "class": "sa-legend" });
    var status = el("p", { "class": "sa-status", "aria-live": "polite" });
    root.appendChild(controls);
    root.appendChild(el("p", { "class": "sa-hint", text: "Rows are queries, columns keys (numbered from 0); a tick: the query may attend to the key." }));
    root.appendChild(el("div", { "class": "sa-axis", "aria-hidden": "true", text: "key \u2192" }));
    root.appendChild(grid);
    root.appendChild(legend);
    root.appendChild(status);
    function label(i, real, axis) {
      var pad = i >= real;
      return el("span", { "class": "sa-index sa-index-" + axis + (pad ? " sa-pad" : ""), "aria-hidden": "true" }, [
        el("span", { text: String(i) })
      ].concat(pad ? [el("span", { "class": "sa-pad-label", text: "pad" })] : []));
    }
    function draw() {
      var mask = data.masks[pattern.value + "," + lengths.value];
      var real = +lengths.value;
      grid.innerHTML = "";
      grid.style.gridTemplateColumns = "minmax(1.6rem, auto) repeat(" + T + ", minmax(0, 1fr))";
      grid.appendChild(el("span", { "class": "sa-corner", "aria-hidden": "true" }, [
        el("span", { text: "query" }), el("span", { text: "\u2193" })
      ]));
      for (var j = 0; j < T; j++) grid.appendChild(label(j, real, "col"));
      var allowed = 0;
      mask.forEach(function (bits, i) {
        grid.appendChild(label(i, real, "row"));
        bits.split("").forEach(function (bit, j) {
          allowed += bit === "1" ? 1 : 0;
          var pad = i >= real || j >= real;
          grid.appendChild(el("span", {
            "class": "sa-cell" + (bit === "1" ? " sa-on" : "") + (pad ? " sa-pad" : ""), "data-row": i, "data-col": j
          }, bit === "1" ? [el("span", { "class": "sa-tick", text: "\u2713" })] : []));
        });
      });
      var text = pattern.options[pattern.selectedIndex].text;
      var padded = range(T).slice(real);
      var padding = padded.length ? (padded.length === 1 ? "token " : "tokens ") + listed(padded.map(String)) : "no padding";
      legend.textContent = padded.length ? "Padding (hatched, numbers marked \u201cpad\u201d): " + padding + ". No query may " +
        "attend to a padding key; padding queries still attend here, but their outputs are not used." :
        "No padding: all " + T + " tokens are real.";
      grid.setAttribute("aria-label", "The " + text + " mask with " + real + " real tokens (" + padding + "): " +
        mask.map(function (bits, i) {
          var keys = [];
          bits.split("").forEach(function (b, j) { if (b === "1") keys.push(j); });
          return "query " + i + (i >= real ? " (pad)" : "") + " sees " + (keys.length ? "keys " + keys.join(" ") : "no key");
        }).join("; "));
      status.textContent = allowed + " of " + (T * T) + " query-key pairs may attend.";
    }
    [pattern, lengths].forEach(function (control) { control.addEventListener("change", draw); });
    draw();
  }

  /* ---------------------------------------------------------------- next-token explorer */
  function thousands(n) { return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ","); }

  function nextToken(root, data) {
    // Every number is in the data, in thousandths: row = [kept, rest, cut, each kept listed token's probability].
    var state = { prompt: 0, t: data.start[0], k: data.start[1], p: data.start[2] };
    var K = data.top_k.length, P = data.top_p.length;
    var controls = el("div", { "class": "sa-controls" });
    var promptSelect = select(data.prompts.map(function (p, i) { return [i, p.label]; }), 0);
    if (data.prompts.length > 1) controls.appendChild(labelled("Prompt", promptSelect));
    function shown(value) { return value === null ? "off" : String(value); }
    var syncs = [["t", "Temperature", data.temperatures], ["k", "Top-k", data.top_k], ["p", "Top-p", data.top_p]]
      .filter(function (spec) { return spec[2].length > 1; })
      .map(function (spec) {
        var key = spec[0], name = spec[1], values = spec[2];
        var input = el("input", { type: "range", min: "0", max: String(values.length - 1), step: "1",
                                  value: String(state[key]), "data-setting": key });
        var output = el("output", { "class": "sa-setting", "data-setting": key });
        function sync() {
          input.value = String(state[key]);
          output.textContent = shown(values[state[key]]);
          input.setAttribute("aria-valuetext", name + " " + shown(values[state[key]]));
        }
        input.addEventListener("input", function () { state[key] = +input.value; sync(); draw(); });
        var control = labelled(name, input);
        control.appendChild(output);
        controls.appendChild(control);
        return sync;
      });
    var text = el("p", { "class": "sa-prompt", tabindex: "0", "aria-label": "the prompt the model continues" });
    var list = el("div", { "class": "sa-rows sa-next", role: "list", "aria-label": "the most likely next tokens" });
    var readout = el("dl", { "class": "sa-readout", "aria-live": "polite" });
    root.appendChild(controls);
    root.appendChild(el("p", { "class": "sa-hint", text: "Move a slider, or focus it and press the arrow keys. " +
      "Greyed tokens are dropped by top-k or top-p (their bar: the probability before the cut); " +
      "the kept ones are renormalised to sum to 1. \u2423 is a space, \u21b5 a new line." }));
    root.appendChild(text);
    root.appendChild(list);
    root.appendChild(readout);

    function item(name, value, key) {
      readout.appendChild(el("dt", { text: name }));
      readout.appendChild(el("dd", { "data-name": key, text: value }));
    }
    function draw() {
      var prompt = data.prompts[state.prompt];
      var row = prompt.rows[prompt.settings[(state.t * K + state.k) * P + state.p]];
      var before = prompt.rows[prompt.settings[state.t * K * P]];  // the same temperature, no cut
      text.textContent = prompt.text.replace(/ $/, "\u2423").replace(/\n/g, "\u21b5\n");  // as the tokens show them
      list.innerHTML = "";
      prompt.tokens.forEach(function (token, j) {
        var value = row[3 + j], dropped = j >= row[0];  // a cut keeps the most likely tokens: the first row[0]
        var bar = el("span", { "class": "sa-bar" });
        bar.style.width = ((dropped ? before[3 + j] : value) / 10) + "%";
        list.appendChild(el("div", {
          "class": "sa-row" + (dropped ? " sa-dropped" : ""), role: "listitem", "data-rank": j,
          title: dropped ? fmt(before[3 + j] / 1000, 3) + " before the cut" : token
        }, [
          el("span", { "class": "sa-key", text: token }),
          el("span", { "class": "sa-track" }, [bar]),
          el("span", { "class": "sa-value", text: dropped ? "dropped" : fmt(value / 1000, 3) })
        ]));
      });
      readout.innerHTML = "";
      item("tokens kept", thousands(row[0]) + " of " + thousands(data.vocabulary), "kept");
      item("probability the cut removed, before renormalising", fmt(row[2] / 1000, 3), "cut");
      item("probability of the kept tokens not listed", fmt(row[1] / 1000, 3), "rest");
    }
    promptSelect.addEventListener("change", function () { state.prompt = +promptSelect.value; draw(); });
    syncs.forEach(function (sync) { sync(); });
    draw();
  }

  function range(n) { var out = []; for (var i = 0; i < n; i++) out.push(i); return out; }

  var KINDS = { explorer: explorer, stepper: stepper, mask: maskBuilder, next: nextToken };

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
