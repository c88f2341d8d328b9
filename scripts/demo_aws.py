"""AWS side of scripts/demo: create a stream and bucket, produce records, and
check the archive shardsink wrote. Runs with the moto venv's Python, which
scripts/local-servers installs with boto3, zstandard and pyarrow; endpoints
come from the AWS_ENDPOINT_URL_* variables of the local-servers env file.

    demo_aws.py setup STREAM BUCKET SHARDS
    demo_aws.py produce STREAM COUNT LOGFILE        # appends "shard TAB seq TAB base64" lines
    demo_aws.py wait-objects BUCKET STREAM COUNT SECONDS
    demo_aws.py verify BUCKET STREAM LOGFILE [--wait SECONDS]

`verify` reads the archive the way a user of it would, independently of the
daemon's code, and whatever settings the daemon ran with (the SHARDSINK_*
variables it was started with are in the environment): the prefixes are
resolved as the daemon resolves them (SHARDSINK_PREFIX, else the stream
name; SHARDSINK_ERROR_PREFIX, else PREFIX-errors; SHARDSINK_DUPLICATES_PREFIX,
else PREFIX-duplicates), the key layout is read from PREFIX/_shardsink.json,
and each object's format from its key and its x-amz-meta-shardsink-format.

Every key in the bucket must be one of:
- PREFIX/_shardsink.json, the key layout record (reported; not data);
- a data object PREFIX/{time path}/{shard}/{sorter}-{first}-{last}{ext} in
  that layout: .jsonl (envelope or json lines), .raw, each with .gz or .zst,
  or .parquet;
- an error object under the error prefix or a duplicates object under the
  duplicates prefix (envelope lines with errorMessage or duplicateOf), with
  the same time path, shard and range as their batch's main object;
- a decisions object PREFIX/_events/{time path}/{shard}/{name}.events.zst
  (with SHARDSINK_EVENT_ID): one line per record of its batch, whose
  sequence numbers must be exactly the batch's records in the main, error
  and duplicates objects, those with outcome "duplicate" exactly the ones
  in the duplicates object;
- a retention gap marker PREFIX/_retention-gaps/{shard}/{position}.json
  (reported: records expired before they were read).

Each record is identified by its shard and sequence number and compared
with the payload produced: envelope lines by `data`, json lines by the
payload's JSON value (metadata under the member x-amz-meta-shardsink-format
names), Parquet rows by the `data` column (with --parquet-schema there is no
`data` column, and rows are identified without their payload). Each record
must lie in its key's shard, [first, last] range and time path (the UTC
minute or hour of its approximateArrivalTimestamp).

Raw objects (and json objects written without metadata) carry no record
metadata. Their records are taken to be the produced records of the key's
shard whose sequence numbers lie in the key's [first, last] (compared as
numbers), less those in the same batch's error and duplicates objects, in
sequence order; the check is that the body is exactly those payloads (json:
those payloads' JSON values, one a line), each followed by the delimiter
that x-amz-meta-shardsink-format names, and that x-amz-meta-shardsink-records
equals their count. A raw object that does not match identifies no record,
so its records are then reported missing.

The archive is exact when every produced record is found exactly once
across the main, error and duplicates prefixes, no record is found that was
not produced, and every object, batch and key passes the checks above.
"""

import base64
import datetime
import gzip
import io
import json
import os
import re
import sys
import time

import boto3
from botocore.config import Config


def clients():
    s3 = boto3.client("s3", config=Config(s3={"addressing_style": "path"}))
    return boto3.client("kinesis"), s3


def setup(stream, bucket, shards):
    kinesis, s3 = clients()
    kinesis.create_stream(StreamName=stream, ShardCount=int(shards))
    kinesis.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 1})
    s3.create_bucket(Bucket=bucket)
    print(f"created stream {stream} ({shards} shards) and bucket {bucket}")


def payload(i):
    """The i-th record's payload: binary, empty, or a JSON object."""
    if i % 10 == 0:
        return os.urandom(64)
    if i % 10 == 1:
        return b""
    return json.dumps({"order": i, "item": "book", "note": "quote \" and é"}).encode()


