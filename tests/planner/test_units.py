"""Byte counts in the unit that keeps them readable."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.units import UNITS, size_text


@pytest.mark.parametrize(
    ("num_bytes", "text"),
    [(0, "0 B"), (512, "512 B"), (1023, "1023 B"), (1024, "1 KiB"), (1536, "1.5 KiB"),
     (6.1 * 2**30, "6.1 GiB"), (450_000 * 2**30, "439 TiB"), (3 * 2**60, "3072 PiB")],
)  # fmt: skip
def test_size_text_by_hand(num_bytes, text):
    assert size_text(num_bytes) == text


@given(st.integers(1, 2**62))
def test_size_text_reads_back_within_its_rounding(num_bytes):
    """The figure times its unit is the count to three significant figures (or the whole
    figure, at 100 and over), and the figure is under 1024 but in the last unit."""
    figure, unit = size_text(num_bytes).split()
    value = float(figure) * 1024 ** UNITS.index(unit)
    assert value == pytest.approx(num_bytes, rel=5e-3 if float(figure) < 100 else 5e-3 + 1 / float(figure))
    assert float(figure) < 1024 or unit == UNITS[-1]
    assert float(figure) >= 1 or unit == "B"


def test_size_text_never_prints_a_full_unit_below_the_next():
    assert size_text(2**20 - 1) == "1 MiB" and size_text(1023.4 * 1024) == "1023 KiB"
