"""The state store's DynamoDB table: where the scheduled rotation (and, later, the canaries and the
release pipeline) keep their journals and leases, shared by every job and operator of the stage.

Its key is the one ``platformctl.kernel.state.dynamodb`` reads and writes (``pk`` string, ``sk`` number),
billed per request, encrypted at rest, with point-in-time recovery: a journal is the record of what
was done to production, and worth a restore.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from infra.components.common import child, tags


class StateTable(pulumi.ComponentResource):
    name: pulumi.Output[str]
    arn: pulumi.Output[str]

    def __init__(self, name: str, *, stage: str, table_name: str, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("platformctl:infra:StateTable", name, None, opts)
        table = aws.dynamodb.Table(
            name, name=table_name, billing_mode="PAY_PER_REQUEST", hash_key="pk", range_key="sk",
            attributes=[aws.dynamodb.TableAttributeArgs(name="pk", type="S"),
                        aws.dynamodb.TableAttributeArgs(name="sk", type="N")],
            point_in_time_recovery=aws.dynamodb.TablePointInTimeRecoveryArgs(enabled=True),
            # Canary results carry an expiry (90 days); DynamoDB deletes them. Journals and ledgers carry none.
            ttl=aws.dynamodb.TableTtlArgs(attribute_name="expires_at", enabled=True),
            server_side_encryption=aws.dynamodb.TableServerSideEncryptionArgs(enabled=True),
            deletion_protection_enabled=True,
            tags=tags(stage, table_name), opts=child(self))
        self.name = table.name
        self.arn = table.arn
        self.register_outputs({"name": table.name, "arn": table.arn})
