"""The indexed record read (`automation/record/index.py`) for a bucket backend: s3://, gs:// and azblob://.

The Pulumi CLI keeps a bucket backend in the same layout as a folder (`<prefix>/.pulumi/stacks/<project>/<stack>.json`,
`.pulumi/meta.yaml`), so the read is the same three requests: list a project's checkpoints (names, ETags, sizes and
times, no byte of a checkpoint), get and put the fleet's index (`<prefix>/.modelplane/index/<fleet>.json`).

obstore (one wheel, Rust's `object_store`, kept by Development Seed and used by Zarr and others) talks to all three
clouds, so three SDKs are not needed for three requests. The bucket is the one the CLI opens from the same URL: this
module reads the URL's query parameters as the CLI's blob library (gocloud.dev) does, and a parameter it does not know
means the backend is read as before (`stack ls`), never a guess at a different bucket.

Credentials: only what the environment gives directly (keys, a session token, a web-identity token file, container
credentials; a service-account or application-default file; an account key or SAS token), the way the CLI finds them
first. Anything else (an AWS profile or SSO, a cloud's metadata server, `az login`) is left to the CLI, which reads the
record as before and says why, so nothing here waits on a metadata address that is not there.
"""

from __future__ import annotations

import os
from datetime import timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from obstore.store import AzureConfig, ClientConfig, RetryConfig, S3Config

from automation.record.index import DEFAULT_FLEET, Listed, index_body, index_entries, layout_is_per_project

TIMEOUTS: ClientConfig = {"connect_timeout": "5s", "timeout": "30s"}  # a bucket that does not answer fails the read, not hangs it
# obstore retries ten times for up to three minutes by default: an endpoint that is down would hold every `plan`
# that long before the read fell back to the CLI, which says why
RETRIES: RetryConfig = {"max_retries": 2, "retry_timeout": timedelta(seconds=15)}
TRUE = ("1", "t", "true", "TRUE", "True")  # Go's strconv.ParseBool


class BucketError(OSError):
    """A request the bucket refused or could not answer (credentials, permissions, the network)."""


def _why(exc: Exception) -> str:
    """The first line of an obstore error: what failed and the HTTP status, never a credential."""
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def _where(scheme: str, bucket: str, prefix: str) -> str:
    """The backend's bucket and prefix as a message names them (the URL less its query: no credential)."""
    return f"{scheme}://{bucket}/" + (f"{prefix}/" if prefix else "")


def _flag(query: dict[str, str], *names: str) -> bool:
    return any(query.get(name) in TRUE for name in names)


def _s3(bucket: str, prefix: str, query: dict[str, str]) -> tuple[Any, str] | None:
    known = {"region", "endpoint", "disableSSL", "disable_https", "use_path_style", "s3ForcePathStyle", "awssdk",
             "request_checksum_calculation", "response_checksum_validation"}
    if set(query) - known:
        return None  # a profile, a role, FIPS, SSE-KMS ...: the CLI's read knows them, this one does not guess
    env = os.environ
    if not (env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY")) and not env.get(
            "AWS_WEB_IDENTITY_TOKEN_FILE") and not env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI") and not env.get(
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):
        return None
    if env.get("AWS_PROFILE") and not env.get("AWS_ACCESS_KEY_ID"):
        return None  # the CLI takes the profile's credentials; the environment's would be another identity's
    from obstore.store import S3Store

    config: S3Config = {}
    if query.get("region"):
        config["region"] = query["region"]
    plain_http = _flag(query, "disableSSL", "disable_https")
    endpoint = query.get("endpoint", "")
    if endpoint:
        # the CLI completes a bare host with the scheme disableSSL asks for (pulumi's translateLegacyS3Params)
        config["endpoint"] = endpoint if "://" in endpoint else ("http://" if plain_http else "https://") + endpoint
        plain_http = plain_http or config["endpoint"].startswith("http://")
    # gocloud addresses the bucket as a host name unless asked for the path style (obstore's default is the path)
    config["virtual_hosted_style_request"] = not _flag(query, "use_path_style", "s3ForcePathStyle")
    store = S3Store(bucket, prefix=prefix or None, config=config,
                    client_options={**TIMEOUTS, "allow_http": plain_http}, retry_config=RETRIES)
    return store, _where("s3", bucket, prefix)


def _gcs(bucket: str, prefix: str, query: dict[str, str]) -> tuple[Any, str] | None:
    if query:
        return None  # access_id, private_key_path, anonymous: left to the CLI
    credentials = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if not credentials:
        default = Path(os.environ.get("CLOUDSDK_CONFIG") or Path.home() / ".config" / "gcloud") / \
            "application_default_credentials.json"
        credentials = str(default) if default.is_file() else ""
    if not credentials:
        return None  # a metadata server (GKE workload identity, a VM's account): left to the CLI
    from obstore.store import GCSStore

    store = GCSStore(bucket, prefix=prefix or None, config={"application_credentials": credentials},
                     client_options=TIMEOUTS, retry_config=RETRIES)
    return store, _where("gs", bucket, prefix)


