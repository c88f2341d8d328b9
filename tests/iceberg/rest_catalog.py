#!/usr/bin/env python3
"""A small Iceberg REST catalog server for the end-to-end tests: the REST
protocol in front of a pyiceberg SQL catalog (`SqlCatalog` on a SQLite file).

  rest_catalog.py --port 0 --catalog-uri sqlite:////abs/path.db \\
      --warehouse s3://BUCKET/wh [--catalog-name shardsink] \\
      [--s3-endpoint http://127.0.0.1:PORT] [--region us-east-1]

Run it with the Python of .local/duckdb (the venv read_table.py documents; it
holds pyiceberg[sql-sqlite,pyarrow,pyiceberg-core]==0.12.0). It listens on
127.0.0.1 at --port (0: a free port the system picks), prints

  listening on http://127.0.0.1:PORT

as its first line on stdout (flushed), so that a test can read the port, and
serves until SIGTERM or SIGINT (exit status 0). One line per request goes to
stderr. A table the server writes is an ordinary row of the SQL catalog at
--catalog-uri under --catalog-name, so read_table.py (or any `SqlCatalog` of
that name on that file) reads it as it reads a table shardsink wrote through
the SQL catalog.

Protocol: the Iceberg REST catalog OpenAPI specification,
https://github.com/apache/iceberg/blob/main/open-api/rest-catalog-open-api.yaml,
without a prefix (GET /v1/config returns none), without authentication and
without views. Served:

  GET    /v1/config                              ConfigResponse; the `warehouse`
                                                 query parameter is accepted and
                                                 ignored (the server has one)
  GET    /v1/namespaces[?parent=NS]              ListNamespacesResponse, one page
  POST   /v1/namespaces                          CreateNamespaceRequest → 200
  GET    /v1/namespaces/{ns}                     GetNamespaceResponse
  HEAD   /v1/namespaces/{ns}                     204, or 404
  DELETE /v1/namespaces/{ns}                     204; 409 when it holds tables
  POST   /v1/namespaces/{ns}/properties          UpdateNamespacePropertiesRequest
  GET    /v1/namespaces/{ns}/tables              ListTablesResponse, one page
  POST   /v1/namespaces/{ns}/tables              CreateTableRequest → LoadTableResult
                                                 (stage-create is refused: 400)
  POST   /v1/namespaces/{ns}/register            RegisterTableRequest → LoadTableResult
  GET    /v1/namespaces/{ns}/tables/{table}      LoadTableResult
  HEAD   /v1/namespaces/{ns}/tables/{table}      204, or 404
  DELETE /v1/namespaces/{ns}/tables/{table}      204 (?purgeRequested=true also
                                                 deletes the table's files)
  POST   /v1/namespaces/{ns}/tables/{table}      CommitTableRequest → CommitTableResponse
  POST   /v1/tables/rename                       RenameTableRequest → 204

{ns} is the namespace's levels joined by the unit separator, percent-encoded
(`a%1Fb`); {table} is percent-decoded. A LoadTableResult carries
`metadata-location`, `metadata` (the JSON of the metadata file, as pyiceberg
writes it) and an empty `config`: clients bring their own storage settings.

Everything Iceberg is pyiceberg's: creating a table (fresh ids; the table at
pyiceberg's default location under --warehouse unless the request names one),
and a commit, which is
`SqlCatalog.commit_table` on the requirements and updates parsed with
pyiceberg's `TableRequirement` and `TableUpdate` models — each requirement
checked against the table's current metadata, the updates applied, a new
metadata file written, then the catalog row swapped only if it still names
the metadata file the commit started from. A requirement that fails, or a
swap that finds the row changed, answers 409 CommitFailedException; the
metadata file written by a losing swap is left in place. An update or
requirement type pyiceberg 0.12 does not know answers 400. Requests are
served one at a time (one lock around the catalog), so two commits never
interleave inside this server; the swap still guards against other writers
of the same SQLite file.

Errors use the REST error body, `{"error": {"message", "type", "code"}}`:
404 NoSuchNamespaceException / NoSuchTableException, 409
AlreadyExistsException / NamespaceNotEmptyException / CommitFailedException,
400 BadRequestException (unparsable body, unknown model), 500
ServiceFailureException (anything else; the traceback goes to stderr).

S3 access for the metadata files, as read_table.py: credentials from
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN); the
endpoint from --s3-endpoint, else AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL,
addressed by path; the region from --region, else AWS_REGION, else
AWS_DEFAULT_REGION, else us-east-1.

Exit status: 0 after SIGTERM or SIGINT; 2 for bad arguments; 1 when the
catalog cannot be opened or the port cannot be bound.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any, NoReturn
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import TypeAdapter, ValidationError
from pyiceberg.catalog.rest import CreateTableRequest, RegisterTableRequest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table import Table
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import TableRequirement, TableUpdate
from read_table import S3Settings

PROG = "rest_catalog.py"
NAMESPACE_SEPARATOR = "\x1f"
FIRST_PARTITION_FIELD_ID = 1000  # Iceberg spec, "Partition Specs": ids start at 1000

REQUIREMENTS = TypeAdapter(list[TableRequirement])
UPDATES = TypeAdapter(list[TableUpdate])

Identifier = tuple[str, ...]


class RestError(Exception):
    """An error answered with the REST error body: HTTP STATUS, exception TYPE."""

    def __init__(self, status: HTTPStatus, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message


def bad_request(message: str) -> RestError:
    """A 400 BadRequestException."""
    return RestError(HTTPStatus.BAD_REQUEST, "BadRequestException", message)


def rest_error(error: Exception) -> RestError:
    """The REST error for an exception the SQL catalog raised; any other
    exception is a 500 ServiceFailureException."""
    if isinstance(error, RestError):
        return error
    mapping: list[tuple[type[Exception], HTTPStatus, str]] = [
        (NoSuchTableError, HTTPStatus.NOT_FOUND, "NoSuchTableException"),
        (NoSuchNamespaceError, HTTPStatus.NOT_FOUND, "NoSuchNamespaceException"),
        (TableAlreadyExistsError, HTTPStatus.CONFLICT, "AlreadyExistsException"),
        (NamespaceAlreadyExistsError, HTTPStatus.CONFLICT, "AlreadyExistsException"),
        (NamespaceNotEmptyError, HTTPStatus.CONFLICT, "NamespaceNotEmptyException"),
        (CommitFailedException, HTTPStatus.CONFLICT, "CommitFailedException"),
        (ValidationError, HTTPStatus.BAD_REQUEST, "BadRequestException"),
    ]
    for kind, status, name in mapping:
        if isinstance(error, kind):
            return RestError(status, name, str(error))
    return RestError(
        HTTPStatus.INTERNAL_SERVER_ERROR,
        "ServiceFailureException",
        f"{type(error).__name__}: {error}",
    )


def error_body(error: RestError) -> dict[str, Any]:
    """The REST ErrorModel document for ERROR."""
    return {"error": {"message": error.message, "type": error.kind, "code": int(error.status)}}


def namespace_from_path(segment: str) -> Identifier:
    """A namespace path parameter (levels joined by %1F) as a tuple."""
    levels = tuple(unquote(segment).split(NAMESPACE_SEPARATOR))
    if not all(levels):
        raise bad_request(f"empty namespace level in {segment!r}")
    return levels


def namespace_from_json(value: Any) -> Identifier:
    """A namespace from a request body (a list of levels) as a tuple."""
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise bad_request(f"a namespace is a non-empty list of non-empty strings, not {value!r}")
    return tuple(value)


def table_result(table: Table) -> dict[str, Any]:
    """A LoadTableResult for TABLE."""
    return {
        "metadata-location": table.metadata_location,
        "metadata": json.loads(table.metadata.model_dump_json()),
        "config": {},
    }


class Catalog:
    """The REST operations on one SQL catalog, one at a time."""

    def __init__(self, catalog: SqlCatalog) -> None:
        self.sql = catalog
        self.lock = threading.Lock()

    # ---- namespaces ------------------------------------------------------------

    def list_namespaces(self, query: dict[str, list[str]]) -> dict[str, Any]:
        """GET /v1/namespaces: the namespaces under ?parent (top level without)."""
        parent = namespace_from_path(query["parent"][0]) if "parent" in query else ()
        if parent and not self.sql.namespace_exists(parent):
            raise NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(parent)}")
        return {"namespaces": [list(ns) for ns in self.sql.list_namespaces(parent)]}

    def create_namespace(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST /v1/namespaces: create the namespace with its properties."""
        namespace = namespace_from_json(body.get("namespace"))
        properties = body.get("properties") or {}
        self.sql.create_namespace(namespace, properties)
        return {"namespace": list(namespace), "properties": properties}

    def load_namespace(self, namespace: Identifier) -> dict[str, Any]:
        """GET /v1/namespaces/{ns}: the namespace and its properties."""
        properties = self.sql.load_namespace_properties(namespace)
        return {"namespace": list(namespace), "properties": properties}

    def namespace_exists(self, namespace: Identifier) -> None:
        """HEAD /v1/namespaces/{ns}: nothing, or NoSuchNamespaceError."""
        if not self.sql.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(namespace)}")

    def drop_namespace(self, namespace: Identifier) -> None:
        """DELETE /v1/namespaces/{ns}: drop an empty namespace."""
        self.sql.drop_namespace(namespace)

    def update_namespace_properties(
        self, namespace: Identifier, body: dict[str, Any]
    ) -> dict[str, Any]:
        """POST /v1/namespaces/{ns}/properties: removals, then updates."""
        summary = self.sql.update_namespace_properties(
            namespace,
            removals=set(body.get("removals") or []),
            updates=body.get("updates") or {},
        )
        return {"updated": summary.updated, "removed": summary.removed, "missing": summary.missing}

    # ---- tables ----------------------------------------------------------------

    def list_tables(self, namespace: Identifier) -> dict[str, Any]:
        """GET /v1/namespaces/{ns}/tables: the namespace's tables."""
        identifiers = self.sql.list_tables(namespace)
        return {
            "identifiers": [
                {"namespace": list(identifier[:-1]), "name": identifier[-1]}
                for identifier in identifiers
            ]
        }

    def create_table(self, namespace: Identifier, body: dict[str, Any]) -> dict[str, Any]:
        """POST /v1/namespaces/{ns}/tables: create the table, answer it loaded."""
        # pyiceberg's model requires keys that clients may leave out when empty
        # (iceberg-rust skips location, partition-spec and write-order when
        # None), and an unbound partition spec may leave out field ids, which
        # pyiceberg reassigns anyway.
        body = {"location": None, "partition-spec": None, "write-order": None, **body}
        spec = body["partition-spec"]
        if isinstance(spec, dict):
            fields = [
                {"field-id": FIRST_PARTITION_FIELD_ID + index, **field}
                for index, field in enumerate(spec.get("fields") or [])
            ]
            body["partition-spec"] = {"spec-id": 0, **spec, "fields": fields}
        request = CreateTableRequest.model_validate(body)
        if request.stage_create:
            raise bad_request("stage-create is not supported by this server")
        if not self.sql.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(namespace)}")
        table = self.sql.create_table(
            (*namespace, request.name),
            schema=request.table_schema,
            location=request.location,
            partition_spec=request.partition_spec or UNPARTITIONED_PARTITION_SPEC,
            sort_order=request.write_order or UNSORTED_SORT_ORDER,
            properties=request.properties,
        )
        return table_result(table)

    def register_table(self, namespace: Identifier, body: dict[str, Any]) -> dict[str, Any]:
        """POST /v1/namespaces/{ns}/register: a table for an existing metadata file."""
        request = RegisterTableRequest.model_validate({"overwrite": False, **body})
        if request.overwrite:
            raise bad_request("overwrite is not supported by this server")
        table = self.sql.register_table((*namespace, request.name), request.metadata_location)
        return table_result(table)

    def load_table(self, identifier: Identifier) -> dict[str, Any]:
        """GET /v1/namespaces/{ns}/tables/{table}: the table's current metadata."""
        return table_result(self.sql.load_table(identifier))

    def table_exists(self, identifier: Identifier) -> None:
        """HEAD /v1/namespaces/{ns}/tables/{table}: nothing, or NoSuchTableError."""
        if not self.sql.table_exists(identifier):
            raise NoSuchTableError(f"Table does not exist: {'.'.join(identifier)}")

    def drop_table(self, identifier: Identifier, query: dict[str, list[str]]) -> None:
        """DELETE /v1/namespaces/{ns}/tables/{table}: drop (or purge) the table."""
        if query.get("purgeRequested", ["false"])[0].lower() == "true":
            self.sql.purge_table(identifier)
        else:
            self.sql.drop_table(identifier)

    def commit_table(self, identifier: Identifier, body: dict[str, Any]) -> dict[str, Any]:
        """POST /v1/namespaces/{ns}/tables/{table}: check, apply, swap (module doc)."""
        requirements = REQUIREMENTS.validate_python(body.get("requirements") or [])
        updates = UPDATES.validate_python(body.get("updates") or [])
        table = self.sql.load_table(identifier)
        response = self.sql.commit_table(table, tuple(requirements), tuple(updates))
        return {
            "metadata-location": response.metadata_location,
            "metadata": json.loads(response.metadata.model_dump_json()),
        }

    def rename_table(self, body: dict[str, Any]) -> None:
        """POST /v1/tables/rename: move a table to another identifier."""
        source, destination = body.get("source"), body.get("destination")
        if not isinstance(source, dict) or not isinstance(destination, dict):
            raise bad_request("rename needs source and destination table identifiers")
        self.sql.rename_table(
            (*namespace_from_json(source.get("namespace")), source.get("name")),
            (*namespace_from_json(destination.get("namespace")), destination.get("name")),
        )

    # ---- routing ---------------------------------------------------------------

    def route(
        self, method: str, parts: list[str], query: dict[str, list[str]], body: Any
    ) -> tuple[HTTPStatus, Any]:
        """Serve one request: METHOD on the path PARTS after /v1 (raw,
        still percent-encoded), with QUERY and the parsed JSON BODY. Returns
        the status and the JSON document to answer (None: no body)."""
        ok, empty = HTTPStatus.OK, HTTPStatus.NO_CONTENT
        with self.lock:
            match method, parts:
                case "GET", ["config"]:
                    return ok, {"defaults": {}, "overrides": {}}
                case "GET", ["namespaces"]:
                    return ok, self.list_namespaces(query)
                case "POST", ["namespaces"]:
                    return ok, self.create_namespace(json_object(body))
                case "GET", ["namespaces", ns]:
                    return ok, self.load_namespace(namespace_from_path(ns))
                case "HEAD", ["namespaces", ns]:
                    self.namespace_exists(namespace_from_path(ns))
                    return empty, None
                case "DELETE", ["namespaces", ns]:
                    self.drop_namespace(namespace_from_path(ns))
                    return empty, None
                case "POST", ["namespaces", ns, "properties"]:
                    return ok, self.update_namespace_properties(
                        namespace_from_path(ns), json_object(body)
                    )
                case "GET", ["namespaces", ns, "tables"]:
                    return ok, self.list_tables(namespace_from_path(ns))
                case "POST", ["namespaces", ns, "tables"]:
                    return ok, self.create_table(namespace_from_path(ns), json_object(body))
                case "POST", ["namespaces", ns, "register"]:
                    return ok, self.register_table(namespace_from_path(ns), json_object(body))
                case "GET", ["namespaces", ns, "tables", name]:
                    return ok, self.load_table((*namespace_from_path(ns), unquote(name)))
                case "HEAD", ["namespaces", ns, "tables", name]:
                    self.table_exists((*namespace_from_path(ns), unquote(name)))
                    return empty, None
                case "DELETE", ["namespaces", ns, "tables", name]:
                    self.drop_table((*namespace_from_path(ns), unquote(name)), query)
                    return empty, None
                case "POST", ["namespaces", ns, "tables", name]:
                    return ok, self.commit_table(
                        (*namespace_from_path(ns), unquote(name)), json_object(body)
                    )
                case "POST", ["tables", "rename"]:
                    self.rename_table(json_object(body))
                    return empty, None
        raise RestError(
            HTTPStatus.NOT_FOUND,
            "NoSuchEndpointException",
            f"no endpoint {method} /v1/{'/'.join(parts)}",
        )


