// GGUF metadata <-> JSON text, so that a GGUF tokenizer (tokenizer.ggml.*) can ride inside a
// safetensors __metadata__ string ("kiln.gguf_tokenizer") and come back bit-exact.
// Encoding: a JSON array of {"key": K, "type": T, "value": V} in metadata order; T is the GGUF type
// name (u8 ... f64, bool, string, array). V is the plain JSON value, except: an array is
// {"elem_type": T, "items": [...]}; a string that is not valid UTF-8 is {"hex": "..."}; a
// non-finite float is the string "nan", "inf" or "-inf". f32/f64 go through JSON doubles, which
// round-trip exactly. Decoding checks every type and caps nesting and element counts like the
// GGUF reader does.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "formats/gguf.h"

namespace kiln::loader {

using GgufMetadata = std::vector<std::pair<std::string, formats::GgufValue>>;

std::string gguf_metadata_to_json(const GgufMetadata& metadata);
core::Result<GgufMetadata> gguf_metadata_from_json(const std::string& text, const std::string& where);

}  // namespace kiln::loader
