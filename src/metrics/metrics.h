// Prometheus metrics: counters, gauges and histograms grouped into labelled families, and a
// Registry that renders them in the text exposition format, version 0.0.4, for GET /metrics.
//
// A small hand-written client (written when no Prometheus client library was packaged for our
// platform; Debian 12 now has prometheus-cpp 1.0.1, a move held until a benchmark shows its hot
// path as fast) that follows the official Go client's data model: a family is a metric name,
// help text and label names; each distinct tuple of label values is a child holding the numbers.
// Children are created on first use and never removed, so label values must come from bounded
// sets we control (configured instances, pools, status classes), never from raw client input.
//
// Thread-safety: updating a child (Counter::Inc, Gauge::Set/Add, Histogram::Observe) is
// lock-free and safe from any thread. Family::WithLabels takes the family's mutex and returns a
// reference that stays valid for the family's lifetime, so hot paths look a child up once and
// keep the reference. Registry methods are safe to call concurrently. Render() holds the
// registry's mutex while it runs the collectors (one at a time) and writes the text, so a
// collector must not call back into the Registry; it may call WithLabels and update children.
// A scrape reads each atomic once without stopping writers: a histogram's _sum may trail its
// buckets by observations in flight, but its _count and +Inf bucket come from the same bucket
// reads and always agree.
//
// Label values are checked when a child is created: a value that is not valid UTF-8, holds a
// control character (NUL, CR, LF, ...) or is longer than kMaxLabelValueBytes becomes "invalid".
// Each family holds at most the registry's series limit of children (SetSeriesLimit, default
// kDefaultMaxSeries); beyond it, a new tuple of label values is counted in the child whose every
// value is "other", and in the registry's overflow counter under the family's name, so that a
// bug that labels by request content cannot grow a scrape without bound.
//
// Invalid metric or label names, duplicate family names and a wrong number of label values are
// programming errors (the names are constants in our code): they assert in debug builds. In
// release builds the offending family or child still accepts updates but is never rendered, so
// one bug cannot make the whole scrape unparseable.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace prefix_router::metrics {

// True if `name` matches [a-zA-Z_:][a-zA-Z0-9_:]*, Prometheus's rule for metric names.
bool IsValidMetricName(std::string_view name);

// True if `name` matches [a-zA-Z_][a-zA-Z0-9_]* and does not start with "__", which Prometheus
// reserves for its own labels.
bool IsValidLabelName(std::string_view name);

inline constexpr size_t kMaxLabelValueBytes = 1024;
inline constexpr size_t kDefaultMaxSeries = 10'000;
inline constexpr std::string_view kInvalidLabelValue = "invalid";
inline constexpr std::string_view kOverflowLabelValue = "other";

// True if `value` is valid UTF-8 without control characters (U+0000..U+001F, U+007F) and at
// most kMaxLabelValueBytes long.
bool IsValidLabelValue(std::string_view value);

