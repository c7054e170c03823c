"""Serializers schemathesis needs for the Slipway API: source uploads are raw .tar.gz bytes
(`Content-Type: application/gzip`), which schemathesis has no serializer for."""

import schemathesis


@schemathesis.serializer("application/gzip")
def gzip_body(ctx, value):
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")
