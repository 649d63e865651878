"""The files bucket's client the edge builds uploads large files in parts (the product's
multipart settings), and passes every other call to boto3's client."""

from __future__ import annotations

import boto3
from moto import mock_aws

from timekeeper.aws.s3 import MULTIPART_THRESHOLD, ManagedUploads
from timekeeper.edge import adapters


def test_a_file_above_the_threshold_is_uploaded_in_parts_of_the_threshold(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    adapters.reset()
    with mock_aws():
        client = adapters.s3_client()
        assert isinstance(client, ManagedUploads)
        boto3.client("s3").create_bucket(Bucket="files",
                                         CreateBucketConfiguration={"LocationConstraint": "eu-central-1"})
        path = tmp_path / "big.csv"
        path.write_bytes(b"x" * (MULTIPART_THRESHOLD + 1))
        client.upload_file(Filename=str(path), Bucket="files", Key="exports/big.csv",
                           ExtraArgs={"ContentType": "text/csv"})
        head = client.head_object(Bucket="files", Key="exports/big.csv")
        # a multipart object's ETag is "<digest>-<parts>": two parts of at most 16 MiB
        assert head["ETag"].strip('"').endswith("-2")
        assert head["ContentLength"] == MULTIPART_THRESHOLD + 1
        assert head["ContentType"] == "text/csv"
    adapters.reset()
