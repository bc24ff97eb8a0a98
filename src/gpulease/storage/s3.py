""":class:`S3Store`: checkpoints as ``s3://BUCKET/PREFIX/step-<N>/`` objects, manifest last.

This module owns the S3 object layout of a checkpoint, the rule that decides whether a step in S3
is *complete*, and the translation of boto3 errors into :mod:`gpulease.errors`:

- ``PREFIX/step-<N>/<file>`` holds each data file; ``PREFIX/step-<N>/manifest.json`` (the JSON of
  :mod:`gpulease.storage.manifest`) is uploaded **last** and deleted **first**, so a step without
  a manifest is an incomplete upload or a half-finished delete.
- A step is complete when its manifest exists, parses, names that step, and every listed object
  exists with the listed size (one ListObjectsV2 listing); :meth:`S3Store.download` also checks
  the sha256 of every file it fetches and writes the local manifest last.
- An upload that fails deletes what it sent (when S3 can still be reached); one whose process is
  killed leaves objects without a manifest: incomplete, never listed or downloaded, and named by
  :meth:`S3Store.list_incomplete` so the next sync or prune deletes them.

boto3 is the optional extra ``gpulease[aws]``; it is imported when an :class:`S3Store` is built,
never when :mod:`gpulease.storage` is imported.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from gpulease.errors import GpuleaseError, Permanent, Retryable, UserInputError
from gpulease.storage.digest import entry, entry_is_valid, entry_matches, file_digest
from gpulease.storage.manifest import MANIFEST, is_data_name, new_manifest, write_atomic
from gpulease.storage.source import UploadSource, file_identity, upload_source

if TYPE_CHECKING:
    from boto3.s3.transfer import TransferConfig
    from botocore.exceptions import ClientError
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import PutObjectRequestTypeDef

log = logging.getLogger(__name__)

MIB = 1 << 20
MIN_PART_SIZE = 5 * MIB  # S3's smallest multipart part (except the last one)
DEFAULT_MULTIPART_THRESHOLD = 64 * MIB
DEFAULT_MULTIPART_CHUNKSIZE = 16 * MIB
BOTO3_MISSING = "s3:// stores need boto3: pip install 'gpulease[aws]'"
_DELETE_BATCH = 1000  # DeleteObjects takes at most 1000 keys
_BUCKET = re.compile(r"^[A-Za-z0-9._-]{1,255}$")  # what botocore accepts as a bucket name
_MAX_PREFIX_BYTES = 512  # S3 keys are at most 1024 bytes; leave room for step-<N>/<file>
_STEP_KEY = re.compile(r"^step-(0|[1-9][0-9]*)/([^/]+)$")
_RETRYABLE_CODES = {
    "SlowDown",
    "Throttling",
    "RequestTimeout",
    "InternalError",
    "ServiceUnavailable",
}
_DENIED_CODES = {
    "AccessDenied",
    "AllAccessDisabled",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "KMS.AccessDeniedException",
    "KMS.NotFoundException",
    "KMS.DisabledException",
}


def _check_bucket(bucket: str) -> None:
    if not _BUCKET.match(bucket):
        raise UserInputError(
            f"S3Store bucket={bucket!r} is not a valid S3 bucket name "
            "(letters, digits, '.', '-' and '_' only)"
        )


def _clean_prefix(prefix: str) -> str:
    cleaned = prefix.strip("/")
    try:
        size = len(cleaned.encode("utf-8"))
    except UnicodeEncodeError:
        raise UserInputError(f"S3Store prefix={prefix!r} is not valid UTF-8") from None
    if size > _MAX_PREFIX_BYTES:
        raise UserInputError(f"S3Store prefix= is {size} bytes; at most {_MAX_PREFIX_BYTES}")
    return cleaned


def _check_part_sizes(threshold: int, chunksize: int) -> None:
    if threshold < 1:
        raise UserInputError(f"S3Store multipart_threshold= must be positive, got {threshold}")
    if chunksize < MIN_PART_SIZE:
        raise UserInputError(
            f"S3Store multipart_chunksize= must be at least {MIN_PART_SIZE} bytes "
            f"(S3's smallest part), got {chunksize}"
        )


def _new_client(endpoint_url: str | None, region: str | None) -> S3Client:
    """An S3 client with boto3's standard retries; ``AWS_ENDPOINT_URL`` applies when no URL."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise UserInputError(BOTO3_MISSING) from None
    config = Config(retries={"mode": "standard"})
    try:
        return boto3.client("s3", endpoint_url=endpoint_url, region_name=region, config=config)
    except ValueError as exc:  # botocore: "Invalid endpoint: ..."
        raise UserInputError(f"S3Store endpoint_url={endpoint_url!r}: {exc}") from None


