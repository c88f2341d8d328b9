#!/usr/bin/env python3
"""Query a shardsink archive with DuckDB, straight from S3, as an analyst would.

  query_archive.py --endpoint 127.0.0.1:PORT --bucket B --prefix P \\
      --format envelope|json|raw|parquet --key-layout plain|hive \\
      [--payload-key NAME [--value-member NAME]]

Run it with the Python of a venv that holds the pinned DuckDB packages
(scripts/test installs them into .local/duckdb/ and exports that venv's python
as SHARDSINK_E2E_DUCKDB_PYTHON):

  duckdb==1.4.4 duckdb-ext-httpfs==1.4.4.20260205
  duckdb-ext-json==1.4.4.20260205 duckdb-ext-parquet==1.4.4.20260205

Nothing is downloaded at run time: extension auto-install and auto-load are
off, and the httpfs, json and parquet extensions are each loaded with
`LOAD '<file>'` from the extension packages'
`site-packages/duckdb_ext/extensions/v<version>/<platform>/` (json and parquet
are also built into the duckdb wheel; loading their files then changes
nothing). Credentials are the local servers' dummy ones (`test`/`test`,
us-east-1), addressed by path, over plain HTTP.

The query a user would run, per format. Globs under s3://B/P/ (`**/*.jsonl*`,
`**/*.parquet`, `**/*.raw*`) match data objects only: not `P/_shardsink.json`,
and not error objects, which live under `P-errors/`.

  envelope  read_json('s3://B/P/**/*.jsonl*', format='newline_delimited'): one
            row per record; shardId, sequenceNumber[, subSequenceNumber],
            approximateArrivalTimestamp; the payload is
            decode(from_base64(data)). gzip and zstd are read by extension.
  json      the same read_json: the payload's members as columns, the metadata
            as the struct `_kinesis` (_kinesis.shardId, _kinesis.sequenceNumber,
            ...).
  parquet   read_parquet('s3://B/P/**/*.parquet'): shard_id, sequence_number,
            sub_sequence_number, approximate_arrival_timestamp, data (the
            payload is decode(data)); written with a schema, the payload's
            members are typed columns instead of data.
  raw       read_blob('s3://B/P/**/*.raw*') for the objects and their bytes.
            Raw objects hold no metadata: records are counted by reading them
            with read_json as newline-delimited JSON (decompressed by
            extension), which holds when the payloads are single-line JSON and
            the record delimiter is `\\n`; the shard is taken from each key.

With `--key-layout hive` each read passes hive_partitioning=true (false for
plain), and the partition columns are those the hive read has and the plain
read of the same objects has not.

Prints one JSON object on stdout:

  format, keyLayout, source (the glob)
  queries                 the SQL run: objects (read_blob), records (the
                          user's read, view `archive`), normalised (the
                          columns compared, view `records`)
  objects, bytes          objects matched and their total size (read_blob)
  columns                 the user's read's columns and their types, as
                          DuckDB gives them ({name: type})
  rows                    rows the read returned (records; raw: payload lines)
  distinctRecords         distinct (shard, sequenceNumber, subSequenceNumber);
                          null for raw
  shards                  {shardId: {"rows": N, "sequenceNumbers": [distinct,
                          sorted numerically]}}; for raw the list is empty
  partitionColumns        hive only: the partition columns DuckDB added
  partitionTypes          hive only: their types. DuckDB's hive_types_autocast
                          makes a column BIGINT only when every value reads
                          back the same as a number: `month=11` gives BIGINT,
                          `month=03` VARCHAR '03' (pass hive_types for fixed
                          types)
  partitions              hive only: per object, its key, the partition
                          values DuckDB gave its rows (JSON numbers or text,
                          as DuckDB typed them), its row count, and the
                          first and last arrival time of its rows
                          (YYYY-MM-DDTHH:MM:SS.mmmZ, UTC; null for raw)
  payloadKeys             with --payload-key NAME: the sorted distinct values
                          of member NAME of the JSON payloads (as text)
  values                  with --value-member NAME too: {payload key: member
                          NAME of that payload, as text} (from the typed
                          column of that name when the read has one)
  extensions              {name: how DuckDB reports it loaded}

An archive with no matching object yet is not an error: objects 0, rows 0.
Any query error is: the failing SQL and DuckDB's message go to stderr, exit
status 1. Bad arguments: exit status 2.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

import duckdb

PROG = "query_archive.py"
EXTENSIONS = ("httpfs", "json", "parquet")
ARRIVAL_FORMAT = "%Y-%m-%dT%H:%M:%S.%gZ"


def fail(message: str) -> NoReturn:
    """Print MESSAGE on stderr with the program's prefix and exit 1."""
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def quote_literal(text: str) -> str:
    """TEXT as an SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def quote_ident(name: str) -> str:
    """NAME as an SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


