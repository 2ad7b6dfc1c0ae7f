"""The simulator's rooms, each a class over one concern, behind ``platformctl.emulator.simulator.SimulatedCluster``.

- ``events``: the event log's record and its kinds;
- ``world``: what every room shares: the clock, the random source, resource versions, the event and change
  logs, and the cluster's nodes, pods and controllers;
- ``budgets``: PodDisruptionBudgets, the pods each covers and the status the disruption controller writes;
- ``scheduler``: pending pods, the classes of pods sharing static constraints, binding;
- ``pods``: the pods' lives (start, succeed, terminate, vanish), namespaces and the controllers' bookkeeping
  (it is the ``ControllerHost`` the controllers act on);
- ``eviction``: the eviction subresource;
- ``nodes``: nodes and their faults as the kubelet and the node controller show them;
- ``pools``: node pools that behave like auto scaling groups;
- ``snapshots``: loading a snapshot, and the whole-cluster views.

Rooms import only rooms listed above them here; a room calls a higher one never (the scheduler binds
through the pods room's ``bind``, handed to it when the pods room is made).
"""