def _transfer_config(threshold: int, chunksize: int) -> TransferConfig:
    from boto3.s3.transfer import TransferConfig

    # "classic": the transfer code the tests run, also on instance types where boto3 would pick CRT
    return TransferConfig(
        multipart_threshold=threshold,
        multipart_chunksize=chunksize,
        preferred_transfer_client="classic",
    )


def parse_manifest(data: bytes, step: int) -> dict[str, Any] | None:
    """The manifest in ``data`` when it is well formed and names ``step``; otherwise ``None``."""
    try:
        manifest = json.loads(data)
    except ValueError:
        return None
    if not isinstance(manifest, dict) or manifest.get("version") not in (1, 2):
        return None
    if manifest.get("step") != step or isinstance(manifest.get("step"), bool):
        return None
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(_valid_entry(n, e) for n, e in files.items()):
        return None
    return manifest


def _valid_entry(name: object, value: object) -> bool:
    return isinstance(name, str) and is_data_name(name) and entry_is_valid(value)


def _sizes_match(manifest: dict[str, Any], sizes: dict[str, int]) -> bool:
    """True when every file of ``manifest`` is in ``sizes`` ({name: object size}) at its size."""
    files: dict[str, Any] = manifest["files"]
    return all(sizes.get(name) == entry["size"] for name, entry in files.items())


