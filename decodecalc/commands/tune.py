"""`decodecalc tune`: the best engine settings for a whole decode workload, and what-if split heuristics.

The command parses its options into a :class:`~decodecalc.reports.tune_request.TuneRequest` (which refuses bad or
conflicting options), has :mod:`decodecalc.commands.tune_run` carry out its plan while a progress line runs on stderr,
and prints the result."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from decodecalc.commands.options import (
    OUTPUT,
    progress_on_stderr,
    BandwidthOpt,
    BatchInvOpt,
    BlockSizeOpt,
    CgModeOpt,
    Cubins,
    CubinsOpt,
    CudaGraphOpt,
    DtypeOpt,
    GpuOpt,
    JsonOpt,
    KvDtype,
    KvDtypeOpt,
    MaxModelLenOpt,
    VllmVersion,
    VllmVersionOpt,
    MaxSeqsOpt,
    MaxSplitsOpt,
    MaxTokensOpt,
    ModelOpt,
    ModelRunner,
    ModelRunnerOpt,
    OutputOpt,
    RegimeOpt,
    SmsOpt,
    SpecOpt,
    StaticSplitsOpt,
    TpOpt,
    handle_errors,
    plain,
)
from decodecalc.commands.tune_measure import (
    MeasuredOpt,
    MeasureLeadingOpt,
    MeasureOpt,
    MeasureStepsOpt,
    SaveTimingsOpt,
)

TRAFFIC = "Workload (one of --steps, --requests, --workload, --metrics)"
StepsOpt = Annotated[Optional[Path], typer.Option("--steps", help="Step trace: JSON Lines (or .csv), one decode step "
                                                  "per line: {\"seq_lens\": [...], \"query_lens\": [...], \"weight\": n}.",
                                                  rich_help_panel=TRAFFIC)]
RequestsOpt = Annotated[Optional[Path], typer.Option("--requests", help="Request trace: the Azure LLM and LMM "
                                                     "inference traces, BurstGPT, Mooncake, Qwen-Bailian, Copilot "
                                                     "agent shards (a file or their directory), vllm bench serve / "
                                                     "SGLang "
                                                     "bench_serving results, ShareGPT, or prompt_tokens / "
                                                     "output_tokens / arrival_s (format detected; docs/traces.md); "
                                                     "turned into decode steps by a continuous-batching model "
                                                     "(--max-num-seqs, --max-num-batched-tokens).",
                                                     rich_help_panel=TRAFFIC)]
FormatOpt = Annotated[Optional[str], typer.Option("--format", help="The --requests file's format (default: detected). "
                                                  "One of: native, azure, azure-lmm, burstgpt, mooncake, "
                                                  "qwen-bailian, copilot-agent, vllm-bench, sglang-bench, sharegpt.",
                                                  rich_help_panel=TRAFFIC)]
ColumnsOpt = Annotated[Optional[str], typer.Option("--columns", help="Read any other CSV / JSON Lines / JSON file "
                                                   "given as --requests: name its columns, as in "
                                                   "prompt=COL,output=COL and optionally arrival=COL, unit=ms.",
                                                   rich_help_panel=TRAFFIC)]
TokenizerOpt = Annotated[Optional[Path], typer.Option("--tokenizer", help="A tokenizer.json to count the tokens of a "
                                                      "ShareGPT file (default: the model's from the local Hugging Face "
                                                      "cache, else an estimate; needs the 'tokens' extra).",
                                                      rich_help_panel=TRAFFIC)]
RateOpt = Annotated[Optional[float], typer.Option("--rate", help="Poisson arrivals at R requests/s for the --requests "
                                                "file (seeded), instead of its own arrival times. A file without "
                                                "arrival times (ShareGPT) gets the rate that keeps --max-num-seqs "
                                                "busy: max_num_seqs / (mean output tokens x 0.025 s a step).",
                                                rich_help_panel=TRAFFIC, show_default=False)]
MaxRequestsOpt = Annotated[Optional[int], typer.Option("--max-requests", help="Read only the first N requests of "
                                                       "the --requests file.", rich_help_panel=TRAFFIC)]
MetricsOpt = Annotated[Optional[str], typer.Option("--metrics", help="A running vLLM server's Prometheus metrics (a "
                                                   "file, or the http(s) URL of /metrics): the prompt and output "
                                                   "length histograms and the running requests make the workload.",
                                                   rich_help_panel=TRAFFIC)]
MetricsModelOpt = Annotated[Optional[str], typer.Option("--metrics-model", help="With --metrics: the model_name label "
                                                        "to read (default: every model, summed).",
                                                        rich_help_panel=TRAFFIC)]
WorkloadOpt = Annotated[Optional[str], typer.Option("--workload", "-w", help="A named mix: chat, long-doc-qa, agentic, "
                                                    "code-completion; or a parametric mix such as "
                                                    "mix:prompt=2048,output=256 (also sigma=X, steps=N).",
                                                    rich_help_panel=TRAFFIC)]
ConcurrencyOpt = Annotated[Optional[int], typer.Option("--concurrency", "-c", help="Sequences decoding at once for "
                                                       "--workload (default: the preset's).", rich_help_panel=TRAFFIC)]
AcceptanceOpt = Annotated[Optional[float], typer.Option("--draft-acceptance-rate",
                                                        help="With --num-speculative-tokens k and --requests or "
                                                        "--workload: the fraction of draft tokens accepted, 0 to 1; "
                                                        "each decode step advances a request by 1 + rate x k tokens "
                                                        "on average (deterministic; default 0.7).",
                                                        rich_help_panel=TRAFFIC)]
SEARCH = "Search"
ObjectiveOpt = Annotated[str, typer.Option("--objective", help="What to minimise. One of: mean, p99 (step time).",
                                           rich_help_panel=SEARCH)]
RegressionOpt = Annotated[str, typer.Option("--max-regression", help="Guard: no step may be slower than under the "
                                            "default by more than this (e.g. 5%; 'none' turns it off).",
                                            rich_help_panel=SEARCH)]
EngineOpt = Annotated[Optional[str], typer.Option("--engine", help="Only one engine. One of: vllm, sglang (default "
                                                  "both), trtllm (its multi-block count as the lever).",
                                                  rich_help_panel=SEARCH)]
ProfileOpt = Annotated[Optional[Path], typer.Option("--profile", help="Time-model profile YAML (default: the user's "
                                                    "calibrated one, then the packaged one).", rich_help_panel=SEARCH)]
MaxShapesOpt = Annotated[Optional[int], typer.Option("--max-shapes", help="Steps each setting may time with the "
                                                     "scalar model before the rest are estimated from them (default: "
                                                     "until every total is within 0.03%, at most 3,072).",
                                                     rich_help_panel=SEARCH, show_default=False)]
ExactOpt = Annotated[bool, typer.Option("--exact", help="Time every step with the scalar model (slower on large "
                                        "workloads; the default estimates and says how closely).",
                                        rich_help_panel=SEARCH)]
WHATIF = "What-if split heuristics"
#: the built-in heuristics' names, for --help without importing the core (tests/test_tune.py checks the list)
HEURISTIC_NAMES = ("vllm-default", "vllm-tuned", "vllm-pr47520", "vllm-bound", "sglang-default", "sglang-tuned",
                   "sglang-pr21775", "sglang-pr27786", "sglang-pr35801", "sglang-bound")
HeuristicsOpt = Annotated[Optional[str], typer.Option("--heuristics", help="Comma list (default: all; 'none' for "
                                                      "none). Names: " + ", ".join(HEURISTIC_NAMES) + ".",
                                                      rich_help_panel=WHATIF)]
RuleOpt = Annotated[Optional[Path], typer.Option("--rule", help="Python file defining splits(step) -> split count per "
                                                 "sequence (SGLang's kernel) and/or segments(step) -> one segment "
                                                 "count (vLLM's); see docs/tune.md.", rich_help_panel=WHATIF)]
PlotOpt = Annotated[Optional[Path], typer.Option("--plot", help="Write a PNG of per-step time and its distribution "
                                                 "(needs the 'plot' extra: matplotlib).", rich_help_panel=OUTPUT)]


def register(app: typer.Typer) -> None:
    @app.command()
    @handle_errors
    def tune(
        steps: StepsOpt = None,
        requests: RequestsOpt = None,
        workload: WorkloadOpt = None,
        metrics: MetricsOpt = None,
        trace_format: FormatOpt = None,
        columns: ColumnsOpt = None,
        tokenizer: TokenizerOpt = None,
        max_requests: MaxRequestsOpt = None,
        rate: RateOpt = None,
        metrics_model: MetricsModelOpt = None,
        concurrency: ConcurrencyOpt = None,
        draft_acceptance_rate: AcceptanceOpt = None,
        objective: ObjectiveOpt = "mean",
        max_regression: RegressionOpt = "5%",
        heuristics: HeuristicsOpt = None,
        rule: RuleOpt = None,
        engine: EngineOpt = None,
        json_out: JsonOpt = False,
        output: OutputOpt = None,
        plot: PlotOpt = None,
        profile: ProfileOpt = None,
        regime: RegimeOpt = "back-to-back",
        max_shapes: MaxShapesOpt = None,
        exact: ExactOpt = False,
        model: ModelOpt = "llama3-8b",
        tp: TpOpt = 1,
        gpu: GpuOpt = "h200",
        sms: SmsOpt = None,
        bandwidth: BandwidthOpt = None,
        dtype: DtypeOpt = None,
        kv_cache_dtype: KvDtypeOpt = KvDtype.auto,
        block_size: BlockSizeOpt = 16,
        batch_invariant: BatchInvOpt = False,
        cuda_graph: CudaGraphOpt = True,
        cudagraph_mode: CgModeOpt = None,
        max_num_seqs: MaxSeqsOpt = 1024,
        max_num_batched_tokens: MaxTokensOpt = 8192,
        num_speculative_tokens: SpecOpt = 0,
        model_runner: ModelRunnerOpt = ModelRunner.v2,
        max_kv_splits: MaxSplitsOpt = None,
        static_kv_splits: StaticSplitsOpt = False,
        vllm_version: VllmVersionOpt = VllmVersion.v0_34_0,
        cubins: CubinsOpt = Cubins.yes,
        max_model_len: MaxModelLenOpt = None,
        measure: MeasureOpt = False,
        measure_steps: MeasureStepsOpt = 16,
        measure_leading: MeasureLeadingOpt = 3,
        save_measurements: SaveTimingsOpt = None,
        measured: MeasuredOpt = None,
    ) -> None:
        """Best engine settings for a whole decode workload (vLLM segments x 2D/3D threshold, SGLang max KV
        splits x static switch), which steps gain and lose, how to apply it, and what-if split heuristics."""
        from decodecalc.commands.output import to_json
        from decodecalc.commands.tune_run import prepare, run_tune, write_outputs
        from decodecalc.reports.tune_request import (MeasureOptions, SearchOptions, ServingOptions, TuneRequest,
                                                     TuneTraffic)

        request = TuneRequest(
            traffic=TuneTraffic(steps=steps, requests=requests, workload=workload, metrics=metrics,
                                trace_format=trace_format, columns=columns, tokenizer=tokenizer,
                                max_requests=max_requests, rate=rate, metrics_model=metrics_model,
                                concurrency=concurrency, draft_acceptance_rate=draft_acceptance_rate),
            serving=ServingOptions(
                model=model, tp=tp, gpu=gpu, sms=sms, bandwidth=bandwidth, dtype=plain(dtype),
                kv_cache_dtype=plain(kv_cache_dtype), block_size=block_size, batch_invariant=batch_invariant,
                cuda_graph=cuda_graph, cudagraph_mode=plain(cudagraph_mode), max_num_seqs=max_num_seqs,
                max_num_batched_tokens=max_num_batched_tokens, num_speculative_tokens=num_speculative_tokens,
                model_runner=plain(model_runner), max_kv_splits=max_kv_splits, static_kv_splits=static_kv_splits,
                vllm_version=plain(vllm_version), cubins=plain(cubins), max_model_len=max_model_len),
            search=SearchOptions(objective=objective, max_regression=max_regression, engine=engine,
                                 heuristics=heuristics, rule=rule, profile=profile, regime=regime,
                                 max_shapes=max_shapes, exact=exact),
            measure=MeasureOptions(measure=measure, steps=measure_steps, leading=measure_leading,
                                   save=save_measurements, measured=measured),
            json_out=json_out, output=output, plot=plot)
        plan = prepare(request)
        with progress_on_stderr(enabled=not json_out) as report:
            run = run_tune(plan, progress=report)
        text = to_json(run.to_dict())
        write_outputs(request, run, text)
        if json_out:
            typer.echo(text)
        else:
            from decodecalc.render.tune import print_tune

            print_tune(run.result)
            if run.measured is not None:
                from decodecalc.render.tune_measure import print_measured

                print_measured(run.measured)
