// http_common.h: OpenAI errors, the bearer-key check and httplib's error handlers.
#include "server/http_common.h"

#include <exception>

namespace kiln::server {
namespace {

// Compares without an early exit, so the time taken does not reveal the key's prefix.
bool equal_const_time(const std::string& a, const std::string& b) {
    size_t diff = a.size() ^ b.size();
    for (size_t i = 0; i < a.size(); ++i) diff |= uint8_t(a[i]) ^ uint8_t(i < b.size() ? b[i] : 0);
    return diff == 0;
}

const char* status_message(int status) {
    switch (status) {
        case 400:
            return "bad request (malformed HTTP or body)";
        case 404:
            return "no such route";
        case 405:
            return "method not allowed";
        case 413:
            return "the request body is larger than the limit";
        case 414:
            return "the request URI is too long";
        default:
            return "request failed";
    }
}

}  // namespace

void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    res.set_content(error_json(e), "application/json");
}

std::optional<ApiError> auth_error(const httplib::Request& req, const std::string& api_key) {
    const std::string& path = req.path;
    const bool guarded = path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
    if (api_key.empty() || !guarded) return std::nullopt;
    const std::string got = req.get_header_value("Authorization");
    if (equal_const_time(got, "Bearer " + api_key)) return std::nullopt;
    return ApiError{401, got.empty() ? "missing API key (Authorization: Bearer KEY)" : "invalid API key",
                    "invalid_request_error", "", "invalid_api_key"};
}

void install_error_handlers(httplib::Server& h) {
    h.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string type = res.status == 404 ? "not_found_error" : "invalid_request_error";
        send_error(res, {res.status, status_message(res.status), type, "", ""});
        return httplib::Server::HandlerResponse::Handled;
    }));
    h.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
            if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        send_error(res, {500, what, "server_error", "", ""});
    });
}

}  // namespace kiln::server
