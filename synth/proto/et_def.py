"""Python message classes for the Chakra execution trace, built from ``et_def.proto`` at import time.

There is no code-generation step: a small reader for the subset of the proto3 language the schema uses
(``syntax``, ``package``, ``message`` with scalar, message and enum fields, ``repeated``, ``oneof``,
``enum``) turns the ``.proto`` file beside this module into a ``FileDescriptorProto``, and the
``protobuf`` runtime makes the classes from it. The ``.proto`` file stays the single source of truth and
the bytes are standard protobuf; any other compiler (``protoc``) reads the same file.

An ET file is a sequence of records, each a varint32 length then one serialized message: first a
``GlobalMetadata``, then ``Node`` messages (:func:`encode_records`, :func:`decode_records`).

Examples
--------
>>> node = Node(id=3, name="send", type=NodeType.COMM_SEND_NODE)
>>> Node.FromString(node.SerializeToString()).id
3
>>> decode_records(encode_records([b"ab", b""]))
[b'ab', b'']
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import IntEnum
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from synth.errors import InputError

#: The schema file this module reads.
PROTO_PATH = Path(__file__).with_name("et_def.proto")

_SCALARS = {
    "double": descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE,
    "float": descriptor_pb2.FieldDescriptorProto.TYPE_FLOAT,
    "int32": descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
    "int64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
    "uint32": descriptor_pb2.FieldDescriptorProto.TYPE_UINT32,
    "uint64": descriptor_pb2.FieldDescriptorProto.TYPE_UINT64,
    "sint32": descriptor_pb2.FieldDescriptorProto.TYPE_SINT32,
    "sint64": descriptor_pb2.FieldDescriptorProto.TYPE_SINT64,
    "fixed32": descriptor_pb2.FieldDescriptorProto.TYPE_FIXED32,
    "fixed64": descriptor_pb2.FieldDescriptorProto.TYPE_FIXED64,
    "sfixed32": descriptor_pb2.FieldDescriptorProto.TYPE_SFIXED32,
    "sfixed64": descriptor_pb2.FieldDescriptorProto.TYPE_SFIXED64,
    "bool": descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
    "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
    "bytes": descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
}
_TOKEN = re.compile(r'[A-Za-z_][A-Za-z0-9_.]*|-?[0-9]+|"[^"]*"|[{}=;]')


def _tokens(text: str) -> list[str]:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return _TOKEN.findall(text)


def parse_proto(text: str, filename: str = "et_def.proto") -> descriptor_pb2.FileDescriptorProto:
    """Read the proto3 subset the Chakra schema uses into a ``FileDescriptorProto``.

    Raises ``ValueError`` on anything outside that subset (nested messages, maps, options...).
    """
    tokens = _tokens(text)
    position = 0

    def take(expected: str | None = None) -> str:
        nonlocal position
        if position >= len(tokens):
            raise ValueError(f"{filename}: unexpected end of file")
        token = tokens[position]
        position += 1
        if expected is not None and token != expected:
            raise ValueError(f"{filename}: expected {expected!r}, got {token!r}")
        return token

    result = descriptor_pb2.FileDescriptorProto(name=filename, syntax="proto3")
    message_names: set[str] = set()
    enum_names: set[str] = set()
    pending: list[tuple[descriptor_pb2.FieldDescriptorProto, str]] = []

    def parse_field(message: descriptor_pb2.DescriptorProto, first: str, oneof: int | None) -> None:
        repeated = first == "repeated"
        type_name = take() if repeated else first
        field = message.field.add(name=take(), json_name="")
        take("=")
        field.number = int(take())
        take(";")
        field.label = (descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED if repeated
                       else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
        field.ClearField("json_name")
        if oneof is not None:
            field.oneof_index = oneof
        if type_name in _SCALARS:
            field.type = _SCALARS[type_name]
        else:
            pending.append((field, type_name))

    while position < len(tokens):
        keyword = take()
        if keyword == "syntax":
            take("=")
            if take() != '"proto3"':
                raise ValueError(f"{filename}: only proto3 is supported")
            take(";")
        elif keyword == "package":
            result.package = take()
            take(";")
        elif keyword == "enum":
            enum = result.enum_type.add(name=take())
            enum_names.add(enum.name)
            take("{")
            while (token := take()) != "}":
                take("=")
                enum.value.add(name=token, number=int(take()))
                take(";")
        elif keyword == "message":
            message = result.message_type.add(name=take())
            message_names.add(message.name)
            take("{")
            while (token := take()) != "}":
                if token == "oneof":
                    message.oneof_decl.add(name=take())
                    index = len(message.oneof_decl) - 1
                    take("{")
                    while (inner := take()) != "}":
                        parse_field(message, inner, index)
                else:
                    parse_field(message, token, None)
        else:
            raise ValueError(f"{filename}: unsupported statement {keyword!r}")
    prefix = f".{result.package}." if result.package else "."
    for field, type_name in pending:
        if type_name in message_names:
            field.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
        elif type_name in enum_names:
            field.type = descriptor_pb2.FieldDescriptorProto.TYPE_ENUM
        else:
            raise ValueError(f"{filename}: unknown type {type_name!r} of field {field.name!r}")
        field.type_name = prefix + type_name
    return result


def _build() -> tuple[descriptor_pb2.FileDescriptorProto, dict[str, Any]]:
    file_proto = parse_proto(PROTO_PATH.read_text(encoding="utf-8"), PROTO_PATH.name)
    pool = descriptor_pool.DescriptorPool()  # a private pool: never clashes with protoc-generated modules
    pool.Add(file_proto)
    classes = {m.name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{file_proto.package}.{m.name}"))
               for m in file_proto.message_type}
    return file_proto, classes


FILE_DESCRIPTOR, _CLASSES = _build()
GlobalMetadata: Any = _CLASSES["GlobalMetadata"]
Node: Any = _CLASSES["Node"]
AttributeProto: Any = _CLASSES["AttributeProto"]
IOInfo: Any = _CLASSES["IOInfo"]


class NodeType(IntEnum):
    """Chakra node types (``ChakraProtoMsg.NodeType``)."""

    INVALID_NODE = 0
    METADATA_NODE = 1
    MEM_LOAD_NODE = 2
    MEM_STORE_NODE = 3
    COMP_NODE = 4
    COMM_SEND_NODE = 5
    COMM_RECV_NODE = 6
    COMM_COLL_NODE = 7


class CollectiveCommType(IntEnum):
    """Chakra collective types (``ChakraProtoMsg.CollectiveCommType``)."""

    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def encode_records(payloads: Iterable[bytes]) -> bytes:
    """Frame serialized messages as ET records: a varint32 length before each one."""
    out = bytearray()
    for payload in payloads:
        if len(payload) >= 2**32:
            raise ValueError("an ET record must be shorter than 4 GiB")
        out += _varint(len(payload))
        out += payload
    return bytes(out)


def decode_records(data: bytes, source: str = "") -> list[bytes]:
    """Split ET bytes into the serialized messages; raises :class:`InputError` on a truncated record."""
    records: list[bytes] = []
    position = 0
    size = len(data)
    while position < size:
        length = 0
        shift = 0
        while True:
            if position >= size:
                raise InputError(source, f"record {len(records)}", "truncated length prefix")
            byte = data[position]
            position += 1
            length |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
            if shift > 28:
                raise InputError(source, f"record {len(records)}", "length prefix longer than a varint32")
        if position + length > size:
            raise InputError(source, f"record {len(records)}",
                             f"needs {length} bytes but only {size - position} remain (truncated file)")
        records.append(data[position:position + length])
        position += length
    return records
