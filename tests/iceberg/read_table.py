#!/usr/bin/env python3
"""Read an Iceberg table that shardsink wrote, twice and independently of it:
with pyiceberg and with DuckDB's iceberg extension.

  read_table.py --catalog-uri sqlite:////abs/path.db --catalog-name shardsink \\
      --table NS.TABLE [--s3-endpoint http://127.0.0.1:PORT] [--region us-east-1]
  read_table.py --catalog glue --table NS.TABLE [--catalog-endpoint URL] [...]
  read_table.py --catalog s3tables --table-bucket-arn ARN --table NS.TABLE \\
      [--catalog-endpoint URL] [...]
  read_table.py --metadata-location s3://.../metadata/NNNNN-uuid.metadata.json [...]

Run it with the Python of a venv that holds the pinned packages (scripts/test
installs them into .local/duckdb/ and exports that venv's python as
SHARDSINK_E2E_DUCKDB_PYTHON):

  duckdb==1.4.4 duckdb-ext-httpfs==1.4.4.20260205
  duckdb-ext-parquet==1.4.4.20260205 duckdb-ext-avro==1.4.4.20260205
  duckdb-ext-iceberg==1.4.4.20260205
  pyiceberg[sql-sqlite,pyarrow,pyiceberg-core]==0.12.0

With --catalog glue, pyiceberg loads the table from the Glue Data Catalog
(pyiceberg's GlueCatalog, through boto3; --catalog-endpoint for a local
server, else AWS_ENDPOINT_URL_GLUE or AWS's). With --catalog s3tables, boto3
asks S3 Tables for the table's current metadata file (GetTableMetadataLocation,
in the table bucket --table-bucket-arn; --catalog-endpoint, else
AWS_ENDPOINT_URL_S3TABLES or AWS's) and pyiceberg reads that file as a
`StaticTable`. With --metadata-location, pyiceberg reads the given metadata
file. DuckDB reads the table's metadata file in every case, as below. Glue and
S3 Tables need boto3 in the venv (pinned with the packages below).

The catalog is a SQL catalog (pyiceberg `SqlCatalog`) at --catalog-uri. Its
rows carry the catalog name, so --catalog-name must be the writer's. The table
is loaded from the catalog by pyiceberg; DuckDB then reads the same table from
its metadata file (`metadata_location`), as a user without the catalog would:
`iceberg_scan('s3://.../metadata/NNNNN-uuid.metadata.json')`. The metadata
file path is needed: a SQL catalog writes no `version-hint.text`, and DuckDB
will not guess the latest version from the metadata folder unless told
`unsafe_enable_version_guessing`.

S3 access: credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and
AWS_SESSION_TOKEN if set); the endpoint from --s3-endpoint, else
AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL; the region from --region, else
AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1. With an endpoint, objects
are addressed by path (`s3.path-style-access` for pyiceberg; `URL_STYLE
'path'` for DuckDB), over TLS only when the endpoint is https://. Without one,
AWS's own endpoints and virtual-host addressing.

Nothing is downloaded at run time: DuckDB's extension auto-install and
auto-load are off, and httpfs, parquet, avro and iceberg are each loaded with
`LOAD '<file>'` from the extension packages'
`site-packages/duckdb_ext/extensions/v<version>/<platform>/`. avro is loaded
before iceberg, whose initialisation otherwise tries to install it.

Prints one JSON document on stdout:

  metadata_location    the table's current metadata file
  current_snapshot_id  null for a table never written
  snapshots            oldest first: snapshot_id, parent_id, timestamp_ms,
                       operation, summary (every summary property, including
                       `operation` and those a writer added, such as
                       shardsink.commit-id), sequence_number
  data_files           live data files of the current snapshot
                       (pyiceberg `inspect.files()`): path, record_count,
                       partition ({partition field name: value, encoded as
                       below})
  partition_spec       the default spec's fields: source (column name),
                       source_id, field_id, transform (e.g. "day"), name
  schema               the current schema's top-level fields: id, name, type
                       (Iceberg type text: "string", "long", "timestamptz",
                       "binary", ...), required
  pyiceberg_rows       every row of the current snapshot, read by pyiceberg
                       (`table.scan().to_arrow()`)
  duckdb_rows          every row, read by DuckDB (`iceberg_scan`)

Both row lists are encoded the same way, from Arrow, so that they can be
compared as they are: binary and fixed → base64 text; timestamp and
timestamptz → ISO-8601 UTC text with microseconds and `Z`
("2026-11-28T10:00:00.123000Z"; a timestamp without zone is taken as UTC);
date → "YYYY-MM-DD"; time → "HH:MM:SS.ffffff"; decimal → its text ("12.30");
others as JSON natives (nested structs and lists encoded the same way
inside). Rows are sorted by (shard_id, sequence_number, sub_sequence_number)
when the table has those three columns — sequence numbers as numbers when
they are decimal digits, sub-sequence nulls first — else left in the order
read. DuckDB reports every column as nullable; `schema` is pyiceberg's.

Exit status: 0 on success; 3 when the namespace or table does not exist (a
message on stderr); 2 for bad arguments; 1 for any other failure (the failing
SQL or the exception on stderr).
"""

