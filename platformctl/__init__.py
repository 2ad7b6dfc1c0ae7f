"""platformctl: lifecycle toolkit for a Kubernetes compute platform on AWS.

This package holds the ``platformctl`` command and what every subsystem shares: the stage and
region model (``topology``), the cluster interface with its simulated and live implementations
(``cluster``), the clock, the AWS client factory and the local region. It imports no subsystem;
only ``platformctl.cli`` imports everything.
"""

__version__ = "0.1.0"
