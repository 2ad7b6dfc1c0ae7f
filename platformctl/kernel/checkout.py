"""Where the operator's files are: the checkout of the current directory, found as git finds ``.git``.

Commands read the manifests, stack files and lock file of the checkout the operator stands in, never
silently the copies beside the installed package: from a second checkout, or with platformctl
installed as a wheel, an edited manifest must be the one that is read. ``find`` looks in the current
directory and each one above it for the folder (with its marker file); none found is a one-line
error naming the option that sets the folder instead.
"""

from __future__ import annotations

from pathlib import Path

from platformctl.kernel.errors import PlatformError


def find(relative: str, marker: str | None, option: str) -> Path:
    """``<checkout>/<relative>``, the nearest one above the current directory (holding ``marker``, if given)."""
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        candidate = folder / relative
        if (candidate / marker).exists() if marker else candidate.is_dir():
            return candidate
    what = f"{relative}/" + (f" (with {marker})" if marker else "")
    raise PlatformError(f"no {what} in {here} or any folder above it: run platformctl from a platformctl checkout, "
                        f"or give {option}", field=option)


def root(option: str = "--infra-dir") -> Path:
    """The checkout itself: the folder that holds ``infra/Pulumi.yaml``."""
    return find("infra", "Pulumi.yaml", option).parent