from __future__ import annotations

import argparse
import base64
import datetime
import decimal
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import StaticTable, Table

PROG = "read_table.py"
EXTENSIONS = ("httpfs", "parquet", "avro", "iceberg")
SORT_COLUMNS = ("shard_id", "sequence_number", "sub_sequence_number")
EPOCH = datetime.datetime(1970, 1, 1)
MICROS_PER_UNIT = {"s": 1_000_000, "ms": 1_000, "us": 1}


def fail(message: str, status: int = 1) -> NoReturn:
    """Print MESSAGE on stderr with the program's prefix and exit with STATUS."""
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)
    sys.exit(status)


def quote_literal(text: str) -> str:
    """TEXT as an SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


class S3Settings:
    """Where and how to reach S3, from the arguments and the AWS_* variables."""

    def __init__(self, endpoint: str | None, region: str | None) -> None:
        env = os.environ
        self.endpoint = (
            endpoint or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
        )
        self.region = (
            region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
        )
        self.key_id = env.get("AWS_ACCESS_KEY_ID")
        self.secret = env.get("AWS_SECRET_ACCESS_KEY")
        self.session_token = env.get("AWS_SESSION_TOKEN") or None

    def pyiceberg_properties(self) -> dict[str, str]:
        """FileIO properties for pyiceberg (pyiceberg.io: s3.*)."""
        properties = {"s3.region": self.region}
        if self.endpoint:
            properties["s3.endpoint"] = self.endpoint
            properties["s3.path-style-access"] = "true"
        if self.key_id:
            properties["s3.access-key-id"] = self.key_id
        if self.secret:
            properties["s3.secret-access-key"] = self.secret
        if self.session_token:
            properties["s3.session-token"] = self.session_token
        return properties

    def duckdb_secret(self) -> str:
        """The CREATE SECRET statement for DuckDB's httpfs."""
        options = ["TYPE s3", f"REGION {quote_literal(self.region)}"]
        if self.key_id:
            options.append(f"KEY_ID {quote_literal(self.key_id)}")
        if self.secret:
            options.append(f"SECRET {quote_literal(self.secret)}")
        if self.session_token:
            options.append(f"SESSION_TOKEN {quote_literal(self.session_token)}")
        if self.endpoint:
            host = re.sub(r"^https?://", "", self.endpoint).rstrip("/")
            use_ssl = "true" if self.endpoint.startswith("https://") else "false"
            options += [f"ENDPOINT {quote_literal(host)}", "URL_STYLE 'path'", f"USE_SSL {use_ssl}"]
        return f"CREATE SECRET table_s3 ({', '.join(options)})"


# ---- value encoding, shared by both readers ----------------------------------


