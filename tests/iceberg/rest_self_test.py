#!/usr/bin/env python3
"""Self-test of tests/iceberg/rest_catalog.py against a running S3 server.

  scripts/local-servers start moto
  (source "$(scripts/local-servers env moto)" &&
    .local/duckdb/bin/python tests/iceberg/rest_self_test.py)
  scripts/local-servers stop moto

Needs what self_test.py needs (S3 at AWS_ENDPOINT_URL_S3, its credentials, the
Python of .local/duckdb). It starts rest_catalog.py on a temporary SQLite file
and a fresh bucket, talks to it with pyiceberg's REST client (`RestCatalog`)
and with raw HTTP, and checks:

- the records table of self_test.py (two appends, day partitions, commit ids)
  written through the REST server: read_table.py, opening the same SQLite file
  as a SQL catalog of the same name, and DuckDB give the rows written, two
  snapshots, the files and the spec (self_test.py's checks); a REST load and
  scan give the same rows and the same metadata file.
- commits are checked: of two clients that loaded the same table version and
  both append (pyiceberg retries turned off by the table property
  commit.retry.num-retries=0), the second fails with CommitFailedException
  and its rows are not in the table; a raw commit whose
  assert-ref-snapshot-id names the replaced snapshot answers 409 with the
  REST error body and changes nothing, and the same commit with the current
  snapshot id is applied.
- requests in iceberg-rust 0.10's JSON shapes: a create whose partition
  spec has no field ids and which leaves out location, write-order and
  properties; a commit of add-snapshot plus a flattened set-snapshot-ref
  under assert-table-uuid and assert-ref-snapshot-id, after which the new
  snapshot is current.
- REST errors: 404 NoSuchTableException, 404 NoSuchNamespaceException, 409
  AlreadyExistsException, HEAD 204 / 404; a two-level namespace (%1F).
- SIGTERM stops the server with exit status 0.

Prints one line per check, then `rest self-test passed`; exit status 0 when
all pass, 1 at the first failure.
"""

from __future__ import annotations

import datetime
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException
from read_table import encode_rows
from self_test import (
    CATALOG_NAME,
    UTC,
    check,
    endpoint,
    read,
    record,
    record_schema,
    s3_filesystem,
    test_records,
)

SERVER = Path(__file__).with_name("rest_catalog.py")


def s3_properties(url: str) -> dict[str, str]:
    """FileIO properties for pyiceberg, path-style at URL."""
    return {
        "s3.endpoint": url,
        "s3.access-key-id": os.environ.get("AWS_ACCESS_KEY_ID", "test"),
        "s3.secret-access-key": os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
        "s3.region": os.environ.get("AWS_REGION", "us-east-1"),
        "s3.path-style-access": "true",
    }


