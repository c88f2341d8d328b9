#!/usr/bin/env python3
"""Self-test of tests/iceberg/read_table.py against a running S3 server.

  scripts/local-servers start moto
  (source "$(scripts/local-servers env moto)" &&
    .local/duckdb/bin/python tests/iceberg/self_test.py)
  scripts/local-servers stop moto

Needs only S3 at AWS_ENDPOINT_URL_S3 (or AWS_ENDPOINT_URL), with the
credentials of AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, and the Python of
.local/duckdb (scripts/test installs it). It writes with pyiceberg, then runs
read_table.py as the end-to-end tests do and checks what it prints:

- table `kinesis.records` (a random bucket, a SQL catalog on a temporary
  SQLite file, warehouse s3://BUCKET/wh), with shardsink's record columns,
  partitioned by day(approximate_arrival_timestamp), written in two appends
  that each carry the snapshot property shardsink.commit-id: both readers give
  the same rows, equal to the rows written (encoded as read_table.py
  documents), in (shard, numeric sequence number, sub-sequence) order; two
  snapshots, the second the child of the first and current, each with its
  commit id; the live data files exist, cover both days and count every row.
- table `kinesis.types`, unpartitioned: a timestamp without zone, a decimal
  and a date come back as the same text from both readers.
- table `kinesis.empty`, never written: no snapshot, no file, no row.
- a missing table and a missing namespace: exit status 3.

Prints one line per check; exit status 0 when all pass, 1 at the first failure.
"""

from __future__ import annotations

import datetime
import decimal
import json
import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyarrow import fs
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform
from pyiceberg.types import (
    BinaryType,
    DateType,
    DecimalType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)

READER = Path(__file__).with_name("read_table.py")
CATALOG_NAME = "shardsink"
UTC = datetime.UTC


def check(condition: bool, what: str, detail: Any = None) -> None:
    """Print WHAT as passed, or exit 1 naming it and DETAIL."""
    if not condition:
        print(f"FAIL {what}" + ("" if detail is None else f": {detail}"), flush=True)
        sys.exit(1)
    print(f"ok   {what}", flush=True)


def endpoint() -> str:
    """The S3 endpoint from the environment; exit 2 without one."""
    url = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if not url:
        print(
            "self_test.py: set AWS_ENDPOINT_URL_S3 (source the env file of scripts/local-servers)",
            file=sys.stderr,
        )
        sys.exit(2)
    return url


def s3_filesystem(url: str) -> fs.S3FileSystem:
    """pyarrow's S3 client for the server at URL, path-style, allowed to create buckets."""
    scheme, _, host = url.partition("://")
    return fs.S3FileSystem(
        access_key=os.environ.get("AWS_ACCESS_KEY_ID", "test"),
        secret_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
        region=os.environ.get("AWS_REGION", "us-east-1"),
        endpoint_override=host.rstrip("/"),
        scheme=scheme,
        force_virtual_addressing=False,
        allow_bucket_creation=True,
    )


def record_schema() -> Schema:
    """shardsink's record columns."""
    return Schema(
        NestedField(1, "shard_id", StringType(), required=True),
        NestedField(2, "sequence_number", StringType(), required=True),
        NestedField(3, "sub_sequence_number", LongType(), required=False),
        NestedField(4, "partition_key", StringType(), required=False),
        NestedField(5, "approximate_arrival_timestamp", TimestamptzType(), required=True),
        NestedField(6, "data", BinaryType(), required=False),
    )


def record(
    shard: str, sequence: str, sub: int | None, arrival: datetime.datetime, data: bytes
) -> dict[str, Any]:
    """One Kinesis record as a row."""
    return {
        "shard_id": shard,
        "sequence_number": sequence,
        "sub_sequence_number": sub,
        "partition_key": f"pk-{sequence}",
        "approximate_arrival_timestamp": arrival,
        "data": data,
    }


def run_reader(catalog_uri: str, table: str) -> subprocess.CompletedProcess[str]:
    """read_table.py on TABLE, with this Python and the endpoint from the environment."""
    return subprocess.run(
        [
            sys.executable,
            str(READER),
            "--catalog-uri",
            catalog_uri,
            "--catalog-name",
            CATALOG_NAME,
            "--table",
            table,
        ],
        capture_output=True,
        text=True,
        check=False,
    )