def produce(stream, count, logfile):
    kinesis, _ = clients()
    count = int(count)
    with open(logfile, "a") as log:
        sent = 0
        while sent < count:
            n = min(500, count - sent)
            data = [payload(i) for i in range(sent, sent + n)]
            entries = [
                {"Data": d, "PartitionKey": f"customer-{i % 97}"}
                for i, d in zip(range(sent, sent + n), data)
            ]
            result = kinesis.put_records(StreamName=stream, Records=entries)
            for entry, d in zip(result["Records"], data):
                if "SequenceNumber" not in entry:
                    sys.exit(f"put_records failed for an entry: {entry}")
                encoded = base64.b64encode(d).decode()
                log.write(f"{entry['ShardId']}\t{entry['SequenceNumber']}\t{encoded}\n")
            sent += n
    print(f"produced {count} records to {stream}")


# --- settings -----------------------------------------------------------------


class Prefixes:
    """The three prefixes, resolved from the daemon's variables as it does."""

    def __init__(self, stream):
        self.main = os.environ.get("SHARDSINK_PREFIX", stream).strip("/")
        self.errors = os.environ.get("SHARDSINK_ERROR_PREFIX") or f"{self.main}-errors"
        self.duplicates = os.environ.get("SHARDSINK_DUPLICATES_PREFIX") or f"{self.main}-duplicates"
        self.errors = self.errors.strip("/")
        self.duplicates = self.duplicates.strip("/")

    @staticmethod
    def under(key, prefix):
        """KEY relative to PREFIX, or None when outside it."""
        if not prefix:
            return key
        return key[len(prefix) + 1 :] if key.startswith(prefix + "/") else None


# --- keys ---------------------------------------------------------------------

NAME = re.compile(r"^([0-9]+)-([0-9]+)-([0-9]+)(\..+)$")
DATA_EXTENSIONS = {
    ".jsonl": ("lines", None),
    ".jsonl.gz": ("lines", "gzip"),
    ".jsonl.zst": ("lines", "zstd"),
    ".raw": ("raw", None),
    ".raw.gz": ("raw", "gzip"),
    ".raw.zst": ("raw", "zstd"),
    ".parquet": ("parquet", None),
}
DECISIONS_EXTENSION = ".events.zst"


class BadKey(Exception):
    """A key the daemon does not write."""


def decode_number(form):
    """A length-prefixed number (3 digits of length, then the digits) as an int."""
    length, digits = form[:3], form[3:]
    if len(form) < 4 or int(length) != len(digits):
        raise BadKey(f"bad length-prefixed number {form!r}")
    return int(digits)


def parse_name(name):
    """(first, last, extension) of `{sorter}-{first}-{last}{ext}`."""
    match = NAME.match(name)
    if not match:
        raise BadKey(f"not a batch name: {name!r}")
    sorter, first_form, last_form, extension = match.groups()
    if sorter != "".join(str(9 - int(c)) for c in first_form):
        raise BadKey(f"sorter is not the nines' complement of first: {name!r}")
    first, last = decode_number(first_form), decode_number(last_form)
    if first > last:
        raise BadKey(f"first > last: {name!r}")
    return first, last, extension


def time_path(millis, layout):
    """The time path of an arrival time (epoch milliseconds) in LAYOUT."""
    t = datetime.datetime.fromtimestamp(millis / 1000, tz=datetime.timezone.utc)
    parts = [("year", f"{t.year:04}"), ("month", f"{t.month:02}"), ("day", f"{t.day:02}"), ("hour", f"{t.hour:02}")]
    if layout["timeBucket"] == "minute":
        parts.append(("minute", f"{t.minute:02}"))
    if layout["keyLayout"] == "hive":
        return "/".join(f"{name}={value}" for name, value in parts)
    return "/".join(value for _, value in parts)


def split_batch_key(relative, layout):
    """(time path, shard, name) of a key relative to its prefix, checked against LAYOUT."""
    segments = relative.split("/")
    depth = 4 if layout["timeBucket"] == "hour" else 5
    if len(segments) != depth + 2:
        raise BadKey(f"not {depth} time segments, a shard and a name")
    path = segments[:depth]
    names = ["year", "month", "day", "hour", "minute"][:depth]
    if layout["keyLayout"] == "hive":
        values = []
        for name, segment in zip(names, path):
            if not segment.startswith(name + "="):
                raise BadKey(f"not a hive key: {segment!r} is not {name}=…")
            values.append(segment[len(name) + 1 :])
    else:
        values = path
    if not all(v.isdigit() for v in values):
        raise BadKey(f"time path {'/'.join(path)!r} is not numbers")
    if not segments[depth].startswith("shardId-"):
        raise BadKey(f"{segments[depth]!r} is not a shard id")
    return "/".join(path), segments[depth], segments[depth + 1]


