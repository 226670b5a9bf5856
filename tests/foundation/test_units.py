"""hybrid.units: memory and wall-time parsing from strings and from any pint registry."""

from __future__ import annotations

import pint
import pytest

from hybrid.errors import ConfigurationError
from hybrid.units import format_bytes, is_quantity, parse_memory, parse_walltime, to_bytes, unit

#: A registry that is not ours: the stand-in for openff-units (itself a pint registry).
other = pint.UnitRegistry()


@pytest.mark.parametrize(
    ("value", "expected_bytes"),
    [
        ("8 GiB", 8 * 2**30),
        ("512MB", 512 * 10**6),
        ("1.5 GB", 1_500_000_000),
        (8 * unit.gigabytes, 8 * 10**9),
        (3 * unit.GiB, 3 * 2**30),
        (8 * other.gigabytes, 8 * 10**9),
        (other.Quantity(2, "GiB"), 2 * 2**30),
        (other.Quantity(4096, "MiB"), 4 * 2**30),
    ],
)
def test_parse_memory_accepts_strings_and_quantities_of_any_registry(value, expected_bytes):
    quantity = parse_memory(value, "memory")
    assert quantity._REGISTRY is unit  # always converted into our registry
    assert to_bytes(quantity) == expected_bytes


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (8, "a bare number has no unit"),
        (8.0, "a bare number has no unit"),
        ("8", "a quantity with a unit of information"),
        ("8 seconds", "a quantity with a unit of information"),
        (8 * other.second, "a quantity with a unit of information"),
        ("eight gigabytes", "a quantity with a unit of information"),
        (-1 * unit.GiB, "not negative"),
        (None, "a quantity with a unit of information"),
    ],
)
def test_parse_memory_refuses_naming_field_value_and_what_is_accepted(value, why):
    with pytest.raises(ConfigurationError) as caught:
        parse_memory(value, "Thing.memory")
    error = caught.value
    assert error.field == "Thing.memory"
    assert error.value is value
    message = str(error)
    assert message.startswith(f"Thing.memory = {value!r} is not valid")
    assert why in message
    assert '"8 GiB"' in message


@pytest.mark.parametrize(
    ("value", "hhmm"),
    [
        ("05:59", "05:59"),
        ("5:00", "05:00"),
        ("25:30", "25:30"),
        ("01:00:01", "01:01"),  # seconds round up to the next minute
        ("100:00", "100:00"),
        (6 * unit.hour, "06:00"),
        (90 * other.minute, "01:30"),
        (other.Quantity(61, "second"), "00:02"),
    ],
)
def test_parse_walltime(value, hhmm):
    assert parse_walltime(value, "walltime") == hhmm


@pytest.mark.parametrize(
    ("value", "hhmm"),
    [("1h", "01:00"), ("90 minutes", "01:30"), ("2.5 hours", "02:30"), ("30 min", "00:30"),
     ("61s", "00:02"), (" 6h ", "06:00"),
     # Slurm's days-hours forms, as dask-jobqueue users write them
     ("1-00:00:00", "24:00"), ("2-12", "60:00"), ("0-01:30", "01:30"), ("1-00:00:01", "24:01")],
)
def test_parse_walltime_reads_a_duration_with_its_unit_as_dask_does(value, hhmm):
    """``lease="2h"`` worked beside ``walltime="2h"``, which was refused: the same words."""
    assert parse_walltime(value, "walltime") == hhmm


@pytest.mark.parametrize(
    "value", ["25:99", "00:00", "", "1:2", 5, "90", "0h", "1000h", "5 GiB", "-1h",
              0 * unit.hour, 2 * unit.GiB, None]
)
def test_parse_walltime_refuses(value):
    with pytest.raises(ConfigurationError) as caught:
        parse_walltime(value, "Job.walltime")
    assert caught.value.field == "Job.walltime"
    assert str(caught.value).startswith(f"Job.walltime = {value!r} is not valid")
    assert '"HH:MM"' in str(caught.value)


def test_a_bare_number_of_wall_time_asks_for_its_unit():
    """Slurm reads ``--time=90`` as minutes and Dask reads 90 as seconds: no guess."""
    for value in ("90", " 1.5 "):
        with pytest.raises(ConfigurationError, match="no unit"):
            parse_walltime(value, "walltime")
    for value in ("1-25:00", "1:00:00:00", "90-"):  # not bare numbers: not told they are
        with pytest.raises(ConfigurationError) as caught:
            parse_walltime(value, "walltime")
        assert "no unit" not in str(caught.value)


@pytest.mark.parametrize("value", ["5h", "90 minutes", 5])
def test_hh_mm_only_refuses_a_duration(value):
    """openff-evaluator's ``wallclock_time_limit`` takes ``"HH:MM"`` only: so do we there."""
    with pytest.raises(ConfigurationError, match='"HH:MM"'):
        parse_walltime(value, "wallclock_time_limit", hh_mm_only=True)


def test_is_quantity_is_duck_typed_across_registries():
    assert is_quantity(1 * unit.GiB)
    assert is_quantity(1 * other.GiB)
    assert not is_quantity("1 GiB")
    assert not is_quantity(1)


@pytest.mark.parametrize(
    ("n", "text"),
    [(8 * 2**30, "8GiB"), (512 * 2**20, "512MiB"), (2**40, "1TiB"), (1_500_000_000, "1.40GiB"),
     (100, "100B")],
)
def test_format_bytes(n, text):
    assert format_bytes(n) == text


def test_a_pool_takes_its_walltime_in_the_words_its_lease_takes():
    from hybrid.pools import PoolSpec

    spec = PoolSpec.build("cpu", "slurm", walltime="2h", lease="3h")
    assert spec.walltime == "02:00"