def read(catalog_uri: str, table: str) -> dict[str, Any]:
    """read_table.py's document for TABLE; exit 1 if it fails."""
    result = run_reader(catalog_uri, table)
    check(result.returncode == 0, f"read_table.py {table} exits 0", result.stderr)
    return json.loads(result.stdout)


def test_records(catalog: SqlCatalog, catalog_uri: str, s3: fs.S3FileSystem) -> None:
    """Two appends to the day-partitioned record table, read back."""
    spec = PartitionSpec(
        PartitionField(
            source_id=5,
            field_id=1000,
            transform=DayTransform(),
            name="approximate_arrival_timestamp_day",
        )
    )
    table = catalog.create_table("kinesis.records", schema=record_schema(), partition_spec=spec)
    arrow_schema = table.schema().as_arrow()
    day1 = datetime.datetime(2026, 11, 28, 10, 0, 0, 123000, tzinfo=UTC)
    day2 = datetime.datetime(2026, 11, 29, 0, 0, 0, 1, tzinfo=UTC)
    first = [
        record("shardId-000000000001", "10", None, day1, b"\x00\xff\xfe"),
        record("shardId-000000000000", "2", 1, day1, b'{"k":1}'),
        record("shardId-000000000000", "2", 0, day1, b""),
    ]
    second = [
        record("shardId-000000000000", "9", None, day2, b"late"),
        record("shardId-000000000001", "3", None, day2, b"\x80"),
    ]
    table.append(
        pa.Table.from_pylist(first, schema=arrow_schema),
        snapshot_properties={"shardsink.commit-id": "c-1"},
    )
    table.append(
        pa.Table.from_pylist(second, schema=arrow_schema),
        snapshot_properties={"shardsink.commit-id": "c-2"},
    )

    doc = read(catalog_uri, "kinesis.records")
    expected = [
        ("shardId-000000000000", "2", 0, "pk-2", "2026-11-28T10:00:00.123000Z", ""),
        ("shardId-000000000000", "2", 1, "pk-2", "2026-11-28T10:00:00.123000Z", "eyJrIjoxfQ=="),
        ("shardId-000000000000", "9", None, "pk-9", "2026-11-29T00:00:00.000001Z", "bGF0ZQ=="),
        ("shardId-000000000001", "3", None, "pk-3", "2026-11-29T00:00:00.000001Z", "gA=="),
        ("shardId-000000000001", "10", None, "pk-10", "2026-11-28T10:00:00.123000Z", "AP/+"),
    ]
    names = [field.name for field in record_schema().fields]
    expected_rows = [dict(zip(names, values, strict=True)) for values in expected]
    check(
        doc["pyiceberg_rows"] == expected_rows,
        "pyiceberg rows are the rows written, encoded and sorted",
        doc["pyiceberg_rows"],
    )
    check(
        doc["duckdb_rows"] == doc["pyiceberg_rows"],
        "DuckDB rows equal pyiceberg rows",
        doc["duckdb_rows"],
    )

    snapshots = doc["snapshots"]
    check(len(snapshots) == 2, "two snapshots", snapshots)
    check(
        [s["summary"].get("shardsink.commit-id") for s in snapshots] == ["c-1", "c-2"],
        "each snapshot carries its shardsink.commit-id, oldest first",
        snapshots,
    )
    check(
        snapshots[1]["parent_id"] == snapshots[0]["snapshot_id"]
        and snapshots[0]["parent_id"] is None,
        "the second snapshot is the child of the first",
    )
    check(
        doc["current_snapshot_id"] == snapshots[1]["snapshot_id"], "the second snapshot is current"
    )
    check(
        all(
            s["operation"] == "append" and s["summary"]["operation"] == "append" for s in snapshots
        ),
        "both snapshots are appends",
    )
    check(
        snapshots[1]["summary"].get("total-records") == "5",
        "summary total-records is 5",
        snapshots[1]["summary"],
    )

    files = doc["data_files"]
    check(sum(f["record_count"] for f in files) == 5, "data files count every row", files)
    infos = s3.get_file_info([f["path"].removeprefix("s3://") for f in files])
    check(
        all(info.type == fs.FileType.File and info.size > 0 for info in infos),
        "every data file exists",
        files,
    )
    days = sorted({json.dumps(f["partition"], sort_keys=True) for f in files})
    check(
        days
        == [
            '{"approximate_arrival_timestamp_day": "2026-11-28"}',
            '{"approximate_arrival_timestamp_day": "2026-11-29"}',
        ],
        "data files are partitioned by arrival day",
        days,
    )
    check(
        doc["partition_spec"]
        == [
            {
                "source": "approximate_arrival_timestamp",
                "source_id": 5,
                "field_id": 1000,
                "transform": "day",
                "name": "approximate_arrival_timestamp_day",
            }
        ],
        "partition spec is day(approximate_arrival_timestamp)",
        doc["partition_spec"],
    )
    check(
        [(f["name"], f["type"], f["required"]) for f in doc["schema"]]
        == [
            ("shard_id", "string", True),
            ("sequence_number", "string", True),
            ("sub_sequence_number", "long", False),
            ("partition_key", "string", False),
            ("approximate_arrival_timestamp", "timestamptz", True),
            ("data", "binary", False),
        ],
        "schema names, types and required flags",
        doc["schema"],
    )
    check(
        doc["metadata_location"].endswith(".metadata.json"), "metadata_location is a metadata file"
    )