# --- bodies -------------------------------------------------------------------


def decompress(body, codec):
    if codec == "gzip":
        return gzip.decompress(body)
    if codec == "zstd":
        try:
            import zstandard
        except ImportError:
            sys.exit("zstd objects need the zstandard package (scripts/local-servers installs it into .local/venv-moto)")
        return zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body), read_across_frames=True).read()
    return body


def same_json_lines(body, payloads):
    """Whether BODY's lines are the JSON values of PAYLOADS, in order."""
    lines = body.decode().splitlines()
    if len(lines) != len(payloads):
        return False
    try:
        return all(json.loads(line) == json.loads(p) for line, p in zip(lines, payloads))
    except ValueError:
        return False


def parquet_rows(body):
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        sys.exit("Parquet objects need the pyarrow package (scripts/local-servers installs it into .local/venv-moto)")
    return pq.read_table(pa.BufferReader(body)).to_pylist()


def arrival_millis(value):
    """Epoch milliseconds of an RFC 3339 text or a datetime (Parquet)."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return round(value.timestamp() * 1000)
    return round(datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)


def format_setting(description):
    """(name, {setting: value}) of an x-amz-meta-shardsink-format text."""
    name, _, rest = (description or "").partition(";")
    settings = dict(part.split("=", 1) for part in rest.split(";") if "=" in part)
    return name, settings


# --- the archive --------------------------------------------------------------


class Archive:
    """What one reading of the bucket found."""

    def __init__(self):
        self.layout = None
        self.seen = {}  # (shard, seq) -> [key, ...]
        self.problems = []
        self.objects = {"main": 0, "errors": 0, "duplicates": 0, "decisions": 0}
        self.formats = {}
        self.gaps = []
        self.batches = {}  # (shard, first, last) -> {"main": [...], "errors": [...], "duplicates": [...]}
        self.main_batches = set()  # (shard, first, last) of every main object, empty ones too
        self.decisions = {}  # (shard, first, last) -> (key, [(seq, outcome)])
        self.sample = None

    def problem(self, text):
        self.problems.append(text)

    def found(self, identity, key, where, batch):
        self.seen.setdefault(identity, []).append(key)
        self.batches.setdefault(batch, {"main": [], "errors": [], "duplicates": []})[where].append(identity[1])


class Reader:
    """Reads every key of the bucket into an Archive."""

    def __init__(self, s3, bucket, prefixes, produced):
        self.s3, self.bucket, self.prefixes, self.produced = s3, bucket, prefixes, produced
        self.by_shard = {}
        for (shard, seq), data in produced.items():
            self.by_shard.setdefault(shard, []).append((int(seq), seq, data))
        for records in self.by_shard.values():
            records.sort()

    def keys(self):
        paginator = self.s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket):
            for obj in page.get("Contents", []):
                yield obj["Key"]

    def get(self, key):
        response = self.s3.get_object(Bucket=self.bucket, Key=key)
        return response["Body"].read(), response.get("Metadata", {})

    def read(self):
        archive = Archive()
        keys = sorted(self.keys())
        marker = self.marker_key()
        if marker in keys:
            self.read_marker(archive, marker)
        else:
            archive.problem(f"no key layout record {marker}")
            archive.layout = {"keyLayout": "plain", "timeBucket": "minute"}
        anonymous = []
        for key in keys:
            if key == marker:
                continue
            try:
                later = self.read_key(archive, key)
            except BadKey as error:
                archive.problem(f"{key}: {error}")
                continue
            if later:
                anonymous.append(later)
        # Raw (and json without metadata) last: their records are what the
        # batch's error and duplicates objects do not hold.
        for later in anonymous:
            self.match_anonymous(archive, *later)
        self.check_batches(archive)
        return archive

    def marker_key(self):
        return f"{self.prefixes.main}/_shardsink.json" if self.prefixes.main else "_shardsink.json"

    def read_marker(self, archive, key):
        body, _ = self.get(key)
        try:
            layout = json.loads(body)
            assert layout["keyLayout"] in ("plain", "hive") and layout["timeBucket"] in ("minute", "hour")
        except (ValueError, KeyError, AssertionError):
            archive.problem(f"{key} is not a key layout record: {body[:200]!r}")
            layout = {"keyLayout": "plain", "timeBucket": "minute"}
        archive.layout = layout

    def read_key(self, archive, key):
        """Reads one key; returns the arguments of match_anonymous for a
        body without record metadata, else None."""
        for where, prefix in (("errors", self.prefixes.errors), ("duplicates", self.prefixes.duplicates)):
            relative = Prefixes.under(key, prefix)
            if relative is not None:
                self.read_side_object(archive, key, relative, where)
                return None
        relative = Prefixes.under(key, self.prefixes.main)
        if relative is None:
            raise BadKey("outside the prefixes")
        if relative.startswith("_retention-gaps/"):
            body, _ = self.get(key)
            archive.gaps.append((key, body.decode(errors="replace")))
            return None
        if relative.startswith("_events/"):
            self.read_decisions(archive, key, relative[len("_events/") :])
            return None
        return self.read_main_object(archive, key, relative)

    def batch_of(self, archive, relative, extensions):
        path, shard, name = split_batch_key(relative, archive.layout)
        first, last, extension = parse_name(name)
        if extension not in extensions:
            raise BadKey(f"unknown extension {extension!r}")
        return path, shard, first, last, extension

    def read_side_object(self, archive, key, relative, where):
        lines_only = {e: v for e, v in DATA_EXTENSIONS.items() if v[0] == "lines"}
        path, shard, first, last, extension = self.batch_of(archive, relative, lines_only)
        archive.objects[where] += 1
        body, _ = self.get(key)
        field = "errorMessage" if where == "errors" else "duplicateOf"
        for line in decompress(body, DATA_EXTENSIONS[extension][1]).decode().splitlines():
            record = json.loads(line)
            if field not in record:
                archive.problem(f"{key}: a line without {field}")
            self.check_envelope(archive, key, record, path, shard, first, last, where)

    def read_main_object(self, archive, key, relative):
        path, shard, first, last, extension = self.batch_of(archive, relative, DATA_EXTENSIONS)
        archive.objects["main"] += 1
        archive.main_batches.add((shard, first, last))
        shape, codec = DATA_EXTENSIONS[extension]
        body, metadata = self.get(key)
        description = metadata.get("shardsink-format", "")
        name, settings = format_setting(description)
        kind = f"{description or '(no format metadata)'} {extension}"
        archive.formats[kind] = archive.formats.get(kind, 0) + 1
        count = metadata.get("shardsink-records")
        if shape == "parquet":
            rows = parquet_rows(body)
            self.check_count(archive, key, count, len(rows))
            for row in rows:
                self.check_row(archive, key, row, path, shard, first, last)
            return None
        body = decompress(body, codec)
        if shape == "raw":
            if name != "raw" or "delimiter" not in settings:
                archive.problem(f"{key}: a raw object whose format is {description!r}")
                return None
            return (key, shard, first, last, bytes.fromhex(settings["delimiter"]), "raw", body, count)
        lines = body.decode().splitlines()
        self.check_count(archive, key, count, len(lines))
        if name == "json" and "metadata-field" not in settings:
            return (key, shard, first, last, None, "json", body, count)
        for line in lines:
            record = json.loads(line)
            if name == "json":
                self.check_json(archive, key, record, settings["metadata-field"], path, shard, first, last)
            else:
                self.check_envelope(archive, key, record, path, shard, first, last, "main")
        return None

    def check_count(self, archive, key, stored, actual):
        if stored is not None and int(stored) != actual:
            archive.problem(f"{key}: x-amz-meta-shardsink-records {stored}, {actual} records in the body")

    def place(self, archive, key, where, identity, millis, path, shard, first, last, data):
        """Records one identified record and checks where it is and what it holds."""
        record_shard, seq = identity
        if record_shard != shard:
            archive.problem(f"{key}: a record of {record_shard}")
        if not first <= int(seq) <= last:
            archive.problem(f"{key}: sequence number {seq} outside [{first}, {last}]")
        if millis is not None and time_path(millis, archive.layout) != path:
            archive.problem(f"{key}: {seq} arrived at {millis} ms, not in {path}")
        expected = self.produced.get(identity)
        if expected is not None and data is not None and data != expected:
            archive.problem(f"{key}: {seq} holds other bytes than were produced")
        archive.found(identity, key, where, (shard, first, last))

    def check_envelope(self, archive, key, record, path, shard, first, last, where):
        if "subSequenceNumber" in record:
            archive.problem(f"{key}: a KPL user record, which the demo does not produce")
        data = base64.b64decode(record["data"], validate=True)
        identity = (record["shardId"], record["sequenceNumber"])
        millis = arrival_millis(record["approximateArrivalTimestamp"])
        if archive.sample is None and where == "main":
            archive.sample = (key, json.dumps(record)[:160])
        self.place(archive, key, where, identity, millis, path, shard, first, last, data)

    def check_json(self, archive, key, record, field, path, shard, first, last):
        meta = record.pop(field, None)
        if not isinstance(meta, dict):
            archive.problem(f"{key}: a line without its {field!r} member")
            return
        identity = (meta["shardId"], meta["sequenceNumber"])
        expected = self.produced.get(identity)
        if expected is not None and json.loads(expected) != record:
            archive.problem(f"{key}: {identity[1]} holds another JSON value than was produced")
        if archive.sample is None:
            archive.sample = (key, json.dumps({**record, field: meta})[:160])
        millis = arrival_millis(meta["approximateArrivalTimestamp"])
        self.place(archive, key, "main", identity, millis, path, shard, first, last, None)

    def check_row(self, archive, key, row, path, shard, first, last):
        identity = (row["shard_id"], row["sequence_number"])
        data = row.get("data")  # no such column with --parquet-schema
        millis = arrival_millis(row["approximate_arrival_timestamp"])
        if archive.sample is None:
            archive.sample = (key, str(row)[:160])
        self.place(archive, key, "main", identity, millis, path, shard, first, last, data)

    def match_anonymous(self, archive, key, shard, first, last, delimiter, shape, body, count):
        """The records of a body without record metadata: see the module doc."""
        elsewhere = archive.batches.get((shard, first, last), {})
        taken = set(elsewhere.get("errors", [])) | set(elsewhere.get("duplicates", []))
        candidates = [
            (seq, data)
            for number, seq, data in self.by_shard.get(shard, [])
            if first <= number <= last and seq not in taken
        ]
        if shape == "raw":
            matches = body == b"".join(data + delimiter for _, data in candidates)
        else:
            matches = same_json_lines(body, [data for _, data in candidates])
        if not matches:
            archive.problem(f"{key}: the body is not the payloads produced in [{first}, {last}] less its batch's other objects")
        if count is None or int(count) != len(candidates):
            archive.problem(f"{key}: x-amz-meta-shardsink-records {count}, {len(candidates)} records produced in its range")
        if not matches or count is None or int(count) != len(candidates):
            return
        if archive.sample is None:
            archive.sample = (key, repr(body[:160]))
        for seq, _ in candidates:
            archive.found((shard, seq), key, "main", (shard, first, last))

    def read_decisions(self, archive, key, relative):
        path, shard, first, last, _ = self.batch_of(archive, relative, {DECISIONS_EXTENSION})
        archive.objects["decisions"] += 1
        body, _ = self.get(key)
        decided = []
        for line in decompress(body, "zstd").decode().splitlines():
            record = json.loads(line)
            decided.append((record["sequenceNumber"], record["outcome"]))
        archive.decisions[(shard, first, last)] = (key, decided)

    def check_batches(self, archive):
        """Each batch's objects together, and with its decisions object."""
        events_on = bool(os.environ.get("SHARDSINK_EVENT_ID"))
        empty = {"main": [], "errors": [], "duplicates": []}
        for batch in sorted(archive.batches.keys() | archive.main_batches):
            found = archive.batches.get(batch, empty)
            name = f"{batch[0]} [{batch[1]}, {batch[2]}]"
            if batch not in archive.main_batches:
                archive.problem(f"batch {name}: error or duplicates objects without a main object")
            decisions = archive.decisions.get(batch)
            if decisions is None:
                if events_on or found["duplicates"]:
                    archive.problem(f"batch {name}: no decisions object")
                continue
            key, decided = decisions
            everything = found["main"] + found["errors"] + found["duplicates"]
            if sorted(s for s, _ in decided) != sorted(everything):
                archive.problem(f"{key}: {len(decided)} decisions, {len(everything)} records in the batch's objects")
            if sorted(s for s, o in decided if o == "duplicate") != sorted(found["duplicates"]):
                archive.problem(f"{key}: the duplicates it decided are not the duplicates object's records")
        for batch, (key, _) in archive.decisions.items():
            if batch not in archive.main_batches:
                archive.problem(f"{key}: a decisions object without its batch")