def json_object(body: Any) -> dict[str, Any]:
    """BODY when it is a JSON object; else a 400."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return body


class Handler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive: every answer carries its length."""

    protocol_version = "HTTP/1.1"
    server: Server

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self.serve("GET")

    def do_HEAD(self) -> None:  # noqa: N802
        self.serve("HEAD")

    def do_POST(self) -> None:  # noqa: N802
        self.serve("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self.serve("DELETE")

    def serve(self, method: str) -> None:
        """Parse the request, route it, answer it."""
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            try:
                body = json.loads(raw) if raw else None
            except json.JSONDecodeError as error:
                raise bad_request(f"the request body is not JSON: {error}") from error
            parts = url.path.strip("/").split("/")
            if parts[:1] != ["v1"]:
                raise RestError(HTTPStatus.NOT_FOUND, "NoSuchEndpointException", url.path)
            status, document = self.server.catalog.route(
                method, parts[1:], parse_qs(url.query), body
            )
        except Exception as error:  # every failure becomes a REST error answer
            answer = rest_error(error)
            if answer.status == HTTPStatus.INTERNAL_SERVER_ERROR:
                traceback.print_exc(file=sys.stderr)
            status, document = answer.status, error_body(answer)
        self.answer(method, status, document)

    def answer(self, method: str, status: HTTPStatus, document: Any) -> None:
        """Send STATUS and DOCUMENT as JSON (no body for HEAD, 204, or None)."""
        payload = b"" if document is None else json.dumps(document).encode("utf-8")
        self.send_response(status)
        if status != HTTPStatus.NO_CONTENT:
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if method != "HEAD" and status != HTTPStatus.NO_CONTENT:
            self.wfile.write(payload)


class Server(ThreadingHTTPServer):
    """The HTTP server, holding the catalog its handlers serve."""

    daemon_threads = True

    def __init__(self, port: int, catalog: Catalog) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.catalog = catalog


def fail(message: str, status: int = 1) -> NoReturn:
    """Print MESSAGE on stderr with the program's prefix and exit with STATUS."""
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)
    sys.exit(status)


