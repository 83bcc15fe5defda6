// Credentials never reach a message: URLs quoted in errors and logs go through RedactUrl.
#pragma once

#include <string>
#include <string_view>

namespace prefix_router::api {

// `url` with the user information of its authority (`user:password@` in
// scheme://user:password@host/...) replaced by `***@`; any other text unchanged. Works on
// malformed input too (that is when a URL gets quoted in an error): the authority is what
// follows "://" (or the start, without a scheme) up to the first '/', '?' or '#', and
// everything in it before its last '@' is user information.
inline std::string RedactUrl(std::string_view url) {
  const size_t scheme = url.find("://");
  const size_t start = scheme == std::string_view::npos ? 0 : scheme + 3;
  const size_t end = std::min(url.find_first_of("/?#", start), url.size());
  const size_t at = url.substr(0, end).rfind('@');
  if (at == std::string_view::npos || at < start) return std::string(url);
  std::string out(url.substr(0, start));
  out += "***";
  out += url.substr(at);
  return out;
}

}  // namespace prefix_router::api
