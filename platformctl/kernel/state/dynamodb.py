"""The state store in a DynamoDB table: shared by operators and by jobs on several clusters.

One table, key ``pk`` (string, hash) and ``sk`` (number, range):

- a record of stream ``S`` is the item ``pk = "s#S"``, ``sk = seq``, with ``t`` (wall time), ``d``
  (the record as JSON), ``k`` (the writer's key for this append) and, for records with a retention
  (canary results), ``expires_at``: the table's TTL attribute. Appending reads the stream's last
  sequence number and writes the next with ``attribute_not_exists(pk)``: when two writers race for
  one number, the condition fails for one of them, which reads again and takes the next. A fenced
  append is one transaction: a condition check on the lease item (the fence's token, not expired)
  and the put, so a holder that lost its lease writes nothing. An append whose answer was lost (a
  dropped connection, a 5xx) looks for its own key among the stream's newest records before it
  tries again, so a retried append is never written twice;
- the registry of streams: the item ``pk = "i#F"`` (``F`` the stream's first path segment:
  ``rotation``, ``canary``, …), ``sk`` a hash of the name, ``n`` the name, written with a stream's
  first record; and ``pk = "i#"``, ``sk = 0``, whose set ``f`` names the segments. Listing streams is
  a key condition on those, never a scan;
- a sequence ``Q`` (one order shared by several streams: the release ledger's partitions, one a writer) is the item
  ``pk = "n#Q"``, ``sk = 0``, whose ``n`` is its last number and ``s`` the streams appended under it. An append under
  it is one transaction: the counter moved from its last number to the next (conditional on the number read) with its
  stream added, the record put at that number in its own
  stream's partition, and the fence's condition check when fenced; so numbers are taken in the order transactions
  commit. A reader reads the counter first (a consistent read, serializable with the transactions), then each stream
  up to that number (consistent reads): every record numbered up to it was committed before it, none is missed
  (IAM confines a writer to its own streams' partitions, ``dynamodb:LeadingKeys``, while all share the order). A
  counter moved without a record (a writer allowed the counter but refused the put cannot, the transaction is one)
  only leaves a number nobody holds;
- a lease ``L`` is the item ``pk = "l#L"``, ``sk = 0``. Acquiring is one conditional put that
  succeeds only when no lease item exists, it has expired, or the caller already holds it; renewing
  (only while not expired) and releasing are conditional on the holder's token.

Lease times are the writers' wall clocks: hosts sharing a table must agree on the time to within
the margin their lease keepers keep (``platformctl.kernel.state.lease``: a tenth of the TTL, at least a
second); the token fences every write a holder makes to its stream whatever the clocks say.

The table is reached through ``platformctl.kernel.aws.client`` (so ``AWS_ENDPOINT_URL`` and moto work).
``create_table`` makes one with this layout, as an operator would once per account.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from platformctl.kernel import aws
from platformctl.kernel.clock import Clock, WallClock
from platformctl.kernel.environment import AwsTarget
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.state.base import Lease, LeaseHeld, LeaseLost, NoSuchStore, Record, StoreUnavailable
from platformctl.kernel.state.lease import lease_call_timeout

ITEM_LIMIT = 350_000  # bytes of JSON per record, under DynamoDB's 400 KB item limit


TTL_ATTRIBUTE = "expires_at"
F = TypeVar("F", bound=Callable[..., Any])
# Answers after which an append may or may not have been written: look for it before trying again.
AMBIGUOUS = ("InternalServerError", "ServiceUnavailable", "ThrottlingException", "ProvisionedThroughputExceededException",
             "RequestLimitExceeded", "TransactionConflictException")


def create_table(table: str, region: str | None = None) -> None:
    ddb = aws.client("dynamodb", region)
    ddb.create_table(
        TableName=table, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "N"}],
    )
    ddb.get_waiter("table_exists").wait(TableName=table, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    ddb.update_time_to_live(TableName=table, TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE})


def _family(stream: str) -> str:
    return stream.split("/", 1)[0]


def stream_key(stream: str) -> str:
    """The partition key of ``stream``'s records (``*`` in it matches any streams, as IAM's ``StringLike`` does)."""
    return f"s#{stream}"


def lease_key(lease: str) -> str:
    """The partition key of the lease ``lease``."""
    return f"l#{lease}"


def sequence_key(sequence: str) -> str:
    """The partition key of the counter of ``sequence``."""
    return f"n#{sequence}"


def registry_keys(stream: str) -> tuple[str, str]:
    """The partition keys a stream's first record registers it under: its family's, and the list of families."""
    return f"i#{_family(stream)}", "i#"


def _name_key(stream: str) -> int:
    return int(hashlib.sha1(stream.encode()).hexdigest()[:12], 16)


def _store_errors(method: F) -> F:
    """What escapes a store call as botocore's error (after the retries the call makes itself) leaves the seam as a
    ``StoreUnavailable`` naming the store and DynamoDB's code."""

    @functools.wraps(method)
    def wrapped(self: DynamoDBStore, *args: Any, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return method(self, *args, **kwargs)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise StoreUnavailable(f"{self.location}: DynamoDB answered {error.get('Code', 'an error')} to "
                                   f"{exc.operation_name}: {error.get('Message', '')}",
                                   transient=error.get("Code") in AMBIGUOUS) from None
        except BotoCoreError as exc:
            from botocore.exceptions import ConnectionError as NoConnection
            from botocore.exceptions import HTTPClientError

            raise StoreUnavailable(f"{self.location}: cannot reach DynamoDB ({exc})",
                                   transient=isinstance(exc, (NoConnection, HTTPClientError))) from None

    return cast(F, wrapped)


class DynamoDBStore:
    def __init__(self, table: str, location: str | None = None, region: str | None = None, clock: Clock | None = None,
                 target: AwsTarget | None = None) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        self.table = table
        self.location = location or f"dynamodb://{table}"
        self.clock = clock or WallClock()
        self._target = target  # which AWS (None: the command's environment's)
        self._ddb = aws.client("dynamodb", region, target=target)
        try:
            self._ddb.describe_table(TableName=table)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code == "ResourceNotFoundException":
                raise NoSuchStore(f"no DynamoDB table {table!r} in {self._ddb.meta.region_name} (create it with key pk "
                                    "string hash, sk number range)", file=self.location, field="--state") from None
            raise PlatformError(f"cannot open the state store ({code}: {exc.response.get('Error', {}).get('Message', '')})",
                                file=self.location, field="--state") from None
        except BotoCoreError as exc:
            raise PlatformError(f"cannot reach DynamoDB ({exc})", file=self.location, field="--state") from None
        self._failed = self._ddb.exceptions.ConditionalCheckFailedException
        self._region = region
        self._lease_clients: dict[float, Any] = {}
        self._ttl_of: dict[str, float] = {}  # lease -> the TTL it was last taken or renewed for
        self._registered: set[str] = set()  # streams this process registered (a sequenced append cannot tell a first)

    # ---------------------------------------------------------------- streams

    @_store_errors
    def append(self, stream: str, data: Mapping[str, Any], *, fence: Lease | None = None, key: str | None = None,
               retain_seconds: float | None = None, sequence: str | None = None) -> Record:
        from botocore.exceptions import BotoCoreError, ClientError

        text = json.dumps(data, separators=(",", ":"), sort_keys=True)
        if len(text) > ITEM_LIMIT:
            raise ValueError(f"a record of {len(text)} bytes is over the {ITEM_LIMIT}-byte limit of one DynamoDB item")
        key = key or uuid.uuid4().hex
        for attempt in range(100):
            if sequence is None:
                last = self.last(stream)
                seq = (last.seq if last else 0) + 1
            else:
                counted = self._counter(sequence)
                seq = counted + 1 if counted is not None else self._first_of(sequence)
            if attempt:
                mine = self._find(stream, key)
                if mine is not None:  # the last try was written; its answer was lost
                    return mine
            now = self.clock.now()
            item = {"pk": {"S": stream_key(stream)}, "sk": {"N": str(seq)}, "t": {"N": repr(now)}, "d": {"S": text},
                    "k": {"S": key}}
            if retain_seconds is not None:
                item[TTL_ATTRIBUTE] = {"N": str(int(now + retain_seconds))}
            try:
                if sequence is None:
                    self._put(item, fence, now)
                else:
                    self._put_numbered(item, fence, now, sequence, counted)
            except self._failed:
                time.sleep(random.uniform(0, 0.01 * (attempt + 1)))  # another writer took this number: read again
                continue
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in AMBIGUOUS:
                    raise
                time.sleep(min(0.05 * 2 ** attempt, 2.0))
                continue
            except BotoCoreError:  # the connection dropped: written or not, the next turn finds out
                time.sleep(min(0.05 * 2 ** attempt, 2.0))
                continue
            if seq == 1 or (sequence is not None and stream not in self._registered):
                self._register(stream)
            return Record(stream, seq, now, json.loads(text))
        raise RuntimeError(f"could not append to {stream}: 100 tries in a row failed")

    def _counter(self, sequence: str) -> int | None:
        return self._sequence(sequence)[0]

    def _sequence(self, sequence: str) -> tuple[int | None, list[str]]:
        """The sequence's last number (None: not made yet) and the streams appended under it."""
        item = self._ddb.get_item(TableName=self.table, Key={"pk": {"S": sequence_key(sequence)}, "sk": {"N": "0"}},
                                  ConsistentRead=True).get("Item")
        if not item:
            return None, []
        return int(item["n"]["N"]), sorted(item.get("s", {}).get("SS", []))

    def _first_of(self, sequence: str) -> int:
        """A new sequence's first number: after the last record of the stream of its name (written unsequenced)."""
        last = self.last(sequence)
        return (last.seq if last else 0) + 1

    def _put_numbered(self, item: dict[str, Any], fence: Lease | None, now: float, sequence: str,
                      counted: int | None) -> None:
        """The counter moved from ``counted`` (None: not made yet) to the item's number, and the item put, at once."""
        seq = item["sk"]["N"]
        moved: dict[str, Any] = {
            "TableName": self.table, "Key": {"pk": {"S": sequence_key(sequence)}, "sk": {"N": "0"}},
            "UpdateExpression": "SET n = :seq ADD s :stream",
            "ConditionExpression": "attribute_not_exists(pk)" if counted is None else "n = :counted",
            "ExpressionAttributeValues": {":seq": {"N": seq}, ":stream": {"SS": [item["pk"]["S"].removeprefix("s#")]},
                                          **({} if counted is None else {":counted": {"N": str(counted)}})}}
        items: list[dict[str, Any]] = [
            {"Update": moved}, {"Put": {"TableName": self.table, "Item": item, "ConditionExpression": "attribute_not_exists(pk)"}}]
        if fence is not None:
            items.insert(0, self._fence_check(fence, now))
        try:
            self._ddb.transact_write_items(TransactItems=items)
        except self._ddb.exceptions.TransactionCanceledException as exc:
            reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
            if fence is not None and reasons and reasons[0] == "ConditionalCheckFailed":
                raise LeaseLost(f"lease {fence.name} is no longer held by {fence.holder} (expired or taken over): "
                                "nothing was written") from None
            if "ConditionalCheckFailed" in reasons or "TransactionConflict" in reasons:  # another writer took the
                # number, or was moving the counter at that moment (DynamoDB cancels one of two): nothing was written
                raise self._failed({"Error": {"Code": "ConditionalCheckFailedException", "Message": "taken"}},
                                   "TransactWriteItems") from None
            raise

    def _fence_check(self, fence: Lease, now: float) -> dict[str, Any]:
        return {"ConditionCheck": {"TableName": self.table, "Key": self._key(fence.name),
                                   "ConditionExpression": "#token = :t AND expires > :now",
                                   "ExpressionAttributeNames": {"#token": "token"},
                                   "ExpressionAttributeValues": {":t": {"S": fence.token}, ":now": {"N": repr(now)}}}}

    def _put(self, item: dict[str, Any], fence: Lease | None, now: float) -> None:
        if fence is None:
            self._ddb.put_item(TableName=self.table, Item=item, ConditionExpression="attribute_not_exists(pk)")
            return
        try:
            self._ddb.transact_write_items(TransactItems=[
                self._fence_check(fence, now),
                {"Put": {"TableName": self.table, "Item": item, "ConditionExpression": "attribute_not_exists(pk)"}},
            ])
        except self._ddb.exceptions.TransactionCanceledException as exc:
            reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
            if reasons and reasons[0] == "ConditionalCheckFailed":
                raise LeaseLost(f"lease {fence.name} is no longer held by {fence.holder} (expired or taken over): "
                                "nothing was written") from None
            if (len(reasons) > 1 and reasons[1] == "ConditionalCheckFailed") or "TransactionConflict" in reasons:
                # the number taken, or another request on one of its items at that moment: nothing was written
                raise self._failed({"Error": {"Code": "ConditionalCheckFailedException", "Message": "taken"}},
                                   "TransactWriteItems") from None
            raise

    def _find(self, stream: str, key: str) -> Record | None:
        """One of the stream's newest records, if it is the append made under ``key``."""
        kwargs: dict[str, Any] = {
            "TableName": self.table, "ConsistentRead": True, "ScanIndexForward": False, "Limit": 20,
            "KeyConditionExpression": "pk = :pk", "ExpressionAttributeValues": {":pk": {"S": stream_key(stream)}}}
        for i in self._ddb.query(**kwargs)["Items"]:
            if i.get("k", {}).get("S") == key:
                return Record(stream, int(i["sk"]["N"]), float(i["t"]["N"]), json.loads(i["d"]["S"]))
        return None

    def _register(self, stream: str) -> None:
        self._registered.add(stream)
        family, families = registry_keys(stream)
        self._ddb.put_item(TableName=self.table, Item={"pk": {"S": family}, "sk": {"N": str(_name_key(stream))},
                                                          "n": {"S": stream}})
        self._ddb.update_item(TableName=self.table, Key={"pk": {"S": families}, "sk": {"N": "0"}}, UpdateExpression="ADD f :f",
                              ExpressionAttributeValues={":f": {"SS": [_family(stream)]}})

    @_store_errors
    def append_many(self, stream: str, rows: Sequence[Mapping[str, Any]], *, fence: Lease | None = None,
                    retain_seconds: float | None = None) -> list[Record]:
        return [self.append(stream, data, fence=fence, retain_seconds=retain_seconds) for data in rows]

    @_store_errors
    def bulk_load(self, stream: str, rows: Sequence[Mapping[str, Any]], retain_seconds: float | None = None) -> int:
        """Write ``rows`` after the stream's last record in batches of 25, without conditions: for seeding history
        into a stream nothing else writes meanwhile (a restore, a benchmark), never for live appends."""
        last = self.last(stream)
        seq = last.seq if last else 0
        now = self.clock.now()
        items = []
        for data in rows:
            seq += 1
            item = {"pk": {"S": stream_key(stream)}, "sk": {"N": str(seq)}, "t": {"N": repr(now)},
                    "d": {"S": json.dumps(data, separators=(",", ":"), sort_keys=True)}, "k": {"S": uuid.uuid4().hex}}
            if retain_seconds is not None:
                item[TTL_ATTRIBUTE] = {"N": str(int(now + retain_seconds))}
            items.append({"PutRequest": {"Item": item}})
        for start in range(0, len(items), 25):
            request = {self.table: items[start:start + 25]}
            while request:
                request = self._ddb.batch_write_item(RequestItems=request).get("UnprocessedItems") or {}
        if rows and not last:
            self._register(stream)
        return len(items)

    def prune(self) -> int:
        return 0  # the table's TTL deletes expired items (within a day or two; reads skip them meanwhile)

    @_store_errors
    def read_back(self, stream: str, before: int | None = None, limit: int = 500) -> list[Record]:
        kwargs: dict[str, Any] = {
            "TableName": self.table, "ConsistentRead": True, "ScanIndexForward": False, "Limit": limit,
            "KeyConditionExpression": "pk = :pk AND sk < :before",
            "ExpressionAttributeValues": {":pk": {"S": stream_key(stream)}, ":before": {"N": str(before if before is not None
                                                                                              else 2**62)}}}
        now = self.clock.now()
        items = self._ddb.query(**kwargs)["Items"]
        return [Record(stream, int(i["sk"]["N"]), float(i["t"]["N"]), json.loads(i["d"]["S"])) for i in items
                if TTL_ATTRIBUTE not in i or float(i[TTL_ATTRIBUTE]["N"]) > now]

    def _query(self, stream: str, after: int, limit: int | None, forward: bool = True) -> list[Record]:
        out: list[Record] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table, "ConsistentRead": True, "ScanIndexForward": forward,
            "KeyConditionExpression": "pk = :pk AND sk > :after",
            "ExpressionAttributeValues": {":pk": {"S": stream_key(stream)}, ":after": {"N": str(after)}},
        }
        while True:
            if limit is not None:
                kwargs["Limit"] = limit - len(out)
            page = self._ddb.query(**kwargs)
            out += [Record(stream, int(i["sk"]["N"]), float(i["t"]["N"]), json.loads(i["d"]["S"])) for i in page["Items"]]
            if "LastEvaluatedKey" not in page or (limit is not None and len(out) >= limit):
                return out
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    @_store_errors
    def read(self, stream: str, after: int = 0, limit: int | None = None) -> list[Record]:
        return self._query(stream, after, limit)

    @_store_errors
    def read_sequence(self, sequence: str, after: int = 0) -> list[Record]:
        upto, streams = self._sequence(sequence)  # first: everything numbered up to it is committed, in its streams
        found: list[Record] = []
        for stream in sorted({sequence, *streams}):
            found += [r for r in self._query(stream, after, None) if upto is None or r.seq <= upto]
        return sorted(found, key=lambda r: (r.seq, r.stream))

    @_store_errors
    def last(self, stream: str) -> Record | None:
        found = self._query(stream, 0, 1, forward=False)
        return found[0] if found else None

    @_store_errors
    def streams(self, prefix: str = "") -> list[str]:
        """From the registry (a key condition per path segment), never a scan of the records."""
        if "/" in prefix or prefix:
            families = [_family(prefix)] if "/" in prefix else self._families(prefix)
        else:
            families = self._families("")
        names: list[str] = []
        for family in families:
            kwargs: dict[str, Any] = {"TableName": self.table, "ConsistentRead": True,
                                      "KeyConditionExpression": "pk = :pk",
                                      "ExpressionAttributeValues": {":pk": {"S": f"i#{family}"}}}
            while True:
                page = self._ddb.query(**kwargs)
                names += [i["n"]["S"] for i in page["Items"] if i["n"]["S"].startswith(prefix)]
                if "LastEvaluatedKey" not in page:
                    break
                kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return sorted(set(names))

    def _families(self, prefix: str) -> list[str]:
        item = self._ddb.get_item(TableName=self.table, Key={"pk": {"S": "i#"}, "sk": {"N": "0"}}, ConsistentRead=True)
        return sorted(f for f in item.get("Item", {}).get("f", {}).get("SS", []) if f.startswith(prefix) or
                      prefix.startswith(f))

    # ---------------------------------------------------------------- leases

    def _key(self, name: str) -> dict[str, Any]:
        return {"pk": {"S": lease_key(name)}, "sk": {"N": "0"}}

    def _leases(self, ttl: float) -> Any:
        """The client lease calls go through: short timeouts for the TTL (botocore's default, 60 s to connect and 60 s
        to read, times its attempts, would let one hung connection outlast the lease) and two attempts."""
        from botocore.config import Config

        timeout = lease_call_timeout(ttl)
        found = self._lease_clients.get(timeout)
        if found is None:
            config = Config(connect_timeout=timeout, read_timeout=timeout, retries={"mode": "standard", "max_attempts": 2})
            found = self._lease_clients[timeout] = aws.client("dynamodb", self._region, config, self._target)
        return found

    def _conflicted(self, call: Any, **kwargs: Any) -> Any:
        """A lease write whose item a fenced append's transaction is checking at that moment answers
        TransactionConflict: it was not applied, and is tried again after a moment."""
        from botocore.exceptions import ClientError

        for attempt in range(5):
            try:
                return call(**kwargs)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "TransactionConflictException" or attempt == 4:
                    raise
                time.sleep(random.uniform(0, 0.05 * 2 ** attempt))

    @_store_errors
    def acquire(self, name: str, holder: str, ttl: float) -> Lease:
        self._ttl_of[name] = ttl
        for _ in range(3):
            now = self.clock.now()
            lease = Lease(name, holder, uuid.uuid4().hex, now, now + ttl)
            try:
                self._conflicted(
                    self._leases(ttl).put_item,
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

    @_store_errors
    def renew(self, lease: Lease, ttl: float) -> Lease:
        """Extend the holder's lease; one that expired is not brought back (only a new acquisition takes it again)."""
        self._ttl_of[lease.name] = ttl
        now = self.clock.now()
        expires = now + ttl
        try:
            self._conflicted(
                self._leases(ttl).update_item,
                TableName=self.table, Key=self._key(lease.name), UpdateExpression="SET expires = :e",
                ConditionExpression="holder = :h AND #token = :t AND expires > :now", ExpressionAttributeNames={"#token": "token"},
                ExpressionAttributeValues={":e": {"N": repr(expires)}, ":h": {"S": lease.holder}, ":t": {"S": lease.token},
                                           ":now": {"N": repr(now)}})
        except self._failed:
            raise LeaseLost(f"lease {lease.name} is no longer held by {lease.holder}") from None
        return Lease(lease.name, lease.holder, lease.token, lease.acquired, expires)

    @_store_errors
    def release(self, lease: Lease) -> None:
        try:
            self._conflicted(self._leases(self._ttl_of.get(lease.name, 60.0)).delete_item, TableName=self.table,
                             Key=self._key(lease.name), ConditionExpression="#token = :t",
                                  ExpressionAttributeNames={"#token": "token"},
                                  ExpressionAttributeValues={":t": {"S": lease.token}})
        except self._failed:
            pass  # no longer ours: nothing to give up

    @_store_errors
    def lease(self, name: str) -> Lease | None:
        item = self._ddb.get_item(TableName=self.table, Key=self._key(name), ConsistentRead=True).get("Item")
        if not item:
            return None
        return Lease(name, item["holder"]["S"], item["token"]["S"], float(item["acquired"]["N"]), float(item["expires"]["N"]))

    def close(self) -> None:
        pass
