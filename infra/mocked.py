"""Run the stage program under Pulumi's mock engine (``pulumi.runtime.set_mocks``).

``run_stage`` sets the stack config exactly as ``pulumi up`` would (every key of the stack file's
``config:``), runs ``infra.program`` and returns every resource it declared, with its inputs and
the outputs a backend answered, plus the stack outputs. Two backends answer:

- ``Synthetic`` makes up the outputs a provider would compute (ARNs, ids, endpoints, the OIDC
  issuer) deterministically: the tests of what the program declares use it;
- ``infra.materialize.MotoBackend`` creates each resource in AWS through boto3 (moto) and applies
  each Kubernetes object to a local cluster: the local region is made that way.

Each run happens on its own thread: Pulumi keeps its settings, config and root stack in context
variables, and a new thread starts with none of a previous run's.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pulumi

from infra.program import INFRA_DIR, load, main, provision, stack_config, stage_regions
from infra.settings import release_config
from platformctl.kernel.state.promoted import Promoted
from platformctl.kernel.topology import read_stack_config

ACCOUNT = "123456789012"


@dataclass(frozen=True)
class Declared:
    """One resource the program registered."""

    type: str
    name: str
    inputs: dict[str, Any]
    id: str
    outputs: dict[str, Any]
    provider: str


class Backend(Protocol):
    def create(self, type_: str, name: str, inputs: dict[str, Any], provider: str) -> tuple[str, dict[str, Any]]:
        """The physical id and the outputs the provider computes (the inputs are merged in by the caller)."""
        ...


@dataclass
class StageRun:
    resources: list[Declared] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    urns: list[str] = field(default_factory=list)

    def parent(self, type_: str, name: str) -> str:
        """The type of the resource ``type_`` ``name`` is parented to (from its URN)."""
        for urn in self.urns:
            qualified, _, urn_name = urn.split("::", 2)[2].rpartition("::")
            chain = qualified.split("$")
            if chain[-1] == type_ and urn_name == name:
                return chain[-2] if len(chain) > 1 else ""
        raise KeyError(f"no URN for {type_} {name}")

    def of_type(self, type_: str) -> list[Declared]:
        return [r for r in self.resources if r.type == type_]

    def named(self, type_: str, name: str) -> Declared:
        matches = [r for r in self.resources if r.type == type_ and r.name == name]
        if len(matches) != 1:
            raise KeyError(f"{len(matches)} resources of type {type_} named {name}")
        return matches[0]

    def by_id(self, id_: str) -> Declared:
        return next(r for r in self.resources if r.id == id_)


class _Mocks(pulumi.runtime.Mocks):
    def __init__(self, backend: Backend, run: StageRun) -> None:
        self.backend = backend
        self.run = run
        self.lock = threading.Lock()

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        id_, outputs = self.backend.create(args.typ, args.name, dict(args.inputs), args.provider or "")
        state = {**args.inputs, **outputs}
        with self.lock:
            self.run.resources.append(Declared(args.typ, args.name, dict(args.inputs), id_, state, args.provider or ""))
        return id_, state

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        raise NotImplementedError(f"the stage program made a call it is not expected to make: {args.token}")


def run_stage(stage_name: str, backend: Backend | None = None, *, config: Mapping[str, Any] | None = None,
              source: Path | None = None, infra_dir: Path = INFRA_DIR, release: bool = False,
              promoted: Promoted | None = None) -> StageRun:
    """Run the program for ``stage_name`` under mocks. ``config`` defaults to the stack file's. ``release``: with the
    ``release tick`` job, as ``pulumi up`` declares it (the local region declares it, held: ``materialize``).
    ``promoted``: what the release pipeline promoted to the stage, as ``pulumi up`` reads it from the stage's table
    (``infra.settings.read_promoted``; ``run_main`` reads it for real)."""
    path = source or infra_dir / f"Pulumi.{stage_name}.yaml"
    values = dict(config) if config is not None else read_stack_config(path)
    run = StageRun()
    mocks = _Mocks(backend or Synthetic(str(values.get("aws:region") or "us-west-2")), run)

    def program() -> pulumi.Output[Any]:
        stage, settings, images = load(stack_config(), stage_name, str(path), infra_dir,
                                       promoted=(lambda _stage, _settings: promoted) if promoted is not None else None)
        files = release_config(settings, str(path), infra_dir) if release else None
        return pulumi.Output.from_input(provision(stage, settings, images, files, stage_regions(infra_dir))).apply(
            run.outputs.update)

    run.urns = _in_engine(stage_name, values, mocks, program)
    return run


def run_main(stage_name: str, config: Mapping[str, Any]) -> StageRun:
    """Run ``infra/__main__.py``'s entry point, exactly as ``pulumi up`` would, under mocks."""
    run = StageRun()
    mocks = _Mocks(Synthetic(str(config.get("aws:region") or "us-west-2")), run)

    def program() -> None:
        main()

    run.urns = _in_engine(stage_name, config, mocks, program)
    return run


