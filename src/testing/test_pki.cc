#include "testing/test_pki.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace prefix_router::testing {
namespace {

bool Run(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()) == 0; }

std::string Quote(const std::string& s) { return "'" + s + "'"; }

}  // namespace

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  return static_cast<bool>(out);
}

TestPki::TestPki(const std::string& name) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "pr-pki-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return;
  dir_ = tmpl;
  ca_ = {Path("ca.pem"), Path("ca.key")};
  ok_ = Run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj " +
            Quote("/CN=" + name) + " -addext basicConstraints=critical,CA:TRUE -addext " +
            "keyUsage=critical,keyCertSign,cRLSign -keyout " + Quote(ca_.key) + " -out " + Quote(ca_.cert));
}

TestPki::~TestPki() {
  if (dir_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

Result<CertFiles> TestPki::Issue(const std::string& common_name, uint64_t serial, const std::string& sans) {
  if (!ok_) return Status::Internal("the test CA could not be made (is openssl installed?)");
  const std::string base = Path("s" + std::to_string(serial));
  CertFiles files{base + ".pem", base + ".key"};
  const std::string ext = base + ".ext";
  if (!WriteFile(ext, "subjectAltName=" + sans + "\nbasicConstraints=CA:FALSE\n" +
                          "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")) {
    return Status::Internal("cannot write " + ext);
  }
  if (!Run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj " + Quote("/CN=" + common_name) +
           " -keyout " + Quote(files.key) + " -out " + Quote(base + ".csr")) ||
      !Run("openssl x509 -req -days 2 -in " + Quote(base + ".csr") + " -CA " + Quote(ca_.cert) + " -CAkey " +
           Quote(ca_.key) + " -set_serial " + std::to_string(serial) + " -extfile " + Quote(ext) + " -out " +
           Quote(files.cert))) {
    return Status::Internal("openssl could not issue " + common_name);
  }
  return files;
}

}  // namespace prefix_router::testing
