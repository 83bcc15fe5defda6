#include "metrics/metrics.h"

#include <array>
#include <atomic>
#include <cassert>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>
#include <type_traits>
#include <utility>

#include "base/utf8.h"

namespace prefix_router::metrics {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

// Prometheus spells the non-finite values +Inf, -Inf and NaN. Finite values use the fewest
// digits that parse back to the same double, laid out as the Prometheus Go client does
// (strconv.FormatFloat(v, 'g', -1, 64)): scientific when the decimal exponent is below -4 or at
// least 6, fixed otherwise. So bucket bounds read "0.0001" and "2.5", sums "700000" and
// "1.5e+06"; plain std::to_chars would pick "1e-04" and "7e+05" because they are shorter, and
// an le label that differs from the Go client's spelling breaks le="..." matchers in queries.
void AppendDouble(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  // The longest scientific form, "-2.2250738585072014e-308", has 24 characters; the longest
  // fixed one used (exponent in [-4, 6)), "-0.00012345678901234567", has 23.
  char buf[32];
  std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  assert(r.ec == std::errc());
  const char* e = std::find(buf, r.ptr, 'e');
  int exponent = 0;
  std::from_chars(e + 1 + (e[1] == '+'), r.ptr, exponent);
  if (exponent >= -4 && exponent < 6) {
    r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
    assert(r.ec == std::errc());
  }
  out.append(buf, r.ptr);
}

void AppendUint(std::string& out, uint64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  assert(ec == std::errc());
  out.append(buf, end);
}

// Label values escape backslash, double quote and newline; help text only backslash and newline.
void AppendEscaped(std::string& out, std::string_view s, bool escape_quote) {
  for (char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '"':
        if (escape_quote) {
          out += "\\\"";
        } else {
          out += c;
        }
        break;
      default: out += c;
    }
  }
}

// Appends `{l1="v1",l2="v2",le="0.5"}`, or nothing when there are no labels at all. An empty
// `le` means the sample has no le label.
void AppendLabels(std::string& out, const std::vector<std::string>& names, const std::vector<std::string>& values,
                  std::string_view le) {
  if (names.empty() && le.empty()) return;
  out += '{';
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    out += names[i];
    out += "=\"";
    AppendEscaped(out, values[i], /*escape_quote=*/true);
    out += '"';
  }
  if (!le.empty()) {
    if (!names.empty()) out += ',';
    out += "le=\"";
    out += le;
    out += '"';
  }
  out += '}';
}

// Appends "name<suffix>{labels} " ready for the value.
void AppendSampleStart(std::string& out, std::string_view name, std::string_view suffix,
                       const std::vector<std::string>& label_names, const std::vector<std::string>& label_values,
                       std::string_view le = {}) {
  out += name;
  out += suffix;
  AppendLabels(out, label_names, label_values, le);
  out += ' ';
}

void RenderChild(std::string& out, std::string_view name, const std::vector<std::string>& names,
                 const std::vector<std::string>& values, const Counter& counter) {
  AppendSampleStart(out, name, "", names, values);
  AppendUint(out, counter.Value());
  out += '\n';
}

void RenderChild(std::string& out, std::string_view name, const std::vector<std::string>& names,
                 const std::vector<std::string>& values, const Gauge& gauge) {
  AppendSampleStart(out, name, "", names, values);
  AppendDouble(out, gauge.Value());
  out += '\n';
}

void RenderChild(std::string& out, std::string_view name, const std::vector<std::string>& names,
                 const std::vector<std::string>& values, const Histogram& histogram) {
  const std::vector<double>& bounds = histogram.UpperBounds();
  // Each bucket is read once; +Inf and _count both come from this running total.
  uint64_t cumulative = 0;
  std::string le;
  for (size_t i = 0; i < bounds.size(); ++i) {
    cumulative += histogram.BucketCount(i);
    le.clear();
    AppendDouble(le, bounds[i]);
    AppendSampleStart(out, name, "_bucket", names, values, le);
    AppendUint(out, cumulative);
    out += '\n';
  }
  cumulative += histogram.BucketCount(bounds.size());
  AppendSampleStart(out, name, "_bucket", names, values, "+Inf");
  AppendUint(out, cumulative);
  out += '\n';
  AppendSampleStart(out, name, "_sum", names, values);
  AppendDouble(out, histogram.Sum());
  out += '\n';
  AppendSampleStart(out, name, "_count", names, values);
  AppendUint(out, cumulative);
  out += '\n';
}

bool StrictlyIncreasing(const std::vector<double>& v) {
  return std::adjacent_find(v.begin(), v.end(), [](double a, double b) { return !(a < b); }) == v.end();
}

