"""Image manifests: one image per YAML file in ``ami/manifests/``, and their inheritance.

Read by ``platformctl ami …`` and the builder. Each file is checked on its own (pydantic: no unknown
key, a semver ``version``, a known ``family``, ``parent`` or ``source`` but not both), then the
files are checked together (every parent exists, no cycle), and each image is *resolved*: its
parent's resolved configuration with its own merged on top. Every mistake is a ``PlatformError``
naming the file and the key, raised before anything is built.

Merge rules (documented in docs/ami.md):

- maps merge deeply: a child's key overrides or extends the parent's;
- lists append: the child's items follow the parent's, an item already inherited is not repeated;
- scalars: the child's value wins;
- a value tagged ``!replace`` (``packages: !replace [vim]``) replaces the parent's instead.

``architecture`` and ``kubernetesVersion`` are inherited like configuration; ``name``, ``version``,
``family``, ``parent`` and ``source`` are each image's own.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import networkx as nx
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from platformctl.kernel.errors import PlatformError
from platformctl.kernel.yamlfile import validation_error

MANIFEST_DIR = Path(__file__).resolve().parent / "manifests"  # the manifests shipped with this package (tests read them)


def default_manifest_dir() -> Path:
    """``ami/manifests/`` of the checkout the current directory is in, never silently the package's."""
    from platformctl.kernel.checkout import find

    return find("ami/manifests", None, "--manifests")
SEMVER = r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$"
Name = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]
# The configuration an image applies; inherited and merged by the rules above.
INHERITED = ("architecture", "kubernetes_version", "packages", "files", "kernel_parameters", "sysctls", "services",
             "scripts", "tags")


class Replace:
    """A value tagged ``!replace``: it replaces the inherited one instead of merging with it."""

    def __init__(self, value: Any) -> None:
        self.value = value


# libyaml's loader when PyYAML was built with it (the wheels are), the pure-Python one otherwise.
class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]  # libyaml's loader when built with it
    pass


def _replace(loader: yaml.SafeLoader, node: yaml.Node) -> Replace:
    if isinstance(node, yaml.SequenceNode):
        return Replace(loader.construct_sequence(node, deep=True))
    if isinstance(node, yaml.MappingNode):
        return Replace(loader.construct_mapping(node, deep=True))
    return Replace(loader.construct_scalar(node))


_Loader.add_constructor("!replace", _replace)


def parse_yaml(text: str) -> Any:
    """A manifest's YAML: the safe loader plus the ``!replace`` tag."""
    return yaml.load(text, Loader=_Loader)


class _Value(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


class SourceFilter(_Value):
    name: str  # an image name pattern, as describe-images takes it
    owner: str  # an account id, or amazon / self


class Source(_Value):
    """Where a root image starts: exactly one of an AMI id, an SSM parameter, or a name filter and owner."""

    ami: Annotated[str, Field(pattern=r"^ami-[0-9a-f]{8,17}$")] | None = None
    ssm_parameter: Annotated[str, Field(pattern=r"^/")] | None = None
    filter: SourceFilter | None = None

    @model_validator(mode="after")
    def _one(self) -> Source:
        if sum(v is not None for v in (self.ami, self.ssm_parameter, self.filter)) != 1:
            raise ValueError("give exactly one of ami, ssmParameter, filter")
        return self

    def describe(self) -> str:
        if self.ami:
            return self.ami
        if self.ssm_parameter:
            return f"ssm:{self.ssm_parameter}"
        assert self.filter is not None
        return f"newest {self.filter.name} owned by {self.filter.owner}"


class File(_Value):
    content: str
    mode: Annotated[str, Field(pattern=r"^0?[0-7]{3}$")] = "0644"
    owner: str = "root:root"


class Script(_Value):
    name: Name
    run: str


class ImageConfig(_Value):
    """What one manifest file may say; every inherited field is optional in a child."""

    architecture: Literal["x86_64", "arm64"] | None = None
    kubernetes_version: Annotated[str, Field(pattern=r"^1\.\d+$")] | None = None
    packages: list[str] = Field(default_factory=list)
    files: dict[str, File] = Field(default_factory=dict)  # absolute path -> file
    kernel_parameters: list[str] = Field(default_factory=list)
    sysctls: dict[str, str | int] = Field(default_factory=dict)
    services: dict[str, Literal["enabled", "disabled"]] = Field(default_factory=dict)
    scripts: list[Script] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)


