"""The default backends' families fitted on each kernel's profiled duration instead of whole launch times: an
experiment (issue 18; BENCHMARKS.md, "The backends' steps alone"), not adopted.

    python -m benchmarks.fit_backends_per_kernel

The H200 captures fit_backends_h200.py trains on (capture-backends-h200.jsonl, sweep-backends-h200.jsonl; FlashInfer's
two paths and FA3, 1,328 runs whose profiled kernels are the plan's) hold each kernel's CUPTI duration besides the
launch's CUDA-graph time. Each main, merge and combine family is refitted (from the shipped values, on the same
training three quarters) against its kernels' durations alone; a launch is then predicted as its kernels plus the
median rest of the training launches of its backend and kernel count (the launch time less its kernels). Printed:
the kernels' errors, the held-out launches, the backends' steps alone (backend-steps-alone-h200.jsonl.gz) and the
workload totals of the three bf16 validate_backends_workload_h200.py runs, each against the shipped profile.
"""
import dataclasses
import gzip
import json
import statistics
from pathlib import Path

from decodecalc.specs.gpus import resolve_gpu
from decodecalc.timemodel import packaged_profile
from decodecalc.timemodel.predict import launch_time_s, kernel_time_s
from decodecalc.timemodel.fit import fit_families, percentile
from decodecalc.verify.backend_calibration import record_measurement
from decodecalc.verify import profiler as P
from benchmarks.fit_backends_h200 import DATA, held_out
from decodecalc.timemodel.backend_fit import shape_workload
from decodecalc.timemodel.backends import backend_work
from benchmarks.validate_backends_workload_h200 import case_steps
from decodecalc.reports.tune_backends import engine_planner
gpu = resolve_gpu('h200')
ship = packaged_profile('h200')
PATHS = ('flashinfer', 'flashinfer-tc', 'fa3')


def pairs_of(recs):
    out = []
    for r in recs:
        if r.get('backend') not in PATHS:
            continue
        m = record_measurement(r, gpu)
        if m is None:
            continue
        d = [float(x['duration_us']) * 1e-6 for x in r['launches'] if x.get('role') in ('main', 'merge')]
        if len(d) != len(m.work.kernels):
            continue
        out.append((m, d))
    return out


recs = [r for p in DATA[:2] for r in P.read_capture_records(p)]
pairs = pairs_of(recs)
train = [(m, d) for m, d in pairs if not held_out(m.shape.key)]
test = [(m, d) for m, d in pairs if held_out(m.shape.key)]
print(len(pairs), 'runs with durations;', len(train), 'train', len(test), 'test')

# per backend and number of kernels: the launch's time less its kernels (median over the training runs)
gaps = {}
for m, d in train:
    gaps.setdefault((m.kernel, len(d)), []).append(m.time_s - sum(d))
gap = {k: statistics.median(v) for k, v in gaps.items()}
print('gaps (us):', {f'{k[0]}/{k[1]}': round(v * 1e6, 2) for k, v in sorted(gap.items())})

# pseudo-measurements: each kernel alone against its profiled duration (no launch gap: overlapped_launches=1)
def pseudo(ms_d, fam):
    out = []
    for m, d in ms_d:
        for k, t in zip(m.work.kernels, d):
            if k.family == fam:
                lw = dataclasses.replace(m.work, kernels=(k,), overlapped_launches=1, extra_launches=0)
                out.append(dataclasses.replace(m, work=lw, time_s=t))
    return out


prof = ship
for fam in ('flashinfer_decode', 'flashinfer_tc', 'flashinfer_merge', 'fa3_fwd', 'fa3_combine'):
    rows = pseudo(train, fam)
    before = statistics.median(abs(launch_time_s(m.work, prof) / m.time_s - 1) for m in rows)
    prof, loss = fit_families(rows, prof, families=[fam], restarts=2, max_evals=1500)
    after = statistics.median(abs(launch_time_s(m.work, prof) / m.time_s - 1) for m in rows)
    te = pseudo(test, fam)
    print(f'{fam}: {len(rows)} kernel rows, median kernel error {before:.1%} -> {after:.1%}; held-out kernels '
          f'{statistics.median(abs(launch_time_s(m.work, ship) / m.time_s - 1) for m in te):.1%} -> '
          f'{statistics.median(abs(launch_time_s(m.work, prof) / m.time_s - 1) for m in te):.1%}', flush=True)


def per_kernel_time(lw):
    t = sum(kernel_time_s(k, prof.family(k.family), prof.num_sms, prof.idle_program_s, prof.hbm_bandwidth_bytes_per_s)
            for k in lw.kernels)
    return t + gap.get((lw.kernel, len(lw.kernels)), 0.0)


def summ(errs):
    a = sorted(abs(e) for e in errs)
    return f'{percentile(a, .5):.1%} / {percentile(a, .9):.1%} ({len(a)})'


for path in PATHS:
    te = [m for m, _ in test if m.kernel == path]
    print(f'held-out launches {path}: shipped {summ([launch_time_s(m.work, ship) / m.time_s - 1 for m in te])}, '
          f'per-kernel {summ([per_kernel_time(m.work) / m.time_s - 1 for m in te])}')

# the backends' steps alone
srecs = [json.loads(x) for x in gzip.open(Path(__file__).resolve().parent / 'results' / 'backend-steps-alone-h200.jsonl.gz', 'rt')]
by = {}
for r in srecs:
    m = record_measurement(r, gpu)
    if m is None:
        continue
    c = by.setdefault((r['shape']['tag'].split(':')[0], r['backend']), [0, 0, 0])
    c[0] += launch_time_s(m.work, ship)
    c[1] += per_kernel_time(m.work)
    c[2] += m.time_s
print('steps alone (sum error): shipped -> per-kernel')
for k, c in by.items():
    print(f'  {k[0]:12s} {k[1]:14s} {c[0] / c[2] - 1:+.1%} -> {c[1] / c[2] - 1:+.1%}')

# workload totals
R = Path(__file__).resolve().parents[1] / 'benchmarks' / 'results'
runs = ['validate-backends-workload-h200.json', 'validate-backends-workload-h200-run2.json',
        'validate-backends-workload-h200-run3.json']
errs_s, errs_k = [], []
for run in runs:
    for case in json.loads((R / run).read_text())['cases']:
        ctx, lens = case_steps(case['model'], case['tp'], case['workload'], case['steps'])
        for path in PATHS:
            meas = case['measured_total_s'].get(path)
            if not meas:
                continue
            try:
                shipped = float(ctx.timer.backend(path, 'vllm', engine_planner(path, 'vllm')).time.sum())
            except Exception:  # noqa: BLE001 - a path not compiled for the case (not run either)
                continue
            tot = 0.0
            for L in lens:
                w = shape_workload({'model': case['model'], 'tp': case['tp'], 'seq_lens': list(L),
                                    'kv_cache_dtype': 'bfloat16'}, 16)
                plan = P.default_result(path, w, gpu, cuda_graph=True).plan
                tot += per_kernel_time(backend_work(plan, w, path))
            errs_s.append(shipped / meas - 1)
            errs_k.append(tot / meas - 1)
            print(f"  {case['model']:16s} {case['workload'][:12]:12s} {path:14s} shipped {shipped / meas - 1:+.1%} "
                  f"per-kernel {tot / meas - 1:+.1%}", flush=True)


def w5(e):
    return sum(abs(x) <= 0.05 for x in e)


print('workload totals within 5%:', w5(errs_s), '->', w5(errs_k), 'of', len(errs_s),
      'median', f'{statistics.median(map(abs, errs_s)):.1%} -> {statistics.median(map(abs, errs_k)):.1%}')
