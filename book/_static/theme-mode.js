// pydata-sphinx-theme sets data-mode from localStorage, or "" on a reader's
// first visit, and then logs "Got invalid theme mode" to the console before
// falling back to "auto". Start from "auto" instead, so that the first visit
// is as clean as every later one. Runs before the theme's deferred script.
if (!document.documentElement.dataset.mode) {
  document.documentElement.dataset.mode = "auto";
}