// A monotonically increasing count (requests, bytes, errors).
class Counter {
 public:
  static constexpr std::string_view kTypeName = "counter";

  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  void Inc(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// A value that goes up and down (in-flight requests, healthy instances).
class Gauge {
 public:
  static constexpr std::string_view kTypeName = "gauge";

  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  // C++20 atomic<double>::fetch_add; libstdc++ implements it as a compare-exchange loop.
  void Add(double d) { value_.fetch_add(d, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  static_assert(std::atomic<double>::is_always_lock_free);
  std::atomic<double> value_{0.0};
};

// A distribution of observations (latencies, sizes) counted into fixed buckets. An observation v
// falls in the first bucket whose upper bound b satisfies v <= b (Prometheus's "le"), or in the
// implicit +Inf bucket above the last bound; NaN also goes to +Inf. Counts are kept per bucket
// and made cumulative when rendered.
class Histogram {
 public:
  static constexpr std::string_view kTypeName = "histogram";

  // REQUIRES: upper_bounds strictly increasing and not NaN. A trailing +Inf is accepted and
  // dropped, since the +Inf bucket always exists.
  explicit Histogram(std::vector<double> upper_bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void Observe(double v);

  const std::vector<double>& UpperBounds() const { return upper_bounds_; }
  // Observations in bucket i alone (not cumulative). i == UpperBounds().size() is the +Inf
  // bucket. REQUIRES: i <= UpperBounds().size().
  uint64_t BucketCount(size_t i) const;
  // Total observations: the sum of all bucket counts, so it always equals the +Inf bucket.
  uint64_t Count() const;
  double Sum() const { return sum_.load(std::memory_order_relaxed); }

  // `count` bounds start, start*factor, start*factor^2, ...
  // REQUIRES: start > 0, factor > 1, count >= 1 (otherwise asserts; empty in release).
  static std::vector<double> ExponentialBuckets(double start, double factor, int count);
  // Request and upstream latencies in seconds: 100 microseconds to 60 seconds in 1-2.5-5 steps.
  static std::vector<double> LatencyBuckets();
  // Whole requests, which a long generation or a slow stream can make last for many minutes:
  // LatencyBuckets, then 2, 5, 10, 30 and 60 minutes.
  static std::vector<double> DurationBuckets();

 private:
  std::vector<double> upper_bounds_;
  // upper_bounds_.size() + 1 non-cumulative counts; the last is the +Inf bucket.
  std::unique_ptr<std::atomic<uint64_t>[]> bucket_counts_;
  std::atomic<double> sum_{0.0};
};

class Registry;
template <typename M>
class Family;

namespace internal {

// The bound on children a registry puts on its families (see the top of this file).
struct SeriesLimit {
  size_t max_series = kDefaultMaxSeries;
  Family<Counter>* overflow = nullptr;  // counts overflows by family name; null = not counted
};

// Orders label-value tuples lexicographically. Transparent, so that WithLabels finds an existing
// child from the caller's string_views without building a std::vector<std::string> (abseil tip
// #144).
struct LabelValuesLess {
  using is_transparent = void;
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(),
                                        [](std::string_view x, std::string_view y) { return x < y; });
  }
};

// The children a thread has looked up lately, in a direct-mapped table shared by every family:
// an entry names its family by a number never reused (so that an entry of a destroyed family,
// whose address a new one may take, never matches), and points to the child and to its label
// values, which live as long as the family. A hit compares the values and takes no lock; a
// miss goes to the family's map under its mutex and fills the entry. Only children whose own
// values are the caller's are cached (not the "invalid" or "other" stand-ins).
class ThreadChildCache {
 public:
  static constexpr size_t kEntries = 256;  // a power of two
  struct Entry {
    uint64_t family = 0;  // 0: empty (family numbers start at 1)
    const std::vector<std::string>* values = nullptr;
    void* child = nullptr;
  };
  // The entry where this family's child for `values` is cached, if it is.
  static Entry& Slot(uint64_t family, std::span<const std::string_view> values);
  static bool Matches(const Entry& e, uint64_t family, std::span<const std::string_view> values) {
    return e.family == family && std::equal(values.begin(), values.end(), e.values->begin(), e.values->end());
  }
  static uint64_t NewFamilyNumber();
};

// What every family shares, whatever its metric type: names, help and the HELP/TYPE header.
class FamilyBase {
 public:
  virtual ~FamilyBase() = default;
  FamilyBase(const FamilyBase&) = delete;
  FamilyBase& operator=(const FamilyBase&) = delete;

  const std::string& Name() const { return name_; }
  const std::string& Help() const { return help_; }
  const std::vector<std::string>& LabelNames() const { return label_names_; }

 protected:
  FamilyBase(std::string name, std::string help, std::vector<std::string> label_names, std::string_view type_name);
  // Appends "# HELP ...\n# TYPE ...\n".
  void AppendHeader(std::string& out) const;

 private:
  friend class metrics::Registry;
  virtual void RenderTo(std::string& out) const = 0;

  std::string name_;
  std::string help_;
  std::vector<std::string> label_names_;
  std::string_view type_name_;
  bool renderable_ = true;  // false after a programming error caught in a release build

 protected:
  const uint64_t number_ = ThreadChildCache::NewFamilyNumber();  // this family's in ThreadChildCache
  const SeriesLimit* limit_ = nullptr;  // the registry's; set when the family is added
};

}  // namespace internal

// One metric name with its label names, and a child metric of type M (Counter, Gauge or
// Histogram) per distinct tuple of label values. Created and owned by a Registry.
template <typename M>
class Family final : public internal::FamilyBase {
 public:
  // The child for these label values, in the order of LabelNames(); created on first use.
  // The reference stays valid for the family's lifetime; updating it takes no lock.
  // REQUIRES: values.size() == LabelNames().size(). In release builds a wrong count returns a
  // per-family child that is never rendered.
  // A child found before is usually found in a small per-thread cache, without the family's
  // mutex (internal::ThreadChildCache): request paths look children up by label values they
  // only know per request (instance, status) at no cost of a lock.
  M& WithLabels(std::initializer_list<std::string_view> values);

 private:
  friend class metrics::Registry;
  Family(std::string name, std::string help, std::vector<std::string> label_names, std::vector<double> bucket_bounds);
  void RenderTo(std::string& out) const override;
  std::unique_ptr<M> NewChild() const;

  const std::vector<double> bucket_bounds_;  // histograms only: every child's upper bounds
  mutable std::mutex mu_;
  // Guarded by mu_. Children are never removed, so references handed out stay valid.
  std::map<std::vector<std::string>, std::unique_ptr<M>, internal::LabelValuesLess> children_;
  const std::unique_ptr<M> invalid_child_;  // target of wrong-arity WithLabels; never rendered
};

// Owns metric families and renders them, in registration order, for a Prometheus scrape.
class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // REQUIRES (for all Add*): `name` a valid metric name not yet registered here; `label_names`
  // valid label names, pairwise distinct. The returned family lives as long as the Registry.
  Family<Counter>& AddCounter(std::string name, std::string help, std::vector<std::string> label_names = {});
  Family<Gauge>& AddGauge(std::string name, std::string help, std::vector<std::string> label_names = {});
  // Also REQUIRES: no label named "le"; `bounds` as for Histogram's constructor.
  Family<Histogram>& AddHistogram(std::string name, std::string help, std::vector<std::string> label_names,
                                  std::vector<double> bounds);

  // Bounds every family's children (those of families added before too) to `max_series`;
  // `overflow` (a family with one label, `metric`, of this registry) counts the updates sent to
  // a family's "other" child. Call before the families are used.
  // REQUIRES: max_series >= 1.
  void SetSeriesLimit(size_t max_series, Family<Counter>* overflow);

  // `refresh` runs at the start of every Render(), so gauges can be set from live state at
  // scrape time. It must not call Registry methods.
  void AddCollector(std::function<void()> refresh);

  // Runs every collector, then returns all families in text exposition format 0.0.4
  // (Content-Type: text/plain; version=0.0.4). A family without children renders only its HELP
  // and TYPE lines.
  std::string Render() const;

 private:
  template <typename M>
  Family<M>& Add(std::string name, std::string help, std::vector<std::string> label_names, std::vector<double> bounds);

  internal::SeriesLimit limit_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<internal::FamilyBase>> families_;  // guarded by mu_
  std::vector<std::function<void()>> collectors_;                // guarded by mu_
};

// Defined in metrics.cc for exactly these metric types.
extern template class Family<Counter>;
extern template class Family<Gauge>;
extern template class Family<Histogram>;

}  // namespace prefix_router::metrics
