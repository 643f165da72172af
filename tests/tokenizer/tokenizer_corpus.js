// Deterministic test corpus for the tokenizer oracle test: hand-picked strings plus generated
// ones (seeded PRNG), covering many scripts, emoji sequences, whitespace runs, code, numbers,
// special-token strings inside text, byte-token look-alikes and very long lines.
// Every string is valid Unicode (no lone surrogates), so it survives JSON and UTF-8 unchanged.
'use strict';

function mulberry32(seed) {
  let a = seed >>> 0;
  return function () {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const HAND = [
  '', ' ', '  ', '   ', '\t', '\n', '\n\n', '\n\n\n', '\t\n', '\r\n', '\r', ' \n ', '\u00a0',
  'Hello world', ' Hello world', 'Hello World', ' Hello World!', 'Hello, world!',
  'ied 4 ½ months', 'Äpfel', 'w048 7tuijk dsdfhu', "Hello, y'all! How are you 😁 ?",
  'The quick brown fox jumps over the lazy dog.', 'THE QUICK BROWN FOX', 'tHe QuIcK bRoWn',
  // Scripts and languages.
  'Bonjour, ça va ? Très bien, merci.', 'Größenwahn und Übermut: Straße, Fuß, Maß.',
  '¿Dónde está la biblioteca? ¡Allí!', 'Ação, coração, não, pão.', 'Perché è così difficile?',
  'Zażółć gęślą jaźń', 'Příliš žluťoučký kůň úpěl ďábelské ódy', 'Çok güzel, ığdır, şişli',
  'Cửa hàng Tiếng Việt rất đẹp', 'Съешь же ещё этих мягких французских булок, да выпей чаю.',
  'Привіт, як справи? Їжак і ґанок.', 'Γειά σου Κόσμε, ελληνικά γράμματα: αβγδεζηθ',
  'שלום עולם, מה שלומך?', 'مرحبا بالعالم! كيف حالك؟', 'سلام دنیا، حال شما چطور است؟',
  'नमस्ते दुनिया, आप कैसे हैं?', 'হ্যালো বিশ্ব', 'வணக்கம் உலகம்', 'హలో ప్రపంచం',
  'สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่าง', 'សួស្តី​ពិភពលោក', 'ສະບາຍດີ', 'မင်္ဂလာပါ',
  'გამარჯობა მსოფლიო', 'Բարեւ աշխարհ', 'ሰላም ልዑል', '你好，世界！今天天气很好。', '繁體中文測試：臺灣、香港',
  'こんにちは世界、カタカナとひらがなと漢字', '안녕하세요 세계, 한국어 테스트입니다', 'Сайн байна уу',
  'བཀྲ་ཤིས་བདེ་ལེགས།', 'ආයුබෝවන්', 'ꦲꦤꦕꦫꦏ', '𐌰𐌱𐌲 gothic', '𝐀𝐁𝐂 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙', '𠀀𠀁𠀂 CJK ext B',
  'ᚠᚢᚦᚨᚱᚲ runes', '⠓⠑⠇⠇⠕ braille', 'Ꭰ Ꭱ Ꭲ cherokee', 'ᐃᓄᒃᑎᑐᑦ',
  // Emoji: simple, skin tones, ZWJ families, flags, keycaps, variation selectors.
  '🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ (only emoji that has its own token)',
  '👍👍🏻👍🏼👍🏽👍🏾👍🏿', '👨‍👩‍👧‍👦 family', '👩‍❤️‍💋‍👨', '🏳️‍🌈 🏴‍☠️', '🇺🇸🇬🇧🇯🇵🇩🇪🇫🇷', '1️⃣2️⃣#️⃣*️⃣',
  '☺️ ☺ ❤️ ❤', '🧑‍💻🧑🏽‍🚀', '😀😃😄😁😆😅😂🤣', '🫠🫢🫣🫡🫥', 'e\u0301 é e\u0308 ë',
  'a\u200bb\u200cc\u200dd', '\u202eright-to-left override\u202c', '\ufeffBOM at start', 'x\u2028y\u2029z',
  'ideographic\u3000space', 'thin\u2009space and\u00a0nbsp', 'soft\u00adhyphen', '\u0000nul\u0001ctl\u007f',
  // Whitespace.
  '    Hello\n    Hello', '\n =', "' era", ' (', '\t\t\tindented\n\t\tless\n\tleast',
  'trailing spaces    ', '    leading spaces', 'a  b   c    d     e', 'line1\r\nline2\r\n',
  ' \n \n\n \t \t\t \t\n  \n   \n    \n     \n',
  // Code.
  'def f(x):\n    return x ** 2  # square\n', 'int main() { return 0; }',
  'for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}', '{"key": "value", "n": [1, 2, 3]}',
  '<div class="x"><span>hi</span></div>', '<table><tr><td>1</td></tr></table>', '<a href="#">link</a>',
  'SELECT * FROM users WHERE id = 42;', '$ ls -la | grep foo && echo done', '```python\nprint(1)\n```',
  '| a | b |\n|---|---|\n| 1 | 2 |', '\\frac{a}{b} + \\sqrt{x^2}', 'x => x * 2; y -> z; a != b',
  '#include <vector>\nstd::vector<int> v{1,2,3};', '    // comment\n    /* block */',
  // Numbers.
  '3', '33', '333', '3333', '33333', '333333', '3333333', '33333333', '333333333', '3.3', '3..3',
  '3...3', '1,234,567.89', '-0.0001', '1e-10', '0x7FFF', '+1 (555) 123-4567', '2024-01-31T12:34:56Z',
  '12345678901234567890123456789012345678901234567890', '١٢٣٤٥ ٦٧٨٩', '一二三四五', '½ ¼ ¾ ⅓',
  // Long words.
  'pneumonoultramicroscopicsilicovolcanoconiosis', 'Donaudampfschifffahrtsgesellschaftskapitän',
  'supercalifragilisticexpialidocious', 'antidisestablishmentarianism',
  // Special token strings inside text.
  '<bos>', '<eos>', '<pad>', '<unk>', '<mask>', '[multimodal]', '<bos>Hello<eos>', 'a<bos>b',
  '<|turn>user\nHello<turn|>\n<|turn>model\n', '<|turn>', '<turn|>', '<|think|>', '<|channel>thought\n<channel|>',
  '<|tool>declaration:f{}<tool|>', '<|tool_call>call:f{a:1}<tool_call|>', '<|tool_response>r<tool_response|>',
  '<|"|>quoted<|"|>', '<start_of_image>', '<end_of_image>', '<image_soft_token>', '<unused0>', '<unused99>',
  '<start_of_turn>', '<end_of_turn>', '<|tur', '<turn', '<|turn|>', '<<|turn>>', '<|turn><|turn>',
  'x<|turn>y<turn|>z', '<b>bold</b>', '<h1>Title</h1>', '<code>x</code>', '</s> <s>',
  // Byte-token look-alikes and literal metaspace characters.
  '<0x41>', '<0x0A>', '<0xFF>', '<0xZZ>', '<0x>', '<0x4>', '<0x41><0x42>', '▁', '▁▁', '▁▁▁', '▁hello',
  'a▁b', '▁ ▁', '>▁</', '> </', 'a> </b', '<a> </a>', '>▁▁</', '>  </', 'x> </y> </z',
  // Punctuation runs.
  '!!!!!!', '??????', '......', "''''''", '``````', '""""', '------=======', '***___~~~',
  "I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
  // URLs and emails.
  'https://example.com/path?query=1&b=2#frag', 'mailto:someone@example.org', 'C:\\Users\\x\\file.txt',
];

function pick(rng, arr) { return arr[Math.floor(rng() * arr.length)]; }
function randInt(rng, lo, hi) { return lo + Math.floor(rng() * (hi - lo + 1)); }

function randomCodePoint(rng, lo, hi) {
  for (;;) {
    const cp = randInt(rng, lo, hi);
    if (cp < 0xd800 || cp > 0xdfff) return String.fromCodePoint(cp);
  }
}

// Character classes for random strings.
const CLASSES = [
  (r) => pick(r, 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'.split('')),
  (r) => pick(r, 'abcdefghijklmnopqrstuvwxyz'.split('')).repeat(randInt(r, 1, 8)),
  (r) => pick(r, '0123456789'.split('')),
  (r) => pick(r, '.,;:!?()[]{}<>/\\|@#$%^&*-_=+~`\'"'.split('')),
  (r) => ' '.repeat(randInt(r, 1, 5)),
  (r) => '\n'.repeat(randInt(r, 1, 3)),
  (r) => '\t'.repeat(randInt(r, 1, 3)),
  (r) => randomCodePoint(r, 0xa0, 0x24f),      // Latin-1, Latin Extended
  (r) => randomCodePoint(r, 0x370, 0x3ff),     // Greek
  (r) => randomCodePoint(r, 0x400, 0x4ff),     // Cyrillic
  (r) => randomCodePoint(r, 0x590, 0x6ff),     // Hebrew, Arabic
  (r) => randomCodePoint(r, 0x900, 0x97f),     // Devanagari
  (r) => randomCodePoint(r, 0xe00, 0xe7f),     // Thai
  (r) => randomCodePoint(r, 0x3040, 0x30ff),   // Kana
  (r) => randomCodePoint(r, 0x4e00, 0x9fff),   // CJK
  (r) => randomCodePoint(r, 0xac00, 0xd7a3),   // Hangul
  (r) => randomCodePoint(r, 0x1f300, 0x1faff), // emoji
  (r) => '\u200d',
  (r) => '\ufe0f',
  (r) => randomCodePoint(r, 0x300, 0x36f),     // combining marks
  (r) => randomCodePoint(r, 0x10000, 0x2ffff), // rare planes: mostly byte fallback
  (r) => randomCodePoint(r, 0x0, 0x1f),        // control characters
  (r) => randomCodePoint(r, 0x2000, 0x2bff),   // punctuation and symbols
  (r) => '▁',
  (r) => pick(r, ['<bos>', '<eos>', '<|turn>', '<turn|>', '<0x41>', '<unused3>', '<|', '|>', '<', '>',
                  '<start_of_image>', '<td>', '</div>', '[multimodal]', '<mask>']),
];

const WORDS = ('the of and to in is that it was for on are with as his they be at one have this ' +
    'from or had by hot word but what some we can out other were all there when up use your how ' +
    'said an each she which do their time if will way about many then them write would like so ' +
    'these her long make thing see him two has look more day could go come did number sound no most ' +
    'people my over know water than call first who may down side been now find any new work part ' +
    'take get place made live where after back little only round man year came show every good me ' +
    'give our under name very through just form sentence great think say help low line differ turn ' +
    'cause much mean before move right boy old too same tell does set three want air well also play ' +
    'small end put home read hand port large spell add even land here must big high such follow act ' +
    'why ask men change went light kind off need house picture try us again animal point mother ' +
    'world near build self earth father tokenizer inference engine expert mixture streaming').split(' ');

function sentence(rng) {
  const n = randInt(rng, 3, 18);
  const words = [];
  for (let i = 0; i < n; ++i) {
    let w = pick(rng, WORDS);
    if (i === 0 || rng() < 0.05) w = w[0].toUpperCase() + w.slice(1);
    if (rng() < 0.03) w = w.toUpperCase();
    if (rng() < 0.05) w += pick(rng, [',', ';', ':', ' -', "'s", 'n\'t']);
    if (rng() < 0.03) w = String(randInt(rng, 0, 100000));
    words.push(w);
  }
  return words.join(' ') + pick(rng, ['.', '.', '.', '!', '?', '...', '']);
}

function buildCorpus(vocabTokens) {
  const rng = mulberry32(0x5eed1234);
  const out = HAND.slice();

  // Whitespace runs around text.
  for (const ws of [' ', '\n', '\t', '\r\n', '▁', '\u00a0', '\u3000', ' \n', '\n ']) {
    for (const n of [1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 30, 31, 32, 33, 40]) {
      out.push('x' + ws.repeat(n) + 'y');
      out.push(ws.repeat(n));
      out.push(ws.repeat(n) + 'Hello');
    }
  }
  // Random mixed strings.
  for (let i = 0; i < 900; ++i) {
    const parts = [];
    const n = randInt(rng, 1, 40);
    const classes = [];
    for (let k = 0, m = randInt(rng, 1, 5); k < m; ++k) classes.push(pick(rng, CLASSES));
    for (let k = 0; k < n; ++k) parts.push(pick(rng, classes)(rng));
    out.push(parts.join(''));
  }
  // English-like sentences and paragraphs.
  for (let i = 0; i < 300; ++i) {
    const n = randInt(rng, 1, 6);
    const s = [];
    for (let k = 0; k < n; ++k) s.push(sentence(rng));
    out.push(s.join(rng() < 0.2 ? '\n' : ' '));
  }
  // Numbers in many shapes.
  for (let i = 0; i < 150; ++i) {
    const v = rng() * Math.pow(10, randInt(rng, 0, 15));
    out.push(pick(rng, [String(Math.floor(v)), v.toFixed(randInt(rng, 1, 6)), v.toExponential(3),
                        '$' + Math.floor(v).toLocaleString('en-US'), '#' + Math.floor(v).toString(16)]));
  }
  // Concatenations of random vocabulary tokens (stresses merge order on real pieces).
  const cleanTokens = vocabTokens.filter((t) => !/^<0x[0-9A-F]{2}>$/.test(t));
  for (let i = 0; i < 500; ++i) {
    const n = randInt(rng, 1, 12);
    let s = '';
    for (let k = 0; k < n; ++k) s += pick(rng, cleanTokens);
    out.push(rng() < 0.7 ? s.replaceAll('▁', ' ') : s);
  }
  // Code-like lines.
  for (let i = 0; i < 100; ++i) {
    const id = pick(rng, WORDS) + '_' + pick(rng, WORDS);
    out.push(pick(rng, [
      `    ${id} = ${id}(${randInt(rng, 0, 999)}, "${pick(rng, WORDS)}")\n`,
      `if (${id} >= ${randInt(rng, 0, 99)}) {\n\treturn ${id}->${pick(rng, WORDS)};\n}`,
      `const ${id} = [${randInt(rng, 0, 9)}, ${randInt(rng, 0, 9)}];  // ${sentence(rng)}`,
      `<${pick(rng, ['div', 'span', 'td', 'li'])}>${sentence(rng)}</${pick(rng, ['div', 'span', 'td', 'li'])}>`,
    ]));
  }
  // Very long lines (whole lines are single BPE words for Gemma).
  let prose = '';
  while (prose.length < 60000) prose += sentence(rng) + ' ';
  out.push(prose);
  out.push('a'.repeat(50000));
  out.push('ab'.repeat(20000));
  out.push(' '.repeat(5000) + 'x');
  let cjk = '';
  for (let i = 0; i < 8000; ++i) cjk += randomCodePoint(rng, 0x4e00, 0x9fff);
  out.push(cjk);
  let emoji = '';
  for (let i = 0; i < 3000; ++i) emoji += randomCodePoint(rng, 0x1f300, 0x1faff);
  out.push(emoji);
  let mixed = '';
  for (let i = 0; i < 20000; ++i) mixed += pick(rng, CLASSES)(rng);
  out.push(mixed.replaceAll('\n', ' '));
  return out;
}

module.exports = { buildCorpus, mulberry32 };
