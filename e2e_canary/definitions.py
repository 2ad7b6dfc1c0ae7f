"""Canary definitions: one YAML file per canary under ``e2e_canary/canaries/``; a new canary needs no code.

A canary behaves like a user of the platform: it submits a workload the way users do, waits for it,
checks it works, and cleans up. Five kinds:

- ``service``: a Deployment of ``replicas`` with a PodDisruptionBudget; wait until all are Ready, roll it to
  a new version and check availability never fell below the budget during the roll, scale it, delete it;
- ``batch``: a Job of ``parallelism`` pods, checked for completion and exit status;
- ``cron``: a CronJob on ``schedule`` (cron, parsed with croniter), checked for firing within ``toleranceSeconds``;
- ``daemon``: a DaemonSet, checked for a Ready pod on every schedulable node within ``readyDeadlineSeconds``;
- ``node-pool``: pods pinned to each node pool and to each image version present in it, so that mid-rotation
  the new image and the old one are two arms measured side by side (same zone, same instance type).

Every canary runs in its own namespace (``canary-<name>``), labelled ``platformctl.io/canary=<name>``, so
that the next run reaps whatever a crashed run left. Parsed once, at the edge: every mistake (an
unknown kind, a bad cron expression, a duration that is not one) names the file and the key.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, ClassVar, Literal, get_args

from croniter import croniter
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from platformctl.kernel.cluster.model import Resources as PodResources
from platformctl.kernel.cluster.model import parse_quantity
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.humanize import parse_duration as seconds
from platformctl.kernel.jsontypes import JSONObject
from platformctl.kernel.yamlfile import read_yaml, validate

CANARY_DIR = Path(__file__).resolve().parent / "canaries"  # the canaries shipped with this package (tests read them)
LABEL = "platformctl.io/canary"
PAUSE = "registry.k8s.io/pause:3.10"
BUSYBOX = "registry.k8s.io/e2e-test-images/busybox:1.36.1-1"  # runs `sleep runSeconds` for batch and cron

Name = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=50)]
Count = Annotated[int, Field(ge=1)]


Duration = Annotated[int, BeforeValidator(seconds), Field(ge=0)]  # 90, "90s", "5m", "1h30m"


class _Value(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


class Resources(_Value):
    cpu: str = "50m"
    memory: str = "64Mi"

    @field_validator("cpu", "memory")
    @classmethod
    def _quantity(cls, value: str) -> str:
        try:
            parse_quantity(value, "", None)
        except PlatformError:
            raise ValueError(f"{value!r} is not a Kubernetes quantity") from None
        return value

    def requests(self) -> PodResources:
        """As the model counts them: millicores and bytes (the quantities were checked at load)."""
        return PodResources(int(parse_quantity(self.cpu, "cpu", None) * 1000), int(parse_quantity(self.memory, "memory", None)))


class Canary(_Value):
    """What every canary has. A kind is one subclass of it, below: its ``kind`` (a literal: the key the file's ``kind``
    selects it by, in the order ``KINDS`` lists them), its own fields, and whether it measures images side by side
    (``image_arms``: the runner pins its pods to each pool's images, and the verdict decides an image by its arms);
    its check is registered for the class in ``e2e_canary/checks.py`` (``@observe.register``). Nothing else names a
    kind."""

    image_arms: ClassVar[bool] = False
    default_image: ClassVar[str] = PAUSE  # a pause container never exits

    name: Name
    kind: str
    description: str = ""
    interval: Duration = 300  # between attempts
    jitter: Duration = 30  # each attempt starts up to this much later, so canaries of many clusters do not align
    deadline: Duration = 600  # an attempt that takes longer is a timeout
    image: str | None = None  # default: the kind's ``default_image``
    resources: Resources = Resources()
    clusters: tuple[str, ...] = ()  # empty: every cluster of the stage
    # How far back the verdict judges it (0: the shortest whole number of verdict windows holding its minimum
    # evidence); its results carry it, so the verdict needs no checkout
    evidence_window: Duration = 0

    source: str = Field(default="canary", exclude=True)

    @property
    def longest_period(self) -> int:
        """The most seconds between two attempts' starts: the interval plus the whole jitter, or the deadline when an
        attempt may take longer (the runner starts the next one an interval plus jitter after the last began)."""
        return max(self.interval + self.jitter, self.deadline)

    def to_dict(self) -> JSONObject:
        """The definition as the file would spell it in full: the common fields and its own kind's."""
        return {**self.model_dump(mode="json", by_alias=True), "image": self.pod_image, "namespace": self.namespace,
                "source": self.source}

    @property
    def pod_image(self) -> str:
        return self.image if self.image is not None else self.default_image

    @property
    def namespace(self) -> str:
        return f"canary-{self.name}"


class ServiceCanary(Canary):
    """A Deployment of ``replicas`` with a PodDisruptionBudget: all Ready, rolled, scaled, deleted."""

    kind: Literal["service"] = "service"
    replicas: Count = 3
    min_available: int | None = None  # the budget; default replicas - 1
    new_image: str | None = None  # what the roll goes to (default: the same image with a changed annotation)
    max_surge: Annotated[int, Field(ge=0)] = 1
    max_unavailable: Annotated[int, Field(ge=0)] = 0
    scale_to: Count | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ServiceCanary:
        if self.min_available is not None and not 0 <= self.min_available <= self.replicas:
            raise ValueError(f"minAvailable {self.min_available} must be between 0 and replicas {self.replicas}")
        if self.max_surge == 0 and self.max_unavailable == 0:
            raise ValueError("maxSurge and maxUnavailable cannot both be 0: the roll could never make progress")
        return self

    @property
    def budget(self) -> int:
        return self.replicas - 1 if self.min_available is None else self.min_available


class BatchCanary(Canary):
    """A Job of ``parallelism`` pods, checked for completion and exit status."""

    default_image: ClassVar[str] = BUSYBOX
    kind: Literal["batch"] = "batch"
    parallelism: Count = 3
    completions: Count | None = None
    run_seconds: Duration = 10


class CronCanary(Canary):
    """A CronJob on ``schedule``, checked for firing within ``toleranceSeconds``; each firing runs the batch canary's
    default Job (its fields are not a cron canary's to set)."""

    default_image: ClassVar[str] = BUSYBOX
    parallelism: ClassVar[int] = 3
    completions: ClassVar[int | None] = None
    run_seconds: ClassVar[int] = 10
    kind: Literal["cron"] = "cron"
    schedule: str = "*/5 * * * *"
    tolerance_seconds: Duration = 60
    runs: Count = 1  # how many firings one attempt watches

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        if not croniter.is_valid(value):
            raise ValueError(f"{value!r} is not a cron schedule (minute hour day-of-month month day-of-week)")
        return value


class DaemonCanary(Canary):
    """A DaemonSet, checked for a Ready pod on every schedulable node within ``readyDeadlineSeconds``."""

    kind: Literal["daemon"] = "daemon"
    ready_deadline_seconds: Duration = 300


class NodePoolCanary(Canary):
    """Pods pinned to each node pool and to each image present in it: the arms a rotation's images are judged by."""

    image_arms: ClassVar[bool] = True
    kind: Literal["node-pool"] = "node-pool"
    pools: tuple[str, ...] = ()  # empty: every pool
    pods_per_arm: Count = 1


def _kinds() -> dict[str, type[Canary]]:
    return {get_args(model.model_fields["kind"].annotation)[0]: model for model in Canary.__subclasses__()}


KIND_MODELS = _kinds()  # kind -> its model, in the order the kinds are defined above
KINDS = tuple(KIND_MODELS)
IMAGE_ARM_KINDS = frozenset(kind for kind, model in KIND_MODELS.items() if model.image_arms)


class _Kind(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: Literal[KINDS]  # type: ignore[valid-type]  # the kinds above, told apart as a discriminator would


def _field_names(model: type[Canary]) -> set[str]:
    """Each field's name and its alias (as the file spells it)."""
    return {key for name, f in model.model_fields.items() for key in (name, f.alias) if key}


def parse_canary(document: object, source: str) -> Canary:
    """The file's canary as its kind's model (the file's ``kind`` selects it); a field of another kind is a mistake,
    not a no-op."""
    kind = validate(_Kind, document, source, "canary").kind
    model = KIND_MODELS[kind]
    assert isinstance(document, dict)
    own = _field_names(model)
    for key in document:
        if key in own:
            continue
        other = next((k for k, m in KIND_MODELS.items() if key in _field_names(m)), None)
        if other is not None:
            raise PlatformError(f"applies to {other} canaries, not {kind}", file=source, field=str(key))
    canary = validate(model, document, source, "canary")
    stem = Path(source).stem
    if stem != canary.name and Path(source).suffix in (".yaml", ".yml"):
        raise PlatformError(f"{canary.name!r} must match the file name {stem!r}", file=source, field="name")
    return canary.model_copy(update={"source": source})


def default_canary_dir() -> Path:
    """``e2e_canary/canaries/`` of the checkout the current directory is in, never silently the package's."""
    from platformctl.kernel.checkout import find

    return find("e2e_canary/canaries", None, "--canaries")


def load_canaries(folder: Path | None = None) -> list[Canary]:
    folder = folder or default_canary_dir()
    if not folder.is_dir():
        raise PlatformError("no such folder of canaries", file=str(folder), field="--canaries")
    canaries = [parse_canary(read_yaml(path, "canary"), str(path)) for path in sorted(folder.glob("*.yaml"))]
    if not canaries:
        raise PlatformError("holds no canary (*.yaml)", file=str(folder), field="--canaries")
    return canaries


def arm_results_within(canaries: Sequence[Canary], window: float) -> tuple[NodePoolCanary, int] | None:
    """The node-pool canary (the one that measures an image's arm, side by side with the images it replaces) and the
    fewest results of one arm that ``window`` seconds hold at its own schedule: ``podsPerArm`` pods an attempt, each
    attempt an interval plus jitter after the last one started (its deadline, when that is longer). None when no
    node-pool canary runs: no image ever has an arm of its own to judge."""
    arms = [(c, int(window // c.longest_period) * c.pods_per_arm) for c in canaries if isinstance(c, NodePoolCanary)]
    return max(arms, key=lambda arm: arm[1]) if arms else None
