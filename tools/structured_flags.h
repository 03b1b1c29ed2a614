// The structured-output flags `kiln generate` and `kiln grammar` share:
//   --json-schema FILE|JSON  --json-object  --regex RE  --choice TEXT (repeatable)  --grammar FILE
#pragma once

#include <string>

#include "args.h"
#include "kiln/engine.h"

namespace kiln::tools {

inline constexpr const char* kStructuredHelp =
    "structured output (docs/structured.md; at most one):\n"
    "  --json-schema S        output is JSON valid under schema S (a file, or the JSON itself)\n"
    "  --json-object          output is a JSON object\n"
    "  --regex RE             output matches RE in full\n"
    "  --choice TEXT          output is one of the --choice texts (repeatable)\n"
    "  --grammar FILE         output is a sentence of this GBNF grammar (llama.cpp's dialect)\n";

// Flags (no value) and options (with one) to add to an Args.
inline const char* const kStructuredFlags[] = {"--json-object"};
inline const char* const kStructuredOptions[] = {"--json-schema", "--regex", "--choice", "--grammar"};

// Fills `out` from the flags (kind "" when none is given); false with *error set for two at once or
// an unreadable file.
bool parse_structured_flags(const Args& args, StructuredOutput& out, std::string* error);

}  // namespace kiln::tools
