"""A tqdm-style progress bar for LLM.generate (no tqdm dependency), drawn on stderr:

    Generating:  37%|███▋      | 95/256 [00:12<00:20, Prefill=1234tok/s, Decode=567tok/s]
"""
import sys
import time

_EIGHTHS = " ▏▎▍▌▋▊▉█"


def format_interval(seconds):
    s = int(max(0.0, seconds))
    h, m, s = s // 3600, s // 60 % 60, s % 60
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def format_bar(desc, n, total, elapsed, postfix="", width=10):
    frac = min(max(n / total, 0.0), 1.0) if total > 0 else 0.0
    eighths = int(frac * width * 8)
    full, part = divmod(eighths, 8)
    bar = _EIGHTHS[8] * full
    if full < width:
        bar += _EIGHTHS[part] + " " * (width - full - 1)
    remaining = format_interval(elapsed / n * (total - n)) if 0 < n <= total else "?"
    head = f"{desc}: " if desc else ""
    tail = f", {postfix}" if postfix else ""
    return (f"{head}{frac * 100:3.0f}%|{bar}| {n}/{total} "
            f"[{format_interval(elapsed)}<{remaining}{tail}]")


class ProgressBar:
    """Redrawn in place at most every `mininterval` seconds (and when done), as tqdm does."""

    def __init__(self, total, desc="Generating", file=None, mininterval=0.1):
        self.total, self.desc, self.n = total, desc, 0
        self.file = file if file is not None else sys.stderr
        self.mininterval = mininterval
        self.prefill_tok_s = self.decode_tok_s = 0.0
        self.start = self.last_draw = time.perf_counter()
        self.closed = False
        self._last_len = 0
        self._drawn = None  # (n, postfix) of the last line drawn
        self._draw()

    @property
    def postfix(self):
        if not self.prefill_tok_s and not self.decode_tok_s:
            return ""
        return f"Prefill={int(self.prefill_tok_s)}tok/s, Decode={int(self.decode_tok_s)}tok/s"

    def update(self, num_done, prefill_tok_s=0.0, decode_tok_s=0.0):
        self.n += num_done
        if prefill_tok_s:
            self.prefill_tok_s = prefill_tok_s
        if decode_tok_s:
            self.decode_tok_s = decode_tok_s
        now = time.perf_counter()
        if now - self.last_draw >= self.mininterval or self.n >= self.total:
            self._draw(now)

    def close(self):
        if self.closed:
            return
        self.closed = True
        if self._drawn != (self.n, self.postfix):
            self._draw()
        self.file.write("\n")
        self.file.flush()

    def _draw(self, now=None):
        self.last_draw = now if now is not None else time.perf_counter()
        line = format_bar(self.desc, self.n, self.total, self.last_draw - self.start, self.postfix)
        self._drawn = (self.n, self.postfix)
        pad = " " * max(0, self._last_len - len(line))
        self._last_len = len(line)
        self.file.write("\r" + line + pad)
        self.file.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
