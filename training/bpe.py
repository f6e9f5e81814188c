"""Byte-level BPE as Qwen2/Qwen3's tokenizer.json describes it, in plain Python.

encode(text): split out added tokens (leftmost, longest first) -> NFC -> the Qwen2 split
regex -> each piece's UTF-8 bytes as GPT-2's byte-to-unicode letters -> BPE by merge rank
-> ids. decode(ids): the inverse (added tokens as their text). No BOS, no post-processing.
"""
import json
import unicodedata

import regex

# The pre-tokenizer pattern of Qwen2/Qwen3 (the Split step of their tokenizer.json).
SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPLIT_RE = regex.compile(SPLIT_PATTERN)


def bytes_to_unicode():
    """GPT-2's map from the 256 byte values to printable unicode letters (a bijection)."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    out, extra = {}, 0
    for b in range(256):
        if b in printable:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)  # the bytes that are not printable go to U+0100...
            extra += 1
    return out


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def pretokenize(text):
    """NFC text -> list of pieces as byte-level strings (one letter per UTF-8 byte)."""
    return ["".join(BYTE_TO_CHAR[b] for b in piece.encode("utf-8")) for piece in SPLIT_RE.findall(text)]


def apply_merges(symbols, ranks):
    """Repeatedly merge the adjacent pair with the lowest rank; symbols: list of strings."""
    while len(symbols) > 1:
        best, best_rank = None, None
        for i in range(len(symbols) - 1):
            r = ranks.get((symbols[i], symbols[i + 1]))
            if r is not None and (best_rank is None or r < best_rank):
                best, best_rank = i, r
        if best is None:
            break
        symbols = symbols[:best] + [symbols[best] + symbols[best + 1]] + symbols[best + 2:]
    return symbols


class Tokenizer:
    def __init__(self, vocab, merges, added_tokens):
        """vocab: {byte-level string: id}; merges: [(a, b)] in rank order;
        added_tokens: {text: id}."""
        self.vocab, self.added = vocab, added_tokens
        self.ranks = {pair: i for i, pair in enumerate(merges)}
        self.id_to_token = {i: t for t, i in vocab.items()}
        self.id_to_added = {i: t for t, i in added_tokens.items()}
        self.first_chars = {t[0] for t in added_tokens}
        self.cache = {}

    @classmethod
    def from_file(cls, path):
        with open(path, encoding="utf-8") as f:
            t = json.load(f)
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in t["model"]["merges"]]
        added = {a["content"]: a["id"] for a in t["added_tokens"]}
        return cls(t["model"]["vocab"], merges, added)

    def encode_piece(self, piece):
        ids = self.cache.get(piece)
        if ids is None:
            ids = [self.vocab[s] for s in apply_merges(list(piece), self.ranks)]
            self.cache[piece] = ids
        return ids

    def split_added(self, text):
        """-> [(segment, is_added)], added tokens found leftmost first, longest on a tie."""
        out, start, i = [], 0, 0
        by_length = sorted(self.added, key=len, reverse=True)
        while i < len(text):
            hit = next((t for t in by_length if text.startswith(t, i)), None) if text[i] in self.first_chars else None
            if hit:
                if start < i:
                    out.append((text[start:i], False))
                out.append((hit, True))
                i = start = i + len(hit)
            else:
                i += 1
        if start < len(text):
            out.append((text[start:], False))
        return out

    def encode(self, text):
        ids = []
        for segment, is_added in self.split_added(text):
            if is_added:
                ids.append(self.added[segment])
            else:
                for piece in pretokenize(unicodedata.normalize("NFC", segment)):
                    ids.extend(self.encode_piece(piece))
        return ids

    def decode_bytes(self, ids):
        out = bytearray()
        for i in ids:
            if i in self.id_to_added:
                out += self.id_to_added[i].encode("utf-8")
            else:
                out += bytes(CHAR_TO_BYTE[c] for c in self.id_to_token[i])
        return bytes(out)

    def decode(self, ids):
        return self.decode_bytes(ids).decode("utf-8", errors="replace")
