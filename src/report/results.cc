#include "report/results.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>

#include "base/json_text.h"
#include "base/utf8.h"
#include "report/text.h"

namespace prefix_router::report {
namespace json = boost::json;
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr uint64_t kMaxSeriesWindows = 10'000;

// The quantile of an already sorted vector (see Percentile).
double SortedPercentile(const std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const double rank = std::clamp(p, 0.0, 1.0) * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

// The scalar fields in the order they are written (JSON and CSV); one table so that writer,
// reader and CSV cannot drift apart.
struct DoubleField {
  const char* name;
  double RunResult::*member;
};
constexpr DoubleField kDoubleFields[] = {
    {"ttft_p50_s", &RunResult::ttft_p50_s},
    {"ttft_p90_s", &RunResult::ttft_p90_s},
    {"ttft_p99_s", &RunResult::ttft_p99_s},
    {"ttft_mean_s", &RunResult::ttft_mean_s},
    {"e2e_p50_s", &RunResult::e2e_p50_s},
    {"e2e_p90_s", &RunResult::e2e_p90_s},
    {"itl_p50_s", &RunResult::itl_p50_s},
    {"engine_ttft_p50_s", &RunResult::engine_ttft_p50_s},
    {"engine_ttft_p90_s", &RunResult::engine_ttft_p90_s},
    {"engine_ttft_p99_s", &RunResult::engine_ttft_p99_s},
    {"hit_rate", &RunResult::hit_rate},
    {"throughput_rps", &RunResult::throughput_rps},
    {"output_tokens_per_s", &RunResult::output_tokens_per_s},
    {"overflow_rate", &RunResult::overflow_rate},
};

struct PointDoubleField {
  const char* name;
  double SeriesPoint::*member;
};
constexpr PointDoubleField kPointDoubleFields[] = {
    {"hit_rate", &SeriesPoint::hit_rate},
    {"ttft_p50_s", &SeriesPoint::ttft_p50_s},
    {"ttft_p90_s", &SeriesPoint::ttft_p90_s},
};

// ---- Summarize -------------------------------------------------------------------------------

// Fills one series point from the records that started in its window.
void SummarizeWindow(const std::vector<const RequestRecord*>& in_window, size_t instances, bool counts_known,
                     SeriesPoint& p) {
  p.requests = in_window.size();
  p.share.assign(instances, 0.0);
  std::vector<double> ttft;
  uint64_t cached = 0, prompt = 0, with_instance = 0;
  for (const RequestRecord* r : in_window) {
    if (r->instance >= 0 && static_cast<size_t>(r->instance) < instances) {
      p.share[static_cast<size_t>(r->instance)] += 1;
      ++with_instance;
    }
    if (r->error) continue;
    if (r->ttft_s >= 0) ttft.push_back(r->ttft_s);
    cached += r->cached_tokens;
    prompt += r->prompt_tokens;
  }
  std::sort(ttft.begin(), ttft.end());
  p.ttft_p50_s = SortedPercentile(ttft, 0.5);
  p.ttft_p90_s = SortedPercentile(ttft, 0.9);
  p.hit_rate = !counts_known ? kNaN : prompt > 0 ? static_cast<double>(cached) / static_cast<double>(prompt) : 0;
  if (with_instance > 0) {
    for (double& s : p.share) s /= static_cast<double>(with_instance);
  }
}

void SummarizeSeries(const std::vector<const RequestRecord*>& counted, double first_start, double last_start,
                     double window, size_t instances, bool counts_known, std::vector<SeriesPoint>& series) {
  auto window_index = [&](double t, double w) { return static_cast<int64_t>(std::floor(t / w)); };
  int64_t k0 = window_index(first_start, window);
  int64_t k1 = window_index(last_start, window);
  uint64_t count = static_cast<uint64_t>(k1 - k0) + 1;
  if (count > kMaxSeriesWindows) {
    window *= std::ceil(static_cast<double>(count) / static_cast<double>(kMaxSeriesWindows));
    k0 = window_index(first_start, window);
    k1 = window_index(last_start, window);
    count = static_cast<uint64_t>(k1 - k0) + 1;
  }
  std::vector<std::vector<const RequestRecord*>> buckets(count);
  for (const RequestRecord* r : counted) {
    const int64_t k = std::clamp(window_index(r->start_s, window), k0, k1);
    buckets[static_cast<size_t>(k - k0)].push_back(r);
  }
  series.resize(count);
  for (size_t i = 0; i < count; ++i) {
    series[i].t_s = static_cast<double>(k0 + static_cast<int64_t>(i)) * window;
    SummarizeWindow(buckets[i], instances, counts_known, series[i]);
  }
}

// ---- JSON writing ----------------------------------------------------------------------------

void AppendKey(std::string& out, std::string_view key) {
  base::AppendJsonString(out, key);
  out += ": ";
}

void AppendNumberArray(std::string& out, const std::vector<double>& v) {
  out += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ", ";
    out += base::JsonNumber(v[i]);
  }
  out += ']';
}

void AppendNumberMap(std::string& out, const std::map<std::string, double>& m) {
  out += '{';
  bool first = true;
  for (const auto& [k, v] : m) {
    if (!first) out += ", ";
    first = false;
    AppendKey(out, k);
    out += base::JsonNumber(v);
  }
  out += '}';
}

void AppendRun(std::string& out, const RunResult& r) {
  out += "  {";
  bool first = true;
  const auto field = [&](std::string_view name) {
    out += first ? "\n    " : ",\n    ";
    first = false;
    AppendKey(out, name);
  };
  field("source");
  base::AppendJsonString(out, r.source);
  field("workload");
  base::AppendJsonString(out, r.workload);
  field("strategy");
  base::AppendJsonString(out, r.strategy);
  field("instances");
  out += fmt::format("{}", r.instances);
  field("seed");
  out += fmt::format("{}", r.seed);
  field("ttft_kind");
  base::AppendJsonString(out, r.ttft_kind);
  field("settings");
  AppendNumberMap(out, r.settings);
  field("requests");
  out += fmt::format("{}", r.requests);
  field("errors");
  out += fmt::format("{}", r.errors);
  for (const DoubleField& f : kDoubleFields) {
    field(f.name);
    out += base::JsonNumber(r.*f.member);
  }
  field("share");
  AppendNumberArray(out, r.share);
  field("extra");
  AppendNumberMap(out, r.extra);
  field("ttft_quantiles");
  AppendNumberArray(out, r.ttft_quantiles);
  field("series");
  out += '[';
  for (size_t i = 0; i < r.series.size(); ++i) {
    const SeriesPoint& p = r.series[i];
    out += i > 0 ? ",\n      {" : "\n      {";
    AppendKey(out, "t_s");
    out += base::JsonNumber(p.t_s);
    out += ", ";
    AppendKey(out, "requests");
    out += fmt::format("{}", p.requests);
    for (const PointDoubleField& f : kPointDoubleFields) {
      out += ", ";
      AppendKey(out, f.name);
      out += base::JsonNumber(p.*f.member);
    }
    out += ", ";
    AppendKey(out, "share");
    AppendNumberArray(out, p.share);
    out += '}';
  }
  out += r.series.empty() ? "]" : "\n    ]";
  out += "\n  }";
}

// ---- JSON reading ----------------------------------------------------------------------------

// A Boost.JSON handler that builds a json::value tree like json::parser does, except that it
// converts floating-point numbers with std::from_chars: Boost.JSON 1.81 multiplies by powers of
// ten and can be one unit in the last place off, and the results must read back exactly.
class ExactDomBuilder {
 public:
  static constexpr std::size_t max_object_size = std::size_t(-1);
  static constexpr std::size_t max_array_size = std::size_t(-1);
  static constexpr std::size_t max_key_size = std::size_t(-1);
  static constexpr std::size_t max_string_size = std::size_t(-1);