class ManifestFile(ImageConfig):
    name: Name
    version: str
    family: Literal["general", "ml", "custom"]
    parent: Name | None = None
    source: Source | None = None
    description: str = ""

    @field_validator("version", mode="before")
    @classmethod
    def _semver(cls, value: Any) -> str:
        if not isinstance(value, str) or not re.match(SEMVER, value):
            raise ValueError("must be a semantic version, MAJOR.MINOR.PATCH like 1.4.0 (quote it in YAML)")
        return value

    @model_validator(mode="after")
    def _parent_or_source(self) -> ManifestFile:
        if self.parent is not None and self.source is not None:
            raise ValueError("an image has either a parent or a source, not both")
        if self.parent is None and self.source is None:
            raise ValueError("an image needs a parent (another manifest) or a source (a base image)")
        return self


@dataclass(frozen=True)
class ImageManifest:
    """One image, resolved: its own identity and the configuration it inherited and set."""

    name: str
    version: str
    family: str
    parent: str | None
    source: Source | None
    file: str
    config: dict[str, Any]  # the resolved configuration, camelCase keys as written
    origin: dict[str, str]  # dotted key path -> the manifest that set it

    @property
    def architecture(self) -> str:
        return self.config["architecture"]

    @property
    def content_hash(self) -> str:
        """A fingerprint of what the image is: its identity and resolved configuration."""
        doc = {"name": self.name, "version": self.version, "family": self.family, "config": self.config,
               "source": self.source.model_dump(mode="json", exclude_none=True) if self.source else None}
        return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "version": self.version, "family": self.family}
        if self.parent:
            out["parent"] = self.parent
        if self.source:
            out["source"] = self.source.model_dump(mode="json", by_alias=True, exclude_none=True)
        return out | self.config


def _unwrap(value: Any) -> Any:
    """The document without its ``!replace`` markers (for checking its shape)."""
    if isinstance(value, Replace):
        return _unwrap(value.value)
    if isinstance(value, dict):
        return {k: _unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrap(v) for v in value]
    return value


def merge(parent: Any, child: Any, origin: dict[str, str], path: str, who: str) -> Any:
    """``child`` merged onto ``parent`` by the rules in the module docstring; ``origin`` records who set what."""
    if isinstance(child, Replace):
        for key in [k for k in origin if k == path or k.startswith(path + ".")]:
            del origin[key]
        _record(child.value, origin, path, who)
        return _unwrap(child.value)
    if isinstance(parent, dict) and isinstance(child, dict):
        out = dict(parent)
        for key, value in child.items():
            sub = f"{path}.{key}" if path else key
            out[key] = merge(parent.get(key), value, origin, sub, who) if key in parent else _recorded(value, origin, sub, who)
        return out
    if isinstance(parent, list) and isinstance(child, list):
        out_list = list(parent)
        for item in child:
            if item not in out_list:
                out_list.append(_unwrap(item))
        if child:
            origin[path] = f"{origin.get(path, who)} + {who}" if origin.get(path) and origin[path] != who else who
        return out_list
    return _recorded(child, origin, path, who)


def _recorded(value: Any, origin: dict[str, str], path: str, who: str) -> Any:
    _record(value, origin, path, who)
    return _unwrap(value)


def _record(value: Any, origin: dict[str, str], path: str, who: str) -> None:
    value = value.value if isinstance(value, Replace) else value
    if isinstance(value, dict) and value:
        for key, sub in value.items():
            _record(sub, origin, f"{path}.{key}", who)
    else:
        origin[path] = who