def test_types(catalog: SqlCatalog, catalog_uri: str) -> None:
    """A timestamp without zone, a decimal and a date, encoded alike by both readers."""
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "at", TimestampType(), required=False),
        NestedField(3, "amount", DecimalType(10, 2), required=False),
        NestedField(4, "day", DateType(), required=False),
    )
    table = catalog.create_table("kinesis.types", schema=schema)
    rows = [
        {
            "id": 1,
            "at": datetime.datetime(2026, 11, 28, 23, 59, 59, 999999),
            "amount": decimal.Decimal("12.30"),
            "day": datetime.date(2026, 11, 28),
        },
        {"id": 2, "at": None, "amount": None, "day": None},
    ]
    table.append(pa.Table.from_pylist(rows, schema=table.schema().as_arrow()))
    doc = read(catalog_uri, "kinesis.types")
    expected = [
        {"id": 1, "at": "2026-11-28T23:59:59.999999Z", "amount": "12.30", "day": "2026-11-28"},
        {"id": 2, "at": None, "amount": None, "day": None},
    ]
    by_id = sorted(doc["pyiceberg_rows"], key=lambda row: row["id"])
    check(by_id == expected, "pyiceberg: naive timestamp, decimal and date as text", by_id)
    check(
        sorted(doc["duckdb_rows"], key=lambda row: row["id"]) == by_id,
        "DuckDB: the same text",
        doc["duckdb_rows"],
    )


def test_empty(catalog: SqlCatalog, catalog_uri: str) -> None:
    """A table created and never written."""
    catalog.create_table("kinesis.empty", schema=record_schema())
    doc = read(catalog_uri, "kinesis.empty")
    check(
        doc["current_snapshot_id"] is None and doc["snapshots"] == [] and doc["data_files"] == [],
        "empty table: no snapshot, no data file",
        doc,
    )
    check(
        doc["pyiceberg_rows"] == [] and doc["duckdb_rows"] == [],
        "empty table: no row from either reader",
        doc,
    )


def test_missing(catalog_uri: str) -> None:
    """A missing table and a missing namespace: exit status 3."""
    for name in ("kinesis.nothing", "nowhere.records"):
        result = run_reader(catalog_uri, name)
        check(
            result.returncode == 3 and name in result.stderr and result.stdout == "",
            f"missing {name}: exit 3 with a message",
            (result.returncode, result.stderr),
        )


def main() -> int:
    """Run every check; 0 when all pass."""
    url = endpoint()
    s3 = s3_filesystem(url)
    bucket = f"iceberg-self-test-{secrets.token_hex(4)}"
    s3.create_dir(bucket)
    with tempfile.TemporaryDirectory(prefix="iceberg-self-test-") as directory:
        catalog_uri = f"sqlite:///{Path(directory).resolve()}/catalog.db"
        catalog = SqlCatalog(
            CATALOG_NAME,
            uri=catalog_uri,
            warehouse=f"s3://{bucket}/wh",
            **{
                "s3.endpoint": url,
                "s3.access-key-id": os.environ.get("AWS_ACCESS_KEY_ID", "test"),
                "s3.secret-access-key": os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
                "s3.region": os.environ.get("AWS_REGION", "us-east-1"),
                "s3.path-style-access": "true",
            },
        )
        catalog.create_namespace("kinesis")
        test_records(catalog, catalog_uri, s3)
        test_types(catalog, catalog_uri)
        test_empty(catalog, catalog_uri)
        test_missing(catalog_uri)
    print("self-test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