  bool on_document_begin(json::error_code&) { return true; }
  bool on_document_end(json::error_code&) { return true; }
  bool on_object_begin(json::error_code&) {
    stack_.push_back(Frame{json::value(json::object_kind), {}});
    return true;
  }
  bool on_object_end(std::size_t, json::error_code&) { return Close(); }
  bool on_array_begin(json::error_code&) {
    stack_.push_back(Frame{json::value(json::array_kind), {}});
    return true;
  }
  bool on_array_end(std::size_t, json::error_code&) { return Close(); }
  bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
    text_.append(s.data(), s.size());
    return true;
  }
  bool on_key(json::string_view s, std::size_t, json::error_code&) {
    text_.append(s.data(), s.size());
    stack_.back().key = std::move(text_);
    text_.clear();
    return true;
  }
  bool on_string_part(json::string_view s, std::size_t, json::error_code&) {
    text_.append(s.data(), s.size());
    return true;
  }
  bool on_string(json::string_view s, std::size_t, json::error_code&) {
    text_.append(s.data(), s.size());
    json::value v(json::string_kind);
    v.as_string().assign(text_.data(), text_.size());
    text_.clear();
    return Attach(std::move(v));
  }
  bool on_number_part(json::string_view s, json::error_code&) {
    number_.append(s.data(), s.size());
    return true;
  }
  bool on_int64(int64_t i, json::string_view, json::error_code&) {
    number_.clear();
    return Attach(json::value(i));
  }
  bool on_uint64(uint64_t u, json::string_view, json::error_code&) {
    number_.clear();
    return Attach(json::value(u));
  }
  bool on_double(double, json::string_view s, json::error_code& ec) {
    number_.append(s.data(), s.size());
    double d = 0;
    const auto [end, err] = std::from_chars(number_.data(), number_.data() + number_.size(), d);
    const bool ok = err == std::errc() && end == number_.data() + number_.size();
    number_.clear();
    if (!ok) {
      ec = json::error::exponent_overflow;
      return false;
    }
    return Attach(json::value(d));
  }
  bool on_bool(bool b, json::error_code&) { return Attach(json::value(b)); }
  bool on_null(json::error_code&) { return Attach(json::value(nullptr)); }
  bool on_comment_part(json::string_view, json::error_code&) { return true; }
  bool on_comment(json::string_view, json::error_code&) { return true; }

