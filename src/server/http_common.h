// What `kiln serve` (http_server.cc) and `kiln router` (proxy.cc) do alike over cpp-httplib: OpenAI
// error replies, the bearer-key check, and error bodies for httplib's own rejections and for
// exceptions out of a handler.
#pragma once

#include <httplib.h>

#include <optional>
#include <string>

#include "server/openai_schema.h"

namespace kiln::server {

void send_error(httplib::Response& res, const ApiError& e);

// With a key set, the 401 for a request to a guarded route (/v1/*, /tokenize, /detokenize) whose
// `Authorization: Bearer KEY` is missing or wrong (compared in constant time); nullopt otherwise.
std::optional<ApiError> auth_error(const httplib::Request& req, const std::string& api_key);

// httplib's own rejections (bad HTTP, no route, a body over the limit) and a handler's exception
// answered with OpenAI error bodies.
void install_error_handlers(httplib::Server& h);

}  // namespace kiln::server
