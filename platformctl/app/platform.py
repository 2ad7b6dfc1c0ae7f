"""The platform a command acts on, worked out once where the command starts and handed to every application call.

``platformctl``'s root command builds one ``Platform`` from the process environment and ``--infra-dir``; each
application function takes it in place of an ``infra_dir`` and of asking the environment again. It answers, each at
most once in the command's life:

- ``stage(name)``: the stage as its stack file describes it, and ``stack_config(name)`` that file's ``config:``; the
  file is read once (a file that does not load is refused the same way at every ask);
- ``region``: the running local region, a typed ``LocalRegion`` (one look at its status endpoint, made the first time
  a call needs it: ``stage show`` never looks);
- ``aws``: the AWS target every adapter reaches (the environment's when it names one, else the local region's, else
  boto3's credential chain);
- ``kubeconfig(given)``: the kubeconfig a command uses;
- ``clock(stage)``: the stage's clock (its region's virtual one while a local region holds it, else the wall's).

The value is frozen; what it has worked out it keeps (``functools.cached_property`` and per-stage tables). A command
that starts or stops the local region (``demo``) takes ``with_region_looked_again()``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from platformctl.kernel import region_client
from platformctl.kernel.clock import Clock, WallClock, synced_now
from platformctl.kernel.environment import FAKE_CREDENTIALS, AwsTarget, Environment
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.memo import remembered
from platformctl.kernel.topology import (
    STAGES,
    Stage,
    default_infra_dir,
    parse_stage_config,
    read_stack_config,
    stage_file,
    table_of,
)


@dataclass(frozen=True)
class LocalRegion:
    """The running local region as its status endpoint answered (``local status -o json``), once."""

    status: Mapping[str, Any]

    @property
    def stages(self) -> list[str]:
        return region_client.stages_of(dict(self.status))

    @property
    def kubeconfig(self) -> str:
        return str(self.status["kubeconfig"])

    @property
    def aws_endpoint(self) -> str:
        return str(self.status["aws_endpoint"])

    @property
    def image_lock(self) -> Path:
        return Path(self.status["image_lock"])

    def for_stage(self, stage: str | None = None, cluster: str | None = None) -> dict[str, Any] | None:
        """The region as the stage it holds (named, or found by one of its clusters) sees it; None: it holds neither."""
        return region_client.for_stage(dict(self.status), stage, cluster)

    def time_url(self, stage: str) -> str | None:
        """The address of the virtual clock of the stage's clusters, when the region holds the stage."""
        info = self.for_stage(stage)
        return f"{info['kubernetes_endpoint']}/platformctl/v1/time" if info is not None else None


