"""A minimal safetensors writer and reader (bf16 / fp32 tensors).

File layout: 8-byte little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}} padded with
spaces to a multiple of 8, then the tensors' raw little-endian bytes back to back
(offsets are relative to the end of the header).
"""
import json
import struct

import torch

DTYPES = {torch.bfloat16: "BF16", torch.float32: "F32"}
FROM_NAME = {v: k for k, v in DTYPES.items()}


def tensor_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bf16: go through the int16 bit pattern
        t = t.view(torch.int16)
    return t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()


def save(tensors, path, metadata=None):
    """tensors: {name: torch tensor}; written in sorted name order."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        blob = tensor_bytes(t)
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def load(path):
    """-> {name: torch tensor} (bf16 stays bf16)."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    base, out = 8 + n, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = FROM_NAME[info["dtype"]]
        buf = bytearray(raw[base + begin:base + end])
        if dtype == torch.bfloat16:
            t = torch.frombuffer(buf, dtype=torch.int16).view(torch.bfloat16)
        else:
            t = torch.frombuffer(buf, dtype=dtype)
        out[name] = t.reshape(info["shape"])
    return out