# --- commands -----------------------------------------------------------------


def read_produced(logfile):
    produced = {}
    with open(logfile) as log:
        for line in log:
            if line.strip():
                shard, seq, data = line.rstrip("\n").split("\t")
                produced[(shard, seq)] = base64.b64decode(data)
    return produced


def count_objects(s3, bucket, prefix):
    """Objects under the prefix, not counting the layout record."""
    listing = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/" if prefix else "")
    return sum(1 for o in listing.get("Contents", []) if not o["Key"].endswith("/_shardsink.json"))


def wait_objects(bucket, stream, count, wait):
    """Waits until at least COUNT data objects are under the prefix."""
    _, s3 = clients()
    prefix = Prefixes(stream).main
    deadline = time.time() + float(wait)
    while True:
        found = count_objects(s3, bucket, prefix)
        if found >= int(count):
            print(f"{found} objects in s3://{bucket}/{prefix}/")
            return
        if time.time() >= deadline:
            sys.exit(f"only {found} objects in s3://{bucket}/{prefix}/ after {wait} s")
        time.sleep(1)


def verify(bucket, stream, logfile, wait=0.0):
    _, s3 = clients()
    prefixes = Prefixes(stream)
    produced = read_produced(logfile)
    reader = Reader(s3, bucket, prefixes, produced)
    deadline = time.time() + float(wait)
    while True:
        archive = reader.read()
        missing = produced.keys() - archive.seen.keys()
        if not missing or time.time() >= deadline:
            break
        time.sleep(1)
    duplicated = {k: v for k, v in archive.seen.items() if len(v) > 1}
    unexpected = archive.seen.keys() - produced.keys()
    layout = archive.layout
    print(f"s3://{bucket}/{prefixes.main}/: key layout {layout['keyLayout']}, time bucket {layout['timeBucket']} (from _shardsink.json)")
    objects = archive.objects
    print(
        f"  {objects['main']} objects, {objects['errors']} in {prefixes.errors}/, "
        f"{objects['duplicates']} in {prefixes.duplicates}/, {objects['decisions']} decisions objects, "
        f"{len(archive.gaps)} retention gap markers"
    )
    for description, n in sorted(archive.formats.items()):
        print(f"  {n} x {description}")
    if archive.sample:
        print(f"  e.g. {archive.sample[0]}\n       {archive.sample[1]}")
    where = {"main": 0, "errors": 0, "duplicates": 0}
    for batch in archive.batches.values():
        for kind, seqs in batch.items():
            where[kind] += len(seqs)
    print(f"  records: {where['main']} in the prefix, {where['errors']} errors, {where['duplicates']} duplicates")
    for key, body in archive.gaps:
        print(f"  retention gap {key}: {body[:200]}")
    for text in archive.problems[:20]:
        print(f"  problem: {text}")
    if len(archive.problems) > 20:
        print(f"  … and {len(archive.problems) - 20} more problems")
    print(
        f"produced {len(produced)}, missing {len(missing)}, duplicated {len(duplicated)}, "
        f"unexpected {len(unexpected)}, problems {len(archive.problems)}"
    )
    for identity in sorted(missing)[:5]:
        print(f"  missing {identity}")
    for identity, keys in sorted(duplicated.items())[:5]:
        print(f"  {identity} in {keys}")
    if missing or duplicated or unexpected or archive.problems:
        sys.exit("NOT exactly once")
    print("every record is in S3 exactly once")


if __name__ == "__main__":
    command, *args = sys.argv[1:] or ["help"]
    if command == "setup":
        setup(*args)
    elif command == "produce":
        produce(*args)
    elif command == "wait-objects":
        wait_objects(*args)
    elif command == "verify":
        wait = 0.0
        if "--wait" in args:
            i = args.index("--wait")
            wait = args[i + 1]
            args = args[:i] + args[i + 2 :]
        verify(*args, wait=wait)
    else:
        sys.exit(__doc__)