def micros_text(micros: int) -> str:
    """Microseconds since the Unix epoch (UTC) as "YYYY-MM-DDTHH:MM:SS.ffffffZ"."""
    moment = EPOCH + datetime.timedelta(microseconds=micros)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def encode_value(value: Any) -> Any:
    """A Python value from Arrow's to_pylist as a JSON value (for values
    nested in structs, lists and maps; top-level columns go through
    encode_column)."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.UTC).replace(tzinfo=None)
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dict):
        return {key: encode_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_value(item) for item in value]
    return value


def encode_column(column: pa.ChunkedArray) -> list[Any]:
    """One Arrow column as JSON values. Timestamps are converted from their
    integer values, so no time-zone database is needed (pyiceberg gives
    zone "UTC", DuckDB "Etc/UTC"); nanoseconds are cut to microseconds."""
    kind = column.type
    if pa.types.is_timestamp(kind):
        numbers = pc.cast(column, pa.int64()).to_pylist()
        if kind.unit == "ns":
            return [None if n is None else micros_text(n // 1000) for n in numbers]
        scale = MICROS_PER_UNIT[kind.unit]
        return [None if n is None else micros_text(n * scale) for n in numbers]
    return [encode_value(value) for value in column.to_pylist()]


def encode_rows(table: pa.Table) -> list[dict[str, Any]]:
    """TABLE's rows as JSON objects, sorted as the module doc says."""
    names = table.column_names
    columns = [encode_column(table.column(index)) for index in range(table.num_columns)]
    rows = [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]
    if all(name in names for name in SORT_COLUMNS):
        rows.sort(key=row_order)
    return rows


def row_order(row: dict[str, Any]) -> tuple[Any, ...]:
    """Sort key: shard, then sequence number (numerically when it is digits),
    then sub-sequence number (null first)."""
    sequence = row["sequence_number"]
    if isinstance(sequence, str) and sequence.isdigit():
        sequence_key = (0, int(sequence), "")
    else:
        sequence_key = (1, 0, str(sequence))
    sub = row["sub_sequence_number"]
    sub_key = (0, 0) if sub is None else (1, sub)
    return (str(row["shard_id"]), sequence_key, sub_key)


# ---- pyiceberg -----------------------------------------------------------------


def load_table(args: argparse.Namespace, s3: S3Settings) -> Table:
    """The table from the SQL catalog, or from its metadata file; exit 3 when it
    or its namespace is missing."""
    if args.metadata_location:
        return StaticTable.from_metadata(args.metadata_location, s3.pyiceberg_properties())
    if args.catalog == "glue":
        return load_glue_table(args, s3)
    if args.catalog == "s3tables":
        return StaticTable.from_metadata(s3_tables_metadata(args, s3), s3.pyiceberg_properties())
    catalog = SqlCatalog(args.catalog_name, uri=args.catalog_uri, **s3.pyiceberg_properties())
    try:
        return catalog.load_table(args.table)
    except (NoSuchTableError, NoSuchNamespaceError) as error:
        fail(
            f"no table {args.table} in catalog {args.catalog_name} at {args.catalog_uri}: {error}",
            3,
        )


def catalog_endpoint(args: argparse.Namespace, service_variable: str) -> str | None:
    """The endpoint of the Glue or S3 Tables API: --catalog-endpoint, else the
    service's AWS_ENDPOINT_URL_* variable, else AWS_ENDPOINT_URL, else AWS's."""
    env = os.environ
    return args.catalog_endpoint or env.get(service_variable) or env.get("AWS_ENDPOINT_URL") or None


