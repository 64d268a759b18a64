// Host, Origin and API-key checks of `flashdllm serve` (web_guard.h).
#include "server/web_guard.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace flashdllm::server {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool listed(const std::vector<std::string>& list, const std::string& value) {
  return std::any_of(list.begin(), list.end(), [&](const std::string& v) { return v == "*" || lower(v) == value; });
}

bool ip_literal(const std::string& name) {
  unsigned char buf[16];
  return inet_pton(AF_INET, name.c_str(), buf) == 1 || inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

/// "scheme://authority" of an Origin header, the authority lower-cased; "" for "null" or garbage.
std::string origin_authority(const std::string& origin) {
  const size_t sep = origin.find("://");
  if (sep == std::string::npos) return {};
  return lower(origin.substr(sep + 3));
}

/// Equal in time independent of where they differ (the key's length is not hidden).
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

ApiError refusal(int status, std::string message, std::string code) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

}  // namespace

std::string host_name(const std::string& host_header) {
  std::string h = lower(host_header);
  if (!h.empty() && h.front() == '[') {  // [v6]:port
    const size_t close = h.find(']');
    return close == std::string::npos ? h : h.substr(1, close - 1);
  }
  if (const size_t colon = h.rfind(':'); colon != std::string::npos && h.find(':') == colon) h.resize(colon);
  return h;
}

std::optional<ApiError> check_web_request(const WebGuardOptions& o, const std::string& path, const std::string& host,
                                          const std::string& origin, const std::string& authorization) {
  if (!host.empty()) {
    const std::string name = host_name(host);
    if (!(ip_literal(name) || name == "localhost" || name == lower(o.listen_host) || listed(o.allowed_hosts, name)))
      return refusal(421,
                     fmt::format("Host '{}' is not a name of this server (a page on another site may be using "
                                 "your browser): start it with --allowed-host {} to serve that name",
                                 host, name),
                     "host_not_allowed");
  }
  if (!origin.empty()) {
    const bool same = !host.empty() && origin_authority(origin) == lower(host);
    if (!same && !listed(o.cors_origins, lower(origin)))
      return refusal(403,
                     fmt::format("requests from the web origin '{}' are not accepted (start the server with "
                                 "--cors-origin {} to allow it)",
                                 origin, origin),
                     "origin_not_allowed");
  }
  if (!o.api_key.empty() && path.rfind("/v1/", 0) == 0) {
    static const std::string kBearer = "Bearer ";
    const bool ok =
        authorization.rfind(kBearer, 0) == 0 && same_secret(authorization.substr(kBearer.size()), o.api_key);
    if (!ok)
      return refusal(401,
                     authorization.empty() ? "this server needs an API key: send 'Authorization: Bearer <key>'"
                                           : "Incorrect API key provided",
                     "invalid_api_key");
  }
  return std::nullopt;
}

bool cors_allowed(const WebGuardOptions& o, const std::string& origin) {
  return !origin.empty() && listed(o.cors_origins, lower(origin));
}

}  // namespace flashdllm::server
