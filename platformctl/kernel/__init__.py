"""The kernel: what every layer above shares and nothing below it exists.

Errors, the clock and retries; the stage and region model (``topology``); the state store (``state``: SQLite and
DynamoDB); the seams to each external system with their live adapters: clusters (``cluster``: the model, the
``Cluster`` Protocol, the Kubernetes client adapter), node groups (``nodegroups``: EC2 Auto Scaling), the deployer
(``deployer``) and the local region's client side (``region_client``: finding it, its clock). The kernel imports no
subsystem, the emulator, the application layer nor the command (pyproject.toml's import-linter contracts).
"""
