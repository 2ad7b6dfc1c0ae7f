"""A candidate: one platform change, immutable, named by a digest of what it is (Kargo's Freight).

What a candidate is: for every stage of the pipeline, the image each image family of the stage boots in the stage's
region (from the lock file ``ami build`` wrote, or the stage's own pin), the Kubernetes version and the platform's
components (the rotation, remediation and canary jobs' images) the stage's stack file names, and the checkout's
infra revision. The same content is the same candidate, whatever its note or whoever started it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import semver

from ami.lock import newest_in_lock
from infra.settings import InfraSettings
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.jsontypes import JSONMapping, JSONObject, JSONValue, mapping, to_float
from platformctl.kernel.topology import Stage


@dataclass(frozen=True)
class StageImages:
    """What one stage runs under a candidate: each family's image (version and id) in the stage's region."""

    stage: str
    region: str
    images: dict[str, dict[str, str]]  # family -> {"version": …, "id": ami-…}
    kubernetes_version: str
    components: dict[str, str]  # job -> container image

    @property
    def image_ids(self) -> set[str]:
        return {i["id"] for i in self.images.values()}

    def to_dict(self) -> JSONObject:
        return {"stage": self.stage, "region": self.region, "images": self.images,
                "kubernetes_version": self.kubernetes_version, "components": self.components}

    @classmethod
    def from_dict(cls, data: JSONMapping) -> StageImages:
        return cls(str(data["stage"]), str(data["region"]),
                   {family: _texts(image) for family, image in mapping(data["images"]).items()},
                   str(data["kubernetes_version"]), _texts(data["components"]))


def _texts(value: JSONValue) -> dict[str, str]:
    return {k: str(v) for k, v in mapping(value).items()}


@dataclass(frozen=True)
class Candidate:
    id: str
    stages: dict[str, StageImages]
    infra_revision: str
    note: str = ""
    created_at: float = 0.0
    created_by: str = ""
    content: JSONObject = field(default_factory=dict, compare=False, repr=False)

    def lock(self) -> JSONObject:
        """A lock file holding exactly this candidate's images: what a stage's deploy points its pools at."""
        images: dict[str, dict[str, dict[str, str]]] = {}
        for stage in self.stages.values():
            for family, image in stage.images.items():
                images.setdefault(family, {}).setdefault(image["version"], {})[stage.region] = image["id"]
        return {"images": images}

    def to_record(self) -> JSONObject:
        return {"kind": "candidate", "id": self.id, "stages": {name: s.to_dict() for name, s in self.stages.items()},
                "infra_revision": self.infra_revision, "note": self.note, "created_at": self.created_at,
                "created_by": self.created_by}

    @classmethod
    def from_record(cls, data: JSONMapping) -> Candidate:
        stages = {name: StageImages.from_dict(mapping(s)) for name, s in mapping(data["stages"]).items()}
        return cls(str(data["id"]), stages, str(data["infra_revision"]), str(data.get("note", "")),
                   to_float(data.get("created_at", 0.0)), str(data.get("created_by", "")))

    def image_ids(self, stage: str | None = None) -> set[str]:
        return {i for name, s in self.stages.items() if stage in (None, name) for i in s.image_ids}


def content_digest(stages: Mapping[str, StageImages], infra_revision: str) -> str:
    content = {"stages": {name: s.to_dict() for name, s in sorted(stages.items())}, "infra_revision": infra_revision}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def stage_images(stage: Stage, settings: InfraSettings, lock: JSONMapping, lock_source: str) -> StageImages:
    """The images ``stage`` boots under ``lock``: every family's newest version built in the stage's region, the
    stage's pins notwithstanding (a pin holds a stage deployed by hand; the pipeline carries the candidate's images to
    every stage). A family with none there is a one-line error naming the region."""
    families = sorted({p.image_family for c in stage.clusters() for p in c.node_pools})
    images: dict[str, dict[str, str]] = {}
    for family in families:
        found = newest_in_lock(lock, family, stage.region)
        if found is None:
            raise PlatformError(f"has no {family} image in {stage.region}, the region of stage {stage.name}: copy it "
                                f"there (`platformctl ami build --copy-to {stage.region}` copies what is built, without "
                                "a rebuild, and builds what is not)", file=lock_source, field=f"images.{family}")
        version = max((semver.Version.parse(v), v) for v, ids in mapping(mapping(lock["images"])[family]).items()
                      if semver.Version.is_valid(v) and isinstance(ids, Mapping) and ids.get(stage.region) == found)[1]
        images[family] = {"version": version, "id": found}
    components = {"rotation": settings.rotation.image, "remediation": settings.remediation.image,
                  "canary": settings.canary.image}
    return StageImages(stage.name, stage.region, images, settings.kubernetes_version, components)


def make_candidate(stages: Sequence[StageImages], infra_revision: str, note: str, at: float, by: str) -> Candidate:
    by_name = {s.stage: s for s in stages}
    digest = content_digest(by_name, infra_revision)
    return Candidate(f"c-{digest[:12]}", by_name, infra_revision, note, at, by)


def read_lock(path: Path) -> JSONObject:
    try:
        lock = json.loads(path.read_text())
    except FileNotFoundError:
        raise PlatformError("lock file not found", file=str(path), field="--lock-file") from None
    except OSError as exc:
        raise PlatformError(f"cannot read the lock file ({exc.strerror})", file=str(path), field="--lock-file") from None
    except ValueError:
        raise PlatformError("not valid JSON", file=str(path), field="--lock-file") from None
    if not isinstance(lock, dict) or not isinstance(lock.get("images"), dict):
        raise PlatformError("expected {\"images\": {name: {version: {region: id}}}}", file=str(path), field="images")
    return lock
