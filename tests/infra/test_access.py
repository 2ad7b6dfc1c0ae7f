"""What each job may do in AWS (``infra.access``): the table docs/running-for-real.md shows is the program's own."""

from __future__ import annotations

from pathlib import Path

from infra import access

DOCS = Path(__file__).resolve().parents[2] / "docs" / "running-for-real.md"


def test_the_docs_table_of_each_jobs_grants_is_the_one_the_program_makes() -> None:
    text = DOCS.read_text()
    begin = text.index("<!-- generated: `python -m infra.access`")
    shown = text[text.index("\n", begin) + 1:text.index("<!-- end generated -->")]
    assert shown == access.table(), "docs/running-for-real.md: paste `python -m infra.access` over its table"


def test_no_grant_names_a_wildcard_action_or_an_iam_action() -> None:
    grants = [*access.rotation("dev", "us-west-2", "t", ["c"]), *access.remediation("c", "us-west-2", "t"),
              *access.canary("dev", "c", "t"), *access.release_tick("dev", "us-west-2", "t", "l", "s3://b?region=us-east-1", ["c"])]
    actions = {a for g in grants for a in g.actions}
    assert not any("*" in a for a in actions)
    assert not any(a.startswith(("iam:", "sts:")) for a in actions)  # no job can grant itself more, or be another
    # Every write is on a resource type, never on "*", and every write but the Pulumi backend's is confined by a tag
    # or, in a table, by the partition keys it may write (on item actions only: each names its key).
    for grant in grants:
        writes = [a for a in grant.actions if not a.split(":")[1].startswith(("Describe", "Get", "List", "Query"))]
        if writes:
            assert grant.resources != ("*",), grant
            assert grant.condition or all(a.startswith("s3:") for a in writes), grant
            if any(a.startswith("dynamodb:") for a in writes):
                assert set(grant.actions) <= set(access.STATE_WRITES), grant
                assert list(grant.condition) == ["ForAllValues:StringLike"], grant


def test_the_image_builds_writes_reach_only_builders_and_images() -> None:
    """An image build may launch, image and terminate only instances tagged as builders, tag a launch only as it is
    made, and write only images, snapshots and its own SSM parameters; no IAM or STS action, no wildcard action."""
    grants = access.image_build()
    actions = {a for g in grants for a in g.actions}
    assert not any("*" in a or a.startswith(("iam:", "sts:", "autoscaling:", "eks:", "dynamodb:")) for a in actions)
    for grant in grants:
        writes = [a for a in grant.actions if not a.split(":")[1].startswith(("Describe", "Get"))]
        if not writes:
            continue
        assert grant.resources != ("*",), grant
        on_instances = [r for r in grant.resources if ":instance/" in r]
        assert not on_instances or grant.condition, grant  # an instance only where the builder tag (or its launch) says
        assert all(":instance/" in r or r.startswith(("arn:aws:ec2:*::image/", "arn:aws:ec2:*::snapshot/",
                                                      "arn:aws:ssm:*:*:parameter/platformctl/ami/"))
                   or "RunInstances" in grant.actions[0] for r in grant.resources), grant
