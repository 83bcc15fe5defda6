#include "workload/params.h"

#include <charconv>
#include <cmath>

namespace prefix_router::workload {

std::string FormatNumber(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  if (ec != std::errc()) return std::to_string(v);
  return std::string(buf, end);
}

ParamReader::ParamReader(std::string_view workload, const ParamMap& params) : workload_(workload), params_(params) {}

const std::string* ParamReader::Find(std::string_view name) {
  known_.emplace(name);
  const auto it = params_.find(name);
  return it == params_.end() ? nullptr : &it->second;
}

void ParamReader::Record(std::string_view name, std::string value) { effective_[std::string(name)] = std::move(value); }

void ParamReader::Fail(std::string_view name, std::string_view message) {
  if (!error_.ok()) return;
  error_ = Status::InvalidArgument(workload_ + ": parameter " + std::string(name) + ": " + std::string(message));
}

uint32_t ParamReader::Int(std::string_view name, uint32_t def, uint32_t lo, uint32_t hi) {
  uint32_t v = def;
  if (const std::string* s = Find(name)) {
    uint64_t parsed = 0;
    const char* first = s->data();
    const char* last = first + s->size();
    const auto [ptr, ec] = std::from_chars(first, last, parsed);
    if (s->empty() || ec != std::errc() || ptr != last || parsed < lo || parsed > hi) {
      Fail(name, "'" + *s + "' is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    } else {
      v = static_cast<uint32_t>(parsed);
    }
  }
  Record(name, std::to_string(v));
  return v;
}

double ParamReader::Real(std::string_view name, double def, double lo, double hi) {
  double v = def;
  if (const std::string* s = Find(name)) {
    double parsed = 0;
    const char* first = s->data();
    const char* last = first + s->size();
    const auto [ptr, ec] = std::from_chars(first, last, parsed);
    if (s->empty() || ec != std::errc() || ptr != last || !std::isfinite(parsed) || parsed < lo || parsed > hi) {
      Fail(name, "'" + *s + "' is not a number in [" + FormatNumber(lo) + ", " + FormatNumber(hi) + "]");
    } else {
      v = parsed;
    }
  }
  Record(name, FormatNumber(v));
  return v;
}

bool ParamReader::Bool(std::string_view name, bool def) {
  bool v = def;
  if (const std::string* s = Find(name)) {
    if (*s == "true" || *s == "1" || *s == "yes" || *s == "on") {
      v = true;
    } else if (*s == "false" || *s == "0" || *s == "no" || *s == "off") {
      v = false;
    } else {
      Fail(name, "'" + *s + "' is not a boolean (true or false)");
    }
  }
  Record(name, v ? "true" : "false");
  return v;
}

std::string ParamReader::Text(std::string_view name, std::string_view def) {
  const std::string* s = Find(name);
  std::string v = s ? *s : std::string(def);
  Record(name, v);
  return v;
}

std::string ParamReader::Choice(std::string_view name, std::string_view def,
                                std::initializer_list<std::string_view> allowed) {
  std::string v(def);
  if (const std::string* s = Find(name)) {
    bool ok = false;
    std::string list;
    for (std::string_view a : allowed) {
      ok = ok || *s == a;
      if (!list.empty()) list += ", ";
      list += a;
    }
    if (ok) {
      v = *s;
    } else {
      Fail(name, "'" + *s + "' is not one of " + list);
    }
  }
  Record(name, v);
  return v;
}

std::string ParamReader::Raw(std::string_view name, std::string_view def) {
  const std::string* s = Find(name);
  return s ? *s : std::string(def);
}

void ParamReader::CheckOrder(std::string_view lo_name, double lo, std::string_view hi_name, double hi) {
  if (lo > hi) {
    Fail(lo_name, FormatNumber(lo) + " is greater than " + std::string(hi_name) + " (" + FormatNumber(hi) + ")");
  }
}

Status ParamReader::Finish() const {
  if (!error_.ok()) return error_;
  for (const auto& [name, value] : params_) {
    if (known_.find(name) == known_.end()) {
      std::string list;
      for (const std::string& k : known_) {
        if (!list.empty()) list += ", ";
        list += k;
      }
      return Status::InvalidArgument(workload_ + ": unknown parameter '" + name + "' (known: " + list + ")");
    }
  }
  return Status::Ok();
}

Lengths ReadLengths(ParamReader& p, std::string_view prefix, Lengths def) {
  const std::string s(prefix);
  Lengths l;
  l.median = p.Real(s + "_median", def.median, 1, 1e6);
  l.sigma = p.Real(s + "_sigma", def.sigma, 0, 10);
  l.min = p.Int(s + "_min", def.min, 1, 1'000'000);
  l.max = p.Int(s + "_max", def.max, 1, 1'000'000);
  p.CheckOrder(s + "_min", l.min, s + "_max", l.max);
  return l;
}

}  // namespace prefix_router::workload