class Session:
    """A DuckDB connection that reports a failing statement and exits."""

    def __init__(self) -> None:
        self.con = duckdb.connect(
            config={
                "autoinstall_known_extensions": "false",
                "autoload_known_extensions": "false",
            }
        )

    def run(self, sql: str) -> list[tuple[Any, ...]]:
        """Execute SQL and return all its rows; on an error, exit 1 naming both."""
        try:
            return self.con.execute(sql).fetchall()
        except duckdb.Error as error:
            statement = " ".join(sql.split())
            fail(f"query failed: {statement}\n{type(error).__name__}: {error}")

    def columns(self, relation: str) -> dict[str, str]:
        """The column names of RELATION (a view or a table function call), in
        order, with their types."""
        rows = self.run(f"DESCRIBE SELECT * FROM {relation}")
        return {name: column_type for name, column_type, *_rest in rows}


def extension_dir(session: Session) -> Path:
    """The folder of the pip-installed extension files for this DuckDB."""
    platform = session.run("PRAGMA platform")[0][0]
    relative = Path("duckdb_ext", "extensions", f"v{duckdb.__version__}", platform)
    for entry in sys.path:
        candidate = Path(entry or ".") / relative
        if candidate.is_dir():
            return candidate
    fail(
        f"no {relative} on sys.path: install duckdb-ext-httpfs, duckdb-ext-json and "
        f"duckdb-ext-parquet matching duckdb {duckdb.__version__} into this Python"
    )


def load_extensions(session: Session, directory: Path) -> dict[str, str]:
    """LOAD each extension from its file; return how DuckDB reports each."""
    for name in EXTENSIONS:
        path = directory / f"{name}.duckdb_extension"
        if not path.is_file():
            fail(f"extension file missing: {path}")
        session.run(f"LOAD {quote_literal(str(path))}")
    names = ", ".join(quote_literal(name) for name in EXTENSIONS)
    rows = session.run(
        "SELECT extension_name, loaded, install_mode FROM duckdb_extensions() "
        f"WHERE extension_name IN ({names}) ORDER BY extension_name"
    )
    loaded = {
        name: f"{'loaded' if is_loaded else 'not loaded'} ({mode})"
        for name, is_loaded, mode in rows
    }
    missing = [name for name in EXTENSIONS if not loaded.get(name, "").startswith("loaded")]
    if missing:
        fail(f"extensions not loaded after LOAD: {', '.join(missing)}")
    return loaded


def create_secret(session: Session, endpoint: str) -> None:
    """The S3 secret for the server at ENDPOINT (host:port, or http[s]://host:port)."""
    use_ssl = endpoint.startswith("https://")
    host = re.sub(r"^https?://", "", endpoint).rstrip("/")
    session.run(
        "CREATE SECRET archive_s3 (TYPE s3, KEY_ID 'test', SECRET 'test', "
        f"REGION 'us-east-1', ENDPOINT {quote_literal(host)}, URL_STYLE 'path', "
        f"USE_SSL {'true' if use_ssl else 'false'})"
    )


def reader_call(fmt: str, source: str, hive: bool) -> str:
    """The table function call a user would write to read SOURCE in format FMT."""
    options = f"filename=true, hive_partitioning={'true' if hive else 'false'}"
    if fmt == "parquet":
        return f"read_parquet({quote_literal(source)}, {options})"
    # envelope, json, and raw payloads read as JSON lines.
    return f"read_json({quote_literal(source)}, format='newline_delimited', {options})"


def arrival_text(expression: str) -> str:
    """EXPRESSION (text, TIMESTAMP or TIMESTAMPTZ) as UTC text with milliseconds."""
    return f"strftime(timezone('UTC', CAST({expression} AS TIMESTAMPTZ)), '{ARRIVAL_FORMAT}')"