  json::value& root() { return root_; }

 private:
  struct Frame {
    json::value value;
    std::string key;  // the pending key while value is an object
  };

  bool Close() {
    json::value v = std::move(stack_.back().value);
    stack_.pop_back();
    return Attach(std::move(v));
  }
  bool Attach(json::value v) {
    if (stack_.empty()) {
      root_ = std::move(v);
    } else if (stack_.back().value.is_object()) {
      stack_.back().value.as_object().insert_or_assign(stack_.back().key, std::move(v));
    } else {
      stack_.back().value.as_array().push_back(std::move(v));
    }
    return true;
  }

  std::vector<Frame> stack_;
  std::string text_;
  std::string number_;
  json::value root_;
};

Status Bad(const std::string& path, std::string_view what) {
  return Status::InvalidArgument(fmt::format("{}: {}", path, what));
}

// A JSON number (or null, read as NaN) as a double.
Status ToDouble(const json::value& v, const std::string& path, double& out) {
  if (v.is_double()) {
    out = v.get_double();
  } else if (v.is_int64()) {
    out = static_cast<double>(v.get_int64());
  } else if (v.is_uint64()) {
    out = static_cast<double>(v.get_uint64());
  } else if (v.is_null()) {
    out = kNaN;
  } else {
    return Bad(path, "expected a number");
  }
  return Status::Ok();
}

Status ToUnsigned(const json::value& v, const std::string& path, uint64_t max, uint64_t& out) {
  uint64_t u = 0;
  if (v.is_uint64()) {
    u = v.get_uint64();
  } else if (v.is_int64() && v.get_int64() >= 0) {
    u = static_cast<uint64_t>(v.get_int64());
  } else {
    return Bad(path, "expected a non-negative integer");
  }
  if (u > max) return Bad(path, fmt::format("{} is larger than {}", u, max));
  out = u;
  return Status::Ok();
}

