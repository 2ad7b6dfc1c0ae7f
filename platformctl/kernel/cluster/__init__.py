"""Clusters as the toolkit sees them: the typed model, the ``Cluster`` seam, scheduling and drain rules, and the live
adapter (``live``, ``live_watch``: the official Kubernetes client). The simulated implementation of the seam is the
emulator's (``platformctl.emulator.simulator``)."""
