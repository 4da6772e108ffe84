"""Read one novel out of the Debian package r-cran-janeaustenr (Jane Austen's six novels as R data), no R needed.

The package keeps its data as an R lazy-load database (data/Rdata.rdx: the gzip'ed index; data/Rdata.rdb: one
zlib-compressed serialized object per variable). Each novel is a character vector, one element per line of the
Project Gutenberg text. This reads the index, unserializes the named vector and prints its lines, joined by
newlines, so the output is the package's text exactly (an NA line, if any, prints as an empty line).

    python3 janeausten_rdata.py DATA_DIR prideprejudice > prideprejudice.txt

DATA_DIR is .../usr/lib/R/site-library/janeaustenr/data of the extracted package. Standard library only.
"""
from __future__ import annotations

import gzip
import struct
import sys
import zlib
from pathlib import Path

NILVALUE, REF, SYM, LIST, LANG, CHAR, LGL, INT, REAL, STR, VEC, EXPR = 254, 255, 1, 2, 6, 9, 10, 13, 14, 16, 19, 20


class Unserializer:
    """The subset of R's XDR serialization (format 2 or 3) that character vectors and the index list use."""

    def __init__(self, data: bytes) -> None:
        if data[:2] != b"X\n":
            raise ValueError("not an R XDR serialization")
        self.data, self.pos, self.refs = data, 2, []
        version = self.int()
        self.int(), self.int()  # R version that wrote it, minimal reader version
        if version == 3:
            length = self.int()  # the native encoding's name follows
            self.pos += length

    def int(self) -> int:
        (value,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return value

    def read(self):
        flags = self.int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind == NILVALUE:
            return None
        if kind == REF:
            index = flags >> 8 or self.int()
            return self.refs[index - 1]
        if kind == SYM:
            symbol = ("symbol", self.read())
            self.refs.append(symbol)
            return symbol
        if kind == CHAR:
            length = self.int()
            if length == -1:
                return None
            text = self.data[self.pos:self.pos + length].decode("utf-8")
            self.pos += length
            return text
        if kind in (LIST, LANG):
            attributes = self.read() if has_attr else None
            tag = self.read() if has_tag else None
            head = self.read()
            rest = self.read()
            return {"tag": tag, "value": head, "attributes": attributes, "next": rest}
        if kind in (STR, VEC, EXPR):
            values = [self.read() for _ in range(self.int())]
        elif kind in (LGL, INT):
            n = self.int()
            values = list(struct.unpack_from(f">{n}i", self.data, self.pos))
            self.pos += 4 * n
        elif kind == REAL:
            n = self.int()
            values = list(struct.unpack_from(f">{n}d", self.data, self.pos))
            self.pos += 8 * n
        else:
            raise ValueError(f"R type {kind} is not handled")
        attributes = self.read() if has_attr else None
        return {"values": values, "attributes": attributes}


def pairlist(node) -> dict:
    out = {}
    while node is not None:
        out[node["tag"][1]] = node["value"]
        node = node["next"]
    return out


def names(vector) -> list[str]:
    return pairlist(vector["attributes"])["names"]["values"]


def novel(data_dir: Path, name: str) -> list[str]:
    index = Unserializer(gzip.decompress((data_dir / "Rdata.rdx").read_bytes())).read()
    variables = index["values"][names(index).index("variables")]
    offset, length = variables["values"][names(variables).index(name)]["values"]
    blob = (data_dir / "Rdata.rdb").read_bytes()[offset:offset + length]
    vector = Unserializer(zlib.decompress(blob[4:])).read()  # 4 bytes: the uncompressed length
    return ["" if line is None else line for line in vector["values"]]


if __name__ == "__main__":
    sys.stdout.write("\n".join(novel(Path(sys.argv[1]), sys.argv[2])) + "\n")
