"""upgrade_service: rotating nodes onto new images without hurting the applications on them.

- ``planning``: the rotation policy and the planner (the disruption each node causes, the waves packed under the
  policy's limits as a networkx DAG, the estimate); it reads a snapshot and never acts.
- ``journal``: the typed records a rotation and a remediation write to the state store, the intents that make every
  side effect settle-able after a crash, and the folds that read them back.
- ``running``: the executor that carries a plan out under its lease (cordon, surge, drain through the eviction API,
  terminate, wait), its gate and pacing, abort, and the run's report.
- ``remediation``: replacing nodes that went bad on their own, on the same drain and replacement steps.
"""
