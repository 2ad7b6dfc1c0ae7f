"""Deploying a stage: its Pulumi program run again with a lock file's images (new launch template versions; no node
moves until a rotation moves it).

The deployer is chosen here, once: the running local region's (the mock engine against its AWS) when one of this
stage runs (or when the command is a job's pod there: ``Platform.region``), else Pulumi's Automation API on the stage's
stack in the checkout's ``infra/``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from platformctl.app.platform import Platform
from platformctl.kernel.deployer import Deployer, DeployResult
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.topology import Stage

if TYPE_CHECKING:
    from platformctl.kernel.nodegroups import GroupState
    from platformctl.kernel.state import StateStore
    from platformctl.kernel.state.frozen import HandFreeze
    from platformctl.kernel.state.promoted import Promoted

T = TypeVar("T")


def check_lock_file(lock_file: Path) -> None:
    """A lock file that can be read and is JSON, checked before anything is deployed."""
    try:
        json.loads(lock_file.read_text())
    except OSError as exc:
        raise PlatformError(f"cannot read the lock file ({exc.strerror})", file=str(lock_file), field="--lock-file") from None
    except ValueError:
        raise PlatformError("not valid JSON", file=str(lock_file), field="--lock-file") from None


def deployer_for(platform: Platform, stage: Stage, lock_file: Path | None,
                 kubeconfig: str | None = None) -> tuple[Deployer, Path]:
    """The deployer of ``stage`` and the lock file it deploys (the given one, else the region's or the stack's); in the
    local region it applies the program's Kubernetes objects with ``kubeconfig`` (default: the command's own, as
    ``Platform.kubeconfig`` finds it), so the clusters authorize whoever deploys."""
    running = platform.region
    info = running.for_stage(stage.name) if running is not None else None
    if running is not None and info is None:
        raise PlatformError(f"the local region running here holds {', '.join(running.stages)}, not "
                            f"{stage.name}: stop it (`platformctl local down`) or start a region that holds this stage",
                            field="--stage")
    if lock_file is not None:
        check_lock_file(lock_file)
    if info is not None:
        from infra.deploy import LocalDeployer

        local = LocalDeployer(Path(info["checkpoint"]), f"the local region (AWS {info['aws_endpoint']})",
                              platform.aws if platform.aws.local else None, platform.clock(stage.name),
                              platform.kubeconfig(kubeconfig))
        return local, lock_file or Path(info["image_lock"])
    from infra.deploy import PulumiDeployer
    from infra.settings import parse_settings

    lock = lock_file or platform.infra_dir / parse_settings(dict(platform.stack_config(stage.name)), stage.name,
                                                            stage.source).image_lock
    return PulumiDeployer(platform.infra_dir, platform.environment), lock


def deploy_stage(platform: Platform, stage_name: str, lock_file: Path | None = None,
                 over_pins: bool = False, kubernetes_version: str | None = None, kubeconfig: str | None = None) -> DeployResult:
    """Deploy ``stage_name`` with ``lock_file``'s images (default: the region's or the stack's lock file); with
    ``over_pins`` (a release candidate's deploy) those images win over the stage's pinned ones; ``kubernetes_version``
    over the stack file's (a rollback keeps its control planes' version: EKS never takes one back); ``kubeconfig``: whose
    credentials apply the Kubernetes objects (the tick's own)."""
    stage = platform.stage(stage_name)
    deployer, lock = deployer_for(platform, stage, lock_file, kubeconfig)
    return deployer.deploy(stage, lock, over_pins=over_pins, kubernetes_version=kubernetes_version)


def promoted_to(platform: Platform, stage_name: str) -> Promoted | None:
    """What the release pipeline last deployed to ``stage_name`` (its ``promoted/<stage>`` record in the stage's store);
    None when it never did (no record, or no store yet: the stage's table comes with its first deploy)."""
    from platformctl.kernel.state.promoted import promoted_in

    return _in_stage_store(platform, stage_name, lambda store: promoted_in(store, stage_name), None)


def held_to(platform: Platform, stage_name: str) -> tuple[Promoted | None, list[HandFreeze]]:
    """What the release pipeline last deployed to ``stage_name`` and the freezes set by hand that bind it, as its tick
    last wrote them in the stage's store: one read of it (None and none when it has no store yet)."""
    from platformctl.kernel.state.frozen import frozen_in
    from platformctl.kernel.state.promoted import promoted_in

    none: tuple[Promoted | None, list[HandFreeze]] = (None, [])
    return _in_stage_store(platform, stage_name, lambda store: (promoted_in(store, stage_name), frozen_in(store, stage_name)),
                           none)


def _in_stage_store(platform: Platform, stage_name: str, read: Callable[[StateStore], T], none: T) -> T:
    """``read`` of the stage's own store; ``none`` when it has none yet."""
    store = stage_store(platform, stage_name)
    if store is None:
        return none
    try:
        return read(store)
    finally:
        store.close()


def stage_store(platform: Platform, stage_name: str) -> StateStore | None:
    """The stage's own store, where its tick records what the release pipeline promoted there and the freezes by hand
    (whatever store a command journals in); None when it has none yet. The caller closes it."""
    from platformctl.app.stores import store_for
    from platformctl.kernel.state import NoSuchStore

    try:
        return store_for(platform, None, stage=stage_name)
    except NoSuchStore:
        return None
    except PlatformError as exc:  # the stage's table cannot be read (no credentials, no network)
        raise PlatformError(f"cannot read {stage_name}'s own store, where its tick records what the release pipeline "
                            f"promoted there and the freezes by hand ({exc.detail}): a deploy or rotation of a stage the "
                            "pipeline may drive needs them", file=exc.file, field="--stage") from None


def pool_groups(platform: Platform, stage_name: str) -> list[tuple[str, str, str, GroupState | None, str | None]]:
    """(cluster, pool, image family, its group as AWS describes it, the image it boots) for each pool of the stage whose
    group exists (the program names a pool's group ``<cluster>-<pool>``); the group None when its launch template's
    user data labels another image than it boots."""
    from platformctl.app.nodegroups import node_groups
    from platformctl.kernel.nodegroups import LabelledOtherwise, NodeGroupError

    spec = platform.stage(stage_name)
    groups = node_groups(spec.region, target=platform.aws)
    found: list[tuple[str, str, str, GroupState | None, str | None]] = []
    for cluster in spec.clusters():
        for pool in cluster.node_pools:
            state: GroupState | None
            try:
                described = groups.describe(f"{cluster.name}-{pool.name}")
                state, image = described, described.image
            except LabelledOtherwise as other:
                state, image = None, other.image
            except NodeGroupError as missing:
                if missing.code != "ValidationError":  # AWS's answer for a group that does not exist
                    raise
                continue  # a pool this checkout names and the stage has not deployed (yet, or any more)
            found.append((cluster.name, pool.name, pool.image_family, state, image))
    return found


def record_launches_now(platform: Platform, stage_name: str, promoted: Promoted, fence: Callable[[], object]) -> bool:
    """Once the deploy of ``promoted`` is made: what each of the stage's groups launches now, in the stage's store
    (``platformctl.kernel.state.promoted.record_launches``), each group only while it boots the record's image of its
    family (a read that lags the deploy records nothing of it). The settings a rotation there may roll out come from
    it; a record that could not be written leaves them out until the next deploy (answers False), as a write fenced
    off (``fence`` raises) does."""
    from platformctl.kernel.state.base import LeaseLost
    from platformctl.kernel.state.promoted import record_launches

    try:
        launches = {state.name: state.launch for _, _, family, state, image in pool_groups(platform, stage_name)
                    if state is not None and state.launch is not None and image == promoted.images.get(family)}
        store = stage_store(platform, stage_name)
        if store is None:
            return False
        try:
            return record_launches(store, stage_name, promoted.candidate, launches, promoted.at, fence)
        finally:
            store.close()
    except LeaseLost:
        raise
    except Exception:
        return False


def deploy_by_hand(platform: Platform, stage_name: str, lock_file: Path | None = None) -> tuple[DeployResult, Promoted | None]:
    """``stage deploy``: the stage's program run again. A stage the release pipeline has deployed runs what it promoted
    there: a deploy by hand deploys exactly those images (and so puts back a launch template someone changed, as
    ``pulumi up --refresh`` does), and another lock file is refused before anything: another image reaches a stage of
    the pipeline through the pipeline (``release start``; ``release rollback`` to go back). A stage it never deployed
    takes the lock file's newest images, as before. Answers the result and the record it deployed (None: the lock's)."""
    stage = platform.stage(stage_name)
    if lock_file is not None:
        check_lock_file(lock_file)  # the operator's input first, before any store is read
    record = promoted_to(platform, stage_name)
    if record is None:
        return deploy_stage(platform, stage_name, lock_file), None
    if lock_file is not None:
        raise PlatformError(f"{stage_name} runs what the release pipeline promoted there (candidate {record.candidate}: "
                            f"{record.said()}), and a deploy by hand deploys exactly that: another image reaches the "
                            "stage through the pipeline (`platformctl release start`), an earlier one through "
                            "`release rollback`", field="--lock-file")
    images = {family: {"0.0.0-promoted": {stage.region: image}} for family, image in sorted(record.images.items())}
    work = platform.home / "deploys"
    lock = work / f"{stage_name}-promoted.lock.json"
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        lock.write_text(json.dumps({"images": images}, indent=2, sort_keys=True))
    except OSError as exc:
        raise PlatformError(f"cannot write {lock}: {exc.strerror}", field="PLATFORMCTL_HOME") from None
    # The candidate's own commit (its program, stack file, user data) and the control planes' version its deploy kept,
    # as the tick deploys it: never the checkout's newer program nor a version bump the pipeline has not carried.
    source = platform.infra_dir
    if record.infra_revision:
        from platformctl.app.release_source import candidate_source
        from release_pipeline.candidates import Candidate

        source = candidate_source(Candidate(record.candidate, {}, record.infra_revision), platform.infra_dir, work)
    on = platform.with_infra_dir(source) if source != platform.infra_dir else platform
    done = deploy_stage(on, stage_name, lock, over_pins=True, kubernetes_version=record.kubernetes_version or None)
    record_launches_now(platform, stage_name, record, lambda: None)  # the candidate's own settings, made again
    return done, record


def stage_deployer(platform: Platform, stage_name: str) -> tuple[Deployer, Stage]:
    """The deployer of ``stage_name`` (its stack's lock holder, its ``cancel``) and the stage."""
    stage = platform.stage(stage_name)
    return deployer_for(platform, stage, None)[0], stage


def cancel_stack_lock(platform: Platform, stage_name: str) -> None:
    """Clear ``stage_name``'s stack lock, as ``pulumi cancel`` does (``platformctl stage cancel``)."""
    deployer, stage = stage_deployer(platform, stage_name)
    deployer.cancel(stage)


def deployed_now(platform: Platform, stage_name: str) -> tuple[dict[str, str], dict[str, str]]:
    """What ``stage_name`` runs as its last deploy left it: each image family and the image its launch templates boot,
    and each cluster's control plane version."""
    stage = platform.stage(stage_name)
    deployer, _ = deployer_for(platform, stage, None)
    now = deployer.deployed(stage)
    families = {f"{c.name}/{p.name}": p.image_family for c in stage.clusters() for p in c.node_pools}
    return {families[key]: image for key, image in sorted(now.images.items()) if key in families}, now.kubernetes_versions
