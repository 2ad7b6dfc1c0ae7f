"""What each pool should run: the policy's ``targets``, or what its auto scaling groups' launch templates boot now.

A scheduled job cannot have AMI ids typed into its policy at every release, so a policy may name no
``targets``: a node is then outdated when its image differs from what its group launches now (how
EKS managed node groups and kOps decide), and that image is its target. ``resolve`` is pure: the
caller reads the groups (through the node-group seam) and passes what it read.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from platformctl.kernel.cluster.model import Node
from platformctl.kernel.errors import PlatformError
from upgrade_service.planning.policy import RotationPolicy


@dataclass
class Targets:
    images: dict[str, str]  # pool -> image
    warnings: list[str] = field(default_factory=list)
    mismatches: dict[str, str] = field(default_factory=dict)  # pool -> why its groups cannot bring its target
    drifted: dict[str, str] = field(default_factory=dict)  # pool -> the image its groups launch, which is not promoted


def resolve(policy: RotationPolicy, nodes: Sequence[Node], group_of: Mapping[str, str],
            group_images: Mapping[str, str | None], promoted: Collection[str] | None = None) -> Targets:
    """``group_of``: node -> its auto scaling group; ``group_images``: group -> what it launches now. ``promoted``:
    the images the release pipeline says the stage runs (``platformctl.kernel.state.promoted``; None: no record): a pool
    that follows its launch template is rotated only onto one of them; one whose template boots another image has
    drifted from what was promoted, and none of its nodes is rotated (a policy's own ``targets`` are the operator's
    explicit ask, not held to it)."""
    pool_groups: dict[str, set[str]] = {}
    for node in nodes:
        pool = node.labels.get(policy.pool_label)
        if pool is not None and node.name in group_of:
            pool_groups.setdefault(pool, set()).add(group_of[node.name])
    if policy.targets is None:
        out = Targets({})
        for pool, groups in sorted(pool_groups.items()):
            booting = {image for g in groups if (image := group_images.get(g))}
            if len(booting) == 1 and promoted is not None and (launched := str(next(iter(booting)))) not in promoted:
                out.drifted[pool] = launched
                out.warnings.append(f"pool {pool}: its launch template boots {launched}, which the release pipeline has "
                                    f"not promoted to this stage (it runs {', '.join(sorted(promoted)) or 'none'}): "
                                    "not rotated (drift: `platformctl release status`)")
            elif len(booting) == 1:
                out.images[pool] = booting.pop()
            elif len(booting) > 1:
                out.warnings.append(f"pool {pool}: its auto scaling groups launch different images "
                                    f"({', '.join(sorted(b for b in booting if b))}): not rotated")
        return out
    out = Targets(dict(policy.targets))
    for pool, image in policy.targets.items():
        for g in sorted(pool_groups.get(pool, ())):
            if group_images.get(g) != image:
                out.mismatches[pool] = (f"pool {pool} should run {image}, but its auto scaling group {g} launches "
                                        f"{group_images.get(g)}: new nodes would not run the target (point the launch "
                                        "template at it first: `platformctl stage deploy`)")
    return out


def check_pools(policy: RotationPolicy, pools_present: set[str] | frozenset[str], where: str) -> None:
    """A target pool that no node of anything planned belongs to is a typo, not a no-op: a CI check of a
    policy must fail on it. Said on one line, with the pools that do exist."""
    for pool in policy.targets or ():
        if pool not in pools_present:
            raise PlatformError(f"no node of {where} is in pool {pool!r} (label {policy.pool_label}; pools: "
                                f"{', '.join(sorted(pools_present)) or 'none'})", file=policy.source, field=f"targets.{pool}")
