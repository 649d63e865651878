"""The files bucket's S3 client as the domain uses it: uploads are managed transfers with
the product's multipart settings, so domain code names no boto3 type.

The exports, deliveries and renders write files of up to a few hundred megabytes; boto3's
managed transfer splits those above :data:`MULTIPART_THRESHOLD` bytes into parts of that
size, four at a time. Every other call (presigned links, reads, deletes) goes to the
wrapped client unchanged.
"""

from __future__ import annotations

from typing import Any

from boto3.s3.transfer import TransferConfig

#: Files above this size (bytes) are uploaded in parts of this size.
MULTIPART_THRESHOLD = 16 * 1024 * 1024
#: Parts uploaded at once per file.
MULTIPART_CONCURRENCY = 4


class ManagedUploads:
    """A boto3 S3 client whose ``upload_file`` applies the product's transfer settings.

    ``client`` is a boto3 S3 client (or one of moto's); attribute access other than
    ``upload_file`` is delegated to it. Errors are boto3's (``botocore`` exceptions and
    ``boto3.exceptions.S3UploadFailedError``)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._config = TransferConfig(multipart_threshold=MULTIPART_THRESHOLD,
                                      multipart_chunksize=MULTIPART_THRESHOLD,
                                      max_concurrency=MULTIPART_CONCURRENCY)

    def upload_file(self, Filename: str, Bucket: str, Key: str, ExtraArgs: dict | None = None,  # noqa: N803
                    Callback: Any = None) -> None:
        """Upload the local file ``Filename`` to ``Bucket``/``Key`` as a managed transfer
        (multipart above :data:`MULTIPART_THRESHOLD` bytes)."""
        self.client.upload_file(Filename=Filename, Bucket=Bucket, Key=Key, ExtraArgs=ExtraArgs,
                                Callback=Callback, Config=self._config)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)
