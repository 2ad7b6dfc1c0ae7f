"""What a release candidate is on disk: a commit of the operator's repository. ``release start`` records it (and
refuses a checkout whose ``infra/`` or ``ami/`` differ from it); a stage's deploy applies it, extracted once with
``git archive``, never the checkout the tick happens to run in."""

from __future__ import annotations

import subprocess
from pathlib import Path

from platformctl.kernel.errors import PlatformError
from release_pipeline.candidates import Candidate


def _git(where: Path, *args: str, strip: bool = True) -> str:
    out = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, check=True, timeout=60).stdout
    return out.strip() if strip else out


def infra_revision(infra_dir: Path, lock_file: Path | None = None) -> str:
    """The commit of the operator's repository a candidate is. Its ``infra/`` and ``ami/`` must be that commit's, or
    the candidate would not be what is deployed (exit 2 naming the files); the lock file ``ami build`` writes is left
    out: the candidate records its images itself."""
    infra_dir = infra_dir.resolve()
    try:
        root = Path(_git(infra_dir, "rev-parse", "--show-toplevel")).resolve()
        head = _git(infra_dir, "rev-parse", "HEAD")
        changed = _git(root, "status", "--porcelain", "--untracked-files=all", "--", str(infra_dir),
                       str(infra_dir.parent / "ami"), strip=False)  # "XY path": the status's columns matter
    except (OSError, subprocess.SubprocessError):
        raise PlatformError("is not in a git checkout with a commit: a candidate is a commit of the operator's repository "
                            "(commit infra/ and ami/, then start it)", file=str(infra_dir), field="infra") from None
    skip = {str(lock_file.resolve().relative_to(root))} if lock_file is not None and lock_file.resolve().is_relative_to(root) else set()
    files = [line[3:].split(" -> ")[-1] for line in changed.splitlines() if line[3:].split(" -> ")[-1] not in skip]
    if files:
        more = f" and {len(files) - 5} more" if len(files) > 5 else ""
        raise PlatformError(f"infra/ and ami/ differ from commit {head[:12]}: {', '.join(files[:5])}{more}: commit them "
                            "first (a candidate is a commit, and its deploys apply that commit)", file=str(infra_dir),
                            field="infra")
    return head


def candidate_source(candidate: Candidate, checkout_infra: Path, work: Path, repository: str | None = None) -> Path:
    """The ``infra/`` of the candidate's commit, extracted once (``git archive``) under ``work``: what its deploys
    apply, whatever the checkout the tick runs in holds. A checkout that is no git repository or lacks the commit (the
    jobs' image carries the toolkit's files, not the operator's repository) fetches that one commit from
    ``repository`` (the pipeline's, a URL git can fetch) into a bare repository under ``work``. A candidate recorded
    before candidates were commits (its revision no commit id) is deployed from the checkout."""
    import re
    import shutil
    import sys
    import tarfile
    import tempfile

    revision = candidate.infra_revision
    if not re.fullmatch(r"[0-9a-f]{40}", revision):
        return checkout_infra
    dest = work / "source" / revision
    if (dest / checkout_infra.name).is_dir():
        return dest / checkout_infra.name
    checkout_infra = checkout_infra.resolve()
    archive, inside = _archive_from_checkout(checkout_infra, revision)
    if archive is None and repository:
        archive, inside = _archive_from_repository(repository, revision, work), Path(checkout_infra.name)
    if archive is None:
        where = f"from the checkout or from {repository}" if repository else (
            "from the checkout: fetch it, or name the repository the tick fetches candidates from (the pipeline's "
            "`repository:`)")
        raise PlatformError(f"cannot read commit {revision[:12]} of {candidate.id} {where} (the tick deploys the "
                            "candidate's commit, not the checkout)", file=str(checkout_infra), field="infra_revision")
    dest.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{revision[:12]}-", dir=dest.parent))
    import io

    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(scratch, filter="data")
    top = scratch / inside.parent
    (top / ".venv").symlink_to(Path(sys.prefix))  # the program's virtualenv (Pulumi.yaml: ../.venv) is the toolkit's
    try:
        top.rename(dest)
    except OSError:  # another tick extracted it first: the same bytes
        pass
    shutil.rmtree(scratch, ignore_errors=True)
    return dest / inside.name


def _archive_from_checkout(checkout_infra: Path, revision: str) -> tuple[bytes | None, Path]:
    """The whole tree of ``revision`` as a tar (the program imports the toolkit, and the stack file names the canary
    definitions beside it) from the repository the checkout is in, and where ``infra/`` is in it; None if the
    checkout is no repository or lacks the commit."""
    try:
        root = Path(_git(checkout_infra, "rev-parse", "--show-toplevel")).resolve()
        inside = checkout_infra.relative_to(root)
        archive = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", revision],
                                 capture_output=True, check=True, timeout=300).stdout
    except (OSError, ValueError, subprocess.SubprocessError):
        return None, Path(checkout_infra.name)
    return archive, inside


def _archive_from_repository(repository: str, revision: str, work: Path) -> bytes | None:
    """``revision`` fetched alone (``--depth 1``: one commit, not the history) from ``repository`` into a bare
    repository under ``work`` (kept: the next candidate's fetch is incremental), as a tar; None if it cannot be."""
    bare = work / "repository.git"
    try:
        if not (bare / "HEAD").is_file():
            bare.mkdir(parents=True, exist_ok=True)
            _git(bare, "init", "--quiet", "--bare")
        subprocess.run(["git", "-C", str(bare), "fetch", "--quiet", "--depth", "1", "--no-tags", repository, revision],
                       capture_output=True, check=True, timeout=600)
        return subprocess.run(["git", "-C", str(bare), "archive", "--format=tar", revision],
                              capture_output=True, check=True, timeout=300).stdout
    except (OSError, subprocess.SubprocessError):
        return None
