"""The simulator's controllers, one module per workload kind, as kube-controller-manager runs them.

The simulator (``platformctl.emulator.simulator``) owns pods, nodes, budgets and the scheduler; each
controller here reconciles one kind of owner of pods:

- ``replicaset``: keeps ``replicas`` pods, creating the missing and deleting the surplus in the order
  the ReplicaSet controller does (unscheduled, pending, not Ready, then the newest first);
- ``statefulset``: pods named ``<name>-<ordinal>``, a lost one recreated under its own name;
- ``daemonset``: a pod on every node whose labels and taints admit it, on every node that joins;
- ``job``: ``parallelism`` pods at a time until ``completions`` succeeded, then done (and deleted
  ``ttlSecondsAfterFinished`` later);
- ``deployment``: the rolling update across ReplicaSets under ``maxSurge``/``maxUnavailable`` (or
  ``Recreate``), the revision history, and the status the deployment controller writes;
- ``cronjob``: a Job at every time the schedule (croniter) names, with ``concurrencyPolicy``,
  ``suspend`` and the history limits.

The first four act on the simulator's own controller records through ``host.ControllerHost`` (what a pod
controller may call on the cluster); ``deployment`` and ``cronjob`` act on the API objects of
``platformctl.emulator.workloads`` through ``objects.WorkloadStore`` (a Deployment owns ReplicaSets, a CronJob
owns Jobs), on the simulator's virtual clock. None of them imports the simulator or the workload objects.
"""
