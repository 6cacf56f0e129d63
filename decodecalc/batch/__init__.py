"""tune's batch evaluator: every decode step of a workload under every engine setting, as arrays.

``decodecalc tune`` times a whole workload (a day of traffic is a million steps, nearly every one a distinct
shape under continuous batching) under dozens of settings. Planning and timing each step one at a time costs
about a millisecond per (step, setting); this package does the same work on numpy arrays of steps:

* :mod:`.steps`: a workload as arrays (every step's KV and query lengths in one flat array) and its blocks of
  steps padded to a common batch width;
* :mod:`.launches`: what each step launches under a setting, from the launcher modules' rules (which work on
  arrays: ``decodecalc.launchers``) and the time model's work cells (``decodecalc.timemodel.work``);
* :mod:`.kernels`: the time model (``decodecalc.timemodel.predict``: the same :class:`IterationCost`) on those
  arrays: exact for the kernels whose programs all run the same loop or fit in one wave, a proxy for the rest;
* :mod:`.estimate`: the rest: a stratified sample of steps timed exactly by the scalar model, the proxy
  corrected by their ratio, and the error of every total estimated from the sample.

numpy is imported here and nowhere below the CLI; the plain CLI path never imports this package.
"""
