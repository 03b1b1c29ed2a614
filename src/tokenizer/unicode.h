// UTF-8 helpers and the GPT-2 byte-level alphabet used by the tokenizers.
//
// Byte-level BPE (GPT-2, Llama-3, Qwen2) stores every token as a string over a 256-character
// alphabet: byte b is written as the code point bytes_to_unicode(b) (the table from OpenAI's
// gpt-2 encoder.py, also HF tokenizers' ByteLevel: printable bytes '!'..'~', 0xA1..0xAC and
// 0xAE..0xFF map to themselves, the other 68 bytes to U+0100.. in increasing byte order).
// Invalid UTF-8 is never an error here: decoders report one byte at a time so callers can fall
// back to byte tokens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::tokenizer {

// Length of the UTF-8 sequence a lead byte announces (1 for ASCII and for invalid lead bytes).
inline size_t utf8_len(uint8_t lead) {
    if (lead < 0x80) return 1;
    if ((lead & 0xE0) == 0xC0) return 2;
    if ((lead & 0xF0) == 0xE0) return 3;
    if ((lead & 0xF8) == 0xF0) return 4;
    return 1;
}

// Decodes the code point at s[pos]; sets *len to the bytes consumed (>= 1). Returns -1 for an
// invalid or truncated sequence (then *len is 1).
int32_t utf8_decode(std::string_view s, size_t pos, size_t* len);

// Appends the UTF-8 encoding of `cp` (must be <= 0x10FFFF).
void utf8_append(std::string& out, uint32_t cp);

// Number of bytes at the end of `s` that form an incomplete (but so far valid) UTF-8 sequence,
// i.e. bytes to hold back when streaming. 0 if `s` ends on a character boundary.
size_t utf8_incomplete_tail(std::string_view s);

// True if the whole string is valid UTF-8.
bool utf8_valid(std::string_view s);

// The byte-level alphabet: code point standing for byte b, and the inverse (-1 if the code point
// is not in the alphabet).
uint32_t byte_to_unicode(uint8_t b);
int32_t unicode_to_byte(uint32_t cp);

// Canonical composition (Unicode NFC) of valid UTF-8 text; invalid sequences are copied through.
// Returns false (and leaves `out` untouched) when the text is already NFC-stable by a cheap test,
// so callers can keep using the input.
bool nfc_normalize(std::string_view in, std::string& out);

}  // namespace kiln::tokenizer