Status ToDoubleArray(const json::value& v, const std::string& path, std::vector<double>& out) {
  if (!v.is_array()) return Bad(path, "expected an array of numbers");
  out.clear();
  const json::array& a = v.get_array();
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    double d = 0;
    if (Status s = ToDouble(a[i], fmt::format("{}[{}]", path, i), d); !s.ok()) return s;
    out.push_back(d);
  }
  return Status::Ok();
}

Status ToNumberMap(const json::value& v, const std::string& path, std::map<std::string, double>& out) {
  if (!v.is_object()) return Bad(path, "expected an object of numbers");
  out.clear();
  for (const auto& kv : v.get_object()) {
    const std::string key(kv.key());
    double d = 0;
    if (Status s = ToDouble(kv.value(), path + "." + key, d); !s.ok()) return s;
    out[key] = d;
  }
  return Status::Ok();
}

Status ReadPoint(const json::value& v, const std::string& path, SeriesPoint& p) {
  if (!v.is_object()) return Bad(path, "expected an object");
  const json::object& o = v.get_object();
  if (const json::value* f = o.if_contains("t_s")) {
    if (Status s = ToDouble(*f, path + ".t_s", p.t_s); !s.ok()) return s;
  }
  if (const json::value* f = o.if_contains("requests")) {
    if (Status s = ToUnsigned(*f, path + ".requests", UINT64_MAX, p.requests); !s.ok()) return s;
  }
  for (const PointDoubleField& field : kPointDoubleFields) {
    if (const json::value* f = o.if_contains(field.name)) {
      Status s = ToDouble(*f, path + "." + field.name, p.*field.member);
      if (!s.ok()) return s;
    }
  }
  if (const json::value* f = o.if_contains("share")) {
    if (Status s = ToDoubleArray(*f, path + ".share", p.share); !s.ok()) return s;
  }
  return Status::Ok();
}

Status ReadRun(const json::value& v, const std::string& path, RunResult& r) {
  if (!v.is_object()) return Bad(path, "expected an object");
  const json::object& o = v.get_object();
  const std::pair<const char*, std::string RunResult::*> strings[] = {
      {"source", &RunResult::source},
      {"workload", &RunResult::workload},
      {"strategy", &RunResult::strategy},
      {"ttft_kind", &RunResult::ttft_kind},
  };
  for (const auto& [name, member] : strings) {
    if (const json::value* f = o.if_contains(name)) {
      if (!f->is_string()) return Bad(path + "." + name, "expected a string");
      r.*member = std::string(f->get_string());
    }
  }
  uint64_t u = 0;
  if (const json::value* f = o.if_contains("instances")) {
    if (Status s = ToUnsigned(*f, path + ".instances", UINT32_MAX, u); !s.ok()) return s;
    r.instances = static_cast<uint32_t>(u);
  }
  const std::pair<const char*, uint64_t RunResult::*> counts[] = {
      {"seed", &RunResult::seed},
      {"requests", &RunResult::requests},
      {"errors", &RunResult::errors},
  };
  for (const auto& [name, member] : counts) {
    if (const json::value* f = o.if_contains(name)) {
      if (Status s = ToUnsigned(*f, path + "." + name, UINT64_MAX, r.*member); !s.ok()) return s;
    }
  }
  for (const DoubleField& field : kDoubleFields) {
    if (const json::value* f = o.if_contains(field.name)) {
      Status s = ToDouble(*f, path + "." + field.name, r.*field.member);
      if (!s.ok()) return s;
    }
  }
  if (const json::value* f = o.if_contains("settings")) {
    if (Status s = ToNumberMap(*f, path + ".settings", r.settings); !s.ok()) return s;
  }
  if (const json::value* f = o.if_contains("extra")) {
    if (Status s = ToNumberMap(*f, path + ".extra", r.extra); !s.ok()) return s;
  }
  if (const json::value* f = o.if_contains("share")) {
    if (Status s = ToDoubleArray(*f, path + ".share", r.share); !s.ok()) return s;
  }
  if (const json::value* f = o.if_contains("ttft_quantiles")) {
    if (Status s = ToDoubleArray(*f, path + ".ttft_quantiles", r.ttft_quantiles); !s.ok()) {
      return s;
    }
  }
  if (const json::value* f = o.if_contains("series")) {
    if (!f->is_array()) return Bad(path + ".series", "expected an array of objects");
    const json::array& a = f->get_array();
    r.series.assign(a.size(), SeriesPoint{});
    for (size_t i = 0; i < a.size(); ++i) {
      Status s = ReadPoint(a[i], fmt::format("{}.series[{}]", path, i), r.series[i]);
      if (!s.ok()) return s;
    }
  }
  return Status::Ok();
}

