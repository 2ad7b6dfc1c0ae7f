"""The stack config of a stage beyond its topology, and the image each node pool boots.

A stack file's ``config:`` holds, besides ``aws:region`` and ``platformctl:topology`` (the stage
model of ``platformctl.kernel.topology``):

``platformctl:kubernetesVersion``
    The EKS version of every cluster of the stage (default ``"1.32"``).
``platformctl:publicAccessCidrs``
    CIDRs that may reach the clusters' public API endpoints. Empty (the default) keeps the public
    endpoint off; in ``prod`` and ``prod-canary`` it must stay empty.
``platformctl:rotation``
    ``image`` and ``schedule`` (cron, UTC) of the host cluster's scheduled rotation CronJob.
``platformctl:remediation``
    ``image``, ``schedule`` and ``policy`` (a remediation policy, checked by the parser ``remediate``
    uses) of the remediation CronJob every cluster runs.
``platformctl:canary``
    ``image``, ``canaries`` (name -> a canary definition; default: the files of ``definitions``,
    ``../e2e_canary/canaries`` relative to ``infra/``, checked by the parser ``canary run`` uses) and
    ``metricsPort`` of the canary runner Deployment every cluster runs.
``platformctl:release``
    ``image``, ``schedule`` (cron, UTC; default every minute), ``ledger`` (``dynamodb://TABLE?region=REGION``, the
    one ledger every stage's tick shares; ``ownsLedger: true`` on the one stack that creates its table),
    ``pipeline`` (the pipeline file, relative to ``infra/``, default ``../release_pipeline/pipeline.yaml``; the file,
    its stages and their rotation policies checked at ``pulumi up``), ``deployPolicies`` (managed policies the
    tick's role holds on top of what a candidate's deploy needs, ``infra.access``; none by default),
    ``pulumiBackend`` (the Pulumi state backend the tick's ``pulumi up`` logs in to, default
    ``s3://platformctl-pulumi-state?region=us-east-1``) and ``pulumiSecret`` (the Kubernetes Secret in
    ``platformctl-system`` whose keys the tick gets as its environment: ``PULUMI_CONFIG_PASSPHRASE`` or
    ``PULUMI_ACCESS_TOKEN``; default ``platformctl-pulumi``) of the host cluster's ``release tick`` CronJob.
``platformctl:imagesFromLock``
    Set for one run by the release pipeline's deploy, never in a stack file: every family boots the lock file's
    newest image for the region, the stage's pins notwithstanding (a candidate carries its images to every stage).
``platformctl:imageLock``
    The AMI lock file ``platformctl ami build`` writes, relative to ``infra/`` (default
    ``../ami/images.lock.json``). A node pool boots ``topology.images.<family>`` when the stage
    sets it, otherwise the newest version of the image named after its family in the lock file
    for the stage's region.

A stage the release pipeline has deployed is the exception (``read_promoted``): outside the pipeline's own deploys
(``imagesFromLock``), its pools boot the images the pipeline last promoted there and its control planes keep the
version that deploy kept, from the ``promoted/<stage>`` record in the stage's state table. An operator's
``pulumi up -s prod`` from a checkout with a newer lock file, an older one or pins then deploys what prod runs, not
what the checkout says; another image reaches the stage through the pipeline (``platformctl release start``, ``release
rollback``). Pins and the lock's newest image mean "before the first candidate".

Every mistake is a ``PlatformError`` naming the file and the key.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

from croniter import croniter
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from ami.lock import newest_in_lock
from platformctl.kernel.errors import PlatformError, Unavailable
from platformctl.kernel.state.promoted import Promoted, promoted_in
from platformctl.kernel.topology import TOPOLOGY_KEY, Stage
from platformctl.kernel.yamlfile import validation_error

PREFIX = "platformctl:"
PROD_STAGES = ("prod", "prod-canary")
DEFAULT_ROTATION_IMAGE = "ghcr.io/platformctl/platformctl:0.1.0"


def _cidr(value: str) -> str:
    try:
        ipaddress.ip_network(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a CIDR block") from None
    return value


Cidr = Annotated[str, AfterValidator(_cidr)]


def _cron(value: str) -> str:
    if not croniter.is_valid(value):
        raise ValueError(f"{value!r} is not a cron schedule")
    return value


Schedule = Annotated[str, AfterValidator(_cron)]


class Rotation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    image: Annotated[str, Field(min_length=1)] = DEFAULT_ROTATION_IMAGE
    schedule: Schedule = "0 3 * * 1-5"
    # The rotation policy the scheduled job runs with (the YAML `rotate run --policy` reads, as a mapping). Left out:
    # the one the release pipeline rotates the stage with (its stage's ``rotationPolicy``), so a scheduled rotation
    # is gated as the pipeline's is. Either way every freeze of the pipeline file that binds the stage is added to its
    # ``exclusions`` (``scheduled_policy``).
    policy: dict[str, Any] | None = None
    # The DynamoDB table of the state store the job journals in (default platformctl-state-<stage>).
    state_table: Annotated[str | None, Field(alias="stateTable", pattern=r"^[A-Za-z0-9_.-]{3,255}$")] = None


class Remediation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    image: Annotated[str, Field(min_length=1)] = DEFAULT_ROTATION_IMAGE
    schedule: Schedule = "*/5 * * * *"  # every cluster looks every five minutes; maxPerHour paces the replacements
    # The remediation policy each cluster's job runs with (the YAML `remediate --policy` reads, as a mapping).
    policy: dict[str, Any] = Field(default_factory=dict)


class Canary(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    image: Annotated[str, Field(min_length=1)] = DEFAULT_ROTATION_IMAGE
    # The canary definitions each cluster's runner carries out, name -> definition (the YAML of a file under
    # e2e_canary/canaries, as a mapping). Empty: the checkout's e2e_canary/canaries, as `pulumi up` finds them.
    canaries: dict[str, dict[str, Any]] = Field(default_factory=dict)
    definitions: str = "../e2e_canary/canaries"  # relative to infra/, when ``canaries`` is empty
    metrics_port: Annotated[int, Field(alias="metricsPort", ge=1024, le=65535)] = 9464


class Release(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    image: Annotated[str, Field(min_length=1)] = DEFAULT_ROTATION_IMAGE
    schedule: Schedule = "* * * * *"  # a tick is idempotent and cheap: every minute, one run at a time
    # The one ledger every stage's tick shares: one table, in one region (the stack with ``ownsLedger`` creates it).
    ledger: Annotated[str, Field(pattern=r"^dynamodb://[A-Za-z0-9_.-]{3,255}\?region=[a-z]{2}(-[a-z]+)+-[0-9]$")] = \
        "dynamodb://platformctl-release?region=us-east-1"
    owns_ledger: Annotated[bool, Field(alias="ownsLedger")] = False
    pipeline: str = "../release_pipeline/pipeline.yaml"  # relative to infra/
    # The tick deploys its stage (`pulumi up`, which creates and changes the stage's every resource): the managed
    # policies its role holds for that. Narrow them to what your stages' resources need.
    deploy_policies: Annotated[tuple[str, ...], Field(alias="deployPolicies")] = ()
    # Where the stage's Pulumi state lives, for the tick's `pulumi up` (PULUMI_BACKEND_URL): a self-managed backend
    # (s3://, gs://, azblob://) or Pulumi Cloud (https://api.pulumi.com), the one operators log in to by hand.
    pulumi_backend: Annotated[str, Field(alias="pulumiBackend", pattern=r"^(s3|gs|azblob)://[^\s]+$|^https://[^\s]+$")] = \
        "s3://platformctl-pulumi-state?region=us-east-1"
    # The Kubernetes Secret (in platformctl-system, made by the operator: never in the stack's state) whose keys become
    # the tick's environment: PULUMI_CONFIG_PASSPHRASE for a self-managed backend, PULUMI_ACCESS_TOKEN for Pulumi Cloud.
    pulumi_secret: Annotated[str, Field(alias="pulumiSecret", pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")] = \
        "platformctl-pulumi"
    # The tick's CronJob declared suspended: it runs only when asked (`kubectl create job --from=cronjob/...`) until
    # the stage is bootstrapped (its Secret made, its first `pulumi up` done by hand), then set false and deployed.
    suspend: bool = False

    @property
    def ledger_table(self) -> str:
        return self.ledger.removeprefix("dynamodb://").partition("?")[0]

    @property
    def ledger_region(self) -> str:
        return self.ledger.partition("?region=")[2]


class InfraSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    # Aliases are the stack config keys, so pydantic's errors name the key as the file spells it.
    kubernetes_version: Annotated[str, Field(alias=f"{PREFIX}kubernetesVersion", pattern=r"^1\.[0-9]{2}$")] = "1.32"
    public_access_cidrs: Annotated[tuple[Cidr, ...], Field(alias=f"{PREFIX}publicAccessCidrs")] = ()
    rotation: Annotated[Rotation, Field(alias=f"{PREFIX}rotation")] = Rotation()
    remediation: Annotated[Remediation, Field(alias=f"{PREFIX}remediation")] = Remediation()
    canary: Annotated[Canary, Field(alias=f"{PREFIX}canary")] = Canary()
    release: Annotated[Release, Field(alias=f"{PREFIX}release")] = Release()
    image_lock: Annotated[str, Field(alias=f"{PREFIX}imageLock")] = "../ami/images.lock.json"
    # Set for one run by the release pipeline's deploy (never in a stack file): the lock file's images over the
    # stage's pins, since a candidate carries its images to every stage, pinned ones included.
    images_from_lock: Annotated[bool, Field(alias=f"{PREFIX}imagesFromLock")] = False



def parse_settings(config: Mapping[str, Any], stage: str, source: str) -> InfraSettings:
    """The ``platformctl:`` keys of a stack's config other than the topology; an unknown key is a mistake."""
    raw = {k: v for k, v in config.items() if k.startswith(PREFIX) and k != TOPOLOGY_KEY}
    try:
        settings = InfraSettings.model_validate(raw)
    except ValidationError as exc:
        raise validation_error(exc, source, ("config",), model=InfraSettings) from None
    if stage in PROD_STAGES and settings.public_access_cidrs:
        raise PlatformError(f"the {stage} stage keeps the clusters' public endpoints off; remove this key",
                            file=source, field=f"config.{PREFIX}publicAccessCidrs")
    # The job's policy is checked now, by the parser `rotate run` uses, not at 3 a.m. when the job starts.
    from upgrade_service.planning.policy import parse_policy

    try:
        parse_policy(settings.rotation.policy or {}, source)
    except PlatformError as exc:
        raise PlatformError(exc.detail, file=source,
                            field=f"config.{PREFIX}rotation.policy" + (f".{exc.field}" if exc.field else "")) from None
    from upgrade_service.remediation.policy import parse_remediation_policy

    try:
        parse_remediation_policy(settings.remediation.policy, source)
    except PlatformError as exc:
        raise PlatformError(exc.detail, file=source,
                            field=f"config.{PREFIX}remediation.policy" + (f".{exc.field}" if exc.field else "")) from None
    return settings


