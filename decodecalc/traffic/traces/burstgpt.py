"""BurstGPT: GPT-3.5 and GPT-4 requests served on Azure OpenAI (Wang et al., arXiv:2401.17644).

Source: github.com/HPMLL/BurstGPT, ``README.md`` (commit ff1a7c6), section "Schema":
``Timestamp`` "request submission time, seconds from 0:00:00 on the first day", ``Model``
(``ChatGPT`` or ``GPT-4``), ``Request tokens``, ``Response tokens``, ``Total tokens`` (request plus
response), ``Log Type`` (``Conversation log`` or ``API log``). The files are ``data/BurstGPT_1.csv``
and ``data/BurstGPT_2.csv`` and the same ``BurstGPT_without_fails_{1,2}.csv`` without failures.

Read here: ``Request tokens`` as the prompt, ``Response tokens`` as the output, ``Timestamp`` as
seconds. The README says the full files hold "some failure that ``Response tokens`` are 0s": such a
row is a failed request, so it is skipped and counted in a note (that is what the
``_without_fails`` files do); a row with 0 request tokens is skipped the same way. ``Model``,
``Total tokens``, ``Log Type`` (and the ``Session ID`` / ``Elapsed time`` columns the README
announces for later releases) are ignored, named in one note.
"""

from __future__ import annotations

from decodecalc.traffic.traces.records import RecordSchema

BURSTGPT = RecordSchema(format="burstgpt", prompt="Request tokens", output="Response tokens", arrival="Timestamp",
                        arrival_unit="s", zero_output_reason="0 Response tokens: failed requests",
                        zero_prompt_reason="0 Request tokens")