// Drops the implicit +Inf bound. Observe's binary search needs sorted, NaN-free bounds, so a
// broken REQUIRES is repaired in release builds after asserting in debug ones.
std::vector<double> NormalizeBounds(std::vector<double> bounds) {
  if (!bounds.empty() && bounds.back() == kInf) bounds.pop_back();
  const bool has_nan = std::any_of(bounds.begin(), bounds.end(), [](double b) { return std::isnan(b); });
  assert(!has_nan && "histogram bounds must not be NaN");
  assert(StrictlyIncreasing(bounds) && "histogram bounds must be strictly increasing");
  if (has_nan || !StrictlyIncreasing(bounds)) {
    std::erase_if(bounds, [](double b) { return std::isnan(b) || b == kInf; });
    std::sort(bounds.begin(), bounds.end());
    bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  }
  return bounds;
}

}  // namespace

bool IsValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = IsAsciiLetter(c) || c == '_' || c == ':' || (i > 0 && IsAsciiDigit(c));
    if (!ok) return false;
  }
  return true;
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || name.starts_with("__")) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = IsAsciiLetter(c) || c == '_' || (i > 0 && IsAsciiDigit(c));
    if (!ok) return false;
  }
  return true;
}

// ---- Histogram ----

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(NormalizeBounds(std::move(upper_bounds))),
      bucket_counts_(std::make_unique<std::atomic<uint64_t>[]>(upper_bounds_.size() + 1)) {}

void Histogram::Observe(double v) {
  // lower_bound finds the first bound b with !(b < v), i.e. v <= b. NaN compares false with
  // everything and would land in the first bucket, so it is sent to +Inf explicitly.
  const size_t i = std::isnan(v) ? upper_bounds_.size()
                                 : static_cast<size_t>(std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), v) -
                                                       upper_bounds_.begin());
  bucket_counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

uint64_t Histogram::BucketCount(size_t i) const {
  assert(i <= upper_bounds_.size());
  if (i > upper_bounds_.size()) return 0;
  return bucket_counts_[i].load(std::memory_order_relaxed);
}

uint64_t Histogram::Count() const {
  uint64_t total = 0;
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) {
    total += bucket_counts_[i].load(std::memory_order_relaxed);
  }
  return total;
}

std::vector<double> Histogram::ExponentialBuckets(double start, double factor, int count) {
  const bool valid = start > 0 && factor > 1 && count >= 1;
  assert(valid && "ExponentialBuckets REQUIRES start > 0, factor > 1, count >= 1");
  if (!valid) return {};
  std::vector<double> bounds;
  bounds.reserve(static_cast<size_t>(count));
  double bound = start;
  for (int i = 0; i < count; ++i) {
    bounds.push_back(bound);
    bound *= factor;
  }
  return bounds;
}

std::vector<double> Histogram::LatencyBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

std::vector<double> Histogram::DurationBuckets() {
  std::vector<double> bounds = LatencyBuckets();
  bounds.insert(bounds.end(), {120, 300, 600, 1800, 3600});
  return bounds;
}

bool IsValidLabelValue(std::string_view value) {
  if (value.size() > kMaxLabelValueBytes) return false;
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return false;
  }
  return base::IsValidUtf8(value);
}

// ---- FamilyBase ----

namespace internal {

ThreadChildCache::Entry& ThreadChildCache::Slot(uint64_t family, std::span<const std::string_view> values) {
  thread_local std::array<Entry, kEntries> table{};
  // FNV-1a over the family's number and the values, each value ended by a byte no UTF-8 text
  // holds (0xff), so that ("ab", "c") and ("a", "bc") differ.
  uint64_t h = 0xcbf29ce484222325ull ^ family;
  constexpr uint64_t kPrime = 0x100000001b3ull;
  for (std::string_view v : values) {
    for (unsigned char c : v) h = (h ^ c) * kPrime;
    h = (h ^ 0xffu) * kPrime;
  }
  return table[(h ^ (h >> 32)) & (kEntries - 1)];
}

uint64_t ThreadChildCache::NewFamilyNumber() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

FamilyBase::FamilyBase(std::string name, std::string help, std::vector<std::string> label_names,
                       std::string_view type_name)
    : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)), type_name_(type_name) {
  const bool name_ok = IsValidMetricName(name_);
  assert(name_ok && "metric name must match [a-zA-Z_:][a-zA-Z0-9_:]*");
  const bool labels_ok =
      std::all_of(label_names_.begin(), label_names_.end(), [](const std::string& l) { return IsValidLabelName(l); });
  assert(labels_ok && "label names must match [a-zA-Z_][a-zA-Z0-9_]* and not start with __");
  const bool distinct =
      std::set<std::string_view>(label_names_.begin(), label_names_.end()).size() == label_names_.size();
  assert(distinct && "label names must be distinct");
  const bool le_ok = type_name_ != Histogram::kTypeName ||
                     std::find(label_names_.begin(), label_names_.end(), "le") == label_names_.end();
  assert(le_ok && "\"le\" is reserved for histogram buckets");
  renderable_ = name_ok && labels_ok && distinct && le_ok;
}

void FamilyBase::AppendHeader(std::string& out) const {
  out += "# HELP ";
  out += name_;
  out += ' ';
  AppendEscaped(out, help_, /*escape_quote=*/false);
  out += "\n# TYPE ";
  out += name_;
  out += ' ';
  out += type_name_;
  out += '\n';
}

}  // namespace internal