def load_glue_table(args: argparse.Namespace, s3: S3Settings) -> Table:
    """The table from the Glue Data Catalog; exit 3 when it is missing."""
    from pyiceberg.catalog.glue import GlueCatalog

    properties = {"glue.region": s3.region, **s3.pyiceberg_properties()}
    endpoint = catalog_endpoint(args, "AWS_ENDPOINT_URL_GLUE")
    if endpoint:
        properties["glue.endpoint"] = endpoint
    if s3.key_id:
        properties["glue.access-key-id"] = s3.key_id
    if s3.secret:
        properties["glue.secret-access-key"] = s3.secret
    if s3.session_token:
        properties["glue.session-token"] = s3.session_token
    catalog = GlueCatalog(args.catalog_name or "glue", **properties)
    try:
        return catalog.load_table(args.table)
    except (NoSuchTableError, NoSuchNamespaceError) as error:
        fail(f"no table {args.table} in the Glue Data Catalog: {error}", 3)


def s3_tables_metadata(args: argparse.Namespace, s3: S3Settings) -> str:
    """The table's current metadata file, from S3 Tables'
    GetTableMetadataLocation; exit 3 when the table is missing."""
    import boto3

    client = boto3.client(
        "s3tables",
        region_name=s3.region,
        endpoint_url=catalog_endpoint(args, "AWS_ENDPOINT_URL_S3TABLES"),
    )
    namespace, _, name = args.table.rpartition(".")
    try:
        answer = client.get_table_metadata_location(
            tableBucketARN=args.table_bucket_arn, namespace=namespace, name=name
        )
    except client.exceptions.NotFoundException as error:
        fail(f"no table {args.table} in {args.table_bucket_arn}: {error}", 3)
    return answer["metadataLocation"]


def snapshots(table: Table) -> list[dict[str, Any]]:
    """The table's snapshots, oldest first."""
    result = []
    for snapshot in table.metadata.snapshots:
        summary: dict[str, Any] = {}
        operation = None
        if snapshot.summary is not None:
            operation = snapshot.summary.operation.value
            summary = {"operation": operation, **snapshot.summary.additional_properties}
        result.append(
            {
                "snapshot_id": snapshot.snapshot_id,
                "parent_id": snapshot.parent_snapshot_id,
                "sequence_number": snapshot.sequence_number,
                "timestamp_ms": snapshot.timestamp_ms,
                "operation": operation,
                "summary": summary,
            }
        )
    result.sort(key=lambda s: (s["sequence_number"] or 0, s["timestamp_ms"]))
    return result


def data_files(table: Table) -> list[dict[str, Any]]:
    """The live data files of the current snapshot, sorted by path."""
    if table.current_snapshot() is None:
        return []
    files = table.inspect.files()
    paths = files.column("file_path").to_pylist()
    counts = files.column("record_count").to_pylist()
    contents = files.column("content").to_pylist()
    partitions = [encode_value(p) for p in files.column("partition").to_pylist()]
    result = [
        {"path": path, "record_count": count, "partition": partition or {}}
        for path, count, content, partition in zip(paths, counts, contents, partitions, strict=True)
        if content == 0  # 0: data; 1 and 2: delete files
    ]
    result.sort(key=lambda f: f["path"])
    return result


def partition_spec(table: Table) -> list[dict[str, Any]]:
    """The default partition spec's fields."""
    schema = table.schema()
    return [
        {
            "source": schema.find_column_name(field.source_id),
            "source_id": field.source_id,
            "field_id": field.field_id,
            "transform": str(field.transform),
            "name": field.name,
        }
        for field in table.spec().fields
    ]


def schema_fields(table: Table) -> list[dict[str, Any]]:
    """The current schema's top-level fields."""
    return [
        {
            "id": field.field_id,
            "name": field.name,
            "type": str(field.field_type),
            "required": field.required,
        }
        for field in table.schema().fields
    ]


# ---- DuckDB --------------------------------------------------------------------


class Session:
    """A DuckDB connection that reports a failing statement and exits 1."""

    def __init__(self) -> None:
        self.con = duckdb.connect(
            config={
                "autoinstall_known_extensions": "false",
                "autoload_known_extensions": "false",
            }
        )

    def run(self, sql: str) -> duckdb.DuckDBPyConnection:
        """Execute SQL; on an error, exit 1 naming the statement and the error."""
        try:
            return self.con.execute(sql)
        except duckdb.Error as error:
            statement = " ".join(sql.split())
            fail(f"query failed: {statement}\n{type(error).__name__}: {error}")


