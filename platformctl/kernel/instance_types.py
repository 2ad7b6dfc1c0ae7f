"""EC2 instance types the platform uses, and the allocatable resources EKS gives their nodes.

The numbers are EC2's published sizes; ``max_pods`` is EKS's ``eni-max-pods`` value for the VPC
CNI without prefix delegation; the reservations follow the EKS AMI bootstrap formula
(kube-reserved CPU by core bands, 255Mi + 11Mi per pod of memory, and a 100Mi eviction threshold).
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True, slots=True)
class InstanceType:
    name: str
    vcpus: int
    memory_gib: int
    max_pods: int
    gpus: int = 0

    @property
    def allocatable_cpu_millis(self) -> int:
        cores = self.vcpus
        reserved = 60.0  # 6% of the first core
        if cores > 1:
            reserved += 10.0  # 1% of the second
        if cores > 2:
            reserved += 5.0 * min(cores - 2, 2)  # 0.5% of cores three and four
        if cores > 4:
            reserved += 2.5 * (cores - 4)  # 0.25% of every further core
        return cores * 1000 - int(reserved)

    @property
    def allocatable_memory_bytes(self) -> int:
        reserved = (255 + 11 * self.max_pods + 100) * MIB
        return self.memory_gib * GIB - reserved


_CATALOGUE = [
    InstanceType("t3.medium", 2, 4, 17),
    InstanceType("t3.large", 2, 8, 35),
    InstanceType("m6i.large", 2, 8, 29),
    InstanceType("m6i.xlarge", 4, 16, 58),
    InstanceType("m6i.2xlarge", 8, 32, 58),
    InstanceType("m6i.4xlarge", 16, 64, 234),
    InstanceType("m6i.8xlarge", 32, 128, 234),
    InstanceType("m6i.12xlarge", 48, 192, 234),
    InstanceType("m7i.large", 2, 8, 29),
    InstanceType("m7i.xlarge", 4, 16, 58),
    InstanceType("m7i.2xlarge", 8, 32, 58),
    InstanceType("m7i.4xlarge", 16, 64, 234),
    InstanceType("c6i.xlarge", 4, 8, 58),
    InstanceType("c6i.2xlarge", 8, 16, 58),
    InstanceType("c6i.4xlarge", 16, 32, 234),
    InstanceType("r6i.xlarge", 4, 32, 58),
    InstanceType("r6i.2xlarge", 8, 64, 58),
    InstanceType("r6i.4xlarge", 16, 128, 234),
    InstanceType("g5.xlarge", 4, 16, 58, gpus=1),
    InstanceType("g5.2xlarge", 8, 32, 58, gpus=1),
    InstanceType("g5.12xlarge", 48, 192, 234, gpus=4),
    InstanceType("g5.48xlarge", 192, 768, 345, gpus=8),
    InstanceType("p4d.24xlarge", 96, 1152, 737, gpus=8),
]

INSTANCE_TYPES: dict[str, InstanceType] = {t.name: t for t in _CATALOGUE}
