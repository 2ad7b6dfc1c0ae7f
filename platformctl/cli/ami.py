"""``platformctl ami``: image manifests, their inheritance, and the builds they drive.

``resolve`` and ``graph`` read only the manifests; ``plan`` and ``build`` also read the account
(EC2 images, SSM parameters) through the project's boto3 clients, so they run against whatever
``AWS_ENDPOINT_URL`` names (the local region's moto server) or the AWS credentials configured.
"""

from __future__ import annotations

from datetime import UTC
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.tree import Tree

from platformctl.cli.context import platform
from platformctl.cli.output import OUTPUT, console, emit_json, writable_file

MANIFESTS = click.option("--manifests", "manifest_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                         help="folder of image manifests (default: ami/manifests of the checkout the current directory is in)")
REGIONS = [
    click.option("--region", default=None, help="where images are built (default: $AWS_REGION, else the running local region's, else us-west-2)"),
    click.option("--copy-to", "copy_to", multiple=True, metavar="REGION", help="also copy every image to REGION (repeatable; "
                 "default, building into a local region of several stages: their other AWS regions)"),
]


def _regions(fn: Any) -> Any:
    for option in reversed(REGIONS):
        fn = option(fn)
    return fn


@click.group()
def ami() -> None:
    """Machine images: manifests with inheritance, and the builds they drive (every AWS call to the command's target:
    the running local region's, unless the environment names another, handed to the image store)."""


@ami.command("resolve")
@click.argument("name")
@MANIFESTS
@OUTPUT
def ami_resolve(name: str, manifest_dir: Path | None, output: str) -> None:
    """Print an image's fully resolved manifest, and which manifest set each value."""
    from ami.manifest import load_manifests, origin_of

    image = load_manifests(manifest_dir).get(name)
    if output == "json":
        emit_json({"image": image.to_dict(), "origin": image.origin, "content_hash": image.content_hash})
        return
    out = console()
    out.print(f"[bold]{image.name}[/] {image.version} ({image.family}) from {image.file}"
              + (f", parent {image.parent}" if image.parent else f", source {image.source.describe()}"))  # type: ignore[union-attr]  # no parent: a source
    table = Table("key", "value", "from")

    def rows(value: Any, path: str) -> None:
        if isinstance(value, dict) and value and not (set(value) <= {"content", "mode", "owner"}):
            for key, sub in value.items():
                rows(sub, f"{path}.{key}" if path else key)
            return
        shown = value if not isinstance(value, (list, dict)) else (
            ", ".join(str(v if not isinstance(v, dict) else v.get("name", v)) for v in value) if isinstance(value, list)
            else f"{len(value.get('content', ''))} bytes, mode {value.get('mode', '0644')}")
        table.add_row(path, str(shown), origin_of(image, path))

    rows(image.config, "")
    out.print(table)


@ami.command("graph")
@MANIFESTS
@OUTPUT
def ami_graph(manifest_dir: Path | None, output: str) -> None:
    """Show the inheritance tree of the images."""
    from ami.manifest import load_manifests

    manifests = load_manifests(manifest_dir)
    if output == "json":
        emit_json({"images": [{"name": n, "parent": manifests.images[n].parent, "version": manifests.images[n].version,
                               "family": manifests.images[n].family} for n in manifests.order()],
                   "build_order": manifests.generations()})
        return
    roots = [n for n in manifests.order() if manifests.images[n].parent is None]
    out = console()
    for root in roots:
        image = manifests.images[root]
        tree = Tree(f"[bold]{root}[/] {image.version} ({image.family}) from {image.source.describe()}")  # type: ignore[union-attr]  # a root has a source

        def grow(node: Tree, name: str) -> None:
            for child in sorted(manifests.graph.successors(name)):
                c = manifests.images[child]
                grow(node.add(f"[bold]{child}[/] {c.version} ({c.family})"), child)

        grow(tree, root)
        out.print(tree)


@ami.command("plan")
@click.argument("names", nargs=-1)
@MANIFESTS
@_regions
@OUTPUT
def ami_plan(names: tuple[str, ...], manifest_dir: Path | None, region: str | None, copy_to: tuple[str, ...], output: str) -> None:
    """List what a build would do and why; unchanged images are never rebuilt."""
    from ami.build import plan_builds
    from ami.manifest import default_manifest_dir, load_manifests

    folder = manifest_dir or default_manifest_dir()
    manifests = load_manifests(folder)
    from ami.build import aws_errors
    from platformctl.app import images

    with aws_errors():
        plan = plan_builds(manifests, images.image_store(platform(), region, copy_to), names)
    if output == "json":
        emit_json({"manifests": str(folder), **plan.to_dict()})
        return
    out = console()
    out.print(f"manifests: {folder}")
    table = Table("image", "version", "action", "why")
    for step in plan.build:
        table.add_row(step.name, manifests.images[step.name].version, "build", step.reason)
    for name, image_id in plan.unchanged.items():
        table.add_row(name, manifests.images[name].version, "keep", f"unchanged: {image_id}")
    out.print(table)


@ami.command("build")
@click.argument("names", nargs=-1)
@MANIFESTS
@_regions
@click.option("--lock-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="where the image ids are recorded for the stacks and the release pipeline (default: the running "
                   "local region's own lock file when building into it, else ami/images.lock.json)")
@click.option("--workers", type=click.IntRange(1, 16), default=4, show_default=True, help="images built at once")
@OUTPUT
def ami_build(names: tuple[str, ...], manifest_dir: Path | None, region: str | None, copy_to: tuple[str, ...],
              lock_file: Path | None, workers: int, output: str) -> None:
    """Build what the plan says (parents first, independent branches at once), publish, and write the lock file."""
    from platformctl.app import images

    lock_file = lock_file or images.default_lock_file(platform())
    writable_file(lock_file, "--lock-file")
    store = images.image_store(platform(), region, copy_to)
    quiet = output == "json"
    out = console()
    if not quiet:
        out.print(f"building {manifest_dir or images.default_manifest_dir()} into {images.target_of(platform(), store.region)}")
    built = images.build(images.BuildRequest(store, lock_file, manifest_dir, names, workers),
                         progress=(lambda _: None) if quiet else out.print)
    report = built.report
    data = report.to_dict() | {"lock_file": str(lock_file), "manifests": str(built.folder)}
    if quiet:
        emit_json(data)
        return
    if not built.plan.build:
        out.print("nothing to build: every image is up to date")
    for image in report.images:
        out.print(f"{image.name} {image.version}: {'built' if image.built else 'already built'} {image.image_id}"
                  + (f" (copies: {', '.join(f'{r} {i}' for r, i in image.copies.items())})" if image.copies else ""))
    out.print(f"wrote {lock_file}")


def _duration(ctx: click.Context | None, param: click.Parameter | None, value: str) -> Any:
    """``7d``, ``12h``, ``1d12h``, ``30m``, ``90s`` or ``0``."""
    import re
    from datetime import timedelta

    units = {"w": "weeks", "d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
    parts = re.findall(r"(\d+)([wdhms])", value)
    if value.strip() == "0":
        return timedelta(0)
    if not parts or "".join(n + u for n, u in parts) != value.strip():
        raise click.BadParameter(f"{value!r} is not a duration such as 7d, 12h, 1d12h, 30m or 0")
    return timedelta(**{units[u]: int(n) for n, u in parts})


@ami.command("prune")
@click.argument("names", nargs=-1)
@_regions
@click.option("--keep", type=click.IntRange(1), default=3, show_default=True,
              help="versions of each image kept (the newest build of each), besides every image still referenced")
@click.option("--grace", default="7d", show_default=True, callback=_duration,
              help="how long an image stays deprecated before it is deregistered (0: both in one run)")
@click.option("--lock-file", "lock_files", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="a lock file whose images are never pruned (repeatable; default: ami/images.lock.json when it exists)")
@click.option("--stack-file", "stack_files", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="a stack file whose pinned images are never pruned (repeatable; default: every Pulumi.*.yaml of --infra-dir)")
@click.option("--dry-run", is_flag=True, help="decide and print, change nothing")
@OUTPUT
def ami_prune(names: tuple[str, ...], region: str | None, copy_to: tuple[str, ...], keep: int, grace: Any,
              lock_files: tuple[Path, ...], stack_files: tuple[Path, ...], dry_run: bool, output: str) -> None:
    """Retire old images: deprecate what retention and references let go, deregister it after the grace period."""
    from datetime import datetime

    from ami.prune import prune_images

    if not lock_files:
        from platformctl.kernel.checkout import root

        default = root("--lock-file") / "ami" / "images.lock.json"
        lock_files = (default,) if default.exists() else ()
    if not stack_files:
        stack_files = tuple(sorted(platform().infra_dir.glob("Pulumi.*.yaml")))
    from ami.build import aws_errors
    from platformctl.app import images

    store = images.image_store(platform(), region, copy_to)
    with aws_errors():
        report = prune_images(store, keep=keep, grace=grace, now=datetime.now(UTC), names=names,
                              lock_files=lock_files, stack_files=stack_files, dry_run=dry_run)
    if output == "json":
        emit_json(report.to_dict())
        return
    out = console()
    table = Table("image", "version", "region", "id", "action", "why", title="dry run: nothing changed" if dry_run else None)
    for d in report.decisions:
        table.add_row(d.name, d.version, d.region, d.image_id, d.action, d.reason)
    out.print(table)
    for snapshot in report.snapshots_deleted:
        out.print(f"{'would delete' if dry_run else 'deleted'} snapshot {snapshot['snapshot']} in {snapshot['region']} "
                  f"(of {snapshot['image']})")
    for parameter in report.parameters_deleted:
        out.print(f"withdrew {parameter}")
