"""The console's charts: the y axis's five ticks read as five different values at any
scale, idle (all zero) and tiny rates included."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ingest_gateway.http.console_render import line_chart


def y_ticks(chart: str) -> list[str]:
    return re.findall(r"<text class=ylab [^>]*>([^<]*)</text>", chart)


@settings(max_examples=300, deadline=None)
@given(peak=st.one_of(st.just(0.0), st.floats(min_value=1e-6, max_value=1e15)),
       unit=st.sampled_from(["B/s", " rec/s"]))
def test_the_five_ticks_are_five_values(peak, unit):
    chart = line_chart([("in", "a", [(0.0, 0.0), (5.0, peak)])], unit=unit)
    ticks = y_ticks(chart)
    assert len(ticks) == 5 and len(set(ticks)) == 5, ticks


def test_an_idle_gateways_bytes_chart():
    ticks = y_ticks(line_chart([("in", "a", [(0.0, 0.0), (5.0, 0.0)])], unit="B/s"))
    assert ticks == ["0 B/s", "0.25 B/s", "0.5 B/s", "0.75 B/s", "1 B/s"]
