#!/usr/bin/env node
// Encode and decode texts with Hugging Face's own tokenizer (npm `tokenizers`, the Rust
// library) for training/verify_tokenizer.py.
//   node training/hf_encode.js TOKENIZER_JSON < texts.json > result.json
// stdin: a JSON list of strings; stdout: {ids: [[...]], decoded: [string]} (no special
// tokens added, decode without skipping special tokens).
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require(path.join(__dirname, '..', 'node_modules', 'tokenizers'));

async function main() {
  const tok = Tokenizer.fromFile(process.argv[2]);
  const texts = JSON.parse(fs.readFileSync(0, 'utf8'));
  const enc = await tok.encodeBatch(texts, { addSpecialTokens: false });
  const ids = enc.map((e) => e.getIds());
  const decoded = await tok.decodeBatch(ids, false);
  process.stdout.write(JSON.stringify({ ids, decoded }));
}
main().catch((e) => { console.error(e); process.exit(1); });
