#!/usr/bin/env node
// Hugging Face tokenizers' encode speed, for bench/bench_tokenizer.cpp.
//   node tests/tokenizer/bench_hf.js TOKENIZER_JSON REPEATS FILE...
// Prints one JSON line per file: {"file", "bytes", "num_tokens", "checksum", "seconds"}
// (best of REPEATS, after one warm-up encode; checksum = sum of (i+1)*id mod 2^32).
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require(path.resolve(__dirname, '..', '..', 'node_modules', 'tokenizers'));

async function main() {
  const [tokPath, repeatsArg, ...files] = process.argv.slice(2);
  const tok = Tokenizer.fromFile(tokPath);
  const repeats = Number(repeatsArg);
  for (const file of files) {
    const text = fs.readFileSync(file, 'utf8');
    let ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
    let best = Infinity;
    for (let r = 0; r < repeats; ++r) {
      const t0 = process.hrtime.bigint();
      ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
      best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
    }
    let checksum = 0;
    for (let i = 0; i < ids.length; ++i) checksum = (checksum + Math.imul(i + 1, ids[i])) >>> 0;
    console.log(JSON.stringify({ file, bytes: Buffer.byteLength(text), num_tokens: ids.length, checksum, seconds: best }));
  }
}
main().catch((e) => {
  console.error(e);
  process.exit(1);
});
