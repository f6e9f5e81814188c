"""Read R's lazy-load databases (data/Rdata.rdx + data/Rdata.rdb) without R.

The .rdx file is a compressed R serialization of a list:
    variables  = named list, one entry per object: an int vector [offset, length] into .rdb
    references = (unused here)
    compressed = how the .rdb entries are compressed (TRUE/1 = zlib)
Each .rdb entry, at [offset, offset + length), is a 4-byte big-endian uncompressed size
followed by a zlib stream of an R serialization ("X\n" = XDR, big-endian; version 2 or 3).

The unserializer covers what the janeaustenr data uses: NULL, symbols, pairlists
(attributes), character vectors (STRSXP of CHARSXP), lists (VECSXP), logical / integer /
double vectors and back-references. Anything else raises ValueError.
"""
import gzip
import struct
import zlib

NILVALUE_SXP, REFSXP = 254, 255
SYMSXP, LISTSXP, CHARSXP, LGLSXP, INTSXP, REALSXP, STRSXP, VECSXP = 1, 2, 9, 10, 13, 14, 16, 19
NA_INT = -2**31
LATIN1_MASK, UTF8_MASK = 1 << 2, 1 << 3


class RObject:
    """A value with R attributes (e.g. names); .value is a Python list/str/None."""

    def __init__(self, value, attributes):
        self.value, self.attributes = value, attributes

    def names(self):
        return self.attributes.get("names")


class Unserializer:
    def __init__(self, data):
        self.data, self.pos, self.refs = data, 0, []

    def read(self, n):
        out = self.data[self.pos:self.pos + n]
        if len(out) != n:
            raise ValueError("truncated R serialization")
        self.pos += n
        return out

    def int(self):
        return struct.unpack(">i", self.read(4))[0]

    def length(self):
        n = self.int()
        if n == -1:  # long vector: two ints, upper then lower 32 bits
            hi, lo = self.int(), self.int()
            n = (hi << 32) | lo
        return n

    def header(self):
        if self.read(2) != b"X\n":
            raise ValueError("only the XDR (binary, big-endian) R format is supported")
        version = self.int()
        self.int(), self.int()  # R version that wrote it, oldest R that can read it
        if version == 3:
            self.read(self.int())  # native encoding name, e.g. "UTF-8"
        elif version != 2:
            raise ValueError(f"unknown R serialization version {version}")

    def attributes(self):
        """A pairlist of attributes -> dict (tag name -> value)."""
        pairs = self.item()
        return dict(pairs.value) if isinstance(pairs, RObject) else {}

    def item(self):
        flags = self.int()
        kind = flags & 0xFF
        has_attr, has_tag = bool(flags & (1 << 9)), bool(flags & (1 << 10))
        levels = flags >> 12
        if kind == NILVALUE_SXP:
            return None
        if kind == REFSXP:
            index = flags >> 8 or self.int()
            return self.refs[index - 1]
        if kind == SYMSXP:
            name = self.item()  # a CHARSXP
            self.refs.append(name)
            return name
        if kind == CHARSXP:
            n = self.int()
            if n == -1:
                return None  # NA_character_
            raw = self.read(n)
            return raw.decode("latin-1" if levels & LATIN1_MASK else "utf-8")
        if kind == LISTSXP:  # pairlist: (attr) (tag) car, then cdr iteratively
            pairs = []
            while True:
                attrs = self.attributes() if has_attr else {}
                tag = self.item() if has_tag else None
                pairs.append((tag, self.item()))
                flags = self.int()
                kind = flags & 0xFF
                has_attr, has_tag = bool(flags & (1 << 9)), bool(flags & (1 << 10))
                if kind == NILVALUE_SXP:
                    return RObject(pairs, attrs)
                if kind != LISTSXP:
                    raise ValueError(f"pairlist tail of SEXP type {kind} is not supported")
        if kind in (STRSXP, VECSXP):
            value = [self.item() for _ in range(self.length())]
        elif kind in (LGLSXP, INTSXP):
            n = self.length()
            value = [None if v == NA_INT else v for v in struct.unpack(f">{n}i", self.read(4 * n))]
        elif kind == REALSXP:
            n = self.length()
            value = list(struct.unpack(f">{n}d", self.read(8 * n)))
        else:
            raise ValueError(f"SEXP type {kind} is not supported")
        return RObject(value, self.attributes() if has_attr else {})


def unserialize(data):
    u = Unserializer(data)
    u.header()
    return u.item()


def decompress(blob):
    return gzip.decompress(blob) if blob[:2] == b"\x1f\x8b" else zlib.decompress(blob)


def load_rdata(rdx_path, rdb_path):
    """-> {object name: RObject} for every object of an R package's data/Rdata.rd[xb]."""
    with open(rdx_path, "rb") as f:
        index = unserialize(decompress(f.read()))
    fields = dict(zip(index.names().value, index.value))
    compressed = fields["compressed"].value[0]
    if compressed not in (True, 1):
        raise ValueError(f"rdb compression {compressed} is not zlib")
    variables = fields["variables"]
    with open(rdb_path, "rb") as f:
        rdb = f.read()
    out = {}
    for name, where in zip(variables.names().value, variables.value):
        offset, length = where.value
        entry = rdb[offset:offset + length]
        size = struct.unpack(">I", entry[:4])[0]
        payload = zlib.decompress(entry[4:])
        if len(payload) != size:
            raise ValueError(f"{rdb_path}: entry {name} has {len(payload)} bytes, expected {size}")
        out[name] = unserialize(payload)
    return out