// ---- CSV -------------------------------------------------------------------------------------

// RFC 4180: quote a field that holds a comma, quote or line break; double inner quotes.
std::string CsvField(std::string_view s) {
  std::string valid;
  base::AppendValidUtf8(valid, s);
  if (valid.find_first_of(",\"\r\n") == std::string::npos) return valid;
  std::string out = "\"";
  for (char c : valid) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

std::string CsvNumber(double v) { return std::isfinite(v) ? fmt::format("{}", v) : ""; }

}  // namespace

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return SortedPercentile(v, p);
}

void AddFlowFigures(const std::vector<RequestRecord>& records, const std::vector<TenantLabel>& tenants, bool ceiling,
                    RunResult& into) {
  if (!ceiling && tenants.empty()) return;
  struct Figures {
    uint64_t requests = 0, refused = 0, succeeded = 0, met = 0;
    uint64_t prompt_tokens = 0, cached_tokens = 0;
    double in_flight_s = 0;  // summed over its completed requests: from routing to the last byte
    std::vector<double> ttft, queue, engine_queue;
  };
  std::vector<Figures> per(tenants.size());
  uint64_t refused = 0, queued = 0;
  std::vector<double> waits;
  double first = std::numeric_limits<double>::infinity(), last = -first;
  for (const RequestRecord& rec : records) {
    if (!rec.counted) continue;
    first = std::min(first, rec.start_s);
    last = std::max(last, rec.start_s + std::max(rec.e2e_s, 0.0));
    if (rec.refused) ++refused;
    if (rec.queue_s >= 0) {
      ++queued;
      waits.push_back(rec.queue_s);
    }
    if (rec.tenant < 0 || static_cast<size_t>(rec.tenant) >= per.size()) continue;
    Figures& f = per[static_cast<size_t>(rec.tenant)];
    ++f.requests;
    if (rec.refused) ++f.refused;
    if (!rec.error) {
      ++f.succeeded;
      if (rec.ttft_s >= 0) f.ttft.push_back(rec.ttft_s);
      if (rec.e2e_s >= 0) f.in_flight_s += std::max(0.0, rec.e2e_s - std::max(rec.queue_s, 0.0));
      if (ceiling) f.queue.push_back(std::max(rec.queue_s, 0.0));
      if (rec.engine_queue_s >= 0) f.engine_queue.push_back(rec.engine_queue_s);
      if (rec.cached_tokens_known) {
        f.prompt_tokens += rec.prompt_tokens;
        f.cached_tokens += rec.cached_tokens;
      }
      const double objective = tenants[static_cast<size_t>(rec.tenant)].ttft_objective_s;
      if (objective > 0 && rec.ttft_s >= 0 && rec.ttft_s <= objective) ++f.met;
    }
  }
  const double span = last > first ? last - first : 0;
  if (ceiling) {
    into.extra["refused"] = static_cast<double>(refused);
    into.extra["queued"] = static_cast<double>(queued);
    into.extra["queue_wait_p90_s"] = Percentile(waits, 0.9);
  }
  for (size_t i = 0; i < tenants.size(); ++i) {
    Figures& f = per[i];
    const std::string k = "tenant." + tenants[i].name + ".";
    into.extra[k + "priority"] = tenants[i].priority;
    into.extra[k + "requests"] = static_cast<double>(f.requests);
    into.extra[k + "refused"] = static_cast<double>(f.refused);
    std::sort(f.ttft.begin(), f.ttft.end());
    into.extra[k + "ttft_p50_s"] = SortedPercentile(f.ttft, 0.5);
    into.extra[k + "ttft_p90_s"] = SortedPercentile(f.ttft, 0.9);
    into.extra[k + "ttft_p99_s"] = SortedPercentile(f.ttft, 0.99);
    into.extra[k + "throughput_rps"] = span > 0 ? static_cast<double>(f.succeeded) / span : 0;
    // Requests it had in flight on average (Little's law: its completed requests' time in flight
    // over the span): what a per-tenant bound (flow_control.max_in_flight_per_tenant) is set against.
    into.extra[k + "in_flight_mean"] = span > 0 ? f.in_flight_s / span : 0;
    // Where the TTFT went: the prompt tokens found cached, the wait in the gateway's queue and
    // in the engine's (from arrival there to first admission), over its completed requests.
    if (f.prompt_tokens > 0) {
      into.extra[k + "hit_rate"] = static_cast<double>(f.cached_tokens) / static_cast<double>(f.prompt_tokens);
    }
    if (ceiling) into.extra[k + "queue_wait_p90_s"] = Percentile(f.queue, 0.9);
    if (!f.engine_queue.empty()) into.extra[k + "engine_queue_p90_s"] = Percentile(f.engine_queue, 0.9);
    if (tenants[i].ttft_objective_s > 0) {
      into.extra[k + "objective_met"] = f.requests > 0 ? static_cast<double>(f.met) / static_cast<double>(f.requests) : 0;
    }
  }
}

