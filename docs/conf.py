"""Sphinx configuration for hybrid's documentation (built with -W: warnings are errors).

    .venv/bin/sphinx-build -W -q -b html docs /tmp/docs-out

The API reference (docs/api/) is generated from the docstrings by autodoc, numpydoc sections
read by napoleon. ``nitpicky`` is on: every class link must resolve. Names of other
projects cannot (no intersphinx: the build has no network), so they are listed below, by
project, in ``nitpick_ignore_regex``; a hybrid name that does not resolve is an error.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "hybrid"
author = "the hybrid developers"
copyright = "2026, the hybrid developers"
extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "hybrid_docs",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_theme_options = {"description": "Dask on heterogeneous facility resources"}

# -- API reference -------------------------------------------------------------------------
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_member_order = "bysource"
autodoc_class_signature = "mixed"
autodoc_preserve_defaults = True
python_use_unqualified_type_names = True
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False

nitpicky = True
#: Other projects' names (their docs are not reachable without network): by project.
THIRD_PARTY = (
    "_asyncio", "asyncio", "collections", "concurrent", "contextlib", "dask", "dask_gateway",
    "dask_gateway_server", "datetime", "distributed", "enum", "jinja2", "kubernetes",
    "logging", "os", "pathlib", "pint", "psutil", "pydantic", "pydantic_core", "ssl",
    "subprocess", "tornado", "traitlets", "types", "urllib3", "weakref",
)
nitpick_ignore_regex = [
    (r"py:.*", rf"({'|'.join(THIRD_PARTY)})(\..+)?"),
    # short names autodoc writes for other projects' classes in signatures and bases
    (r"py:.*", r"(Cluster|Client|Future|Security|Scheduler|AdaptiveCore|SpecCluster|Nanny"
               r"|Gateway|GatewayCluster|ClusterReport|Options|Backend|BaseModel|ConfigDict"
               r"|SchedulerPlugin|WorkerPlugin|PeriodicCallback|Path|Enum|Quantity"
               r"|UnitRegistry|ValidationError|TypeAdapter|V1[A-Za-z]+|ApiClient)"),
    # typing constructs napoleon and autodoc spell out; type variables
    (r"py:.*", r"(optional|callable|Callable|Iterator|Iterable|Mapping|Sequence)"),
    (r"py:class", r"(hybrid(\.\w+)*\.)?(F|M|T|QuantityT)"),
    # private classes in annotations (a public subclass documents what they hold)
    (r"py:class", r"hybrid(\.\w+)*\._\w+"),
]
smartquotes = False  # "--option" stays two hyphens