def _azure(container: str, prefix: str, query: dict[str, str]) -> tuple[Any, str] | None:
    if set(query) - {"storage_account"}:
        return None  # a domain, protocol, an emulator: left to the CLI
    env = os.environ
    account = query.get("storage_account") or env.get("AZURE_STORAGE_ACCOUNT")
    key, sas = env.get("AZURE_STORAGE_KEY"), env.get("AZURE_STORAGE_SAS_TOKEN")
    if not account or not (key or sas):
        return None  # a connection string, `az login`, a managed identity: left to the CLI
    from obstore.store import AzureStore

    config: AzureConfig = {"account_name": account}
    if key:
        config["account_key"] = key
    elif sas:
        config["sas_key"] = sas
    store = AzureStore(container, prefix=prefix or None, config=config, client_options=TIMEOUTS, retry_config=RETRIES)
    return store, _where("azblob", container, prefix)


OPENERS = {"s3": _s3, "gs": _gcs, "azblob": _azure}


class BucketCheckpoints:
    """The indexed read's requests, made of a bucket (see `CheckpointFolder` for what each one answers)."""

    local_clock = False  # the listing's times are the bucket's

    def __init__(self, store: Any, where: str):
        self.store = store
        self.where = where  # the bucket and prefix, for messages: no credential is in it

    @classmethod
    def of(cls, backend: str) -> BucketCheckpoints | None:
        """The bucket of an s3://, gs:// or azblob:// backend in the project layout, else None (read as before)."""
        parts = urlsplit(backend)
        opener = OPENERS.get(parts.scheme)
        if opener is None or not parts.netloc:
            return None
        query = {name: values[-1] for name, values in parse_qs(parts.query, keep_blank_values=True).items()}
        try:
            opened = opener(parts.netloc, parts.path.strip("/"), query)
            if opened is None:
                return None
            bucket = cls(*opened)
            meta = bucket._get(".pulumi/meta.yaml")
        except Exception:  # obstore's errors derive from Exception alone
            return None  # no layout to read, or a bucket this read cannot open: the CLI's read says why
        return bucket if meta is not None and layout_is_per_project(meta.decode("utf-8", "replace")) else None

    def request(self) -> None:
        """One request to the store (a benchmark's latency shim replaces it)."""

    def _get(self, key: str) -> bytes | None:
        import obstore

        self.request()
        try:
            return bytes(obstore.get(self.store, key).bytes())
        except FileNotFoundError:
            return None
        except Exception as exc:  # obstore's errors: a message that names the request, never a credential
            raise BucketError(f"{self.where}{key}: {_why(exc)}") from None

    def list(self, project: str) -> list[Listed]:
        import obstore

        self.request()
        folder = f".pulumi/stacks/{project}/"
        found: dict[str, list[tuple[str, Any]]] = {}
        try:
            for chunk in obstore.list(self.store, folder):
                for meta in chunk:
                    name = meta["path"][len(folder):] if meta["path"].startswith(folder) else ""
                    for suffix in (".json.gz", ".json"):
                        if name.endswith(suffix) and "/" not in name and not name.startswith("."):
                            break
                    else:
                        continue  # a backup, a lock, a history folder's entries
                    # the ETag is the content's, the time when it was written, and a versioned bucket's version
                    stamp = f"{suffix}:{meta.get('e_tag')}:{meta['size']}:{meta['last_modified'].isoformat()}" \
                            f":{meta.get('version') or ''}"
                    written = meta["last_modified"].astimezone(timezone.utc).replace(tzinfo=None)
                    found.setdefault(name[:-len(suffix)], []).append((stamp, written))
        except Exception as exc:
            raise BucketError(f"{self.where}{folder}: {_why(exc)}") from None
        return [Listed(project, stack, ",".join(sorted(s for s, _ in versions)), max(w for _, w in versions))
                for stack, versions in sorted(found.items())]

    def _index_key(self, fleet: str | None) -> str:
        return f".modelplane/index/{fleet or DEFAULT_FLEET}.json"

    def get_index(self, fleet: str | None) -> dict[str, dict] | None:
        try:
            raw = self._get(self._index_key(fleet))
        except BucketError:
            return None  # an index this identity may not read: the stacks are read from their checkpoints
        return index_entries(raw)

    def put_index(self, fleet: str | None, stacks: dict[str, dict]) -> None:
        """One PUT: a bucket replaces an object whole, so a reader sees the old index or the new one."""
        import obstore

        self.request()
        try:
            obstore.put(self.store, self._index_key(fleet), index_body(fleet, stacks))
        except Exception as exc:
            raise BucketError(f"{self.where}{self._index_key(fleet)}: {_why(exc)}") from None
