"""Trace timestamps: the fast date-time path (datetime.fromisoformat) gives exactly the nanoseconds, and the
errors, of the exact regular-expression path on every shape a trace writes, the seventh fraction digit included."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decodecalc.errors import ConfigError
from decodecalc.traffic.traces.values import _datetime_ns_exact, datetime_ns


def both(raw: str) -> tuple[object, object]:
    out = []
    for f in (datetime_ns, _datetime_ns_exact):
        try:
            out.append(f(raw, "t.csv, line 2", "TIMESTAMP"))
        except ConfigError as e:
            out.append(str(e))
    return out[0], out[1]


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 9999), st.integers(0, 13), st.integers(0, 32), st.integers(0, 25), st.integers(0, 61),
       st.integers(0, 61), st.sampled_from("T "), st.text("0123456789", max_size=9), st.sampled_from(".,"),
       st.sampled_from(["", "Z", "+00:00", "-05:30", "+0200", "+03", " +01:00", "-23:59", "+24:00", "x"]))
def test_fast_and_exact_paths_agree(y, mo, d, h, mi, s, sep, fraction, point, tz):
    raw = f"{y:04d}-{mo:02d}-{d:02d}{sep}{h:02d}:{mi:02d}:{s:02d}" + (point + fraction if fraction else "") + tz
    fast, exact = both(raw)
    assert fast == exact


@pytest.mark.parametrize("raw", ["2023-11-16 18:15:46.6805900", "2023-11-16 18:15:46.6805901",
                                 "2024-05-10 00:00:00.009930+00:00", "2024-10-15T12:00:00.269Z",
                                 "2016-12-31 23:59:60", "2024-05-10", "20240510T000000", " 2024-05-10 00:00:00"])
def test_shapes_traces_write(raw):
    fast, exact = both(raw)
    assert fast == exact
    if raw.endswith("5900") or raw.endswith("5901"):  # the seventh digit is kept: 100 ns apart
        assert both("2023-11-16 18:15:46.6805901")[0] - both("2023-11-16 18:15:46.6805900")[0] == 100