class S3Store:
    """A :class:`~gpulease.storage.CheckpointStore` in ``s3://bucket/prefix``.

    ``endpoint_url`` and ``region`` default to boto3's own resolution (``AWS_ENDPOINT_URL``,
    ``AWS_DEFAULT_REGION``, the config files); credentials always come from boto3's chain. Files
    of ``multipart_threshold`` bytes or more go up in ``multipart_chunksize`` parts. With
    ``sse_kms_key_id`` every object is written with ``aws:kms`` server-side encryption.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        sse_kms_key_id: str | None = None,
        multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
        multipart_chunksize: int = DEFAULT_MULTIPART_CHUNKSIZE,
    ) -> None:
        _check_bucket(bucket)
        _check_part_sizes(multipart_threshold, multipart_chunksize)
        if sse_kms_key_id is not None and not sse_kms_key_id.strip():
            raise UserInputError("S3Store sse_kms_key_id= must not be empty (or pass None)")
        self.bucket = bucket
        self.prefix = _clean_prefix(prefix)
        self.sse_kms_key_id = sse_kms_key_id
        self._client = _new_client(endpoint_url, region)
        self._transfer = _transfer_config(multipart_threshold, multipart_chunksize)

    @property
    def url(self) -> str:
        """``s3://bucket/prefix`` (``s3://bucket`` for an empty prefix)."""
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    @property
    def client(self) -> S3Client:
        """The boto3 S3 client this store uses (thread-safe; tests hook its events)."""
        return self._client

    def __repr__(self) -> str:
        return f"S3Store({self.url!r})"

    # -- keys -----------------------------------------------------------------------------

    def _root(self) -> str:
        return f"{self.prefix}/" if self.prefix else ""

    def step_prefix(self, step: int) -> str:
        """The key prefix of checkpoint ``step``: ``PREFIX/step-<N>/``."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise UserInputError(f"checkpoint step must be an integer >= 0, got {step!r}")
        return f"{self._root()}step-{step}/"

    def key(self, step: int, name: str) -> str:
        """The object key of file ``name`` of checkpoint ``step``."""
        return self.step_prefix(step) + name

    # -- the protocol ---------------------------------------------------------------------

    def upload(self, step: int, src: Path) -> None:
        """Upload ``src`` as checkpoint ``step``: its data files, then its manifest.

        An existing copy of ``step`` is deleted first (its manifest first of all), so a step that
        is half replaced is incomplete, never a mix of two uploads. What is sent and checked is
        :mod:`gpulease.storage.source`'s rule: a file that does not match ``src``'s manifest or
        changes while it is sent fails the upload before any manifest is written. After a
        failure the objects sent are deleted (best effort: a store that cannot be reached keeps
        them, an incomplete step that :meth:`list_incomplete` names).
        """
        source = upload_source(Path(src), step)
        self.delete(step)
        try:
            entries = {name: self._put_checked(source, name) for name in source.names}
            manifest = new_manifest(step, entries, source.fields)
            self._put_bytes(self.key(step, MANIFEST), json.dumps(manifest, indent=1).encode())
        except Exception:
            self._forget(step)
            raise
        log.debug("uploaded checkpoint step %d to %s (%d files)", step, self.url, len(entries))

    def list_complete(self) -> list[int]:
        """Steps whose manifest is valid and whose objects all exist with the listed sizes."""
        by_step = self._objects_by_step()
        return [s for s in sorted(by_step) if self._is_complete(s, by_step[s])]

    def list_incomplete(self) -> list[int]:
        """Steps with objects but no valid manifest for their step (an upload cut off, or a
        delete), oldest first. Never read; safe to delete."""
        by_step = self._objects_by_step()
        return [
            s for s in sorted(by_step) if MANIFEST not in by_step[s] or not self._read_manifest(s)
        ]

    def download(self, step: int, dest: Path) -> None:
        """Fetch checkpoint ``step`` into ``dest``, check every sha256, write the manifest last.

        Raises ``Permanent`` when the step is incomplete or a file does not match its manifest;
        the files fetched are then removed and ``dest`` has no manifest (it is incomplete).
        """
        found = self._read_manifest(step)
        if found is None or not _sizes_match(found[1], self._step_objects(step)):
            raise Permanent(f"checkpoint step {step} in {self.url} is missing or incomplete")
        raw, manifest = found
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        (dest / MANIFEST).unlink(missing_ok=True)
        names = list(manifest["files"])
        try:
            for name in names:
                self._fetch_verified(step, name, manifest["files"][name], dest / name)
        except BaseException:
            for name in names:
                (dest / name).unlink(missing_ok=True)
            raise
        write_atomic(dest / MANIFEST, raw)
        log.debug("downloaded checkpoint step %d from %s", step, self.url)

    def total_bytes(self) -> int:
        """Σ ``Size`` of every object under the prefix (ListObjectsV2, every page), checkpoint
        files or not; 0 for an empty prefix. Errors as every call here (a missing bucket is a
        :class:`~gpulease.errors.UserInputError`, throttling a ``Retryable``)."""
        return sum(size for _key, size in self._list(self._root()))

    def delete(self, step: int) -> None:
        """Delete checkpoint ``step``, the manifest first, then its data; no error when absent."""
        manifest_key = self.key(step, MANIFEST)
        with self._aws(f"delete {manifest_key}"):
            self._client.delete_object(Bucket=self.bucket, Key=manifest_key)
        keys = [key for key, _ in self._list(self.step_prefix(step))]
        for start in range(0, len(keys), _DELETE_BATCH):
            self._delete_keys(keys[start : start + _DELETE_BATCH])

    # -- S3 calls -------------------------------------------------------------------------

    def _put_checked(self, source: UploadSource, name: str) -> dict[str, Any]:
        """Hash, check and send one file of ``source``; its manifest entry."""
        path = source.path(name)
        before = file_identity(path)
        digest, size = file_digest(path)
        source.check(name, digest, size, path)
        self._put_file(path, self.key(source.step, name))
        if file_identity(path) != before:
            raise source.changed(name)
        return entry(digest, size)

    def _forget(self, step: int) -> None:
        """After a failed upload: delete what was sent of ``step``, if S3 lets us."""
        try:
            self.delete(step)
        except Exception as exc:  # the upload's own error is the one raised
            log.debug(
                "could not remove the failed upload of step %d from %s: %s", step, self.url, exc
            )

    def _sse_args(self) -> dict[str, str]:
        if self.sse_kms_key_id is None:
            return {}
        return {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": self.sse_kms_key_id}

    def _put_file(self, path: Path, key: str) -> None:
        extra: dict[str, Any] = {"ChecksumAlgorithm": "SHA256", **self._sse_args()}
        with self._aws(f"upload {path} to s3://{self.bucket}/{key}"):
            self._client.upload_file(
                Filename=str(path),
                Bucket=self.bucket,
                Key=key,
                ExtraArgs=extra,
                Config=self._transfer,
            )

    def _put_bytes(self, key: str, data: bytes) -> None:
        request: PutObjectRequestTypeDef = {
            "Bucket": self.bucket,
            "Key": key,
            "Body": data,
            "ContentType": "application/json",
            "ChecksumAlgorithm": "SHA256",
        }
        if self.sse_kms_key_id is not None:
            request["ServerSideEncryption"] = "aws:kms"
            request["SSEKMSKeyId"] = self.sse_kms_key_id
        with self._aws(f"upload s3://{self.bucket}/{key}"):
            self._client.put_object(**request)

    def _list(self, prefix: str) -> Iterator[tuple[str, int]]:
        """``(key, size)`` of every object under ``prefix``."""
        with self._aws(f"list s3://{self.bucket}/{prefix}"):
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                for obj in page.get("Contents", []):
                    yield obj["Key"], obj["Size"]

    def _objects_by_step(self) -> dict[int, dict[str, int]]:
        """``{step: {file name: size}}`` of every object that looks like a checkpoint file."""
        root = self._root()
        by_step: dict[int, dict[str, int]] = {}
        for key, size in self._list(root):
            match = _STEP_KEY.match(key[len(root) :])
            if match:
                by_step.setdefault(int(match.group(1)), {})[match.group(2)] = size
        return by_step

    def _is_complete(self, step: int, sizes: dict[str, int]) -> bool:
        if MANIFEST not in sizes:
            return False
        found = self._read_manifest(step)
        return found is not None and _sizes_match(found[1], sizes)

    def _step_objects(self, step: int) -> dict[str, int]:
        """``{file name: size}`` of the objects of checkpoint ``step``."""
        prefix = self.step_prefix(step)
        return {key[len(prefix) :]: size for key, size in self._list(prefix)}

    def _read_manifest(self, step: int) -> tuple[bytes, dict[str, Any]] | None:
        """The raw and parsed manifest of ``step``; ``None`` when it is missing or invalid."""
        key = self.key(step, MANIFEST)
        with self._aws(f"read s3://{self.bucket}/{key}"):
            try:
                response = self._client.get_object(Bucket=self.bucket, Key=key)
            except self._client.exceptions.NoSuchKey:
                return None
            raw = response["Body"].read()
        manifest = parse_manifest(raw, step)
        return None if manifest is None else (raw, manifest)

    def _fetch_verified(self, step: int, name: str, value: dict[str, Any], path: Path) -> None:
        key = self.key(step, name)
        with self._aws(f"download s3://{self.bucket}/{key}"):
            self._client.download_file(
                Bucket=self.bucket, Key=key, Filename=str(path), Config=self._transfer
            )
        if not entry_matches(path, value):
            raise Permanent(
                f"checkpoint step {step} in {self.url}: {name} does not match its manifest "
                f"(size or checksum); the copy in S3 is corrupt"
            )

    def _delete_keys(self, keys: list[str]) -> None:
        objects: list[Any] = [{"Key": key} for key in keys]
        with self._aws(f"delete {len(keys)} objects under {self.url}"):
            response = self._client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True}
            )
        errors = response.get("Errors", [])
        if errors:
            first = errors[0]
            raise Permanent(
                f"could not delete {len(errors)} objects in {self.url}, e.g. "
                f"{first.get('Key')}: {first.get('Code')} {first.get('Message')}"
            )

    # -- errors ---------------------------------------------------------------------------

    @contextmanager
    def _aws(self, action: str) -> Iterator[None]:
        """Turn boto3 errors raised inside into :mod:`gpulease.errors` naming ``action``."""
        from boto3.exceptions import S3UploadFailedError
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except GpuleaseError:
            raise
        except S3UploadFailedError as exc:  # upload_file wraps the ClientError it hit
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, ClientError):
                self._raise_client_error(action, cause)
            raise Permanent(f"{action}: {exc}") from exc
        except ClientError as exc:
            self._raise_client_error(action, exc)
        except BotoCoreError as exc:
            self._raise_botocore_error(action, exc)

    def _raise_client_error(self, action: str, exc: ClientError) -> NoReturn:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "?"))
        message = str(error.get("Message", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
        if code == "NoSuchBucket":
            raise UserInputError(
                f"S3 bucket {self.bucket!r} does not exist (checkpoint store {self.url})"
            ) from exc
        if code in _DENIED_CODES or status == 403:
            raise Permanent(
                f"{action}: refused by S3 ({code}: {message}); the credentials need "
                "s3:PutObject, s3:GetObject, s3:ListBucket and s3:DeleteObject on "
                f"{self.url} (and kms:GenerateDataKey, kms:Decrypt with SSE-KMS)"
            ) from exc
        if code in {"NoSuchKey", "404"}:
            raise Permanent(f"{action}: no such object (deleted meanwhile?)") from exc
        if code in _RETRYABLE_CODES or status >= 500:
            raise Retryable(f"{action}: S3 is unavailable ({code}: {message})") from exc
        raise Permanent(f"{action}: S3 error {code}: {message}") from exc

    def _raise_botocore_error(self, action: str, exc: BaseException) -> NoReturn:
        from botocore import exceptions as boto_errors

        if isinstance(exc, boto_errors.NoCredentialsError | boto_errors.PartialCredentialsError):
            raise UserInputError(
                f"{action}: no usable AWS credentials (set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or use an instance role)"
            ) from exc
        if isinstance(exc, boto_errors.ConnectionError | boto_errors.HTTPClientError):
            raise Retryable(f"{action}: cannot reach S3: {exc}") from exc
        raise Permanent(f"{action}: {exc}") from exc
