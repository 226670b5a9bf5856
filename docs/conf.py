"""Sphinx configuration for hybrid's documentation (built with -W: warnings are errors)."""

project = "hybrid"
author = "the hybrid developers"
copyright = "2026, the hybrid developers"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
exclude_patterns = ["_build"]
html_theme = "alabaster"
autodoc_typehints = "description"
nitpicky = False