def with_canaries(settings: InfraSettings, source: str, infra_dir: Path) -> InfraSettings:
    """The settings with every canary the runners carry out, name -> definition, checked by the parser `canary run`
    uses: the stack config's ``canaries``, else the files in ``definitions`` (relative to ``infra/``)."""
    from e2e_canary.definitions import load_canaries, parse_canary
    from platformctl.kernel.yamlfile import read_yaml

    if settings.canary.canaries:
        for name, document in sorted(settings.canary.canaries.items()):
            try:
                parse_canary(document, f"{name}.yaml")
            except PlatformError as exc:
                raise PlatformError(exc.detail, file=source, field=f"config.{PREFIX}canary.canaries.{name}"
                                    + (f".{exc.field}" if exc.field else "")) from None
        return settings
    folder = (infra_dir / settings.canary.definitions).resolve()
    if not folder.is_dir():
        raise PlatformError(f"no folder of canary definitions at {folder}", file=source, field=f"config.{PREFIX}canary.definitions")
    documents = {c.name: read_yaml(Path(c.source), "canary") for c in load_canaries(folder)}
    return settings.model_copy(update={"canary": settings.canary.model_copy(update={"canaries": documents})})


def read_pipeline(settings: InfraSettings, source: str, infra_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The pipeline file the stack names, as a mapping with a list of named stages; a file that is missing, not YAML or
    lists no stages names the stack's key. The stack cannot reach the pipeline's own parser (it lives a layer above):
    what the jobs would trip on first is checked here."""
    import yaml

    path = (infra_dir / settings.release.pipeline).resolve()
    field = f"config.{PREFIX}release.pipeline"
    try:
        document = yaml.safe_load(path.read_text())
    except OSError:
        raise PlatformError(f"no pipeline file at {path}", file=source, field=field) from None
    except yaml.YAMLError as exc:
        raise PlatformError(f"{path} is not YAML: {str(exc).splitlines()[0]}", file=source, field=field) from None
    stages = document.get("stages") if isinstance(document, dict) else None
    if not isinstance(stages, list) or not all(isinstance(st, dict) and "name" in st for st in stages):
        raise PlatformError(f"{path} lists no stages (stages: [{{name: dev, ...}}, ...])", file=source, field=field)
    return path, document


def _stage_policy(path: Path, stage: dict[str, Any], source: str) -> Path | None:
    if not stage.get("rotationPolicy"):
        return None
    policy = path.parent / str(stage["rotationPolicy"])
    if not policy.is_file():
        raise PlatformError(f"{path}: stage {stage['name']}'s rotationPolicy {policy} does not exist",
                            file=source, field=f"config.{PREFIX}release.pipeline")
    return policy


def release_config(settings: InfraSettings, source: str, infra_dir: Path) -> dict[str, str]:
    """The files of the tick's ConfigMap: the pipeline file with each stage's rotation policy beside it as
    ``policy-<stage>.yaml``, and no ledger (the job names it)."""
    import yaml

    path, document = read_pipeline(settings, source, infra_dir)
    document.pop("ledger", None)
    files: dict[str, str] = {}
    for stage in document["stages"]:
        policy = _stage_policy(path, stage, source)
        if policy is not None:
            stage["rotationPolicy"] = f"policy-{stage['name']}.yaml"
            files[stage["rotationPolicy"]] = policy.read_text()
    return {"pipeline.yaml": yaml.safe_dump(document, sort_keys=False), **files}


FREEZE_WINDOW_KEYS = ("timezone", "rrule", "cron", "duration", "start", "end")


def _plain_json(value: Any) -> Any:
    """YAML's timestamps as the ISO text they were written as: the policy travels as JSON in the job's ConfigMap."""
    if isinstance(value, dict):
        return {k: _plain_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_json(v) for v in value]
    return value.isoformat() if hasattr(value, "isoformat") else value


def scheduled_policy(settings: InfraSettings, stage_name: str, source: str, infra_dir: Path) -> dict[str, Any]:
    """The policy the stage's scheduled rotation (the ``platformctl-rotate`` CronJob) runs under: the stack's
    ``rotation.policy`` when it gives one, else the one the pipeline rotates the stage with (its ``rotationPolicy``:
    canary-gated, first light in the first stage), and either way every freeze of the pipeline file that binds the
    stage among its ``exclusions``: no wave starts in one, as no candidate enters the stage in one. Checked by the
    parser ``rotate run`` uses, a mistake naming the file it came from."""
    import yaml

    from upgrade_service.planning.policy import parse_policy

    path, document = read_pipeline(settings, source, infra_dir)
    stage = next((st for st in document["stages"] if st["name"] == stage_name), None)
    where, field = source, f"config.{PREFIX}rotation.policy"
    policy: dict[str, Any] = dict(settings.rotation.policy or {})
    if settings.rotation.policy is None and stage is not None and (policy_file := _stage_policy(path, stage, source)):
        where, field = str(policy_file), ""
        try:
            loaded = yaml.safe_load(policy_file.read_text())
        except yaml.YAMLError as exc:
            raise PlatformError(f"not YAML: {str(exc).splitlines()[0]}", file=where) from None
        if not isinstance(loaded, dict):  # an empty or non-mapping file would leave the job ungated, silently
            raise PlatformError("expected a rotation policy (a mapping of its fields)", file=where)
        policy = dict(loaded)
    freezes = [f for f in document.get("freezes") or () if isinstance(f, dict)
               and (not f.get("stages") or stage_name in (f.get("stages") or ()))]
    if freezes:
        policy["exclusions"] = [*(policy.get("exclusions") or ()),
                                *({"name": f"freeze {f.get('name', '')}".strip(),
                                   **{k: f[k] for k in FREEZE_WINDOW_KEYS if k in f}} for f in freezes)]
    policy = _plain_json(policy)
    try:
        parse_policy(policy, where)
    except PlatformError as exc:
        if exc.field is not None and exc.field.startswith("exclusions"):
            where, field = str(path), "freezes"
        raise PlatformError(exc.detail, file=where, field=".".join(x for x in (field, exc.field) if x) or None) from None
    return policy


def state_table(settings: InfraSettings, stage: str) -> str:
    return settings.rotation.state_table or f"platformctl-state-{stage}"


def read_promoted(stage: Stage, settings: InfraSettings, say: Callable[[str], None] = lambda line: None) -> Promoted | None:
    """What the release pipeline last promoted to ``stage``, from the stage's state table in its own region; None when
    it never deployed there (no record, or no table yet: a stage's first ``pulumi up`` makes it, and ``say`` tells so,
    naming the table: a renamed table or another account's credentials look the same). A table that exists but cannot
    be read stops the program (one line): deploying the checkout's images instead could undo a release."""
    from platformctl.kernel.state import NoSuchStore, open_store

    table = state_table(settings, stage.name)
    try:
        store = open_store(f"dynamodb://{table}?region={stage.region}")
        try:
            return promoted_in(store, stage.name)
        finally:
            store.close()
    except NoSuchStore:
        say(f"no state table {table} in {stage.region} for these credentials: {stage.name} has no record of a release "
            "pipeline deploy, so its pools boot what the checkout names (a stage's first `pulumi up` makes the table)")
        return None
    except (PlatformError, Unavailable) as exc:
        detail = exc.detail if isinstance(exc, PlatformError) else str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PlatformError(f"cannot read what the release pipeline promoted to {stage.name} from the DynamoDB table "
                            f"{table} in {stage.region} ({detail}): a deploy of a stage the pipeline may drive "
                            "deploys what it promoted there", file=stage.source,
                            field=f"config.{PREFIX}rotation.stateTable") from None


def with_promoted(stage: Stage, settings: InfraSettings, images: dict[str, str],
                  promoted: Promoted | None) -> tuple[InfraSettings, dict[str, str], list[str]]:
    """The images and Kubernetes version a deploy of ``stage`` applies once the pipeline has ``promoted`` images there:
    each family it carried boots its promoted image (a family it never carried, a pool the checkout adds, boots what the
    checkout says), and the control planes keep the version its deploy kept. The release pipeline's own deploys
    (``imagesFromLock``) already carry what they promote. Also answers what the checkout asked that this deploy does not
    do, one line each, for the program to say."""
    if promoted is None or settings.images_from_lock:
        return settings, images, []
    said = []
    out = dict(images)
    for family, image in sorted(images.items()):
        kept = promoted.images.get(family)
        if kept is not None and kept != image:
            out[family] = kept
            said.append(f"{family}: {stage.name} runs {kept}, promoted by the release pipeline (candidate "
                        f"{promoted.candidate}); the checkout names {image}, which reaches {stage.name} through "
                        "`platformctl release start`")
    version = promoted.kubernetes_version
    if version and version != settings.kubernetes_version:
        said.append(f"Kubernetes {version}: the version {stage.name}'s control planes run since the release pipeline's "
                    f"deploy of candidate {promoted.candidate}; the checkout's {PREFIX}kubernetesVersion "
                    f"{settings.kubernetes_version} reaches {stage.name} with a candidate")
        settings = settings.model_copy(update={"kubernetes_version": version})
    return settings, out, said


# A kubelet may be up to three minor versions older than kube-apiserver, never newer (Kubernetes' version skew policy,
# kubernetes.io/releases/version-skew-policy, since 1.28).
KUBELET_SKEW = 3


def kubelet_skew(kubelet: str, control_plane: str) -> bool:
    """Whether a kubelet of ``kubelet``'s minor version may join control planes of ``control_plane``'s (a version
    that does not say its minor one, ``v1.32`` or ``1``, is not judged: True)."""
    try:
        have, want = int(kubelet.removeprefix("v").split(".")[1]), int(control_plane.removeprefix("v").split(".")[1])
    except (IndexError, ValueError):
        return True
    return 0 <= want - have <= KUBELET_SKEW


def image_kubelets(region: str, images: list[str]) -> dict[str, str]:
    """Image id -> the kubelet version it runs (its ``platformctl:kubernetes-version`` tag, as ``platformctl ami build``
    tags it), read from EC2 in ``region`` through boto3 when the program runs; an image not found or not tagged is not
    in it (``Unavailable``: EC2 did not answer)."""
    from platformctl.kernel import aws

    return aws.image_tags(region, images, "platformctl:kubernetes-version")


def check_new_families(stage: Stage, settings: InfraSettings, images: dict[str, str], promoted: Promoted | None,
                       kubelets: Callable[[str, list[str]], dict[str, str]], lock: str) -> None:
    """A deploy by hand boots a family the release pipeline never carried (every family, on a stage it never deployed)
    from the checkout's lock file; its image must run a kubelet that may join the control planes the deploy keeps
    (the pipeline's own deploys check theirs, ``infra.materialize.check_images``). An image that does not say its
    kubelet is not judged here."""
    new = {family: image for family, image in images.items() if promoted is None or family not in promoted.images}
    if not new:
        return
    try:
        said = kubelets(stage.region, sorted(set(new.values())))
    except Unavailable as exc:
        raise PlatformError(f"cannot read the kubelet version of {', '.join(sorted(set(new.values())))} ({exc}): a deploy by "
                            "hand checks that the images the checkout adds can join the control planes it keeps",
                            file=stage.source, field=f"config.{TOPOLOGY_KEY}") from None
    for family, image in sorted(new.items()):
        kubelet = said.get(image)
        if kubelet and not kubelet_skew(kubelet, settings.kubernetes_version):
            kept = f" (kept by the release pipeline's deploy of candidate {promoted.candidate})" if promoted else ""
            raise PlatformError(f"{image} ({family}) runs kubelet {kubelet}, and {stage.name}'s control planes run "
                                f"{settings.kubernetes_version}{kept}: a kubelet may be up to {KUBELET_SKEW} minor "
                                "versions older than its API server, never newer", file=lock, field=f"images.{family}")


def node_images(stage: Stage, settings: InfraSettings, infra_dir: Path) -> dict[str, str]:
    """Image family -> AMI id for every family a node pool of the stage boots."""
    families = sorted({p.image_family for c in stage.clusters() for p in c.node_pools})
    lock_path = (infra_dir / settings.image_lock).resolve()
    lock: dict[str, Any] | None = None
    images: dict[str, str] = {}
    for family in families:
        if family in stage.topology.images and not settings.images_from_lock:
            images[family] = stage.topology.images[family]
            continue
        if lock is None:
            lock = _read_lock(lock_path)
        found = newest_in_lock(lock, family, stage.region)
        if found is None:
            raise PlatformError(
                f"no image for the {family} family: set it here, or build it with `platformctl ami build` "
                f"({lock_path} has no {family} image for {stage.region})",
                file=stage.source, field=f"config.{TOPOLOGY_KEY}.images.{family}")
        images[family] = found
    return images


def _read_lock(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        lock = json.loads(path.read_text())
    except ValueError:
        raise PlatformError("not valid JSON", file=str(path)) from None
    if not isinstance(lock, dict) or not isinstance(lock.get("images", {}), dict):
        raise PlatformError("expected a mapping of image name -> version -> region -> id", file=str(path), field="images")
    return lock
