"""The emulator: the simulated implementations of the seams and the local region built from them.

The simulator (``simulator`` over its rooms in ``simulation``, the workload objects in ``workloads``, their controllers
in ``controllers``, its watch in ``sim_watch``), the simulated node groups (``nodegroups``), synthetic clusters
(``synthetic``) and the invariants read from the simulator's event log (``invariants``); the local region server
(``server``: the Kubernetes API over the simulator, moto with ``moto_extensions``, the region's time) and the region
itself (``local_region``). It sits above the kernel and below the subsystems, which reach it through the seams only.
"""
