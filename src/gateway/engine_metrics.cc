#include "gateway/engine_metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

namespace prefix_router::gateway {
namespace {

enum class Metric { kOther, kRunning, kWaiting, kKvUsage, kGpuUsage, kCacheQueries, kCacheHits };

Metric Classify(std::string_view name) {
  if (name == "vllm:num_requests_running") return Metric::kRunning;
  if (name == "vllm:num_requests_waiting") return Metric::kWaiting;
  if (name == "vllm:kv_cache_usage_perc") return Metric::kKvUsage;
  if (name == "vllm:gpu_cache_usage_perc") return Metric::kGpuUsage;
  if (name == "vllm:prefix_cache_queries_total") return Metric::kCacheQueries;
  if (name == "vllm:prefix_cache_hits_total") return Metric::kCacheHits;
  return Metric::kOther;
}

bool NameChar(char c, bool first) {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
  return alpha || (!first && c >= '0' && c <= '9');
}

// The sample value of one line (after the name and labels): a Prometheus float, then an optional
// timestamp. False when it is not one.
bool ParseValue(std::string_view rest, double& out) {
  size_t i = 0;
  while (i < rest.size() && (rest[i] == ' ' || rest[i] == '\t')) ++i;
  size_t end = i;
  while (end < rest.size() && rest[end] != ' ' && rest[end] != '\t') ++end;
  std::string_view token = rest.substr(i, end - i);
  if (token.empty()) return false;
  if (token.front() == '+') token.remove_prefix(1);  // "+Inf"; from_chars takes no '+'
  const auto r = std::from_chars(token.data(), token.data() + token.size(), out);
  return r.ec == std::errc() && r.ptr == token.data() + token.size();
}

struct Sum {
  double total = 0;
  size_t series = 0;
};

Status Bad(size_t line, std::string_view what) {
  return Status::InvalidArgument("metrics line " + std::to_string(line) + ": " + std::string(what));
}

}  // namespace

Result<EngineLoad> ParseEngineMetrics(std::string_view text) {
  Sum running, waiting, kv, gpu, queries, hits;
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t i = 0;
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i == line.size() || line[i] == '#') continue;
    const size_t name_start = i;
    while (i < line.size() && NameChar(line[i], i == name_start)) ++i;
    const Metric metric = Classify(line.substr(name_start, i - name_start));
    if (metric == Metric::kOther) continue;  // not ours: not even checked
    if (i < line.size() && line[i] == '{') {
      // Labels: name="value" pairs; a value may hold escaped quotes and braces.
      bool quoted = false, closed = false;
      for (++i; i < line.size(); ++i) {
        const char c = line[i];
        if (quoted) {
          if (c == '\\') {
            ++i;
          } else if (c == '"') {
            quoted = false;
          }
        } else if (c == '"') {
          quoted = true;
        } else if (c == '}') {
          closed = true;
          ++i;
          break;
        }
      }
      if (!closed) return Bad(line_no, "unterminated label set");
    }
    double value = 0;
    if (!ParseValue(line.substr(i), value)) return Bad(line_no, "no sample value");
    const bool count = metric == Metric::kRunning || metric == Metric::kWaiting;
    const bool tokens = metric == Metric::kCacheQueries || metric == Metric::kCacheHits;
    if (tokens) {
      if (!std::isfinite(value) || value < 0) return Bad(line_no, "a token counter must be finite and not negative");
    } else if (!std::isfinite(value) || value < 0 || (count && value > 2147483647.0) ||
               (!count && value > 1.0 + 1e-9)) {
      return Bad(line_no, count ? "a request count must be a whole number from 0 to 2^31-1"
                                : "a KV cache usage must be from 0 to 1");
    }
    Sum& s = metric == Metric::kRunning        ? running
             : metric == Metric::kWaiting      ? waiting
             : metric == Metric::kKvUsage      ? kv
             : metric == Metric::kCacheQueries ? queries
             : metric == Metric::kCacheHits    ? hits
                                               : gpu;
    s.total += value;
    ++s.series;
  }
  if (running.series == 0 && waiting.series == 0) {
    return Status::NotFound("no vllm:num_requests_running or vllm:num_requests_waiting metric");
  }
  auto clamp_count = [](const Sum& s) -> int32_t {
    if (s.series == 0) return -1;
    return static_cast<int32_t>(std::min(s.total, 2147483647.0));
  };
  EngineLoad load;
  load.running = clamp_count(running);
  load.waiting = clamp_count(waiting);
  const Sum& usage = kv.series > 0 ? kv : gpu;
  if (usage.series > 0) load.kv_usage = usage.total / static_cast<double>(usage.series);
  // Both counters or neither: a hit rate needs the pair.
  if (queries.series > 0 && hits.series > 0) {
    if (hits.total > queries.total) {
      return Status::InvalidArgument("vllm:prefix_cache_hits_total exceeds vllm:prefix_cache_queries_total");
    }
    load.prefix_cache_queries = queries.total;
    load.prefix_cache_hits = hits.total;
  }
  return load;
}

}  // namespace prefix_router::gateway