def start_server(catalog_uri: str, warehouse: str) -> tuple[subprocess.Popen[str], str]:
    """rest_catalog.py on a free port; the process and its base URL."""
    server = subprocess.Popen(
        [
            sys.executable,
            str(SERVER),
            "--port",
            "0",
            "--catalog-uri",
            catalog_uri,
            "--warehouse",
            warehouse,
            "--catalog-name",
            CATALOG_NAME,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert server.stdout is not None  # stdout=PIPE
    line = server.stdout.readline().strip()
    prefix = "listening on "
    if not line.startswith(prefix):
        server.kill()
        check(False, "rest_catalog.py prints its address first", line)
    return server, line.removeprefix(prefix)


def http(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    """One raw request; the status and the JSON answer (None when empty)."""
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request) as response:
            status, payload = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, payload = error.code, error.read()
    return status, json.loads(payload) if payload else None


def rows(table_arrow: pa.Table) -> list[dict[str, Any]]:
    """Rows encoded and sorted as read_table.py prints them."""
    return encode_rows(table_arrow)


def test_rest_reads(rest: RestCatalog, catalog_uri: str) -> None:
    """A REST load of the records table equals what the SQL catalog reads."""
    doc = read(catalog_uri, "kinesis.records")
    table = rest.load_table("kinesis.records")
    check(
        table.metadata_location == doc["metadata_location"],
        "REST load names the SQL catalog's metadata file",
        (table.metadata_location, doc["metadata_location"]),
    )
    check(
        rows(table.scan().to_arrow()) == doc["pyiceberg_rows"],
        "REST scan gives the SQL catalog's rows",
    )
    check(rest.table_exists("kinesis.records"), "REST table_exists (HEAD) finds the table")
    check(not rest.table_exists("kinesis.nothing"), "REST table_exists (HEAD) misses a table")


def test_conflict(rest: RestCatalog, other: RestCatalog, base: str) -> None:
    """Stale commits are refused, through pyiceberg and through raw HTTP."""
    table = rest.create_table(
        "kinesis.conflict",
        schema=record_schema(),
        properties={"commit.retry.num-retries": "0"},
    )
    arrow_schema = table.schema().as_arrow()
    arrival = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
    mine = rest.load_table("kinesis.conflict")
    theirs = other.load_table("kinesis.conflict")
    mine.append(
        pa.Table.from_pylist([record("s-0", "1", None, arrival, b"a")], schema=arrow_schema)
    )
    try:
        theirs.append(
            pa.Table.from_pylist([record("s-0", "2", None, arrival, b"b")], schema=arrow_schema)
        )
        failed = False
    except CommitFailedException:
        failed = True
    check(failed, "the second of two appends on one table version fails with CommitFailedException")
    after = other.load_table("kinesis.conflict")
    check(
        [r["sequence_number"] for r in rows(after.scan().to_arrow())] == ["1"]
        and len(after.metadata.snapshots) == 1,
        "only the first append is in the table",
        rows(after.scan().to_arrow()),
    )

    url = f"{base}/v1/namespaces/kinesis/tables/conflict"
    current = after.metadata.current_snapshot_id

    def commit(snapshot_id: int | None) -> tuple[int, Any]:
        return http(
            "POST",
            url,
            {
                "identifier": {"namespace": ["kinesis"], "name": "conflict"},
                "requirements": [
                    {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": snapshot_id}
                ],
                "updates": [{"action": "set-properties", "updates": {"probe": str(snapshot_id)}}],
            },
        )

    status, body = commit(None)
    check(
        status == 409
        and body["error"]["type"] == "CommitFailedException"
        and body["error"]["code"] == 409
        and isinstance(body["error"]["message"], str),
        "a commit with a stale assert-ref-snapshot-id answers 409 CommitFailedException",
        (status, body),
    )
    check(
        "probe" not in other.load_table("kinesis.conflict").properties,
        "the refused commit changed nothing",
    )
    status, body = commit(current)
    check(
        status == 200
        and body["metadata"]["properties"].get("probe") == str(current)
        and body["metadata-location"].endswith(".metadata.json")
        and body["metadata-location"] != after.metadata_location,
        "the same commit with the current snapshot id is applied",
        (status, body),
    )
    check(
        other.load_table("kinesis.conflict").metadata_location == body["metadata-location"],
        "a load then names the committed metadata file",
    )


def test_rust_shapes(rest: RestCatalog, base: str) -> None:
    """Requests in the JSON shapes iceberg-rust 0.10's REST client sends
    (crates/catalog/rest/src/types.rs CreateTableRequest, CommitTableRequest;
    crates/iceberg/src/catalog/mod.rs TableRequirement, TableUpdate): an
    unbound partition spec without ids, keys left out when empty, a
    flattened snapshot reference."""
    schema = json.loads(record_schema().model_dump_json())
    status, body = http(
        "POST",
        f"{base}/v1/namespaces/kinesis/tables",
        {
            "name": "shaped",
            "schema": schema,
            "partition-spec": {
                "fields": [
                    {
                        "source-id": 5,
                        "name": "approximate_arrival_timestamp_day",
                        "transform": "day",
                    }
                ]
            },
            "stage-create": False,
        },
    )
    check(
        status == 200
        and body["metadata"]["partition-specs"][0]["fields"][0]["field-id"] == 1000
        and body["metadata"]["partition-specs"][0]["fields"][0]["transform"] == "day"
        and body["metadata-location"].endswith(".metadata.json"),
        "create with an unbound partition spec and no location, write-order, properties",
        (status, body),
    )
    # The keys iceberg-rust 0.10's TableMetadataV2 (crates/iceberg/src/spec/table_metadata.rs)
    # requires; a LoadTableResult without one of them fails to parse there.
    required = {
        "format-version", "table-uuid", "location", "last-sequence-number", "last-updated-ms",
        "last-column-id", "schemas", "current-schema-id", "partition-specs", "default-spec-id",
        "last-partition-id", "sort-orders", "default-sort-order-id",
    }
    check(
        required <= body["metadata"].keys() and body["metadata"]["format-version"] == 2,
        "the metadata answered has every key iceberg-rust's TableMetadataV2 requires",
        sorted(required - body["metadata"].keys()),
    )
    table = rest.load_table("kinesis.shaped")
    arrival = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
    table.append(
        pa.Table.from_pylist(
            [record("s-1", "7", None, arrival, b"r")], schema=table.schema().as_arrow()
        )
    )
    table = rest.load_table("kinesis.shaped")
    parent = table.current_snapshot()
    assert parent is not None  # appended above
    snapshot_id = parent.snapshot_id + 1
    status, body = http(
        "POST",
        f"{base}/v1/namespaces/kinesis/tables/shaped",
        {
            "identifier": {"namespace": ["kinesis"], "name": "shaped"},
            "requirements": [
                {"type": "assert-table-uuid", "uuid": str(table.metadata.table_uuid)},
                {
                    "type": "assert-ref-snapshot-id",
                    "ref": "main",
                    "snapshot-id": parent.snapshot_id,
                },
            ],
            "updates": [
                {
                    "action": "add-snapshot",
                    "snapshot": {
                        "snapshot-id": snapshot_id,
                        "parent-snapshot-id": parent.snapshot_id,
                        "sequence-number": table.metadata.last_sequence_number + 1,
                        "timestamp-ms": parent.timestamp_ms + 1,
                        "manifest-list": parent.manifest_list,
                        "summary": {"operation": "append", "shardsink.commit-id": "c-rust"},
                        "schema-id": 0,
                    },
                },
                {
                    "action": "set-snapshot-ref",
                    "ref-name": "main",
                    "snapshot-id": snapshot_id,
                    "type": "branch",
                },
            ],
        },
    )
    check(status == 200, "commit of add-snapshot and a flattened set-snapshot-ref", (status, body))
    reloaded = rest.load_table("kinesis.shaped")
    current = reloaded.current_snapshot()
    check(
        current is not None
        and current.snapshot_id == snapshot_id
        and current.parent_snapshot_id == parent.snapshot_id
        and current.summary is not None
        and current.summary.additional_properties.get("shardsink.commit-id") == "c-rust"
        and [r["sequence_number"] for r in rows(reloaded.scan().to_arrow())] == ["7"],
        "the committed snapshot is current, with its summary and rows",
        current,
    )


def test_errors(rest: RestCatalog, base: str) -> None:
    """Error statuses and bodies, HEAD answers, a two-level namespace."""
    status, body = http("GET", f"{base}/v1/namespaces/kinesis/tables/nothing")
    check(
        status == 404 and body["error"]["type"] == "NoSuchTableException",
        "load of a missing table: 404 NoSuchTableException",
        (status, body),
    )
    status, body = http("GET", f"{base}/v1/namespaces/nowhere/tables")
    check(
        status == 404 and body["error"]["type"] == "NoSuchNamespaceException",
        "tables of a missing namespace: 404 NoSuchNamespaceException",
        (status, body),
    )
    status, body = http(
        "POST",
        f"{base}/v1/namespaces/kinesis/tables",
        {"name": "records", "schema": {"type": "struct", "fields": []}},
    )
    check(
        status == 409 and body["error"]["type"] == "AlreadyExistsException",
        "create of an existing table: 409 AlreadyExistsException",
        (status, body),
    )
    status, body = http("POST", f"{base}/v1/namespaces", {"namespace": ["kinesis"]})
    check(
        status == 409 and body["error"]["type"] == "AlreadyExistsException",
        "create of an existing namespace: 409 AlreadyExistsException",
        (status, body),
    )
    status, _ = http("HEAD", f"{base}/v1/namespaces/kinesis/tables/records")
    missing, _ = http("HEAD", f"{base}/v1/namespaces/kinesis/tables/nothing")
    check((status, missing) == (204, 404), "HEAD table: 204, missing 404", (status, missing))

    rest.create_namespace(("outer", "inner"))
    rest.create_table(("outer", "inner", "nested"), schema=record_schema())
    status, body = http("GET", f"{base}/v1/namespaces/outer%1Finner/tables")
    check(
        status == 200
        and body["identifiers"] == [{"namespace": ["outer", "inner"], "name": "nested"}],
        "two-level namespace: %1F in the path",
        (status, body),
    )
    check(
        rest.load_table(("outer", "inner", "nested")).name() == ("outer", "inner", "nested"),
        "two-level namespace: a table loads",
    )


def main() -> int:
    """Run every check; 0 when all pass."""
    url = endpoint()
    s3 = s3_filesystem(url)
    bucket = f"iceberg-rest-self-test-{secrets.token_hex(4)}"
    s3.create_dir(bucket)
    with tempfile.TemporaryDirectory(prefix="iceberg-rest-self-test-") as directory:
        catalog_uri = f"sqlite:///{Path(directory).resolve()}/catalog.db"
        server, base = start_server(catalog_uri, f"s3://{bucket}/wh")
        try:
            rest = RestCatalog(CATALOG_NAME, uri=base, **s3_properties(url))
            other = RestCatalog(CATALOG_NAME, uri=base, **s3_properties(url))
            rest.create_namespace("kinesis")
            check(rest.namespace_exists("kinesis"), "REST namespace_exists (HEAD) finds it")
            test_records(rest, catalog_uri, s3)  # type: ignore[arg-type]  # any Catalog
            test_rest_reads(rest, catalog_uri)
            sql = SqlCatalog(CATALOG_NAME, uri=catalog_uri, **s3_properties(url))
            check(
                sorted(sql.list_tables("kinesis")) == [("kinesis", "records")],
                "the SQL catalog lists the table the REST server created",
            )
            test_conflict(rest, other, base)
            test_rust_shapes(rest, base)
            test_errors(rest, base)
        finally:
            server.send_signal(signal.SIGTERM)
            status = server.wait()
        check(status == 0, "SIGTERM stops the server with status 0", status)
    print("rest self-test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
