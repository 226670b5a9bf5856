"""docs/reliability.md says what the suite proves, in the suite's own numbers.

The page's generated blocks (between ``<!-- reliability: NAME -->`` and
``<!-- /reliability -->``) are the tables of test_bad_input.py and the settings of
test_templates_property.py, rendered by :func:`blocks`; the test fails when a table changes
and the page does not. The Secrets and Concurrency sections name every test of their modules
(and no other). After changing a table, refresh the page with::

    python -m tests.reliability.test_reliability_page --write
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

from tests.reliability import (
    test_bad_input,
    test_concurrency,
    test_secrets,
    test_templates_property,
)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
BLOCK = re.compile(r"<!-- reliability: (?P<name>[a-z-]+) -->\n(?P<body>.*?)<!-- /reliability -->",
                   re.DOTALL)
WHERE = ("API", "CLI", "hybrid.yaml", "environment")


def _code(text: str) -> str:
    """A markdown code span of ``text`` (inside a table cell)."""
    text = text.replace("|", "\\|").replace("\n", "\\n")
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _mark(issue: bool) -> str:
    return "13" if issue else ""


def _counts(cases: list[test_bad_input.Case]) -> str:
    counted = Counter(case.where for case in cases)
    return ", ".join(f"{counted[where]} {label}" for where, label in zip(
        WHERE, ("through the API", "on the command line", "in hybrid.yaml",
                "in DASK_HYBRID__ variables"), strict=True))


def blocks() -> dict[str, str]:
    """Every generated block of the page, by name."""
    cases, fixed, still_open = (test_bad_input.BAD_INPUTS, test_bad_input.FIXED,
                                test_bad_input.OPEN)
    measured = [case for case in cases if case.issue]
    summary = (
        f"**{len(cases)} bad inputs** ({_counts(cases)}). **{len(fixed)}** are answered by "
        "one error that names the field, with nothing submitted to the real Slurm and "
        "HTCondor and nothing left in the staging directory or on the gateway; "
        f"**{len(still_open)}** are still open (below). {len(measured)} of them are the cases "
        f"issue 13 measured ({sum(1 for c in measured if c.open is None)} fixed, "
        f"{sum(1 for c in measured if c.open)} open); they are marked 13.\n")
    property_settings = test_templates_property.\
        test_user_strings_arrive_unchanged_as_data_on_every_system.\
        _hypothesis_internal_use_settings
    return {
        "bad-input-summary": summary,
        "bad-inputs": _table(("Case", "Where", "Value", "The error names", "Issue"), [
            (case.id, case.where, _code(case.value), _code(case.field), _mark(case.issue))
            for case in fixed]),
        "open-inputs": _table(("Case", "Where", "Value", "Must name", "What is wrong"), [
            (case.id, case.where, _code(case.value), _code(case.field), case.open or "")
            for case in still_open]),
        "accepted": _table(("Case", "Where", "Value", "Lands in the job as", "Issue"), [
            (case.id, case.where, _code(case.value), case.lands, _mark(case.issue))
            for case in test_bad_input.ACCEPTED]),
        "refused-by-system": _table(("Case", "Where", "Value", "The error carries", "Issue"), [
            (case.id, case.where, _code(case.value), _code(case.words), _mark(case.issue))
            for case in test_bad_input.REFUSED_BY_SYSTEM]),
        "property": (
            f"**{property_settings.max_examples} drawn examples** per run (derandomized: "
            "the same examples each run), each rendered for **6 systems** (Slurm, PBS, LSF, "
            "HTCondor, local, Kubernetes).\n"),
    }


def _page_blocks(text: str) -> dict[str, str]:
    return {match["name"]: match["body"] for match in BLOCK.finditer(text)}


def _tests_named(module: ModuleType) -> set[str]:
    return {name for name in vars(module) if name.startswith("test_")}


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def test_the_page_shows_the_tables_of_the_suite() -> None:
    on_page = _page_blocks(PAGE.read_text())
    expected = blocks()
    assert set(on_page) == set(expected)
    for name, body in expected.items():
        assert on_page[name] == body, f"block {name} is stale: run {__doc__.split('::')[-1]}"


#: Tests of other folders the sections cite, by the file that holds them.
CITED = {"test_wrong_certificate_and_wrong_sni_are_refused": "tests/gateway/test_dev_gateway.py"}


def test_the_secrets_and_concurrency_sections_name_every_test() -> None:
    text = PAGE.read_text()
    for title, module in (("Secrets", test_secrets), ("Concurrency", test_concurrency)):
        named = set(re.findall(r"`(test_[a-z0-9_]+)`", _section(text, title)))
        assert named - set(CITED) == _tests_named(module), title
    root = PAGE.parents[1]
    for name, path in CITED.items():
        assert f"def {name}(" in (root / path).read_text()


def _write() -> None:
    text = PAGE.read_text()
    for name, body in blocks().items():
        text = re.sub(rf"(<!-- reliability: {name} -->\n).*?(<!-- /reliability -->)",
                      lambda m, body=body: m[1] + body + m[2], text, flags=re.DOTALL)
    PAGE.write_text(text)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        _write()
    else:
        for name, body in blocks().items():
            print(f"<!-- reliability: {name} -->\n{body}<!-- /reliability -->\n")
