"""safetensors files read and written one tensor at a time, on any fsspec filesystem.

A safetensors file is an 8-byte little-endian header length, a JSON header (name -> dtype, shape and
byte range; ``__metadata__``) and the tensors' bytes. Reading one byte range per tensor lets a soup of
K checkpoints hold one tensor per source in memory instead of K models, from local disk or straight
from s3:// alike; writing the header first (it is known from the sources) lets the output be streamed.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass

import torch

from olmocr.errors import UserError

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2, "I64": torch.int64, "I32": torch.int32,
    "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool, "U16": torch.uint16,
    "U32": torch.uint32, "U64": torch.uint64,
}
FLOATING = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}


@dataclass(frozen=True)
class Entry:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int  # absolute offsets in the file
    end: int

    @property
    def floating(self) -> bool:
        return self.dtype in FLOATING


class SafetensorsFile:
    """The header of one safetensors file, and its tensors read by byte range."""

    def __init__(self, fs, path: str):
        self.fs, self.path = fs, path
        with fs.open(path, "rb") as fh:
            raw_length = fh.read(8)
            if len(raw_length) != 8:
                raise UserError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            (length,) = struct.unpack("<Q", raw_length)
            if length > 100_000_000:
                raise UserError(f"{path}: not a safetensors file (header length {length})")
            raw_header = fh.read(length)
        try:
            header = json.loads(raw_header)
        except ValueError:
            raise UserError(f"{path}: not a safetensors file (the header is not JSON)") from None
        self.header_bytes = raw_length + raw_header
        self.metadata = header.pop("__metadata__", None) or {}
        start = 8 + length
        self.entries: dict[str, Entry] = {}
        for name, info in header.items():
            if info["dtype"] not in DTYPES:
                raise UserError(f"{path}: tensor {name} has dtype {info['dtype']}, which this reader does not know")
            begin, end = info["data_offsets"]
            self.entries[name] = Entry(name, info["dtype"], tuple(info["shape"]), start + begin, start + end)
        position = start
        for entry in self.in_file_order():  # the layout a soup writes again: tensors back to back
            if entry.begin != position:
                raise UserError(f"{path}: not a valid safetensors file (a gap before tensor {entry.name})")
            position = entry.end
        self._handle = None

    def in_file_order(self) -> list[Entry]:
        return sorted(self.entries.values(), key=lambda e: e.begin)

    def read(self, name: str) -> bytearray:
        """The tensor's bytes, read into a buffer that :func:`to_tensor` uses without copying."""
        entry = self.entries[name]
        if self._handle is None:
            self._handle = self.fs.open(self.path, "rb")
        self._handle.seek(entry.begin)
        data = bytearray(entry.end - entry.begin)
        if data and self._handle.readinto(data) != len(data):
            raise UserError(f"{self.path}: truncated at tensor {name}")
        return data

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def to_tensor(data: bytearray, entry: Entry) -> torch.Tensor:
    """A tensor over ``data`` (shared, not copied)."""
    if not data:
        return torch.empty(entry.shape, dtype=DTYPES[entry.dtype])
    return torch.frombuffer(data, dtype=DTYPES[entry.dtype]).reshape(entry.shape)


def to_bytes(tensor: torch.Tensor) -> memoryview:
    """The tensor's bytes (shared, not copied)."""
    flat = tensor.contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy()) if flat.numel() else memoryview(b"")


class WeightsHash:
    """A content hash of a model's weights that ignores how they are sharded and ordered in files:
    sha256 over ``name dtype shape sha256(bytes)`` lines, sorted by tensor name."""

    def __init__(self):
        self.lines: dict[str, str] = {}

    def add(self, entry: Entry, data) -> None:
        shape = "x".join(map(str, entry.shape))
        self.lines[entry.name] = f"{entry.name} {entry.dtype} {shape} {hashlib.sha256(data).hexdigest()}"

    def hexdigest(self) -> str:
        text = "\n".join(self.lines[name] for name in sorted(self.lines))
        return hashlib.sha256(text.encode()).hexdigest()