// ---- Family<M> ----

template <typename M>
Family<M>::Family(std::string name, std::string help, std::vector<std::string> label_names,
                  std::vector<double> bucket_bounds)
    : FamilyBase(std::move(name), std::move(help), std::move(label_names), M::kTypeName),
      bucket_bounds_(std::move(bucket_bounds)),
      invalid_child_(NewChild()) {}

template <typename M>
std::unique_ptr<M> Family<M>::NewChild() const {
  if constexpr (std::is_same_v<M, Histogram>) {
    return std::make_unique<Histogram>(bucket_bounds_);
  } else {
    return std::make_unique<M>();
  }
}

template <typename M>
M& Family<M>::WithLabels(std::initializer_list<std::string_view> values) {
  if (values.size() != LabelNames().size()) {
    assert(false && "WithLabels needs exactly one value per label name");
    return *invalid_child_;
  }
  const std::span<const std::string_view> key(values.begin(), values.size());
  internal::ThreadChildCache::Entry& cached = internal::ThreadChildCache::Slot(number_, key);
  if (internal::ThreadChildCache::Matches(cached, number_, key)) return *static_cast<M*>(cached.child);
  M* child = nullptr;
  bool overflowed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = children_.find(key);
    if (it != children_.end()) {
      // The map's node, and so its values, stay put for the family's lifetime.
      cached = {number_, &it->first, it->second.get()};
      return *it->second;
    }
    // A new child: its values checked, and the family's bound kept.
    std::vector<std::string> owned;
    owned.reserve(values.size());
    for (std::string_view v : values) owned.emplace_back(IsValidLabelValue(v) ? v : kInvalidLabelValue);
    it = children_.find(owned);
    const size_t max_series = limit_ ? limit_->max_series : kDefaultMaxSeries;
    if (it == children_.end() && children_.size() >= max_series) {
      overflowed = true;
      owned.assign(values.size(), std::string(kOverflowLabelValue));
      it = children_.find(owned);  // the one child allowed beyond the bound
    }
    if (it == children_.end()) it = children_.emplace(std::move(owned), NewChild()).first;
    child = it->second.get();
  }
  if (overflowed && limit_ && limit_->overflow &&
      static_cast<const void*>(limit_->overflow) != static_cast<const void*>(this)) {
    limit_->overflow->WithLabels({Name()}).Inc();
  }
  return *child;
}

template <typename M>
void Family<M>::RenderTo(std::string& out) const {
  AppendHeader(out);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, child] : children_) {
    RenderChild(out, Name(), LabelNames(), values, *child);
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

// ---- Registry ----

Registry::Registry() = default;

void Registry::SetSeriesLimit(size_t max_series, Family<Counter>* overflow) {
  assert(max_series >= 1 && "SetSeriesLimit REQUIRES max_series >= 1");
  std::lock_guard<std::mutex> lock(mu_);
  limit_.max_series = std::max<size_t>(max_series, 1);
  limit_.overflow = overflow;
}
Registry::~Registry() = default;

template <typename M>
Family<M>& Registry::Add(std::string name, std::string help, std::vector<std::string> label_names,
                         std::vector<double> bounds) {
  // Family's constructor is private to Registry, hence new rather than make_unique.
  std::unique_ptr<Family<M>> family(
      new Family<M>(std::move(name), std::move(help), std::move(label_names), std::move(bounds)));
  Family<M>& ref = *family;
  std::lock_guard<std::mutex> lock(mu_);
  ref.limit_ = &limit_;
  const bool unique =
      std::none_of(families_.begin(), families_.end(), [&](const auto& f) { return f->Name() == ref.Name(); });
  assert(unique && "metric family registered twice");
  if (!unique) ref.renderable_ = false;
  families_.push_back(std::move(family));
  return ref;
}

Family<Counter>& Registry::AddCounter(std::string name, std::string help, std::vector<std::string> label_names) {
  return Add<Counter>(std::move(name), std::move(help), std::move(label_names), {});
}

Family<Gauge>& Registry::AddGauge(std::string name, std::string help, std::vector<std::string> label_names) {
  return Add<Gauge>(std::move(name), std::move(help), std::move(label_names), {});
}

Family<Histogram>& Registry::AddHistogram(std::string name, std::string help, std::vector<std::string> label_names,
                                          std::vector<double> bounds) {
  return Add<Histogram>(std::move(name), std::move(help), std::move(label_names), std::move(bounds));
}

void Registry::AddCollector(std::function<void()> refresh) {
  assert(refresh && "collector must be callable");
  if (!refresh) return;
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(std::move(refresh));
}

std::string Registry::Render() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& collect : collectors_) collect();
  std::string out;
  for (const auto& family : families_) {
    if (family->renderable_) family->RenderTo(out);
  }
  return out;
}

}  // namespace prefix_router::metrics
