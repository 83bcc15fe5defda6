#include "api/trace_context.h"

namespace prefix_router::api {
namespace {

bool IsLowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool AllZero(std::string_view s) { return s.find_first_not_of('0') == std::string_view::npos; }

void PutHex(char*& out, uint64_t v, int digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = digits - 1; i >= 0; --i) *out++ = kHex[(v >> (4 * i)) & 0xF];
}

}  // namespace

bool IsValidRequestId(std::string_view id) {
  if (id.empty() || id.size() > kMaxRequestIdBytes) return false;
  for (char c : id) {
    if (c < 0x20 || c > 0x7E) return false;
  }
  return true;
}

std::string_view FormatRequestId(uint64_t high, uint64_t low, std::array<char, kRequestIdLength>& out) {
  high = (high & ~0xF000ULL) | 0x4000ULL;                // version 4
  low = (low & ~(0xC000ULL << 48)) | (0x8000ULL << 48);  // variant 10xx
  char* p = out.data();
  PutHex(p, high >> 32, 8);
  *p++ = '-';
  PutHex(p, (high >> 16) & 0xFFFF, 4);
  *p++ = '-';
  PutHex(p, high & 0xFFFF, 4);
  *p++ = '-';
  PutHex(p, low >> 48, 4);
  *p++ = '-';
  PutHex(p, low & 0xFFFFFFFFFFFFULL, 12);
  return {out.data(), out.size()};
}

std::string FormatRequestId(uint64_t high, uint64_t low) {
  std::array<char, kRequestIdLength> out;
  return std::string(FormatRequestId(high, low, out));
}

std::optional<std::string_view> TraceIdOf(std::string_view tp) {
  // vv-<trace id: 32>-<parent id: 16>-<flags: 2>
  constexpr size_t kLength = 55;
  if (tp.size() < kLength || tp[2] != '-' || tp[35] != '-' || tp[52] != '-') return std::nullopt;
  const std::string_view version = tp.substr(0, 2);
  const std::string_view trace_id = tp.substr(3, 32);
  const std::string_view parent_id = tp.substr(36, 16);
  const std::string_view flags = tp.substr(53, 2);
  if (!IsLowerHex(version) || version == "ff" || !IsLowerHex(trace_id) || !IsLowerHex(parent_id) ||
      !IsLowerHex(flags) || AllZero(trace_id) || AllZero(parent_id)) {
    return std::nullopt;
  }
  if (tp.size() > kLength && (version == "00" || tp[kLength] != '-')) return std::nullopt;
  return trace_id;
}

}  // namespace prefix_router::api
