"""Float32 torch reference for paged causal decode attention (imports torch: load lazily)."""

from __future__ import annotations

import torch


def gather_kv(cache: torch.Tensor, block_row: torch.Tensor, seq_len: int) -> torch.Tensor:
    """[seq_len, h_kv, d] keys (or values) of one sequence from a [blocks, bs, h_kv, d] cache."""
    bs = cache.shape[1]
    n = -(-seq_len // bs)
    blocks = block_row[:n].long()
    return cache.index_select(0, blocks).reshape(n * bs, *cache.shape[2:])[:seq_len]


def reference_attention(
    q: torch.Tensor,  # [T, h, d]
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,  # [B, max_blocks]
    seq_lens: list[int],
    query_lens: list[int],
    scale: float,
    seqs: list[int] | None = None,
) -> dict[int, torch.Tensor]:
    """Float32 outputs {seq index: [q_len, h, d]} for the sequences in ``seqs`` (default all).

    Query token j of a sequence with q_len queries and L keys sits at position L - q_len + j
    and sees keys 0..L - q_len + j (causal).
    """
    h = q.shape[1]
    h_kv = k_cache.shape[2]
    g = h // h_kv
    starts = [0]
    for ql in query_lens:
        starts.append(starts[-1] + ql)
    out: dict[int, torch.Tensor] = {}
    for i in (range(len(seq_lens)) if seqs is None else seqs):
        L, ql = seq_lens[i], query_lens[i]
        k = gather_kv(k_cache, block_table[i], L).float()  # [L, h_kv, d]
        v = gather_kv(v_cache, block_table[i], L).float()
        qi = q[starts[i]:starts[i] + ql].float()  # [ql, h, d]
        k = k.repeat_interleave(g, dim=1)  # [L, h, d]
        v = v.repeat_interleave(g, dim=1)
        s = torch.einsum("qhd,khd->hqk", qi, k) * scale  # [h, ql, L]
        pos_q = torch.arange(L - ql, L, device=q.device)[:, None]
        pos_k = torch.arange(L, device=q.device)[None, :]
        s = s.masked_fill((pos_k > pos_q)[None], float("-inf"))
        p = torch.softmax(s, dim=-1)
        out[i] = torch.einsum("hqk,khd->qhd", p, v)
    return out


def compare(observed: torch.Tensor, reference: dict[int, torch.Tensor], query_lens: list[int]) -> dict[str, float]:
    """Max abs error, max error relative to the output's max magnitude, ‖Δ‖/‖ref‖, NaN count."""
    starts = [0]
    for ql in query_lens:
        starts.append(starts[-1] + ql)
    max_abs = 0.0
    ref_max = 0.0
    num = 0.0
    den = 0.0
    nans = 0
    for i, ref in reference.items():
        obs = observed[starts[i]:starts[i] + query_lens[i]].float()
        nans += int(torch.isnan(obs).sum())
        diff = (obs - ref).abs()
        diff = torch.nan_to_num(diff, nan=float("inf"))
        max_abs = max(max_abs, float(diff.max()))
        ref_max = max(ref_max, float(ref.abs().max()))
        num += float((diff * diff).sum())
        den += float((ref * ref).sum())
    rel = float("inf") if nans else (num ** 0.5) / max(den ** 0.5, 1e-30)
    return {
        "max_abs_err": max_abs,
        "max_err_vs_max": max_abs / max(ref_max, 1e-30),
        "rel_err_fro": rel,
        "nan_count": nans,
        "sequences_checked": len(reference),
    }