def _in_engine(stack: str, config: Mapping[str, Any], mocks: _Mocks, program: Callable[[], Any]) -> list[str]:
    """Run ``program`` under the mock engine on a thread of its own; returns every resource's URN."""
    monitor = pulumi.runtime.mocks.MockMonitor(mocks)
    failure: list[BaseException] = []

    def body() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            pulumi.runtime.set_mocks(mocks, project="platformctl", stack=stack, preview=False, monitor=monitor)
            pulumi.runtime.set_all_config({k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()})
            pulumi.runtime.test(program)()
        except BaseException as exc:  # re-raised on the caller's thread
            failure.append(exc)
        finally:
            # A program that failed leaves the engine's RPCs pending: end them quietly before the loop goes.
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

    thread = threading.Thread(target=body, name=f"pulumi-{stack}")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return list(monitor.resources)


def _digest(*parts: str, n: int = 17) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:n]


class Synthetic:
    """Outputs as AWS would compute them, made up deterministically from the type and name."""

    def __init__(self, region: str = "us-west-2") -> None:
        self.region = region

    def create(self, type_: str, name: str, inputs: dict[str, Any], provider: str) -> tuple[str, dict[str, Any]]:
        token = type_.split(":")[1].split("/")[-1] if type_.startswith("aws:") else type_
        h = _digest(type_, name)
        region = self.region
        if type_ == "aws:eks/cluster:Cluster":
            issuer = f"https://oidc.eks.{region}.amazonaws.com/id/{_digest('oidc', name, n=32).upper()}"
            vpc = dict(inputs.get("vpcConfig") or {})
            vpc.update(clusterSecurityGroupId=f"sg-{_digest('cluster-sg', name)}", vpcId=f"vpc-{_digest('vpc')}")
            return inputs["name"], {
                "arn": f"arn:aws:eks:{region}:{ACCOUNT}:cluster/{inputs['name']}",
                "endpoint": f"https://{_digest('endpoint', name, n=32).upper()}.gr7.{region}.eks.amazonaws.com",
                "certificateAuthority": {"data": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t"},
                "identities": [{"oidcs": [{"issuer": issuer}]}], "status": "ACTIVE", "vpcConfig": vpc,
                "platformVersion": "eks.1"}
        if type_ == "aws:iam/role:Role":
            return inputs["name"], {"arn": f"arn:aws:iam::{ACCOUNT}:role/{inputs['name']}", "uniqueId": f"AROA{h.upper()}"}
        if type_ == "aws:iam/instanceProfile:InstanceProfile":
            return inputs["name"], {"arn": f"arn:aws:iam::{ACCOUNT}:instance-profile/{inputs['name']}"}
        if type_ == "aws:iam/openIdConnectProvider:OpenIdConnectProvider":
            url = str(inputs["url"]).removeprefix("https://")
            return f"arn:aws:iam::{ACCOUNT}:oidc-provider/{url}", {"arn": f"arn:aws:iam::{ACCOUNT}:oidc-provider/{url}"}
        if type_ == "aws:kms/key:Key":
            key_id = f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[1:4]}-{_digest('k', name, n=12)}"
            return key_id, {"keyId": key_id, "arn": f"arn:aws:kms:{region}:{ACCOUNT}:key/{key_id}"}
        if type_ == "aws:ec2/launchTemplate:LaunchTemplate":
            return f"lt-{h}", {"arn": f"arn:aws:ec2:{region}:{ACCOUNT}:launch-template/lt-{h}", "latestVersion": 1,
                               "defaultVersion": 1}
        if type_ == "aws:dynamodb/table:Table":
            return inputs["name"], {"arn": f"arn:aws:dynamodb:{region}:{ACCOUNT}:table/{inputs['name']}"}
        if type_ == "aws:autoscaling/group:Group":
            return inputs["name"], {"arn": f"arn:aws:autoscaling:{region}:{ACCOUNT}:autoScalingGroup:{h}:autoScalingGroupName/{inputs['name']}"}
        prefixes = {"vpc": "vpc", "subnet": "subnet", "internetGateway": "igw", "natGateway": "nat", "eip": "eipalloc",
                    "routeTable": "rtb", "routeTableAssociation": "rtbassoc", "securityGroup": "sg"}
        if token in prefixes:
            return f"{prefixes[token]}-{h}", {"arn": f"arn:aws:ec2:{region}:{ACCOUNT}:{token.lower()}/{prefixes[token]}-{h}"}
        if type_.startswith("kubernetes:"):
            meta = inputs.get("metadata") or {}
            ns = meta.get("namespace")
            return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name") or name), {}
        return f"{name}-{h[:8]}", {}