def payload_member(fmt: str, columns: dict[str, str], name: str | None) -> str:
    """The expression of member NAME of the payload in the user's read of FMT:
    decoded from the payload bytes (envelope; parquet with a data column), or
    the read's own column (json, raw read as JSON lines, parquet with typed
    columns). NULL without NAME."""
    if name is None:
        return "NULL"
    path = quote_literal(f'$."{name}"')
    if fmt == "envelope":
        return f"json_extract_string(decode(from_base64(data)), {path})"
    if fmt == "parquet" and "data" in columns:
        return f"json_extract_string(decode(data), {path})"
    return quote_ident(name)


def normalised_columns(
    fmt: str,
    columns: dict[str, str],
    metadata: set[str],
    payload_key: str | None,
    value_member: str | None,
) -> str:
    """SELECT list turning the user's read of FMT into shard_id, sequence_number,
    sub_sequence_number, arrival, payload_key, value, filename. COLUMNS: the
    read's columns; METADATA: the members of json's `_kinesis`."""
    payload = payload_member(fmt, columns, payload_key)
    if fmt == "envelope":
        sub = "subSequenceNumber" if "subSequenceNumber" in columns else "NULL"
        select = [
            "shardId",
            "sequenceNumber",
            sub,
            arrival_text("approximateArrivalTimestamp"),
        ]
    elif fmt == "json":
        meta = "_kinesis"
        sub = f"{meta}.subSequenceNumber" if "subSequenceNumber" in metadata else "NULL"
        select = [
            f"{meta}.shardId",
            f"{meta}.sequenceNumber",
            sub,
            arrival_text(f"{meta}.approximateArrivalTimestamp"),
        ]
    elif fmt == "parquet":
        select = [
            "shard_id",
            "sequence_number",
            "sub_sequence_number",
            arrival_text("approximate_arrival_timestamp"),
        ]
    else:  # raw: no metadata in the objects; the shard is in the key.
        select = [
            r"regexp_extract(filename, '/(shardId-[0-9]+)/[^/]*$', 1)",
            "NULL",
            "NULL",
            "NULL",
        ]
    shard, sequence, sub, arrival = select
    value = payload_member(fmt, columns, value_member)
    return ", ".join(
        [
            f"CAST({shard} AS VARCHAR) AS shard_id",
            f"CAST({sequence} AS VARCHAR) AS sequence_number",
            f"CAST({sub} AS BIGINT) AS sub_sequence_number",
            f"CAST({arrival} AS VARCHAR) AS arrival",
            f"CAST({payload} AS VARCHAR) AS payload_key",
            f"CAST({value} AS VARCHAR) AS value",
            "filename",
        ]
    )


def struct_members(session: Session, relation: str, column: str) -> set[str]:
    """The member names of STRUCT column COLUMN of RELATION."""
    rows = session.run(f"DESCRIBE SELECT {quote_ident(column)}.* FROM {relation}")
    return {row[0] for row in rows}


