// Replaces pydata-sphinx-theme's scripts/fontawesome.js (1.5 MB: every Font
// Awesome icon as SVG paths, swapped into the page by script). The theme's
// stylesheet already carries Font Awesome's CSS and webfonts, which draw every
// <i class="fa-..."> icon on their own, so this file is intentionally empty.
// Sphinx copies html_static_path after the theme's static files, so this file
// wins. tests/test_site.py checks that the icons still show.
