"""The deployer: the seam that points a stage's launch templates at new images.

``Deployer.deploy`` re-runs the stage's Pulumi program with the images of a lock file, as
``pulumi up`` does: a node pool whose image changed gets a new launch template version, and its auto
scaling group (on ``$Latest``) launches new instances from it; existing nodes move only when the
upgrade service rotates them. The implementations live with the program (``infra.deploy``): the
local region's (the program under the mock engine, materialised through boto3 against the region's
moto, with the region's checkpoint as the stack's state) and a real account's (Pulumi's Automation
API on the stage's stack). ``platformctl stage deploy`` and the release pipeline's tick call it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from platformctl.kernel.errors import Unavailable
from platformctl.kernel.topology import Stage

# How long a deploy's ``pulumi up`` may run: past it the deployer interrupts it (Pulumi cancels the update and gives
# its lock back). A lock older than ``STALE_LOCK_SECONDS`` that a release tick took (as the ledger recorded before the
# deploy) is one whose holder is gone: the tick that holds the stage's lease now clears it (``Deployer.cancel``).
DEPLOY_LIMIT_SECONDS = 2700.0
STALE_LOCK_SECONDS = 3600.0


class DeployLocked(Unavailable):
    """The stage's stack is locked by another update (Pulumi's ``ConcurrentUpdateError``): one running now, or one a
    killed process left behind. Transient: the release tick is busy and tries again next tick. The toolkit clears
    only a lock that a release tick took (the ledger says so) and that is older than ``STALE_LOCK_SECONDS``; any other
    is for someone to look at (``platformctl stage cancel``, as ``pulumi cancel``)."""

    def __init__(self, message: str, holder: str = "", since: float | None = None) -> None:
        super().__init__(message, transient=True)
        self.holder = holder  # the backend's own words for who holds it and since when, as it said them
        self.since = since  # when the lock was taken (epoch seconds), when the backend said it
        self.fault = holder  # one lock, whatever age its message says (the tick records it once)

    def taken_by(self, lock_holder: str) -> bool:
        """Whether the lock names ``lock_holder`` (``user@host``, with ``(pid N)`` when the deployer knows it) as the
        process that created it."""
        return re.search(r"created by " + re.escape(lock_holder) + r"(\s|$)", self.holder) is not None


@dataclass(frozen=True)
class ResourceChange:
    # create | update | unchanged | not-applied from the local deployer; Pulumi's own operation words (same, create,
    # update, delete, replace, ...: the Automation API's OpType) from a real account's
    action: str
    type: str
    name: str
    detail: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"action": self.action, "type": self.type, "name": self.name, "detail": self.detail}


@dataclass
class DeployResult:
    stage: str
    target: str  # where it deployed: the local region's endpoint, or the Pulumi stack
    lock_file: str
    images: dict[str, str]  # cluster/pool -> the image its launch template boots now
    changes: list[ResourceChange] = field(default_factory=list)

    def summary(self) -> dict[str, int]:
        """How many resources each action touched (``create``, ``update``, ``unchanged``, ...)."""
        counts: dict[str, int] = {}
        for change in self.changes:
            counts[change.action] = counts.get(change.action, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "target": self.target, "lock_file": self.lock_file, "images": self.images,
                "summary": self.summary(), "changes": [c.to_dict() for c in self.changes if c.action != "unchanged"]}


@dataclass(frozen=True)
class Deployed:
    """What a stage runs as its last deploy left it."""

    images: dict[str, str]  # cluster/pool -> the image its launch template boots
    kubernetes_versions: dict[str, str]  # cluster -> its control plane's Kubernetes version


@runtime_checkable
class Deployer(Protocol):
    def deploy(self, stage: Stage, image_lock: Path, over_pins: bool = False,
               kubernetes_version: str | None = None) -> DeployResult:
        """``over_pins``: the lock file's images win over the stage's pinned ones (the release pipeline's deploys);
        ``kubernetes_version``: this version instead of the stack file's (a rollback's: EKS never takes a control plane
        back to an older version, so a rollback keeps the one it has)."""
        ...

    def deployed(self, stage: Stage) -> Deployed:
        """What the stage runs now, as its last deploy left it (what the release pipeline records before a candidate's
        deploy, and a rollback with no good candidate goes back to)."""
        ...

    def lock_holder(self) -> str:
        """Who the stack's lock names when this process deploys (``user@host``, and ``(pid N)`` when the lock is this
        process's own rather than a CLI's it starts): what a release tick records before it deploys."""
        ...

    def cancel(self, stage: Stage) -> None:
        """Clear the stage's stack lock, as ``pulumi cancel`` does."""
        ...