@dataclass(frozen=True, eq=False)
class Platform:
    """What a command acts on: see the module's docstring."""

    environment: Environment
    infra_dir_given: Path | None = None  # --infra-dir; None: the checkout's infra/ (found when first needed)
    _stacks: dict[str, Mapping[str, Any] | Exception] = field(default_factory=dict, init=False, repr=False)
    _stages: dict[str, Stage] = field(default_factory=dict, init=False, repr=False)
    _clocks: dict[str, Clock] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def from_os(cls, infra_dir: Path | None = None) -> Platform:
        """The platform of this process's environment (a test's, a library caller's; the CLI's root builds its own)."""
        return cls(Environment.from_os(), infra_dir)

    # ---------------------------------------------------------------------------------------------- stages

    @functools.cached_property
    def infra_dir(self) -> Path:
        """The folder of the stack files: ``--infra-dir``, else ``infra/`` of the checkout the current directory is in."""
        return self.infra_dir_given or default_infra_dir()

    def stack_config(self, name: str) -> Mapping[str, Any]:
        """The ``config:`` of stage ``name``'s stack file, read once."""
        if name not in STAGES:
            raise PlatformError(f"unknown stage {name!r} (stages: {', '.join(STAGES)})", field="stage")
        return remembered(self._stacks, name, lambda: read_stack_config(stage_file(name, self.infra_dir)), PlatformError)

    def stage(self, name: str) -> Stage:
        """Stage ``name`` as its stack file describes it (``PlatformError`` when the file does not load)."""
        if name not in self._stages:
            self._stages[name] = parse_stage_config(self.stack_config(name), name, str(stage_file(name, self.infra_dir)))
        return self._stages[name]

    def stage_table(self, name: str) -> str:
        """The stage's state table as its Pulumi program names it (``platformctl:rotation.stateTable``)."""
        return table_of(self.stack_config(name), name)

    def stage_of(self, cluster: str) -> Stage | None:
        """The stage whose stack file declares ``cluster`` (None outside a checkout, or for a cluster of no stage); a
        stack file that does not load names no cluster here (its own commands say why)."""
        for name in STAGES:
            try:
                stage = self.stage(name)
            except PlatformError:
                continue
            if cluster in {c.name for c in stage.clusters()}:
                return stage
        return None

    # ------------------------------------------------------------------------------------------ the region

    @property
    def home(self) -> Path:
        """The toolkit's folder (``$PLATFORMCTL_HOME``): its default state store and the local region's files."""
        return self.environment.home

    @functools.cached_property
    def region(self) -> LocalRegion | None:
        """The local region running from this home, looked at once (None: none runs); in a job's pod of the region,
        the region its ``$KUBECONFIG`` reaches when its AWS is that region's too (its IRSA session against the region's
        endpoint): its stages' stores, clocks and stacks are the region's, as the pod's would be its stage's in AWS."""
        status = region_client.running(self.home)
        if status is None:
            status = self._region_of_pod()
        return LocalRegion(status) if status is not None else None

    def _region_of_pod(self) -> dict[str, Any] | None:
        own, config = self.environment.aws, self.environment.kubeconfig
        if not (own.endpoint and config):
            return None
        status = region_client.region_of_context(Path(config.split(os.pathsep)[0]).expanduser(), None)
        return status if status is not None and status.get("aws_endpoint") == own.endpoint else None

    def with_infra_dir(self, infra_dir: Path) -> Platform:
        """This platform with the stack files of another checkout (a candidate's own commit), the region as looked at."""
        other = Platform(self.environment, infra_dir)
        for worked_out in ("region", "aws"):
            if worked_out in self.__dict__:
                other.__dict__[worked_out] = self.__dict__[worked_out]
        return other

    def with_region_looked_again(self) -> Platform:
        """This platform with the local region looked at afresh (after a command started or stopped it)."""
        return Platform(self.environment, self.infra_dir_given)

    @functools.cached_property
    def aws(self) -> AwsTarget:
        """The AWS every adapter reaches: the environment's when it names one, else the running local region's (its
        moto, its fake keys), else boto3's credential chain's."""
        own = self.environment.aws
        if own.configured or self.region is None:
            return own
        return AwsTarget(endpoint=self.region.aws_endpoint, region=own.region or str(self.region.status["region"]),
                         credentials=dict(FAKE_CREDENTIALS), configured=True, local=True)

    @property
    def identity_target(self) -> AwsTarget:
        """The AWS asked who acts (``who``, an approver's ARN): the environment's, the one the ledger and the stores
        named by ``dynamodb://`` are in, never the local region's, whose keys vouch for nobody (no look at the region)."""
        return self.environment.aws

    @property
    def reached(self) -> LocalRegion | None:
        """The running local region, when the command's AWS calls reach it (no other endpoint or account named)."""
        return self.region if self.aws.local else None

    def kubeconfig(self, given: str | None = None) -> str | None:
        """The kubeconfig a command uses: the one given, else ``$KUBECONFIG``, else the running local region's."""
        if given:
            return given
        if self.environment.kubeconfig:
            return self.environment.kubeconfig
        return self.region.kubeconfig if self.region is not None else None

    def clock(self, stage: str) -> Clock:
        """The stage's clock: its local region's virtual one while a region holds it, else the wall's."""
        if stage not in self._clocks:
            url = self.region.time_url(stage) if self.region is not None else None
            self._clocks[stage] = region_client.ServerClock(url) if url else WallClock()
        return self._clocks[stage]

    def now(self, stage: str) -> float:
        """The stage's time now, asked of its source (the local region's server, else the wall)."""
        return synced_now(self.clock(stage))


