// TestPki: a throwaway certificate authority for loopback TLS tests, made with the `openssl`
// command-line tool (scripts/setup.sh installs it) in a fresh temporary directory that the
// object removes when it goes.
//
// Each test makes its own CA, so a "wrong CA" is simply another TestPki, and every certificate
// carries the subject and serial the test chose, so that a test can tell which one a server
// presented. Keys are P-256 (fast to make); certificates are valid from an hour ago for two days.
//
// Thread-safety: one object per test thread.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace prefix_router::testing {

struct CertFiles {
  std::string cert;  // PEM certificate
  std::string key;   // PEM private key
};

class TestPki {
 public:
  // Makes the CA ("CN=<name>"). ok() tells whether openssl succeeded.
  explicit TestPki(const std::string& name);
  ~TestPki();
  TestPki(const TestPki&) = delete;
  TestPki& operator=(const TestPki&) = delete;

  bool ok() const { return ok_; }
  const std::string& dir() const { return dir_; }
  const std::string& ca_file() const { return ca_.cert; }

  // A server certificate signed by this CA: subject CN=<common_name>, the given serial, and
  // `sans` as subjectAltName (openssl syntax, e.g. "IP:127.0.0.1,DNS:localhost").
  Result<CertFiles> Issue(const std::string& common_name, uint64_t serial,
                          const std::string& sans = "IP:127.0.0.1,DNS:localhost");
  // A path in the directory, for files the test writes itself.
  std::string Path(const std::string& file) const { return dir_ + "/" + file; }

 private:
  std::string dir_;
  CertFiles ca_;
  bool ok_ = false;
};

// Writes `text` to `path` (replacing it). False on failure.
bool WriteFile(const std::string& path, const std::string& text);

}  // namespace prefix_router::testing
