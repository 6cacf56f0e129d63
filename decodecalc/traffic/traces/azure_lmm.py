"""Azure LMM (multimodal) inference trace 2025 (ModServe, SoCC'25).

Source: github.com/Azure/AzurePublicDataset, ``AzureLMMInferenceDataset2025.md`` (commit 517b239), schema table:
``TIMESTAMP`` "Request invocation time", ``NumImages`` "Number of images in the request", ``ContextTokens`` "Number
of context tokens", ``GeneratedTokens`` "Number of generated tokens"; the file is
``data/AzureLMMInferenceTrace_multimodal.csv.gz`` (one week, October 15-22 2024, 1,000,000 rows), read here
compressed as it ships. ``analysis/AzureLMMInferenceDataset2025.ipynb`` (same commit) shows the timestamps as
``2024-10-15T12:00:00.269Z``.

Read here as the Azure 2023/2024 traces (:mod:`.azure`): ``ContextTokens`` the prompt, ``GeneratedTokens`` the
output, ``TIMESTAMP`` a date-time; rows with 0 tokens skipped and counted. ``NumImages`` is checked (an integer >= 0)
and summed into a note, nothing more. Assumed, since the description does not say: ``ContextTokens`` is the whole
context the language model attends to, the images' tokens included (the tokens decode attention reads). If a
model's image tokens came on top, each request's KV length here is short by its images times the tokens per image.
"""

from __future__ import annotations

from decodecalc.traffic.traces.records import RecordSchema

AZURE_LMM = RecordSchema(format="azure-lmm", prompt="ContextTokens", output="GeneratedTokens", arrival="TIMESTAMP",
                         arrival_unit="auto", zero_output_reason="0 GeneratedTokens",
                         zero_prompt_reason="0 ContextTokens", tally="NumImages",
                         tally_note="{with_any:,} of {requests:,} requests carry images ({total:,} images in all); "
                                    "their tokens are taken to be inside ContextTokens (the dataset does not say)")
