#!/usr/bin/env python3
"""Drop a table from a SQL catalog, or register a metadata file under a name,
as an operator would through pyiceberg (the tests' stand-in for `DROP TABLE`
without purge, and for restoring a dropped table).

  sql_catalog.py drop --catalog-uri sqlite:////abs/path.db --catalog-name NAME \\
      --table NS.TABLE
  sql_catalog.py register --catalog-uri ... --catalog-name NAME --table NS.TABLE \\
      --metadata-location s3://.../metadata/NNNNN-uuid.metadata.json

`drop` removes the catalog's entry only: the table's files stay in S3.
`register` reads the metadata file (S3 settings as read_table.py takes them:
AWS_ENDPOINT_URL_S3 and the AWS_* credentials) and makes it the table's
current metadata. Prints nothing on success; exits 1 with a message otherwise.
"""

from __future__ import annotations

import argparse
import sys

from pyiceberg.catalog.sql import SqlCatalog

from read_table import S3Settings


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="sql_catalog.py", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("drop", "register"))
    parser.add_argument("--catalog-uri", required=True)
    parser.add_argument("--catalog-name", required=True)
    parser.add_argument("--table", required=True, help="NAMESPACE.TABLE")
    parser.add_argument("--metadata-location", help="register: the metadata file")
    args = parser.parse_args(argv)
    s3 = S3Settings(None, None)
    catalog = SqlCatalog(args.catalog_name, uri=args.catalog_uri, **s3.pyiceberg_properties())
    try:
        if args.action == "drop":
            catalog.drop_table(args.table)
        else:
            if not args.metadata_location:
                parser.error("register needs --metadata-location")
            catalog.register_table(args.table, args.metadata_location)
    except Exception as error:  # noqa: BLE001 - reported to the test as it is
        print(f"sql_catalog.py: {args.action} {args.table}: {error!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
