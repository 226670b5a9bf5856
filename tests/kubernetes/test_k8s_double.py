"""The API server double's own rules, checked against Kubernetes' behaviour and test vectors."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from hybrid.kubernetes.pods import escape_expansion
from tests.kubernetes.kube_api_double import (
    expand,
    label_selector_matches,
    parse_quantity,
)

# Vectors from Kubernetes' third_party/forked/golang/expansion/expand_test.go.
MAPPING = {"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)",
           "VAR_EMPTY": "", "BIG_MONEY": "$()"}


@pytest.mark.parametrize(("text", "expected"), [
    ("$(VAR_A)", "A"),
    ("___$(VAR_B)___", "___B___"),
    ("$(VAR_A)-$(VAR_A)", "A-A"),
    ("$(VAR_A)-1", "A-1"),
    ("$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"),
    ("$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),
    ("$$(VAR_DNE)", "$(VAR_DNE)"),
    ("$(VAR_DNE)", "$(VAR_DNE)"),
    ("$(VAR_REF)", "$(VAR_A)"),
    ("foo$(VAR_EMPTY)bar", "foobar"),
    ("$$$$$$(BIG_MONEY)", "$$$(BIG_MONEY)"),
    ("$$$$$$$(BIG_MONEY)", "$$$$()"),
    ("$VAR_A", "$VAR_A"),
    ("$(VAR_A", "$(VAR_A"),
    ("$", "$"),
    ("$$", "$"),
    ("f00__(VAR_A)__", "f00__(VAR_A)__"),
    ("$()", "$()"),
])
def test_expansion_matches_kubernetes(text: str, expected: str) -> None:
    assert expand(text, MAPPING) == expected


def test_escaped_strings_survive_expansion() -> None:
    generator = random.Random(6)
    alphabet = "$()AB_ \n\"'\\{}"
    for _ in range(2000):
        text = "".join(generator.choice(alphabet) for _ in range(generator.randint(0, 12)))
        assert expand(escape_expansion(text), MAPPING) == text


@pytest.mark.parametrize(("text", "value"), [
    ("4Gi", 4 * 2**30), ("500m", Fraction(1, 2)), ("1e3", 1000), ("2", 2), ("5T", 5 * 10**12),
    ("1.5Gi", 3 * 2**29), (".5", Fraction(1, 2)),
])
def test_quantities(text: str, value) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["4 Gi", "Gi", "4GB", "-", "1..2", ""])
def test_bad_quantities(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)


@pytest.mark.parametrize(("selector", "matches"), [
    ("a=1", True), ("a==1", True), ("a!=1", False), ("a=1,b=2", True), ("a=1,b=3", False),
    ("c", False), ("!c", True), ("a", True), ("a in (1,2)", True), ("a notin (1,2)", False),
    ("b in (3, 4),a=1", False), ("", True),
])
def test_label_selectors(selector: str, matches: bool) -> None:
    assert label_selector_matches(selector, {"a": "1", "b": "2"}) is matches