def query(args: argparse.Namespace) -> dict[str, Any]:
    """Run the user's query for ARGS and summarise it (see the module docstring)."""
    session = Session()
    session.run("SET TimeZone = 'UTC'")
    extensions = load_extensions(session, extension_dir(session))
    create_secret(session, args.endpoint)

    ext = {"envelope": "jsonl", "json": "jsonl", "raw": "raw", "parquet": "parquet"}[args.format]
    pattern = f"*.{ext}" if args.format == "parquet" else f"*.{ext}*"
    source = f"s3://{args.bucket}/{args.prefix + '/' if args.prefix else ''}**/{pattern}"
    hive = args.key_layout == "hive"
    read = reader_call(args.format, source, hive)

    result: dict[str, Any] = {
        "format": args.format,
        "keyLayout": args.key_layout,
        "source": source,
        "extensions": extensions,
    }
    objects_sql = (
        f"SELECT count(*), coalesce(sum(size), 0) FROM read_blob({quote_literal(source)})"
    )
    result["queries"] = {"objects": objects_sql, "records": f"SELECT * FROM {read}"}
    objects, size = session.run(objects_sql)[0]
    result["objects"] = objects
    result["bytes"] = int(size)
    if objects == 0:
        result.update(
            rows=0, distinctRecords=0 if args.format != "raw" else None, shards={}, columns={}
        )
        if hive:
            result.update(partitionColumns=[], partitionTypes={}, partitions=[])
        if args.payload_key:
            result["payloadKeys"] = []
        if args.value_member:
            result["values"] = {}
        return result

    session.run(f"CREATE VIEW archive AS SELECT * FROM {read}")
    columns = session.columns("archive")
    metadata: set[str] = set()
    if args.format == "json":
        if "_kinesis" not in columns:
            fail(f"json objects have no _kinesis column; columns: {list(columns)}")
        metadata = struct_members(session, "archive", "_kinesis")
    partition_columns: list[str] = []
    if hive:
        plain_columns = session.columns(reader_call(args.format, source, False))
        partition_columns = [c for c in columns if c not in plain_columns]
    result["columns"] = columns
    select = normalised_columns(
        args.format, columns, metadata, args.payload_key, args.value_member
    )
    extra = "".join(f", {quote_ident(c)}" for c in partition_columns)
    records_sql = f"SELECT {select}{extra} FROM archive"
    result["queries"]["normalised"] = records_sql
    session.run(f"CREATE VIEW records AS {records_sql}")

    result["rows"] = session.run("SELECT count(*) FROM records")[0][0]
    if args.format == "raw":
        result["distinctRecords"] = None
        rows = session.run("SELECT shard_id, count(*) FROM records GROUP BY ALL ORDER BY 1")
        result["shards"] = {shard: {"rows": n, "sequenceNumbers": []} for shard, n in rows}
    else:
        result["distinctRecords"] = session.run(
            "SELECT count(*) FROM "
            "(SELECT DISTINCT shard_id, sequence_number, sub_sequence_number FROM records)"
        )[0][0]
        rows = session.run(
            "SELECT shard_id, sum(n), "
            "list(sequence_number ORDER BY length(sequence_number), sequence_number) "
            "FROM (SELECT shard_id, sequence_number, count(*) AS n FROM records GROUP BY ALL) "
            "GROUP BY shard_id ORDER BY shard_id"
        )
        result["shards"] = {
            shard: {"rows": int(n), "sequenceNumbers": seqs} for shard, n, seqs in rows
        }

    if hive:
        result["partitionColumns"] = partition_columns
        result["partitionTypes"] = {c: columns[c] for c in partition_columns}
        values = "".join(f"{quote_ident(c)}, " for c in partition_columns)
        rows = session.run(
            f"SELECT filename, {values}count(*), min(arrival), max(arrival) "
            "FROM records GROUP BY ALL ORDER BY filename"
        )
        partitions = []
        for row in rows:
            filename, *parts, count, first, last = row
            partitions.append(
                {
                    "key": filename.removeprefix(f"s3://{args.bucket}/"),
                    "values": dict(zip(partition_columns, map(json_value, parts))),
                    "rows": count,
                    "firstArrival": first,
                    "lastArrival": last,
                }
            )
        result["partitions"] = partitions

    if args.payload_key:
        rows = session.run(
            "SELECT DISTINCT payload_key FROM records WHERE payload_key IS NOT NULL ORDER BY 1"
        )
        result["payloadKeys"] = [row[0] for row in rows]
    if args.value_member:
        rows = session.run(
            "SELECT payload_key, value FROM records WHERE payload_key IS NOT NULL ORDER BY 1"
        )
        result["values"] = dict(rows)
    return result


def json_value(value: Any) -> Any:
    """VALUE as JSON can hold it: numbers, text and null as they are, others as text."""
    return value if value is None or isinstance(value, (int, float, str)) else str(value)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line (see the module docstring); exit 2 when it is wrong."""
    parser = argparse.ArgumentParser(prog=PROG, description="Query a shardsink archive.")
    parser.add_argument("--endpoint", required=True, help="S3 host:port or http://host:port")
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--prefix", required=True, help="the daemon's --prefix (may be empty)")
    parser.add_argument("--format", required=True, choices=("envelope", "json", "raw", "parquet"))
    parser.add_argument("--key-layout", required=True, choices=("plain", "hive"))
    parser.add_argument("--payload-key", help="report the distinct values of this payload member")
    parser.add_argument(
        "--value-member", help="with --payload-key: report this member of each payload"
    )
    args = parser.parse_args(argv)
    name = r"[A-Za-z_][A-Za-z0-9_]*"
    members = (("--payload-key", args.payload_key), ("--value-member", args.value_member))
    for option, value in members:
        if value is not None and not re.fullmatch(name, value):
            parser.error(f"{option} must be a plain member name ({name})")
    if args.value_member is not None and args.payload_key is None:
        parser.error("--value-member needs --payload-key")
    args.prefix = args.prefix.rstrip("/")
    return args


def main(argv: list[str]) -> int:
    """Query, print the summary as one JSON object; 0 on success."""
    result = query(parse_args(argv))
    json.dump(result, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
