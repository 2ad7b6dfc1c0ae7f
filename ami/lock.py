"""The AMI lock file's shape, read by whoever boots what ``ami build`` made (the Pulumi program, the local region).

``{"images": {name: {version: {region: image id}}}}``: every version ``ami build`` made, in every
region it was copied to (``ami.build.write_lock`` writes it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import semver


def newest_in_lock(lock: Mapping[str, Any], name: str, region: str) -> str | None:
    """The id in ``region`` of the highest semver version of image ``name`` that has one there."""
    versions = lock.get("images", {}).get(name) or {}
    built = [(semver.Version.parse(v), ids[region]) for v, ids in versions.items()
             if semver.Version.is_valid(v) and isinstance(ids, dict) and ids.get(region)]
    return max(built)[1] if built else None
