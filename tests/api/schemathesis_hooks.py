"""Hooks schemathesis needs for the Slipway API.

- Source uploads are `.tar.gz` bytes (`Content-Type: application/gzip`, or
  `application/octet-stream`), which schemathesis has no serializer for (its octet-stream
  generator makes zip files): the generated value becomes the one file of a gzip'd tar, so a generated
  body is what a client would upload (the server refuses anything else, as it must).
- `Idempotency-Key` says "the same request as before": the contract answers a key reused for a
  different request with 400 INVALID_IDEMPOTENCY_KEY. The generator draws keys from a small
  space and reuses them across bodies, which no client does; each generated key is made unique
  (a counter appended, kept within the schema's 255 visible ASCII characters) so a valid key
  stays valid and an invalid one stays invalid.
"""

import io
import itertools
import json
import re
import tarfile

import schemathesis

_counter = itertools.count()
_VALID_KEY = re.compile(r"^[!-~]{1,255}$")


@schemathesis.serializer("application/gzip", "application/octet-stream")
def gzip_body(ctx, value):
    if not isinstance(value, (bytes, str)):
        # Not a string (negative data): sent as it is, so the server sees it is no archive.
        return json.dumps(value).encode("utf-8")
    content = value if isinstance(value, bytes) else value.encode("utf-8")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        entry = tarfile.TarInfo("index.html")
        entry.size = len(content)
        archive.addfile(entry, io.BytesIO(content))
    return buffer.getvalue()


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    # A coverage case that leaves a header out must reach the server exactly as generated: once
    # a hook edits it, schemathesis revalidates it and sends the CLI's Authorization anyway.
    data = getattr(getattr(case.meta, "phase", None), "data", None)
    if getattr(getattr(data, "scenario", None), "name", "") == "MISSING_PARAMETER":
        return
    headers = case.headers or {}
    for name in list(headers):
        if name.lower() != "idempotency-key":
            continue
        key = headers[name]
        if isinstance(key, str) and _VALID_KEY.match(key):
            suffix = f".{next(_counter)}"
            headers[name] = key[: 255 - len(suffix)] + suffix
