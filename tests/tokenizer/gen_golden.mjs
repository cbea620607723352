// tests/tokenizer/gen_golden.mjs — regenerate the tokenizer golden files with a real Hugging Face
// implementation (@huggingface/tokenizers, the JavaScript port of the `tokenizers` library that
// transformers' fast tokenizers run; it gives the same ids as Python's `tokenizer(text)` for these
// tokenizer.json files).
//
// How to rerun (outside the worktree, so node_modules never lands in the repo):
//   mkdir -p /tmp/tokref && cd /tmp/tokref && npm init -y
//   npm install --ignore-scripts @huggingface/tokenizers@0.2.0 @huggingface/transformers@4.3.2
//   cp <repo>/tests/tokenizer/gen_golden.mjs . && node gen_golden.mjs <fixtures> <repo>/tests/tokenizer
// --ignore-scripts skips onnxruntime's download step, which needs network access the tokenizers
// do not.
//
// Variant files (variant_*.json) exercise pipeline pieces the three fixtures lack (Llama-3 and
// Qwen2 style Split regexes + ByteLevel without regex, ignore_merges, NFC, Metaspace, Digits,
// RobertaProcessing): they hold {"base": fixture folder, "patch": top-level keys replaced (and
// "model" keys merged) in the fixture's tokenizer.json, "cases"}; no tokenizer_config is used.
// For NFC each case also says whether NFC changes the text ("nfc_changes").
//
// Each golden file is {"source", "tokenizer", "cases": [{"text", "ids", "decoded"}]} where `ids`
// is encode(text) with special tokens added by the post-processor, and `decoded` is
// decode(ids) with special tokens kept and no clean-up of tokenization spaces.  The script also
// cross-checks every id list against transformers.js's AutoTokenizer and stops on a mismatch.
import fs from 'node:fs';
import path from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import * as tfjs from '@huggingface/transformers';

const fixtures = process.argv[2];
const outdir = process.argv[3];
if (!fixtures || !outdir) {
  console.error('usage: gen_golden.mjs FIXTURES_DIR OUT_DIR');
  process.exit(2);
}