std::string FlowLines(const std::vector<RunResult>& runs, const std::vector<TenantLabel>& tenants) {
  auto extra = [](const RunResult& r, const std::string& key) {
    auto it = r.extra.find(key);
    return it == r.extra.end() ? 0.0 : it->second;
  };
  std::string out;
  for (const RunResult& r : runs) {
    const std::string run = fmt::format("{} {} seed {}", r.workload, r.strategy, r.seed);
    std::string limits;
    auto add = [&](const char* setting, const char* text) {
      if (auto m = r.settings.find(setting); m != r.settings.end()) {
        limits += fmt::format("{}{} {}", limits.empty() ? "" : ", ", text, m->second);
      }
    };
    add("max_in_flight", "max_in_flight");
    add("saturation_in_flight", "every instance full at");
    if (!limits.empty()) {
      out += fmt::format("{}: {}, {} refused (429), {} queued, queue wait P90 {:.3f} s\n", run, limits,
                         extra(r, "refused"), extra(r, "queued"), extra(r, "queue_wait_p90_s"));
    }
    // A figure the run has, scaled and formatted; "" when it has none.
    auto optional = [&r](const std::string& key, fmt::format_string<double> text, double scale) {
      auto it = r.extra.find(key);
      return it == r.extra.end() ? std::string() : fmt::format(text, scale * it->second);
    };
    for (const TenantLabel& c : tenants) {
      const std::string k = "tenant." + c.name + ".";
      if (!r.extra.contains(k + "requests")) continue;
      out += fmt::format(
          "{}: tenant {} (priority {}): {} requests, {} refused, TTFT P50 {:.3f} s P90 {:.3f} s P99 {:.3f} s, "
          "{:.2f} completed/s{}{}{}{}\n",
          run, c.name, c.priority, extra(r, k + "requests"), extra(r, k + "refused"), extra(r, k + "ttft_p50_s"),
          extra(r, k + "ttft_p90_s"), extra(r, k + "ttft_p99_s"), extra(r, k + "throughput_rps"),
          optional(k + "hit_rate", ", hit rate {:.1f}%", 100), optional(k + "queue_wait_p90_s", ", queue wait P90 {:.3f} s", 1),
          optional(k + "engine_queue_p90_s", ", engine queue P90 {:.3f} s", 1),
          c.ttft_objective_s > 0 ? fmt::format(", TTFT objective {:g} s met by {:.1f}%", c.ttft_objective_s,
                                               100 * extra(r, k + "objective_met"))
                                 : std::string());
    }
  }
  return out;
}