def parse_args() -> argparse.Namespace:
    """The command line (exit 2 when it is wrong)."""
    parser = argparse.ArgumentParser(
        prog=PROG, description="Iceberg REST catalog over a SQL catalog"
    )
    parser.add_argument(
        "--port", type=int, required=True, help="TCP port on 127.0.0.1; 0 picks one"
    )
    parser.add_argument(
        "--catalog-uri", required=True, help="SQLAlchemy URI, sqlite:////abs/path.db"
    )
    parser.add_argument(
        "--warehouse", required=True, help="where new tables go, s3://BUCKET/PATH"
    )
    parser.add_argument("--catalog-name", default="shardsink", help="the SQL catalog's name")
    parser.add_argument("--s3-endpoint", help="S3 endpoint URL")
    parser.add_argument("--region", help="S3 region")
    return parser.parse_args()


def stop(signum: int, _frame: FrameType | None) -> None:
    """SIGTERM/SIGINT: leave serve_forever by raising in the main thread."""
    raise SystemExit(0)


def main() -> int:
    """Serve until SIGTERM or SIGINT."""
    args = parse_args()
    s3 = S3Settings(args.s3_endpoint, args.region)
    try:
        catalog = SqlCatalog(
            args.catalog_name,
            uri=args.catalog_uri,
            warehouse=args.warehouse,
            **s3.pyiceberg_properties(),
        )
        server = Server(args.port, Catalog(catalog))
    except Exception as error:  # noqa: BLE001 (reported, exit 1)
        fail(f"cannot start: {type(error).__name__}: {error}")
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except SystemExit:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
