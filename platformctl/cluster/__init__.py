"""Clusters: the interface, the typed values, the simulator and the live adapter.

``Cluster`` is the seam; ``SimulatedCluster`` and ``LiveCluster`` implement it. Import the live
adapter from ``platformctl.cluster.live`` (it loads the Kubernetes client).
"""

from platformctl.cluster.interface import Cluster
from platformctl.cluster.model import EvictionResult, Node, Pod, PodDisruptionBudget, Snapshot, load_snapshot
from platformctl.cluster.simulator import SimulatedCluster

__all__ = ["Cluster", "EvictionResult", "Node", "Pod", "PodDisruptionBudget", "SimulatedCluster", "Snapshot", "load_snapshot"]
