"""Reports: one per command (grid, compare, sweep, recommend, explain, determinism, cudagraphs, tune).

Each takes typed inputs (Workload, GPUSpec, settings), calls the launcher modules and the time model, and
returns a typed result with ``to_dict()``. Reports never import typer, rich, torch or triton.
"""
