"""The state store in a DynamoDB table: shared by operators and by jobs on several clusters.

One table, key ``pk`` (string, hash) and ``sk`` (number, range):

- a record of stream ``S`` is the item ``pk = "s#S"``, ``sk = seq``, with ``t`` (wall time) and
  ``d`` (the record as JSON). Appending reads the stream's last sequence number and writes the next
  with ``attribute_not_exists(pk)``: when two writers race for one number, the condition fails for
  one of them, which reads again and takes the next;
- a lease ``L`` is the item ``pk = "l#L"``, ``sk = 0``. Acquiring is one conditional put that
  succeeds only when no lease item exists, it has expired, or the caller already holds it; renewing
  and releasing are conditional on the holder's token.

The table is reached through ``platformctl.aws.client`` (so ``AWS_ENDPOINT_URL`` and moto work).
``create_table`` makes one with this layout, as an operator would once per account.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Mapping
from typing import Any

from platformctl import aws
from platformctl.clock import Clock, WallClock
from platformctl.errors import PlatformError
from platformctl.state import Lease, LeaseHeld, LeaseLost, Record

ITEM_LIMIT = 350_000  # bytes of JSON per record, under DynamoDB's 400 KB item limit


def create_table(table: str, region: str | None = None) -> None:
    ddb = aws.client("dynamodb", region)
    ddb.create_table(
        TableName=table, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "N"}],
    )
    ddb.get_waiter("table_exists").wait(TableName=table, WaiterConfig={"Delay": 1, "MaxAttempts": 60})


class DynamoDBStore:
    def __init__(self, table: str, location: str | None = None, region: str | None = None, clock: Clock | None = None) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        self.table = table
        self.location = location or f"dynamodb://{table}"
        self.clock = clock or WallClock()
        self._ddb = aws.client("dynamodb", region)
        try:
            self._ddb.describe_table(TableName=table)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code == "ResourceNotFoundException":
                raise PlatformError(f"no DynamoDB table {table!r} in {self._ddb.meta.region_name} (create it with key pk "
                                    "string hash, sk number range)", file=self.location, field="--state") from None
            raise PlatformError(f"cannot open the state store ({code}: {exc.response.get('Error', {}).get('Message', '')})",
                                file=self.location, field="--state") from None
        except BotoCoreError as exc:
            raise PlatformError(f"cannot reach DynamoDB ({exc})", file=self.location, field="--state") from None
        self._failed = self._ddb.exceptions.ConditionalCheckFailedException

    # ---------------------------------------------------------------- streams

    def append(self, stream: str, data: Mapping[str, Any]) -> Record:
        text = json.dumps(data, separators=(",", ":"), sort_keys=True)
        if len(text) > ITEM_LIMIT:
            raise ValueError(f"a record of {len(text)} bytes is over the {ITEM_LIMIT}-byte limit of one DynamoDB item")
        for attempt in range(100):
            last = self.last(stream)
            seq = (last.seq if last else 0) + 1
            now = self.clock.now()
            try:
                self._ddb.put_item(
                    TableName=self.table, ConditionExpression="attribute_not_exists(pk)",
                    Item={"pk": {"S": f"s#{stream}"}, "sk": {"N": str(seq)}, "t": {"N": repr(now)}, "d": {"S": text}})
            except self._failed:
                time.sleep(random.uniform(0, 0.01 * (attempt + 1)))  # another writer took this number: read again
                continue
            return Record(stream, seq, now, json.loads(text))
        raise RuntimeError(f"could not append to {stream}: 100 writers in a row took the next sequence number")

    def _query(self, stream: str, after: int, limit: int | None, forward: bool = True) -> list[Record]:
        out: list[Record] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table, "ConsistentRead": True, "ScanIndexForward": forward,
            "KeyConditionExpression": "pk = :pk AND sk > :after",
            "ExpressionAttributeValues": {":pk": {"S": f"s#{stream}"}, ":after": {"N": str(after)}},
        }
        while True:
            if limit is not None:
                kwargs["Limit"] = limit - len(out)
            page = self._ddb.query(**kwargs)
            out += [Record(stream, int(i["sk"]["N"]), float(i["t"]["N"]), json.loads(i["d"]["S"])) for i in page["Items"]]
            if "LastEvaluatedKey" not in page or (limit is not None and len(out) >= limit):
                return out
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def read(self, stream: str, after: int = 0, limit: int | None = None) -> list[Record]:
        return self._query(stream, after, limit)

    def last(self, stream: str) -> Record | None:
        found = self._query(stream, 0, 1, forward=False)
        return found[0] if found else None

    def streams(self, prefix: str = "") -> list[str]:
        # Every stream has a record 1: scanning for those lists each stream once.
        names: list[str] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table, "ProjectionExpression": "pk", "ConsistentRead": True,
            "FilterExpression": "begins_with(pk, :p) AND sk = :one",
            "ExpressionAttributeValues": {":p": {"S": f"s#{prefix}"}, ":one": {"N": "1"}},
        }
        while True:
            page = self._ddb.scan(**kwargs)
            names += [i["pk"]["S"][2:] for i in page["Items"]]
            if "LastEvaluatedKey" not in page:
                return sorted(names)
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    # ---------------------------------------------------------------- leases

    def _key(self, name: str) -> dict[str, Any]:
        return {"pk": {"S": f"l#{name}"}, "sk": {"N": "0"}}

    def acquire(self, name: str, holder: str, ttl: float) -> Lease:
        for _ in range(3):
            now = self.clock.now()
            lease = Lease(name, holder, uuid.uuid4().hex, now, now + ttl)
            try:
                self._ddb.put_item(
                    TableName=self.table,
                    Item={**self._key(name), "holder": {"S": holder}, "token": {"S": lease.token},
                          "acquired": {"N": repr(lease.acquired)}, "expires": {"N": repr(lease.expires)}},
                    ConditionExpression="attribute_not_exists(pk) OR expires <= :now OR holder = :holder",
                    ExpressionAttributeValues={":now": {"N": repr(now)}, ":holder": {"S": holder}})
            except self._failed:
                current = self.lease(name)
                if current is not None:
                    raise LeaseHeld(current) from None
                continue  # released in between: try again
            return lease
        raise LeaseHeld(self.lease(name) or Lease(name, "unknown", "", 0.0, 0.0))

    def renew(self, lease: Lease, ttl: float) -> Lease:
        expires = self.clock.now() + ttl
        try:
            self._ddb.update_item(
                TableName=self.table, Key=self._key(lease.name), UpdateExpression="SET expires = :e",
                ConditionExpression="holder = :h AND #token = :t", ExpressionAttributeNames={"#token": "token"},
                ExpressionAttributeValues={":e": {"N": repr(expires)}, ":h": {"S": lease.holder}, ":t": {"S": lease.token}})
        except self._failed:
            raise LeaseLost(f"lease {lease.name} is no longer held by {lease.holder}") from None
        return Lease(lease.name, lease.holder, lease.token, lease.acquired, expires)

    def release(self, lease: Lease) -> None:
        try:
            self._ddb.delete_item(TableName=self.table, Key=self._key(lease.name), ConditionExpression="#token = :t",
                                  ExpressionAttributeNames={"#token": "token"},
                                  ExpressionAttributeValues={":t": {"S": lease.token}})
        except self._failed:
            pass  # no longer ours: nothing to give up

    def lease(self, name: str) -> Lease | None:
        item = self._ddb.get_item(TableName=self.table, Key=self._key(name), ConsistentRead=True).get("Item")
        if not item:
            return None
        return Lease(name, item["holder"]["S"], item["token"]["S"], float(item["acquired"]["N"]), float(item["expires"]["N"]))

    def close(self) -> None:
        pass
