#!/usr/bin/env python3
"""Writes the seed corpora of the tokenizer fuzz targets:

tests/fuzz/corpus/tokenizer_json/    small (< 4 KB) valid tokenizer.json files for tokenizer_json_fuzz:
    byte-level BPE (GPT-2 ByteLevel pre-tokenizer; Llama-3 Split regex + ByteLevel with ignore_merges,
    TemplateProcessing and a tokenizer_config.json part), SentencePiece-style BPE (Metaspace with byte
    fallback and fuse_unk; Llama-2 legacy Prepend/Replace normalizers with a partial byte set), and one
    mixing NFC, Digits, Split behaviours, added-token lstrip/rstrip and Roberta/Bert post-processors.
    A file may carry a tokenizer_config.json after a NUL byte (JSON text never holds a raw NUL), which
    is how the fuzz target splits its input.
tests/fuzz/corpus/tokenizer_encode/  short texts for tokenizer_encode_fuzz: prose, code, CJK, emoji,
    whitespace runs, digits, special-token text, invalid UTF-8.

Every tokenizer.json is loaded with HF `tokenizers` (when installed) to prove it is valid, and the
script fails if a file reaches 4 KB. Deterministic; re-run after changing it:
    python3 scripts/gen_tokenizer_seeds.py [CORPUS_DIR]   (default tests/fuzz/corpus)
"""
import json
import pathlib
import sys

SPM_SPACE = "\u2581"
MAX_SEED_BYTES = 4096


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (the ByteLevel alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1))
    bs += list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_CHARS = bytes_to_unicode()


# Whitespace controls and printable ASCII in the ByteLevel alphabet: enough for seeds whose point is not
# the full alphabet (missing bytes are dropped, as HF does without an unk_token), and small.
ASCII_ALPHABET = [BYTE_CHARS[b] for b in list(range(0x09, 0x0E)) + list(range(0x20, 0x7F))]


def bl(text):
    """`text` written in the ByteLevel alphabet."""
    return "".join(BYTE_CHARS[b] for b in text.encode())


def vocab_with_merges(base, merges):
    """base tokens (ids in order) + one token per merge, as HF stores them."""
    vocab = {}
    for t in base:
        vocab.setdefault(t, len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return vocab


def added(id_, content, special=True, lstrip=False, rstrip=False):
    return {"id": id_, "content": content, "single_word": False, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": not special, "special": special}


def bpe_model(vocab, merges, **extra):
    m = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
         "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]}
    m.update(extra)
    return m


def tokenizer(model, normalizer=None, pre_tokenizer=None, post_processor=None, decoder=None, added_tokens=()):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": list(added_tokens),
            "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": post_processor,
            "decoder": decoder, "model": model}


def byte_level_merges(words):
    """Left-to-right merges that build each word (in the ByteLevel alphabet) from its characters."""
    merges = []
    for w in words:
        cur = w[0]
        for ch in w[1:]:
            if (cur, ch) not in merges:
                merges.append((cur, ch))
            cur += ch
    return merges


def gpt2_bytelevel():
    merges = byte_level_merges([bl(w) for w in [" the", " a", "he", "ll", " world", "in", "er", "on", "Hello", "!!"]])
    vocab = vocab_with_merges([BYTE_CHARS[b] for b in range(256)], merges)
    eot = len(vocab)
    return tokenizer(
        bpe_model(vocab, merges),
        pre_tokenizer={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        post_processor={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        added_tokens=[added(eot, "<|endoftext|>")])


LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def llama3_split():
    merges = byte_level_merges([bl(w) for w in [" the", "ing", " 123", "\n\n", "  ", "Hi"]])
    vocab = vocab_with_merges(ASCII_ALPHABET, merges)
    vocab[bl(" unmerged")] = len(vocab)  # reachable only through ignore_merges
    bos, eot, user = len(vocab), len(vocab) + 1, len(vocab) + 2
    tok = tokenizer(
        bpe_model(vocab, merges, ignore_merges=True),
        pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        post_processor={"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos],
                                                      "tokens": ["<|begin_of_text|>"]}}}]},
        added_tokens=[added(bos, "<|begin_of_text|>"), added(eot, "<|eot_id|>"), added(user, "<tool>", False)])
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<|begin_of_text|>",
              "eos_token": {"content": "<|eot_id|>", "special": True},
              "chat_template": "{% for m in messages %}{{ m['content'] }}<|eot_id|>{% endfor %}"}
    return tok, config


