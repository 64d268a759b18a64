// What keeps a web page from using `flashdllm serve` through a visitor's browser (issue 49, item 5),
// and the optional API key. Pure functions over header values, checked before routing.
//
// * Host (DNS rebinding: a page on evil.example whose name is made to resolve to 127.0.0.1 sends
//   `Host: evil.example:8000`): the host name must be an IP literal, `localhost`, the server's own
//   --host, or one named by --allowed-host (`*`: any). Otherwise 421.
// * Origin (a cross-origin form or `fetch` POST of `text/plain` needs no CORS preflight, so the
//   browser sends it and only hides the answer: the generation would run): a request carrying an
//   Origin other than the server's own (scheme://Host) and not named by --cors-origin (`*`: any)
//   gets 403 before anything runs. Non-browser clients send no Origin.
// * CORS headers only for the origins named by --cors-origin (none by default), with their
//   OPTIONS preflight answered 204.
// * API key (--api-key): the /v1/ routes need `Authorization: Bearer <key>` (compared in constant
//   time), else 401 `invalid_api_key`. /health, /metrics and the page stay open.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/openai.h"

namespace flashdllm::server {

struct WebGuardOptions {
  std::string listen_host;                 ///< --host (a name given there is allowed as Host)
  std::vector<std::string> allowed_hosts;  ///< --allowed-host ("*": any)
  std::vector<std::string> cors_origins;   ///< --cors-origin ("*": any)
  std::string api_key;                     ///< --api-key ("" = none)
};

/// The host name of a Host header value ("name:port", "[v6]:port"), lower-cased, without the port.
std::string host_name(const std::string& host_header);

/// The error for a request's Host, Origin and Authorization header values (empty when absent) on
/// `path`, in that order; nullopt when it may go on.
std::optional<ApiError> check_web_request(const WebGuardOptions& o, const std::string& path, const std::string& host,
                                          const std::string& origin, const std::string& authorization);

/// Whether responses to `origin` carry CORS headers (a --cors-origin names it).
bool cors_allowed(const WebGuardOptions& o, const std::string& origin);

}  // namespace flashdllm::server