// Deterministic PRNG (mulberry32) so the text set is the same on every run.
function rng(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const fixed = [
  '', ' ', '  ', '   ', '\n', '\n\n', '\t', ' \n ', '\r\n', 'a', 'A', '0', '.',
  'Hello world', 'Hello, world!', 'hello   world', ' leading space', 'trailing space ',
  '  two leading', 'The quick brown fox jumps over the lazy dog.',
  "I'm sure you've seen it; they'll say it's what we'd do.", "DON'T SHOUT, YOU'RE LOUD", "O'Neill's",
  'émigré café naïve résumé', 'Ångström über straße façade', 'Ελληνικά κείμενα', 'Русский текст, привет!',
  'עברית', 'العربية نص', 'हिन्दी पाठ', 'ไทยภาษา', '日本語のテキストです。', '中文文本，测试一下。',
  '한국어 텍스트', 'ｆｕｌｌｗｉｄｔｈ　ｓｐａｃｅ', '😀', '👍🏽', '👩‍👩‍👧‍👦 family', '🇫🇷🇯🇵',
  'emoji 😀 in 🎉 text 🚀!', '1', '12', '123', '1234', '12345', '1234567890', '3.14159265358979',
  '0x7fffffff', '2026-11-29T09:10:00Z', '$1,234.56', '100%', '1e-5', '007', '  123  456  ',
  'tab\there', 'tabs\t\t\tmany', 'line1\nline2', 'para1\n\npara2', 'crlf\r\nline', 'trailing newline\n',
  'spaces     inside     text', 'mixed \t \n whitespace', '\u00a0non-breaking\u00a0space',
  'ideographic\u3000space', 'zero\u200bwidth', 'line\u2028separator', 'nel\u0085char',
  'ǅ titlecase', 'combining e\u0301 accent', 'ﬁ ligature', 'Ω ohm Ω', 'ℌ𝔢𝔩𝔩𝔬 math', '𝟙𝟚𝟛 digits',
  'int main(void) { return 0; }', 'for (i = 0; i < n; i++) {\n    sum += a[i];\n}',
  'def f(x):\n    return x ** 2\n', '    indented code', '#include <stdio.h>', 'a->b && c || !d',
  'x = [1, 2, 3]  # comment', '<html><body>hi</body></html>', '{"key": "value", "n": 42}',
  'https://example.com/path?q=1&r=2', 'user@example.org', '!!!???...', '---', '___init___',
  '`code` *bold* _it_', '"quoted" \'single\'', '(parens) [brackets] {braces}', '~`!@#$%^&*()-_=+',
  '▁already▁meta▁space', 'Ġ Ċ ĉ', '\\backslash\\n', 'café\ncafé', 'ALLCAPS WORD', 'camelCaseWord',
  'snake_case_word', 'kebab-case-word', 'a b c d e f g', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
  '0000000000000000000000000', '1 2 3 4 5 6 7 8 9 0', '01234', '43210', '4 3 2 1 0', '0,1,2,3,4',
  '5678', '012 34', '\n0\n1\n', 'x01234x',
];

const pools = {
  ascii: ['the', 'of', 'and', 'layer', 'quantize', 'tensor', 'Hello', 'World', 'GPU', 'NVFP4', 'x', 'is',
          "it's", "we're", 'a', 'token'],
  accent: ['é', 'à', 'ü', 'ñ', 'ç', 'ø', 'Å', 'ß', 'ő', 'ł', 'ě', 'naïve', 'crème'],
  cjk: ['日本', '語', '中文', '测试', 'の', 'テキスト', '한국', '字', '漢字'],
  emoji: ['😀', '🚀', '👍🏽', '🎉', '❤️', '🧪', '👩‍💻', '🇩🇪'],
  digits: ['0', '7', '42', '123', '2026', '31415926', '99999', '0.5', '1,000'],
  ws: [' ', '  ', '   ', '\t', '\n', '\n\n', ' \n', '\r\n', '\u00a0'],
  punct: ['.', ',', '!', '?', ';', ':', '-', '(', ')', '"', "'", '/', '\\', '#', '...', '—', '«', '»'],
};
const poolNames = Object.keys(pools);

function randomTexts(seed, n, specials) {
  const r = rng(seed);
  const out = [];
  for (let i = 0; i < n; i++) {
    const len = 1 + Math.floor(r() * 14);
    let s = '';
    for (let j = 0; j < len; j++) {
      if (specials.length && r() < 0.06) { s += specials[Math.floor(r() * specials.length)]; continue; }
      const p = pools[poolNames[Math.floor(r() * poolNames.length)]];
      s += p[Math.floor(r() * p.length)];
      if (r() < 0.5) s += ' ';
    }
    out.push(s);
  }
  return out;
}

function specialTexts(specials) {
  const out = [];
  for (const t of specials) {
    out.push(t, `${t}${t}`, `a${t}b`, `hello ${t} world`, `${t} start`, `end ${t}`, `x\n${t}\ny`,
             `  ${t}  `, `12${t}34`, `é${t}😀`);
  }
  return out;
}

function digitTexts(seed, n) {
  const r = rng(seed);
  const out = [];
  for (let i = 0; i < n; i++) {
    const len = 1 + Math.floor(r() * 20);
    let s = '';
    for (let j = 0; j < len; j++) s += r() < 0.8 ? String(Math.floor(r() * 10)) : ' ';
    out.push(s);
  }
  return out;
}

const cases = [
  ['tokenizer-gpt2-bytelevel-bpe', 'gpt2_bytelevel_bpe.json', 1],
  ['tokenizer-tinyllama-sentencepiece-bpe', 'tinyllama_sentencepiece_bpe.json', 2],
  ['agilerl-tiny-qwen3-moe', 'agilerl_wordlevel.json', 3],
];

tfjs.env.allowRemoteModels = false;
tfjs.env.localModelPath = fixtures.endsWith('/') ? fixtures : fixtures + '/';

for (const [dir, outName, seed] of cases) {
  const tj = JSON.parse(fs.readFileSync(path.join(fixtures, dir, 'tokenizer.json'), 'utf8'));
  const tc = JSON.parse(fs.readFileSync(path.join(fixtures, dir, 'tokenizer_config.json'), 'utf8'));
  const tok = new Tokenizer(tj, tc);
  const auto = await tfjs.AutoTokenizer.from_pretrained(dir);
  const specials = tj.added_tokens.map((t) => t.content);
  const texts = [...fixed, ...specialTexts(specials), ...randomTexts(seed, 120, specials),
                 ...digitTexts(seed + 100, 30)];
  const seen = new Set();
  const out = [];
  for (const text of texts) {
    if (seen.has(text)) continue;
    seen.add(text);
    const ids = tok.encode(text).ids;
    const ids2 = auto.encode(text);
    if (JSON.stringify(ids) !== JSON.stringify(ids2)) {
      console.error(`${dir}: tokenizers.js and transformers.js disagree on ${JSON.stringify(text)}:`,
                    JSON.stringify(ids), JSON.stringify(ids2));
      process.exit(1);
    }
    const decoded = ids.length ? tok.decode(ids, { skip_special_tokens: false,
                                                   clean_up_tokenization_spaces: false }) : '';
    out.push({ text, ids, decoded });
  }
  const doc = { source: 'tests/tokenizer/gen_golden.mjs with @huggingface/tokenizers 0.2.0',
                tokenizer: dir, cases: out };
  fs.writeFileSync(path.join(outdir, outName),
                   '{"source":' + JSON.stringify(doc.source) + ',"tokenizer":' + JSON.stringify(dir) +
                   ',"cases":[\n' + out.map((c) => JSON.stringify(c)).join(',\n') + '\n]}\n');
  console.log(`${outName}: ${out.length} cases`);
}

// ---- variants ---------------------------------------------------------------------------------
const LLAMA3_RE = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2_RE = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Texts NFC changes: combining sequences (also out of canonical order), conjoining jamo,
// singletons, composition exclusions, two-starter compositions.
const nfcTexts = ['e\u0301', 'cafe\u0301 au lait', 'a\u0308\u0301', 'o\u0323\u0302', 'o\u0302\u0323',
  '\u1100\u1161\u11A8 \u1100\u1161', '\u2126 and \u212B', 'A\u030A', '\u0344', '\u0958\u0959',
  '\u00C5\u0301', 'u\u0308\u0304', '\uFB2A', '\u1E9B\u0323', 'A\u0327\u0301', '\u0B47\u0B3E',
  '\u304B\u3099 \u30CF\u309A', '\uF900\uF901', '\u1F71\u1FFD', 'e\u0301\u0301', '\u0301 leading mark',
  '\u00e9\u0300', 'Vie\u0302\u0323t Nam', '\u0915\u093C', 'n\u0303o\u0303 s\u0327a\u0303',
  'I\u0307stanbul', '\u1112\u1161\u11AB\u1100\u116E\u11A8\u110B\u1165', 'x\u0300\u0316\u0301y'];
const variants = [
  ['variant_llama3_style.json', 'tokenizer-gpt2-bytelevel-bpe', {
    model: { ignore_merges: true },
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { Regex: LLAMA3_RE }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] },
    post_processor: { type: 'Sequence', processors: [
      { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
      { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '<|endoftext|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
        pair: [], special_tokens: { '<|endoftext|>': { id: '<|endoftext|>', ids: [50256], tokens: ['<|endoftext|>'] } } }] },
  }],
  ['variant_qwen2_style.json', 'tokenizer-gpt2-bytelevel-bpe', {
    normalizer: { type: 'NFC' },
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { Regex: QWEN2_RE }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false }] },
  }],
  ['variant_metaspace.json', 'tokenizer-tinyllama-sentencepiece-bpe', {
    normalizer: null,
    pre_tokenizer: { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: false },
    decoder: { type: 'Sequence', decoders: [{ type: 'ByteFallback' }, { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: false }] },
  }],
  ['variant_digits_roberta.json', 'tokenizer-gpt2-bytelevel-bpe', {
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Digits', individual_digits: true },
      { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true }] },
    post_processor: { type: 'RobertaProcessing', sep: ['<|endoftext|>', 50256], cls: ['<|endoftext|>', 50256],
                      trim_offsets: true, add_prefix_space: true },
  }],
  ['variant_added_strip.json', 'tokenizer-tinyllama-sentencepiece-bpe', {
    added_tokens: [
      { id: 0, content: '<unk>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
      { id: 1, content: '<s>', single_word: false, lstrip: false, rstrip: true, normalized: false, special: true },
      { id: 2, content: '</s>', single_word: false, lstrip: true, rstrip: false, normalized: false, special: true }],
  }],
];

