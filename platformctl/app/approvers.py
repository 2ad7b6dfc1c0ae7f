"""Who approves: an approval names one person AWS vouches for (``platformctl.kernel.who.person_of``), and a ledger on
the local disk, which anyone who can write the file can write as anyone, takes approvals only when the pipeline file
allows them unauthenticated (docs/release.md, "An approval is a person's")."""

from __future__ import annotations

from platformctl.kernel.environment import AwsTarget
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.who import caller_arn, person_of, who
from release_pipeline.ledger import Ledger
from release_pipeline.pipeline import Pipeline


def local_ledger(ledger: Ledger) -> bool:
    """A ledger in a file on this disk, which anyone who can write the file can write as anyone."""
    return not ledger.store.location.startswith("dynamodb://")


def approver(target: AwsTarget, pipeline: Pipeline, ledger: Ledger) -> tuple[str, str | None]:
    """Who approves, as the approval counts them (one person, under whatever role), and the caller's ARN. On a ledger
    on the local disk: only when the pipeline file allows approvals nobody vouches for (``approvers.unauthenticated``),
    as ``who`` names them; else the STS caller of ``target`` (the command's AWS), who must name a person (``person_of``): never a role anyone can
    assume under any session name, never a role of the platform's own jobs, never ``(local)``."""
    if local_ledger(ledger):
        if not pipeline.approvers.unauthenticated:
            raise PlatformError(f"the ledger {ledger.store.location} is a file on this disk, which anyone can write as "
                                "anyone: approvals there need `approvers: {unauthenticated: true}` (for trying the "
                                "pipeline out); a real pipeline's ledger is dynamodb://TABLE", file=pipeline.source,
                                field="approvers.unauthenticated")
        return who(target), None
    arn = caller_arn(target)
    person = person_of(arn, pipeline.approvers.identity_roles)
    if person is None:
        raise PlatformError(f"{arn} names no one person (a role's session name is its caller's to choose, a job's role "
                            "is no one's): approve as an IAM user, through IAM Identity Center, or through a role your "
                            "identity provider assumes, listed in approvers.identityRoles", field="identity")
    return person, arn