void Summarize(const std::vector<RequestRecord>& records, const SummaryOptions& options, RunResult& into) {
  std::vector<const RequestRecord*> counted;
  size_t instances = options.instances;
  for (const RequestRecord& r : records) {
    if (!r.counted) continue;
    counted.push_back(&r);
    if (r.instance >= 0) instances = std::max(instances, static_cast<size_t>(r.instance) + 1);
  }

  std::vector<double> ttft, e2e, itl, engine_ttft;
  uint64_t errors = 0, overflows = 0, succeeded = 0, with_instance = 0;
  uint64_t cached = 0, prompt = 0, output = 0;
  bool counts_known = false;  // some successful record carried a cached-token count
  double first_start = std::numeric_limits<double>::infinity();
  double last_start = -first_start, last_end = -first_start;
  std::vector<double> per_instance(instances, 0.0);
  for (const RequestRecord* r : counted) {
    first_start = std::min(first_start, r->start_s);
    last_start = std::max(last_start, r->start_s);
    last_end = std::max(last_end, r->start_s + std::max(r->e2e_s, 0.0));
    if (r->overflow) ++overflows;
    if (r->instance >= 0) {
      per_instance[static_cast<size_t>(r->instance)] += 1;
      ++with_instance;
    }
    if (r->error) {
      ++errors;
      continue;
    }
    ++succeeded;
    if (r->ttft_s >= 0) ttft.push_back(r->ttft_s);
    if (r->e2e_s >= 0) e2e.push_back(r->e2e_s);
    if (r->itl_mean_s >= 0) itl.push_back(r->itl_mean_s);
    if (r->engine_ttft_s >= 0) engine_ttft.push_back(r->engine_ttft_s);
    cached += r->cached_tokens;
    prompt += r->prompt_tokens;
    output += r->output_tokens;
    counts_known = counts_known || r->cached_tokens_known;
  }

  into.requests = counted.size();
  into.errors = errors;
  std::sort(ttft.begin(), ttft.end());
  into.ttft_p50_s = SortedPercentile(ttft, 0.5);
  into.ttft_p90_s = SortedPercentile(ttft, 0.9);
  into.ttft_p99_s = SortedPercentile(ttft, 0.99);
  double ttft_sum = 0;
  for (double t : ttft) ttft_sum += t;
  into.ttft_mean_s = ttft.empty() ? 0 : ttft_sum / static_cast<double>(ttft.size());
  into.e2e_p50_s = Percentile(e2e, 0.5);
  into.e2e_p90_s = Percentile(e2e, 0.9);
  into.itl_p50_s = itl.empty() ? -1 : Percentile(itl, 0.5);
  if (engine_ttft.empty()) {
    into.engine_ttft_p50_s = into.engine_ttft_p90_s = into.engine_ttft_p99_s = -1;
  } else {
    std::sort(engine_ttft.begin(), engine_ttft.end());
    into.engine_ttft_p50_s = SortedPercentile(engine_ttft, 0.5);
    into.engine_ttft_p90_s = SortedPercentile(engine_ttft, 0.9);
    into.engine_ttft_p99_s = SortedPercentile(engine_ttft, 0.99);
  }
  // Records without a count add 0 cached tokens once any record has one (see the header).
  // Without successful requests there is nothing to know: 0, like the other figures.
  counts_known = counts_known || succeeded == 0;
  into.hit_rate = !counts_known ? kNaN : prompt > 0 ? static_cast<double>(cached) / static_cast<double>(prompt) : 0;
  const double span = counted.empty() ? 0 : last_end - first_start;
  into.throughput_rps = span > 0 ? static_cast<double>(succeeded) / span : 0;
  into.output_tokens_per_s = span > 0 ? static_cast<double>(output) / span : 0;
  into.share = std::move(per_instance);
  if (with_instance > 0) {
    for (double& s : into.share) s /= static_cast<double>(with_instance);
  }
  into.overflow_rate = counted.empty() ? 0 : static_cast<double>(overflows) / static_cast<double>(counted.size());

  into.ttft_quantiles.clear();
  if (!ttft.empty()) {
    into.ttft_quantiles.reserve(101);
    for (int i = 0; i <= 100; ++i) into.ttft_quantiles.push_back(SortedPercentile(ttft, i / 100.0));
  }

  into.series.clear();
  if (options.series_window_s > 0 && !counted.empty() && std::isfinite(first_start) && std::isfinite(last_start)) {
    SummarizeSeries(counted, first_start, last_start, options.series_window_s, instances, counts_known, into.series);
  }
}

