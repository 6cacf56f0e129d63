"""decodecalc's own request trace: ``prompt_tokens``, ``output_tokens``, ``arrival_s`` (optional).

Source: this project, ``decodecalc/traffic/requests.py`` (``REQUEST_FIELDS``, ``make_request``) and
``examples/workloads/requests.csv``. One request per CSV row or JSON Lines object (a JSON array
of such objects is read too). The rules are today's: both token counts are integers >= 1 (a zero
is an error here, unlike the production traces where it marks a failed request), ``arrival_s`` is
seconds >= 0 and a missing one (column or cell) means t=0. Columns or keys other than the three
are ignored, with one note naming them.
"""

from __future__ import annotations

from decodecalc.traffic.traces.records import RecordSchema

NATIVE = RecordSchema(format="native", prompt="prompt_tokens", output="output_tokens", arrival="arrival_s",
                      arrival_unit="s", arrival_optional=True, zero_tokens="error")
