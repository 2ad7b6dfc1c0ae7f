"""What the release pipeline says a stage runs, where the stage's own jobs can read it: the stream ``promoted/<stage>``
of the stage's state store (the table its scheduled rotation, remediation and canary runners already use).

The pipeline's tick writes a record before each deploy it makes there (a candidate's, or a rollback's to the last
good one): the images of every family the stage boots, and the candidate. A rotation of the stage then rotates a pool
only onto one of those images: a launch template that boots anything else (a version made by hand in EC2, a
``pulumi up`` from a checkout whose program does not read this record) is drift, and its pool is not rotated (``upgrade_service.planning.targets``).
A stage the pipeline has never deployed has no record, and its rotations follow their launch templates as before.
The stage's Pulumi program reads it too (``infra.settings.read_promoted``): an operator's ``pulumi up -s <stage>`` deploys
these images and this Kubernetes version, whatever the checkout's lock file and stack file say.
The ledger stays the one record of decisions; this stream is what a stage's jobs may know of them (they cannot read
the ledger, and need not).
"""

from __future__ import annotations

from dataclasses import dataclass

from platformctl.kernel.jsontypes import JSONObject, mapping
from platformctl.kernel.state.base import StateStore


def stream_of(stage: str) -> str:
    return f"promoted/{stage}"


@dataclass(frozen=True)
class Promoted:
    """A stage's promoted images: family -> image id, the candidate they came with, when and who wrote it."""

    stage: str
    images: dict[str, str]
    candidate: str
    at: float
    by: str = ""
    rollback: bool = False
    infra_revision: str = ""  # the candidate's commit: its program, stack files and user data
    kubernetes_version: str = ""  # the control planes' version the deploy kept (EKS never takes one back)

    @property
    def image_ids(self) -> frozenset[str]:
        return frozenset(self.images.values())

    def to_record(self) -> JSONObject:
        return {"stage": self.stage, "images": dict(self.images), "candidate": self.candidate, "at": self.at,
                "by": self.by, "rollback": self.rollback, "infra_revision": self.infra_revision,
                "kubernetes_version": self.kubernetes_version}

    def said(self) -> str:
        return ", ".join(f"{family} {image}" for family, image in sorted(self.images.items()))


def promote(store: StateStore, promoted: Promoted) -> None:
    """Record ``promoted`` as what the stage runs from now (before the deploy that makes it so)."""
    last = promoted_in(store, promoted.stage)
    if last is not None and (last.images, last.candidate, last.rollback) == \
            (promoted.images, promoted.candidate, promoted.rollback):
        return  # a deploy asked again (a killed tick's): the record stands
    store.append(stream_of(promoted.stage), promoted.to_record())


def promoted_in(store: StateStore, stage: str) -> Promoted | None:
    """The stage's promoted images as last recorded; None when the pipeline never deployed it."""
    last = store.last(stream_of(stage))
    if last is None:
        return None
    data = last.data
    images = {str(k): str(v) for k, v in mapping(data.get("images") or {}).items()}
    return Promoted(str(data.get("stage", stage)), images, str(data.get("candidate", "")), float(data.get("at", 0.0)),
                    str(data.get("by", "")), bool(data.get("rollback", False)), str(data.get("infra_revision", "")),
                    str(data.get("kubernetes_version", "")))


__all__ = ["Promoted", "promote", "promoted_in", "stream_of"]
