// ParamReader: reads a workload's name=value parameters with their defaults and ranges, keeps
// the first error, and records every effective value for Workload::Parameters().
//
// Usage: read every parameter the workload knows (each getter returns the default when the
// name is absent or its value is bad), add cross-parameter checks with Fail(), then call
// Finish(): the first bad value, else the first unknown name, as InvalidArgument naming it.
//
// Thread-safety: a value type, used by one thread while a workload is made.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "core/status.h"
#include "workload/sampling.h"
#include "workload/workload.h"

namespace prefix_router::workload {

// Shortest decimal text that reads back as `v` ("0.6", "3.5", "8000").
std::string FormatNumber(double v);

class ParamReader {
 public:
  ParamReader(std::string_view workload, const ParamMap& params);

  // An integer in [lo, hi].
  uint32_t Int(std::string_view name, uint32_t def, uint32_t lo, uint32_t hi);
  // A finite number in [lo, hi].
  double Real(std::string_view name, double def, double lo, double hi);
  // true/false (also 1/0, yes/no, on/off).
  bool Bool(std::string_view name, bool def);
  // Any string.
  std::string Text(std::string_view name, std::string_view def);
  // One of `allowed`.
  std::string Choice(std::string_view name, std::string_view def, std::initializer_list<std::string_view> allowed);
  // The raw value of `name` (or `def`), marked known; the caller validates it and calls Fail
  // or Record.
  std::string Raw(std::string_view name, std::string_view def);
  // Whether `name` was given.
  bool Has(std::string_view name) const { return params_.find(name) != params_.end(); }

  // Records the effective value of `name` (overrides what a getter recorded).
  void Record(std::string_view name, std::string value);
  // Records an error about `name` (kept if it is the first).
  void Fail(std::string_view name, std::string_view message);
  // REQUIRES: lo_name and hi_name were read. Fails when lo > hi.
  void CheckOrder(std::string_view lo_name, double lo, std::string_view hi_name, double hi);

  Status Finish() const;
  const std::map<std::string, std::string>& effective() const { return effective_; }

 private:
  const std::string* Find(std::string_view name);

  std::string workload_;
  const ParamMap& params_;
  std::set<std::string, std::less<>> known_;
  std::map<std::string, std::string> effective_;
  Status error_;
};

// Reads the lognormal length parameters <prefix>_median, <prefix>_sigma, <prefix>_min and
// <prefix>_max (min <= max).
Lengths ReadLengths(ParamReader& p, std::string_view prefix, Lengths def);

}  // namespace prefix_router::workload