std::string ResultsJson(const std::vector<RunResult>& runs) {
  std::string out = "[";
  for (size_t i = 0; i < runs.size(); ++i) {
    out += i > 0 ? ",\n" : "\n";
    AppendRun(out, runs[i]);
  }
  out += runs.empty() ? "]\n" : "\n]\n";
  return out;
}

Result<std::vector<RunResult>> ParseResultsJson(std::string_view text) {
  json::basic_parser<ExactDomBuilder> parser(json::parse_options{});
  json::error_code ec;
  const size_t used = parser.write_some(false, text.data(), text.size(), ec);
  if (ec) {
    return Status::InvalidArgument(fmt::format("results JSON: {} at offset {}", ec.message(), used));
  }
  if (used != text.size()) {
    return Status::InvalidArgument(fmt::format("results JSON: extra data at offset {}", used));
  }
  const json::value& root = parser.handler().root();
  if (!root.is_array()) return Bad("runs", "expected an array of run objects");
  const json::array& a = root.get_array();
  std::vector<RunResult> runs(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (Status s = ReadRun(a[i], fmt::format("runs[{}]", i), runs[i]); !s.ok()) return s;
  }
  return runs;
}

std::string ResultsCsv(const std::vector<RunResult>& runs) {
  std::set<std::string> settings, extra;
  for (const RunResult& r : runs) {
    for (const auto& kv : r.settings) settings.insert(kv.first);
    for (const auto& kv : r.extra) extra.insert(kv.first);
  }
  std::vector<std::string> header = {"source", "workload",  "strategy", "instances",
                                     "seed",   "ttft_kind", "requests", "errors"};
  for (const DoubleField& f : kDoubleFields) header.emplace_back(f.name);
  header.emplace_back("share");
  for (const std::string& k : settings) header.push_back("settings." + k);
  for (const std::string& k : extra) header.push_back("extra." + k);

  std::string out;
  const auto line = [&out](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) {
      if (i > 0) out += ',';
      out += cells[i];
    }
    out += '\n';
  };
  std::vector<std::string> cells;
  for (const std::string& h : header) cells.push_back(CsvField(h));
  line(cells);
  for (const RunResult& r : runs) {
    cells = {
        CsvField(r.source),        CsvField(r.workload),  CsvField(r.strategy),          fmt::format("{}", r.instances),
        fmt::format("{}", r.seed), CsvField(r.ttft_kind), fmt::format("{}", r.requests), fmt::format("{}", r.errors)};
    for (const DoubleField& f : kDoubleFields) cells.push_back(CsvNumber(r.*f.member));
    std::string share;
    for (size_t i = 0; i < r.share.size(); ++i) {
      if (i > 0) share += ';';
      share += CsvNumber(r.share[i]);
    }
    cells.push_back(share);
    for (const std::string& k : settings) {
      auto it = r.settings.find(k);
      cells.push_back(it == r.settings.end() ? "" : CsvNumber(it->second));
    }
    for (const std::string& k : extra) {
      auto it = r.extra.find(k);
      cells.push_back(it == r.extra.end() ? "" : CsvNumber(it->second));
    }
    line(cells);
  }
  return out;
}

Result<std::string> ReadFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    std::string msg = fmt::format("{}: {}", path, std::strerror(err));
    if (err == ENOENT) return Status::NotFound(std::move(msg));
    return Status::Internal(std::move(msg));
  }
  std::string content;
  char buf[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) content.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return Status::Internal(fmt::format("{}: read error", path));
  return content;
}

Status WriteFile(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return Status::Internal(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  }
  bool ok = std::fwrite(content.data(), 1, content.size(), f) == content.size();
  int err = ok ? 0 : errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    std::remove(tmp.c_str());
    return Status::Internal(fmt::format("cannot write {}: {}", path, std::strerror(err)));
  }
  return Status::Ok();
}

}  // namespace prefix_router::report
