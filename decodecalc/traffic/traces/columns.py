"""``--columns``: read any other CSV, JSON Lines or JSON-array trace by naming its fields.

``prompt=COL,output=COL[,arrival=COL][,unit=U]`` (or a mapping with the same keys): COL is a CSV
header name or a JSON key, spaces allowed (``prompt=Request tokens``). The arrival column holds
numbers in ``unit`` (``s`` by default; ``ms``, ``us``, ``ns``) or date-times (``2024-05-10
00:00:00.009930+00:00``; recognized from the first value). Rows with 0 prompt or output tokens are
skipped and counted in a note (as in the production traces: a request that produced nothing).
"""

from __future__ import annotations

from collections.abc import Mapping

from decodecalc.errors import ConfigError
from decodecalc.traffic.traces.records import RecordSchema
from decodecalc.traffic.traces.textio import show
from decodecalc.traffic.traces.values import UNIT_SECONDS

COLUMN_KEYS = ("prompt", "output", "arrival", "unit")
_HELP = "expected prompt=COL,output=COL[,arrival=COL][,unit=s|ms|us|ns]"


def parse_columns(columns: str | Mapping[str, str]) -> RecordSchema:
    """The schema a ``--columns`` spec describes, or ConfigError naming the bad part and the valid keys."""
    if isinstance(columns, str):
        pairs: dict[str, str] = {}
        for part in columns.split(","):
            if not part.strip():
                continue
            key, eq, value = part.partition("=")
            key = key.strip()
            if not eq or not value.strip():
                raise ConfigError(f"--columns: {show(part.strip())} is not KEY=COLUMN; {_HELP}")
            if key in pairs:
                raise ConfigError(f"--columns: {key!r} given twice; {_HELP}")
            pairs[key] = value.strip()
    elif isinstance(columns, Mapping):
        pairs = {}
        for key, value in columns.items():
            if not isinstance(key, str) or not isinstance(value, str) or not value.strip():
                raise ConfigError(f"--columns: {show(key)}: {show(value)} is not a column name; {_HELP}")
            pairs[key.strip()] = value.strip()
    else:
        raise ConfigError(f"--columns: expected a string or a mapping, got {type(columns).__name__}; {_HELP}")
    unknown = [k for k in pairs if k not in COLUMN_KEYS]
    if unknown:
        raise ConfigError(f"--columns: unknown key {unknown[0]!r}; valid keys: {', '.join(COLUMN_KEYS)} ({_HELP})")
    missing = [k for k in ("prompt", "output") if k not in pairs]
    if missing:
        raise ConfigError(f"--columns: {' and '.join(missing)} missing; {_HELP}")
    unit = pairs.get("unit", "s")
    if unit not in UNIT_SECONDS:
        raise ConfigError(f"--columns: unit {unit!r} is not one of {', '.join(UNIT_SECONDS)}")
    if "unit" in pairs and "arrival" not in pairs:
        raise ConfigError(f"--columns: unit given without arrival; {_HELP}")
    if pairs["prompt"] == pairs["output"]:
        raise ConfigError(f"--columns: prompt and output name the same column {pairs['prompt']!r}")
    return RecordSchema(format="columns", prompt=pairs["prompt"], output=pairs["output"], arrival=pairs.get("arrival"),
                        arrival_unit="auto" if unit == "s" else unit,
                        zero_output_reason=f"0 {pairs['output']}", zero_prompt_reason=f"0 {pairs['prompt']}")