for (const [outName, base, patch] of variants) {
  const tj = JSON.parse(fs.readFileSync(path.join(fixtures, base, 'tokenizer.json'), 'utf8'));
  for (const [k, v] of Object.entries(patch)) {
    if (k === 'model') Object.assign(tj.model, v); else tj[k] = v;
  }
  const tok = new Tokenizer(tj, {});
  const specials = tj.added_tokens.map((t) => t.content);
  let texts = [...fixed, ...specialTexts(specials), ...randomTexts(7, 120, specials)];
  if (patch.normalizer && patch.normalizer.type === 'NFC') texts = [...texts, ...nfcTexts];
  // tokenizers.js's Digits splits on ASCII \d, the Rust crate on char::is_numeric (all of
  // Unicode N), so texts with other numerals would record the JS port's divergence, not
  // Python's ids; test_tokenizer.c checks the Rust behaviour on them instead.
  if (JSON.stringify(patch).includes('"Digits"')) texts = texts.filter((t) => !/[^\P{N}0-9]/u.test(t));
  const seen = new Set();
  const out = [];
  for (const text of texts) {
    if (seen.has(text)) continue;
    seen.add(text);
    const ids = tok.encode(text).ids;
    const decoded = ids.length ? tok.decode(ids, { skip_special_tokens: false,
                                                   clean_up_tokenization_spaces: false }) : '';
    const c = { text, ids, decoded };
    if (patch.normalizer && patch.normalizer.type === 'NFC') c.nfc_changes = text.normalize('NFC') !== text;
    out.push(c);
  }
  fs.writeFileSync(path.join(outdir, outName),
                   '{"source":"tests/tokenizer/gen_golden.mjs with @huggingface/tokenizers 0.2.0","base":' +
                   JSON.stringify(base) + ',"patch":' + JSON.stringify(patch) + ',"cases":[\n' +
                   out.map((c) => JSON.stringify(c)).join(',\n') + '\n]}\n');
  console.log(`${outName}: ${out.length} cases`);
}
