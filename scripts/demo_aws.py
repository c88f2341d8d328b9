"""AWS side of scripts/demo: create a stream and bucket, produce records, and
check the archive shardsink wrote. Uses boto3 from the moto venv that
scripts/local-servers installs; endpoints come from the AWS_ENDPOINT_URL_*
variables of the local-servers env file.

    demo_aws.py setup STREAM BUCKET SHARDS
    demo_aws.py produce STREAM COUNT LOGFILE        # appends "shard seq" lines
    demo_aws.py verify BUCKET PREFIX LOGFILE [--wait SECONDS]
    demo_aws.py wait-objects BUCKET PREFIX COUNT SECONDS
"""

import base64
import gzip
import json
import os
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


def produce(stream, count, logfile):
    kinesis, _ = clients()
    count = int(count)
    with open(logfile, "a") as log:
        sent = 0
        while sent < count:
            n = min(500, count - sent)
            entries = []
            for i in range(sent, sent + n):
                if i % 10 == 0:
                    data = os.urandom(64)  # binary
                elif i % 10 == 1:
                    data = b""  # empty
                else:
                    data = json.dumps({"order": i, "item": "book", "note": "quote \" and é"}).encode()
                entries.append({"Data": data, "PartitionKey": f"customer-{i % 97}"})
            result = kinesis.put_records(StreamName=stream, Records=entries)
            for entry in result["Records"]:
                if "SequenceNumber" not in entry:
                    sys.exit(f"put_records failed for an entry: {entry}")
                log.write(f"{entry['ShardId']} {entry['SequenceNumber']}\n")
            sent += n
    print(f"produced {count} records to {stream}")


def archive(bucket, prefix):
    _, s3 = clients()
    seen = {}
    objects = 0
    sample = None
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for obj in page.get("Contents", []):
            key = obj["Key"]
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            if key.endswith(".gz"):
                body = gzip.decompress(body)
            elif not key.endswith(".jsonl"):
                sys.exit(f"demo expects --compression gzip or none, found {key}")
            objects += 1
            for line in body.decode().splitlines():
                record = json.loads(line)
                base64.b64decode(record["data"], validate=True)
                ident = (record["shardId"], record["sequenceNumber"])
                seen.setdefault(ident, []).append(key)
                if sample is None:
                    sample = (key, line)
    return objects, seen, sample


def wait_objects(bucket, prefix, count, wait):
    """Waits until at least `count` objects are under the prefix."""
    _, s3 = clients()
    deadline = time.time() + float(wait)
    while True:
        found = s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "/").get("KeyCount", 0)
        if found >= int(count):
            print(f"{found} objects in s3://{bucket}/{prefix}/")
            return
        if time.time() >= deadline:
            sys.exit(f"only {found} objects in s3://{bucket}/{prefix}/ after {wait} s")
        time.sleep(1)


def verify(bucket, prefix, logfile, wait=0.0):
    with open(logfile) as log:
        produced = {tuple(line.split()) for line in log if line.strip()}
    deadline = time.time() + float(wait)
    while True:
        objects, seen, sample = archive(bucket, prefix)
        missing = produced - seen.keys()
        if not missing or time.time() >= deadline:
            break
        time.sleep(1)
    duplicated = {k: v for k, v in seen.items() if len(v) > 1}
    unexpected = seen.keys() - produced
    print(f"s3://{bucket}/{prefix}/: {objects} objects, {sum(len(v) for v in seen.values())} lines")
    if sample:
        print(f"  e.g. {sample[0]}\n       {sample[1][:160]}")
    print(f"produced {len(produced)}, missing {len(missing)}, duplicated {len(duplicated)}, unexpected {len(unexpected)}")
    if missing or duplicated or unexpected:
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
