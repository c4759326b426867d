"""Protobuf's wire format, for the few places kubectl speaks only protobuf: the two request bodies it sends as
`application/vnd.kubernetes.protobuf` (SelfSubjectAccessReview and SelfSubjectRulesReview: kubectl's typed client
for built-in kinds writes protobuf only, and reads the answer by its Content-Type, so answers stay JSON), and the
OpenAPI v2 document older kubectl (Debian's 1.20) asks for as protobuf only (`routes/openapi.py` maps the
document's fields). A reader and a writer of the wire format for these few messages: generating them with protoc
would mean vendoring gnostic's and Kubernetes' .proto files for a handful of fields.

The Kubernetes envelope: the magic `k8s\\0`, then a runtime.Unknown (1: typeMeta, 2: raw, the object's bytes).
"""

from __future__ import annotations

import struct

from automation.portal.service import ApiError

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
# field numbers (k8s.io/api/authorization/v1/generated.proto)
RESOURCE_ATTRIBUTES = {1: "namespace", 2: "verb", 3: "group", 4: "version", 5: "resource", 6: "subresource", 7: "name"}
NON_RESOURCE_ATTRIBUTES = {1: "path", 2: "verb"}


def bad() -> ApiError:
    return ApiError(400, "BadRequest", "the body is not a protobuf object this portal reads")


def varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise bad()
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def fields(data: bytes) -> dict[int, list[bytes | int]]:
    """Field number -> its values (bytes for length-delimited fields, int for varints); others are skipped."""
    out: dict[int, list[bytes | int]] = {}
    at = 0
    while at < len(data):
        tag, at = varint(data, at)
        number, wire = tag >> 3, tag & 7
        value: bytes | int
        if wire == 0:
            value, at = varint(data, at)
        elif wire == 2:
            size, at = varint(data, at)
            if at + size > len(data):
                raise bad()
            value, at = data[at:at + size], at + size
        elif wire in (1, 5):  # fixed 64 and 32 bits: none of ours
            at += 8 if wire == 1 else 4
            continue
        else:
            raise bad()
        out.setdefault(number, []).append(value)
    return out


def message(data: dict[int, list[bytes | int]], number: int) -> dict[int, list[bytes | int]]:
    found = data.get(number, [b""])[-1]
    return fields(found) if isinstance(found, bytes) else {}


def strings(data: dict[int, list[bytes | int]], names: dict[int, str]) -> dict[str, str]:
    out = {}
    for number, name in names.items():
        value = data.get(number, [b""])[-1]
        if isinstance(value, bytes) and value:
            out[name] = value.decode("utf-8", "replace")
    return out


def unwrap(body: bytes) -> dict[int, list[bytes | int]]:
    if not body.startswith(MAGIC):
        raise bad()
    return message(fields(body[len(MAGIC):]), 2)  # runtime.Unknown.raw: the object itself


def review(body: bytes, kind: str) -> dict:
    """The review as its JSON form would say it (only the fields the portal answers from)."""
    obj = unwrap(body)
    spec = message(obj, 2)
    if kind == "SelfSubjectRulesReview":
        return {"kind": kind, "spec": strings(spec, {1: "namespace"})}
    out: dict = {}
    if 1 in spec:
        out["resourceAttributes"] = strings(message(spec, 1), RESOURCE_ATTRIBUTES)
    if 2 in spec:
        out["nonResourceAttributes"] = strings(message(spec, 2), NON_RESOURCE_ATTRIBUTES)
    return {"kind": kind, "spec": out}


# -- writing ----------------------------------------------------------------------------------------------------------

def encode_varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1  # negative int64s are ten bytes, as protobuf writes them
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field_bytes(number: int, value: bytes | str) -> bytes:
    """A length-delimited field: a string, bytes or an encoded message."""
    data = value.encode() if isinstance(value, str) else value
    return encode_varint(number << 3 | 2) + encode_varint(len(data)) + data


def field_varint(number: int, value: int | bool) -> bytes:
    return encode_varint(number << 3) + encode_varint(int(value))


def field_double(number: int, value: float) -> bytes:
    return encode_varint(number << 3 | 1) + struct.pack("<d", float(value))
