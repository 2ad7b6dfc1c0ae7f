"""The executor: a plan carried out under the run's lease, wave by wave (``execute``, ``wave_drain``, ``replacement``,
``pods_back``), behind the canary gate and the mutation pacer, with abort and the run's report."""
