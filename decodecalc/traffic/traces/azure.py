"""Azure LLM inference traces 2023 and 2024 (Splitwise, ISCA'24; DynamoLLM).

Source: github.com/Azure/AzurePublicDataset, ``AzureLLMInferenceDataset2023.md`` (commit 1a61e6c) and
``AzureLLMInferenceDataset2024.md`` (commit 04e28b8), schema table: ``TIMESTAMP`` "Invocation time",
``ContextTokens`` "Number of context tokens", ``GeneratedTokens`` "Number of generated tokens". The
files: ``data/AzureLLMInferenceTrace_{code,conv}.csv`` (2023, one hour) and
``AzureLLMInferenceTrace_{code,conv}_1week.csv`` (2024, listed in ``AzureLLMInferenceDataset2024Links.txt``).
Both years have the same header; the timestamps differ in form:

* 2023: ``2023-11-16 18:15:46.6805900`` (seven fraction digits, no offset);
* 2024: ``2024-05-10 00:00:00.009930+00:00``, and ``2024-05-12 00:00:00+00:00`` when the fraction is
  zero (``analysis/AzureLLMInferenceDataset2024.ipynb``, commit 7f7c0f4, reads them with
  ``date_format="mixed"`` for that reason).

Read here: ``ContextTokens`` as the prompt, ``GeneratedTokens`` as the output, ``TIMESTAMP`` as a
date-time (UTC where no offset is written; a plain number is read as seconds) turned into seconds
after the earliest request with integer nanoseconds, so the seventh fraction digit is kept.
Assumed: a row with 0 generated (or 0 context) tokens is a request that produced nothing; it is
skipped and counted in a note.
"""

from __future__ import annotations

from decodecalc.traffic.traces.records import RecordSchema

AZURE = RecordSchema(format="azure", prompt="ContextTokens", output="GeneratedTokens", arrival="TIMESTAMP",
                     arrival_unit="auto", zero_output_reason="0 GeneratedTokens",
                     zero_prompt_reason="0 ContextTokens")
