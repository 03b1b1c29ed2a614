// The static pages `kiln serve` serves: the chat playground (GET /) and the live dashboard (GET
// /dashboard). Their sources are src/server/web/*.html, compiled into the binary as they are (CMake
// writes them into web_assets.cc at configure time: no JavaScript build step, nothing fetched from a
// CDN). docs/server.md "Playground and dashboard".
#pragma once

#include <string_view>

namespace kiln::server {

std::string_view playground_html();
std::string_view dashboard_html();

}  // namespace kiln::server