@dataclass(frozen=True)
class ManifestSet:
    """Every manifest of a folder, checked together, resolved, with their inheritance as a DAG."""

    images: dict[str, ImageManifest]
    graph: nx.DiGraph  # parent -> child

    def order(self) -> list[str]:
        """Parents before children; siblings by name."""
        return list(nx.lexicographical_topological_sort(self.graph))

    def generations(self) -> list[list[str]]:
        """Images that can be built at the same time, generation after generation."""
        return [sorted(g) for g in nx.topological_generations(self.graph)]

    def ancestors(self, name: str) -> set[str]:
        return nx.ancestors(self.graph, name)

    def get(self, name: str) -> ImageManifest:
        image = self.images.get(name)
        if image is None:
            raise PlatformError(f"no image manifest named {name!r} (images: {', '.join(sorted(self.images))})",
                                field="name")
        return image


def _read(path: Path) -> tuple[ManifestFile, dict[str, Any]]:
    source = str(path)
    try:
        raw = parse_yaml(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise PlatformError(f"not valid YAML ({f'line {mark.line + 1}' if mark else 'document'})", file=source) from None
    if not isinstance(raw, dict):
        raise PlatformError("an image manifest is a mapping of fields", file=source)
    for key in ("name", "version", "family", "parent", "source", "description"):
        if isinstance(raw.get(key), Replace):
            raise PlatformError("!replace applies to inherited configuration only", file=source, field=key)
    try:
        manifest = ManifestFile.model_validate(_unwrap(raw))
    except ValidationError as exc:
        raise validation_error(exc, source, model=ManifestFile) from None
    if manifest.name != path.stem:
        raise PlatformError(f"name {manifest.name!r} must match the file name ({path.stem}.yaml)", file=source, field="name")
    own = {k: v for k, v in raw.items() if k not in ("name", "version", "family", "parent", "source", "description")}
    return manifest, own


def load_manifests(folder: Path | None = None) -> ManifestSet:
    folder = folder or default_manifest_dir()
    paths = sorted(folder.glob("*.yaml"))
    if not paths:
        raise PlatformError("no image manifests (*.yaml) here", file=str(folder))
    files: dict[str, tuple[ManifestFile, dict[str, Any], Path]] = {}
    for path in paths:
        manifest, own = _read(path)
        files[manifest.name] = (manifest, own, path)
    graph = nx.DiGraph()
    graph.add_nodes_from(files)
    for name, (manifest, _, path) in files.items():
        if manifest.parent is not None:
            if manifest.parent not in files:
                raise PlatformError(f"unknown parent {manifest.parent!r} (images: {', '.join(sorted(files))})",
                                    file=str(path), field="parent")
            graph.add_edge(manifest.parent, name)
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        cycle = []
    if cycle:
        names = [cycle[0][0], *(b for _, b in cycle)]
        raise PlatformError(f"inheritance cycle: {' -> '.join(reversed(names))}", file=str(files[cycle[0][1]][2]),
                            field="parent")
    images: dict[str, ImageManifest] = {}
    for name in nx.lexicographical_topological_sort(graph):
        manifest, own, path = files[name]
        parent = images[manifest.parent] if manifest.parent else None
        origin = dict(parent.origin) if parent else {}
        base = parent.config if parent else {}
        config = merge(base, own, origin, "", f"{name}.yaml")
        for field in ("architecture", "kubernetesVersion"):
            if field not in config:
                raise PlatformError("required for an image without a parent that sets it", file=str(path), field=field)
        try:  # the merged configuration must still be a valid one (a replaced map keeps its shape)
            ImageConfig.model_validate(config)
        except ValidationError as exc:
            raise validation_error(exc, str(path), model=ImageConfig) from None
        images[name] = ImageManifest(name, manifest.version, manifest.family, manifest.parent, manifest.source,
                                     str(path), config, origin)
    return ManifestSet(images, graph)


def origin_of(image: ImageManifest, path: str) -> str:
    """Which manifest(s) set the value at ``path``: its own record, those under it, or the nearest above it."""
    if path in image.origin:
        return image.origin[path]
    below = sorted({who for key, who in image.origin.items() if key.startswith(path + ".")})
    if below:
        return " + ".join(below)
    while "." in path:
        path = path.rpartition(".")[0]
        if path in image.origin:
            return image.origin[path]
    return Path(image.file).name
