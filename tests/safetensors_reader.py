#!/usr/bin/env python3
"""An independent safetensors reader and writer: the other side of tests/test_safetensors_numpy.cpp.

It uses only json, struct and numpy and shares no code with mixgrad, so when the two agree the
files follow the format rather than merely agreeing with themselves.

  safetensors_reader.py read FILE
      Checks the layout (header length, JSON, every entry, the tensors tiling the data buffer) and
      prints one tab-separated line per item, metadata first, then tensors in name order:
        metadata  KEY   VALUE
        tensor    NAME  DTYPE  SHAPE  VALUES
      SHAPE is the sizes joined by "x" ("" for a 0-d tensor); VALUES are the elements in row-major
      order: of a floating dtype as repr() of a float64, which every F16, BF16, F32 and F64 value is
      exactly, so the C++ side compares them bit for bit ("nan", "inf" and "-0.0" included); of an
      integer dtype (I32, I64, U8, BOOL) as the integer, exact past 2^53 where a float64 is not.
  safetensors_reader.py write FILE
      Writes TENSORS and METADATA below the way numpy users do; the C++ test loads the file and
      expects these exact values.

Exits with status 1 and a message on stderr when a file breaks the format.
"""
import json
import struct
import sys

import numpy as np

MAX_HEADER_BYTES = 100_000_000  # the reference implementation's limit

# numpy has no bfloat16: BF16 is read as uint16 and decoded by hand in to_float64.
NUMPY_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "F64": "<f8", "I32": "<i4", "I64": "<i8", "U8": "|u1",
                "BOOL": "|b1"}
INTEGERS = {"I32", "I64", "U8", "BOOL"}

# What `write` stores. The data buffer holds them in WRITE_ORDER, which is not name order, and the
# header lists "__metadata__" between tensors: a reader must go by data_offsets, not by position.
TENSORS = {
    "layer.weight": np.array([[0.1, -2.5, 3.4028234663852886e38], [1e-45, -0.0, np.inf]], dtype="<f4"),
    "layer.half": np.array([0.1, 65504.0, 2.0**-24, -1.0 / 3.0], dtype="<f2"),
    "labels": np.array([-(2**31), 0, 2**31 - 1], dtype="<i4"),
    "scale": np.array(0.1, dtype="<f8"),  # 0-d
    "empty": np.zeros((0, 3), dtype="<f4"),
}
WRITE_ORDER = ["labels", "scale", "layer.half", "empty", "layer.weight"]
METADATA = {"format": "np", "writer": "tests/safetensors_reader.py"}
DTYPE_NAMES = {"<f4": "F32", "<f2": "F16", "<i4": "I32", "<f8": "F64"}


def fail(message):
    print(f"safetensors_reader.py: {message}", file=sys.stderr)
    sys.exit(1)


def printed(raw, dtype, shape):
    """The elements as text: integers as themselves, floating values as repr() of their float64."""
    values = np.frombuffer(raw, dtype=NUMPY_DTYPES[dtype])
    if dtype == "BOOL" and np.any(np.frombuffer(raw, dtype="|u1") > 1):
        fail("a BOOL byte other than 0 or 1")
    if dtype in INTEGERS:
        return " ".join(str(int(v)) for v in values.flat)
    return " ".join(repr(float(v)) for v in to_float64(raw, dtype, shape).flat)


def to_float64(raw, dtype, shape):
    values = np.frombuffer(raw, dtype=NUMPY_DTYPES[dtype])
    if dtype == "BF16":  # bfloat16 is the high half of a float32
        values = (values.astype("<u4") << 16).view("<f4")
    return values.astype(np.float64).reshape(shape)


def read(path):
    with open(path, "rb") as f:
        content = f.read()
    if len(content) < 8:
        fail(f"{path}: {len(content)} bytes, too short for the header length")
    (header_length,) = struct.unpack("<Q", content[:8])
    if header_length > MAX_HEADER_BYTES or 8 + header_length > len(content):
        fail(f"{path}: header length {header_length} does not fit the {len(content)}-byte file")
    header = json.loads(content[8 : 8 + header_length].decode("utf-8"))
    if not isinstance(header, dict):
        fail(f"{path}: the header is not a JSON object")
    buffer = content[8 + header_length :]

    metadata = header.pop("__metadata__", {})
    for key, value in sorted(metadata.items()):
        if not isinstance(value, str) or any(c in key + value for c in "\t\n"):
            fail(f"{path}: metadata {key!r} is not a printable string")
        print(f"metadata\t{key}\t{value}")

    covered = 0
    for name, entry in sorted(header.items(), key=lambda item: tuple(item[1]["data_offsets"])):
        if set(entry) != {"dtype", "shape", "data_offsets"} or entry["dtype"] not in NUMPY_DTYPES:
            fail(f"{path}: tensor {name!r} has a bad entry {entry}")
        begin, end = entry["data_offsets"]
        itemsize = np.dtype(NUMPY_DTYPES[entry["dtype"]]).itemsize
        if begin != covered or end - begin != int(np.prod(entry["shape"], dtype=np.int64)) * itemsize:
            fail(f"{path}: tensor {name!r} has data_offsets {entry['data_offsets']} out of place or of the wrong size")
        covered = end
    if covered != len(buffer):
        fail(f"{path}: the tensors cover {covered} bytes of a {len(buffer)}-byte data buffer")

    for name, entry in sorted(header.items()):
        begin, end = entry["data_offsets"]
        shape = "x".join(str(size) for size in entry["shape"])
        print("\t".join(["tensor", name, entry["dtype"], shape, printed(buffer[begin:end], entry["dtype"], entry["shape"])]))


def write(path):
    entries, chunks, offset = {}, [], 0
    for position, name in enumerate(WRITE_ORDER):
        if position == 2:
            entries["__metadata__"] = METADATA
        array = TENSORS[name]
        raw = array.tobytes()
        entries[name] = {"dtype": DTYPE_NAMES[array.dtype.str], "shape": list(array.shape),
                         "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    header = json.dumps(entries).encode("utf-8")  # json's default ", " and ": ": whitespace is allowed
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + b"".join(chunks))


if __name__ == "__main__":
    sys.stdout.reconfigure(encoding="utf-8")  # tensor names may be any UTF-8, whatever the locale
    if len(sys.argv) != 3 or sys.argv[1] not in ("read", "write"):
        fail("usage: safetensors_reader.py read|write FILE")
    (read if sys.argv[1] == "read" else write)(sys.argv[2])