def spm_vocab(chars, words, byte_ids=range(256)):
    """<unk>, <s>, </s>, <0xNN> byte tokens, single characters, then each word built left to right."""
    base = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in byte_ids] + list(chars)
    merges = []
    for w in words:
        cur = w[0]
        for ch in w[1:]:
            if (cur, ch) not in merges:
                merges.append((cur, ch))
            cur += ch
    return vocab_with_merges(base, merges), merges


def spm_metaspace():
    s = SPM_SPACE
    # Some ASCII control/punctuation bytes and the bytes of a few multi-byte characters (all 256 would
    # not fit the seed budget); characters with a missing byte become <unk>.
    byte_ids = list(range(0x00, 0x10)) + [0x20, 0x21, 0x2C, 0x2E, 0x3F, 0x80, 0x96, 0x99, 0x9F, 0xA0, 0xA6, 0xBD,
                                          0xC3, 0xE2, 0xE4, 0xF0]
    vocab, merges = spm_vocab(s + "abcdehlorw", [s + "hello", s + "world", s + "a", "ab", s + "ab"],
                              byte_ids=byte_ids)
    return tokenizer(
        bpe_model(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True),
        pre_tokenizer={"type": "Metaspace", "replacement": s, "prepend_scheme": "first", "split": False},
        post_processor={"type": "TemplateProcessing",
                        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        decoder={"type": "Metaspace", "replacement": s, "prepend_scheme": "first", "split": False},
        added_tokens=[added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")])


def spm_legacy():
    s = SPM_SPACE
    # Only some byte tokens: characters whose bytes are missing fall back to <unk>.
    byte_ids = [0x0A, 0x21, 0x3F, 0xE4, 0xB8, 0x96, 0xF0, 0x9F]
    vocab, merges = spm_vocab(s + "abehinst", [s + "is", s + "a", "in", "st", s + "this", s + "test"],
                              byte_ids=byte_ids)
    return tokenizer(
        bpe_model(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True),
        normalizer={"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": s},
            {"type": "Replace", "pattern": {"String": " "}, "content": s}]},
        post_processor={"type": "TemplateProcessing",
                        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                   {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                                           "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}},
        decoder={"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": s}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        added_tokens=[added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")])


def mixed():
    s = SPM_SPACE
    vocab, merges = spm_vocab(s + "0123456789abc\u00e9", [s + "abc", "ab", "c\u00e9"],
                              byte_ids=[0x09, 0x0A, 0x20, 0x21, 0x2C, 0x2D, 0x3B, 0x3F, 0xC3, 0xA9])
    n = len(vocab)
    tok = tokenizer(
        bpe_model(vocab, merges, unk_token="<unk>", byte_fallback=True),
        normalizer={"type": "Sequence", "normalizers": [{"type": "NFC"}]},
        pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "Metaspace", "replacement": s, "prepend_scheme": "always", "split": True},
            {"type": "Digits", "individual_digits": True},
            {"type": "Split", "pattern": {"String": "--"}, "behavior": "Removed", "invert": False},
            {"type": "Split", "pattern": {"Regex": "[,;]"}, "behavior": "MergedWithPrevious", "invert": False},
            {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "MergedWithNext", "invert": True}]},
        post_processor={"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1],
                        "trim_offsets": True, "add_prefix_space": True},
        added_tokens=[added(0, "<unk>"), added(1, "<s>"), added(2, "</s>"),
                      added(n, "<mask>", True, lstrip=True), added(n + 1, "[SEP]", False, rstrip=True)])
    # Merges also come as [a, b] pairs in newer tokenizer.json files.
    tok["model"]["merges"] = [[a, b] for a, b in merges]
    return tok


def bert_processing():
    merges = byte_level_merges([bl(w) for w in [" hi", "yo"]])
    vocab = vocab_with_merges(["[CLS]", "[SEP]"] + ASCII_ALPHABET, merges)
    return tokenizer(
        bpe_model(vocab, merges),
        normalizer={"type": "Replace", "pattern": {"String": "\t"}, "content": "    "},
        pre_tokenizer={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        post_processor={"type": "BertProcessing", "sep": ["[SEP]", 1], "cls": ["[CLS]", 0]},
        added_tokens=[added(0, "[CLS]"), added(1, "[SEP]")])


def dump(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


TEXTS = {
    "prose.txt": "Hello world! The quick brown fox jumps over the lazy dog. It's 2024, isn't it?\n",
    "code.txt": "def f(x):\n    return x * 2  # doubled\n\n\tif (a && b) { c[i] += 0x1F; }\n",
    "cjk_emoji.txt": "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u3053\u3093\u306b\u3061\u306f \U0001f999 caf\u00e9 na\u00efve",
    "spaces.txt": "   leading\n\n\n  \t trailing   \r\n  ",
    "digits.txt": "1 12 123 1234 12345 3.14159 -42 \u0661\u0662\u0663 \u2167",
    "special_llama3.txt": "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "special_spm.txt": "<s>[INST] hi [/INST] ok</s><unk>",
    "spm_space.txt": "\u2581a \u2581\u2581b",
    "byte_alphabet.txt": "\u0120\u010a \u0100 <0x41> \u00ff",
}
BINARY = {
    "invalid_utf8.bin": b"ok \xff\xfe bad \xc3 cut \xe2\x82 end\xf0\x9f\x98",
    "nul_ctrl.bin": b"a\x00b\x01\x7f\x1b[0m\x00",
}


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fuzz/corpus")
    jdir, edir = root / "tokenizer_json", root / "tokenizer_encode"
    jdir.mkdir(parents=True, exist_ok=True)
    edir.mkdir(parents=True, exist_ok=True)
    llama3, llama3_cfg = llama3_split()
    seeds = {
        "gpt2_bytelevel.json": (gpt2_bytelevel(), None),
        "llama3_split.json": (llama3, llama3_cfg),
        "spm_metaspace.json": (spm_metaspace(), None),
        "spm_legacy.json": (spm_legacy(), None),
        "mixed.json": (mixed(), None),
        "bert_processing.json": (bert_processing(), None),
    }
    try:
        from tokenizers import Tokenizer
    except ImportError:
        Tokenizer = None
        print("tokenizers not installed: seeds not validated", file=sys.stderr)
    for name, (tok, cfg) in seeds.items():
        data = dump(tok)
        if Tokenizer is not None:
            t = Tokenizer.from_str(data.decode())
            t.encode("Hello world, this is a test 123 \u4f60\u597d <s>!")
        if cfg is not None:
            data += b"\0" + dump(cfg)
        if len(data) >= MAX_SEED_BYTES:
            sys.exit(f"{name}: {len(data)} bytes, over the {MAX_SEED_BYTES}-byte seed budget")
        (jdir / name).write_bytes(data)
        print(f"{jdir / name}: {len(data)} bytes")
    for name, text in TEXTS.items():
        (edir / name).write_bytes(text.encode())
    for name, data in BINARY.items():
        (edir / name).write_bytes(data)
    print(f"{edir}: {len(TEXTS) + len(BINARY)} texts")


if __name__ == "__main__":
    main()
