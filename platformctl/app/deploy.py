"""Deploying a stage: its Pulumi program run again with a lock file's images (new launch template versions; no node
moves until a rotation moves it).

The deployer is chosen here, once: the running local region's (the mock engine against its AWS) when one of this
stage runs, else Pulumi's Automation API on the stage's stack in the checkout's ``infra/``.
"""

from __future__ import annotations

import json
from pathlib import Path

from platformctl.app.platform import Platform
from platformctl.kernel.deployer import Deployer, DeployResult
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.topology import Stage


def check_lock_file(lock_file: Path) -> None:
    """A lock file that can be read and is JSON, checked before anything is deployed."""
    try:
        json.loads(lock_file.read_text())
    except OSError as exc:
        raise PlatformError(f"cannot read the lock file ({exc.strerror})", file=str(lock_file), field="--lock-file") from None
    except ValueError:
        raise PlatformError("not valid JSON", file=str(lock_file), field="--lock-file") from None


def deployer_for(platform: Platform, stage: Stage, lock_file: Path | None) -> tuple[Deployer, Path]:
    """The deployer of ``stage`` and the lock file it deploys (the given one, else the region's or the stack's)."""
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
                              platform.aws if platform.aws.local else None, platform.clock(stage.name))
        return local, lock_file or Path(info["image_lock"])
    from infra.deploy import PulumiDeployer
    from infra.settings import parse_settings

    lock = lock_file or platform.infra_dir / parse_settings(dict(platform.stack_config(stage.name)), stage.name,
                                                            stage.source).image_lock
    return PulumiDeployer(platform.infra_dir, platform.environment), lock


def deploy_stage(platform: Platform, stage_name: str, lock_file: Path | None = None,
                 over_pins: bool = False, kubernetes_version: str | None = None) -> DeployResult:
    """Deploy ``stage_name`` with ``lock_file``'s images (default: the region's or the stack's lock file); with
    ``over_pins`` (a release candidate's deploy) those images win over the stage's pinned ones; ``kubernetes_version``
    over the stack file's (a rollback keeps its control planes' version: EKS never takes one back)."""
    stage = platform.stage(stage_name)
    deployer, lock = deployer_for(platform, stage, lock_file)
    return deployer.deploy(stage, lock, over_pins=over_pins, kubernetes_version=kubernetes_version)


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