def extension_dir(session: Session) -> Path:
    """The folder of the pip-installed extension files for this DuckDB."""
    platform = session.run("PRAGMA platform").fetchall()[0][0]
    relative = Path("duckdb_ext", "extensions", f"v{duckdb.__version__}", platform)
    for entry in sys.path:
        candidate = Path(entry or ".") / relative
        if candidate.is_dir():
            return candidate
    fail(
        f"no {relative} on sys.path: install the duckdb-ext-* packages "
        f"matching duckdb {duckdb.__version__}"
    )


def duckdb_rows(metadata_location: str, s3: S3Settings) -> list[dict[str, Any]]:
    """Every row of the table at METADATA_LOCATION, read by DuckDB."""
    session = Session()
    directory = extension_dir(session)
    for name in EXTENSIONS:
        path = directory / f"{name}.duckdb_extension"
        if not path.is_file():
            fail(f"extension file missing: {path}")
        session.run(f"LOAD {quote_literal(str(path))}")
    session.run(s3.duckdb_secret())
    table = session.run(
        f"SELECT * FROM iceberg_scan({quote_literal(metadata_location)})"
    ).fetch_arrow_table()
    return encode_rows(table)


# ---- command line --------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line; bad arguments exit 2 (argparse)."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--catalog", choices=("sql", "glue", "s3tables"), default="sql")
    parser.add_argument("--catalog-uri", help="sql: SQLAlchemy URI, e.g. sqlite:////abs/path.db")
    parser.add_argument("--catalog-endpoint", help="glue, s3tables: the API's endpoint")
    parser.add_argument("--table-bucket-arn", help="s3tables: the table bucket's ARN")
    parser.add_argument("--catalog-name", help="the name the writer gave its catalog")
    parser.add_argument("--table", help="NAMESPACE.TABLE")
    parser.add_argument(
        "--metadata-location",
        help="the table's current metadata file, instead of --catalog-uri, --catalog-name, --table",
    )
    parser.add_argument(
        "--s3-endpoint", help="e.g. http://127.0.0.1:PORT (default: AWS_ENDPOINT_URL_S3)"
    )
    parser.add_argument("--region", help="default: AWS_REGION, else us-east-1")
    args = parser.parse_args(argv)
    if args.metadata_location is not None:
        if args.catalog_uri or args.table:
            parser.error("--metadata-location replaces the catalog and --table")
        return args
    if args.table is None:
        parser.error("--table is required (or --metadata-location)")
    if args.catalog == "sql" and (args.catalog_uri is None or args.catalog_name is None):
        parser.error("--catalog sql needs --catalog-uri and --catalog-name")
    if args.catalog == "s3tables" and args.table_bucket_arn is None:
        parser.error("--catalog s3tables needs --table-bucket-arn")
    return args


def read(args: argparse.Namespace) -> dict[str, Any]:
    """Both readings of the table, as the module doc describes."""
    s3 = S3Settings(args.s3_endpoint, args.region)
    table = load_table(args, s3)
    current = table.current_snapshot()
    result = {
        "metadata_location": table.metadata_location,
        "current_snapshot_id": None if current is None else current.snapshot_id,
        "snapshots": snapshots(table),
        "data_files": data_files(table),
        "partition_spec": partition_spec(table),
        "schema": schema_fields(table),
        "pyiceberg_rows": encode_rows(table.scan().to_arrow()),
    }
    result["duckdb_rows"] = duckdb_rows(table.metadata_location, s3)
    return result


def main(argv: list[str]) -> int:
    """Read, print the result as one JSON document; 0 on success."""
    result = read(parse_args(argv))
    json.dump(result, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
