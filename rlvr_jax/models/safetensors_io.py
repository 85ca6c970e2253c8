"""Minimal safetensors reader/writer, one tensor at a time.

Why our own: tensors are read one at a time, so loading never holds a second
copy of the checkpoint; bfloat16 maps onto ml_dtypes without going through
torch; and every malformed file gets an error that names the file and tensor.

Format: 8-byte little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
then the raw little-endian tensor bytes (offsets relative to the data start).
"""

from __future__ import annotations

import json
import os
import struct
import sys

import ml_dtypes
import numpy as np

_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_NAMES = {v: k for k, v in _DTYPES.items()}
_MAX_HEADER = 100 * 1024 * 1024


class SafetensorsFile:
    """Index of one .safetensors file; tensors are read on demand."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        size = os.path.getsize(self.path)
        with open(self.path, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise ValueError(f"{self.path}: not a safetensors file (shorter than 8 bytes)")
            (n,) = struct.unpack("<Q", raw)
            if n > min(size - 8, _MAX_HEADER):
                raise ValueError(
                    f"{self.path}: corrupt safetensors header (declares {n} header bytes, "
                    f"file has {size})"
                )
            try:
                header = json.loads(f.read(n))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise ValueError(f"{self.path}: corrupt safetensors header: {e}") from None
        if not isinstance(header, dict):
            raise ValueError(f"{self.path}: corrupt safetensors header (not a JSON object)")
        self.metadata = header.pop("__metadata__", None) or {}
        self._data_start = 8 + n
        data_size = size - self._data_start
        self._entries = {}
        for name, info in header.items():
            try:
                dtype = _DTYPES[info["dtype"]]
                shape = tuple(int(s) for s in info["shape"])
                begin, end = (int(o) for o in info["data_offsets"])
            except (KeyError, TypeError, ValueError):
                raise ValueError(
                    f"{self.path}: tensor {name!r} has a malformed or unsupported entry {info!r}"
                ) from None
            if any(d < 0 for d in shape):
                raise ValueError(f"{self.path}: tensor {name!r} has a negative dimension {shape}")
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if not (0 <= begin <= end <= data_size) or end - begin != nbytes:
                raise ValueError(
                    f"{self.path}: tensor {name!r} offsets {begin}..{end} do not match its "
                    f"shape {shape} {info['dtype']} or the file size (truncated file?)"
                )
            self._entries[name] = (dtype, shape, begin)

    def keys(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def shape(self, name: str) -> tuple[int, ...]:
        return self._entries[name][1]

    def get(self, name: str) -> np.ndarray:
        """The tensor as a fresh array, read from the file on its own.

        Reading (not memory-mapping) each tensor means only the tensor being
        converted is resident: a whole mapped file would stay in this process's
        resident set until every tensor had been touched.
        """
        if name not in self._entries:
            raise KeyError(f"{self.path}: no tensor named {name!r}")
        dtype, shape, begin = self._entries[name]
        count = int(np.prod(shape, dtype=np.int64))
        arr = np.fromfile(self.path, dtype=dtype, count=count, offset=self._data_start + begin)
        return arr.reshape(shape)


def write_safetensors(path, tensors: dict[str, np.ndarray], metadata: dict | None = None) -> None:
    """Writes name -> array to `path` atomically (temp file, then rename)."""
    specs = {name: (arr.dtype, arr.shape) for name, arr in tensors.items()}
    write_safetensors_lazy(path, specs, tensors.__getitem__, metadata)


def write_safetensors_lazy(path, specs: dict, produce, metadata: dict | None = None) -> None:
    """Writes tensors one at a time, asking `produce(name)` for each only when it is written.

    Args:
      path: destination file; written to `path + ".tmp"` then renamed, so a crash
        never leaves a half-written checkpoint under the real name.
      specs: name -> (dtype, shape), in file order.
      produce: name -> np.ndarray with exactly that dtype and shape.
      metadata: optional string->string metadata.
    """
    if sys.byteorder != "little":
        raise NotImplementedError("safetensors writing needs a little-endian host")
    path = os.fspath(path)
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, (dtype, shape) in specs.items():
        dtype = np.dtype(dtype)
        if dtype not in _NAMES:
            raise ValueError(f"{path}: tensor {name!r} has unsupported dtype {dtype}")
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        header[name] = {
            "dtype": _NAMES[dtype],
            "shape": [int(s) for s in shape],
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(blob)))
            f.write(blob)
            for name, (dtype, shape) in specs.items():
                arr = np.asarray(produce(name))
                if arr.dtype != np.dtype(dtype) or tuple(arr.shape) != tuple(shape):
                    raise ValueError(
                        f"{path}: tensor {name!r} is {arr.dtype}{arr.shape}, "
                        f"expected {dtype}{tuple(shape)}"
                    )
                f.write(arr.tobytes(order="C"))
    except BaseException:
        # Never leave a partial file behind; the file under the real name is untouched.
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    os.replace(tmp, path)
