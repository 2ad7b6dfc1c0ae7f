"""What the release pipeline says a stage runs, where the stage's own jobs can read it: the stream ``promoted/<stage>``
of the stage's state store (the table its scheduled rotation, remediation and canary runners already use).

The pipeline's tick writes a record before each deploy it makes there (a candidate's, or a rollback's to the last
good one): the images of every family the stage boots, and the candidate. A rotation of the stage then rotates a pool
only onto one of those images: a launch template that boots anything else (a version made by hand in EC2, a
``pulumi up`` from a checkout whose program does not read this record) is drift, and its pool is not rotated (``upgrade_service.planning.targets``).
Once the deploy is made, the tick records what each of the stage's auto scaling groups launches then (its launch
template and that version's settings, ``record_launches``): a node launched otherwise is rotated with the cause
``launch-template`` only while its group launches those settings, so a version made by hand with the same image is
never rolled out (``upgrade_service.running.launches.as_deployed``).
A stage the pipeline has never deployed has no record, and its rotations follow their launch templates as before.
The stage's Pulumi program reads it too (``infra.settings.read_promoted``): an operator's ``pulumi up -s <stage>`` deploys
these images and this Kubernetes version, whatever the checkout's lock file and stack file say.
The ledger stays the one record of decisions; this stream is what a stage's jobs may know of them (they cannot read
the ledger, and need not).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from platformctl.kernel.jsontypes import JSONObject, JSONValue, mapping
from platformctl.kernel.nodegroups import LaunchSpec
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
    # group -> what it launched once the deploy was made (empty until then, and in records written before 2026-11-30)
    launches: dict[str, LaunchSpec] = field(default_factory=dict)

    @property
    def image_ids(self) -> frozenset[str]:
        return frozenset(self.images.values())

    def to_record(self) -> JSONObject:
        return {"stage": self.stage, "images": dict(self.images), "candidate": self.candidate, "at": self.at,
                "by": self.by, "rollback": self.rollback, "infra_revision": self.infra_revision,
                "kubernetes_version": self.kubernetes_version}

    def to_dict(self) -> JSONObject:
        """The record as shown (``stage deploy -o json``): with what its groups launched, which ``launched/<stage>``
        keeps (``record_launches``)."""
        return {**self.to_record(), "launches": launches_json(self.launches)}

    def said(self) -> str:
        return ", ".join(f"{family} {image}" for family, image in sorted(self.images.items()))


def promote(store: StateStore, promoted: Promoted) -> None:
    """Record ``promoted`` as what the stage runs from now (before the deploy that makes it so)."""
    last = promoted_in(store, promoted.stage)
    if last is not None and (last.images, last.candidate, last.rollback) == \
            (promoted.images, promoted.candidate, promoted.rollback):
        return  # a deploy asked again (a killed tick's): the record stands
    store.append(stream_of(promoted.stage), promoted.to_record())


def launches_json(launches: Mapping[str, LaunchSpec]) -> JSONObject:
    return {group: {"template": spec.template, "version": spec.version, "settings": dict(spec.settings)}
            for group, spec in sorted(launches.items())}


def launched_of(stage: str) -> str:
    return f"launched/{stage}"


def record_launches(store: StateStore, stage: str, candidate: str, launches: dict[str, LaunchSpec], at: float,
                    fence: Callable[[], object] = lambda: None) -> bool:
    """Record, in its own stream ``launched/<stage>``, what the stage's groups launch now that the deploy of the last
    promoted record (of ``candidate``) is made, tied to that record's sequence number: a newer record (a later deploy's)
    has none until its own deploy is made. False (nothing written) when the last record is of another candidate or
    this is said already. ``fence`` runs just before the write (a tick checks its lease there)."""
    last = store.last(stream_of(stage))
    if last is None or str(last.data.get("candidate", "")) != candidate:
        return False
    said = store.last(launched_of(stage))
    data = {"of": last.seq, "candidate": candidate, "launches": launches_json(launches)}
    if said is not None and all(said.data.get(key) == value for key, value in data.items()):
        return False
    fence()
    store.append(launched_of(stage), {**data, "at": at})
    return True


def _launch(data: Mapping[str, JSONValue]) -> LaunchSpec:
    settings = mapping(data.get("settings") or {})
    return LaunchSpec(str(data.get("template", "")), str(data.get("version", "")),
                      tuple(sorted((str(k), str(v)) for k, v in settings.items())))


def promoted_in(store: StateStore, stage: str) -> Promoted | None:
    """The stage's promoted images as last recorded, with what its groups launched once that record's deploy was made
    (none until then); None when the pipeline never deployed it."""
    last = store.last(stream_of(stage))
    if last is None:
        return None
    data = last.data
    images = {str(k): str(v) for k, v in mapping(data.get("images") or {}).items()}
    launched = store.last(launched_of(stage))
    launches = mapping(launched.data.get("launches") or {}) if launched is not None and launched.data.get("of") == last.seq else {}
    return Promoted(str(data.get("stage", stage)), images, str(data.get("candidate", "")), float(data.get("at", 0.0)),
                    str(data.get("by", "")), bool(data.get("rollback", False)), str(data.get("infra_revision", "")),
                    str(data.get("kubernetes_version", "")), {str(g): _launch(mapping(spec)) for g, spec in launches.items()})


__all__ = ["Promoted", "launched_of", "promote", "promoted_in", "record_launches", "stream_of"]
