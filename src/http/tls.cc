#include "http/tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace prefix_router::http {
namespace {

// Opening the file first gives the usual "No such file or directory" instead of OpenSSL's
// "system lib" for the commonest mistake.
Status CheckReadable(const std::string& file, const std::string& field) {
  if (file.empty()) return Status::InvalidArgument(field + ": is required (a PEM file)");
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (f == nullptr) {
    return Status::InvalidArgument(field + ": '" + file + "': cannot open: " + std::strerror(errno));
  }
  std::fclose(f);
  return Status::Ok();
}

Status OpenSslFailure(const std::string& field, const std::string& file, std::string_view what) {
  std::string reason = TakeOpenSslError();
  return Status::InvalidArgument(field + ": '" + file + "': " + std::string(what) +
                                 (reason.empty() ? "" : " (" + reason + ")"));
}

}  // namespace

std::string TakeOpenSslError() {
  unsigned long last = 0;
  while (unsigned long e = ERR_get_error()) last = e;  // the last one is the most specific
  if (last == 0) return "";
  const char* reason = ERR_reason_error_string(last);
  return reason ? reason : "error " + std::to_string(last);
}

Result<std::shared_ptr<ssl::context>> MakeServerTlsContext(const std::string& cert_file, const std::string& key_file,
                                                           std::string_view field) {
  const std::string cert_field = std::string(field) + ".cert_file";
  const std::string key_field = std::string(field) + ".key_file";
  if (Status s = CheckReadable(cert_file, cert_field); !s.ok()) return s;
  if (Status s = CheckReadable(key_file, key_field); !s.ok()) return s;
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  SSL_CTX* native = ctx->native_handle();
  ERR_clear_error();
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  SSL_CTX_set_options(native, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  if (SSL_CTX_use_certificate_chain_file(native, cert_file.c_str()) != 1) {
    return OpenSslFailure(cert_field, cert_file, "not a PEM certificate chain");
  }
  if (SSL_CTX_use_PrivateKey_file(native, key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    // A mismatched key fails here too (OpenSSL checks the pair as it loads the key).
    return OpenSslFailure(key_field, key_file, "not a PEM private key matching the certificate in " + cert_field);
  }
  if (SSL_CTX_check_private_key(native) != 1) {
    return OpenSslFailure(key_field, key_file, "does not match the certificate in " + cert_field);
  }
  return ctx;
}

Result<std::shared_ptr<ssl::context>> MakeClientTlsContext(const std::string& ca_file, bool verify,
                                                           std::string_view field) {
  const std::string ca_field = std::string(field) + ".ca_file";
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
  SSL_CTX* native = ctx->native_handle();
  ERR_clear_error();
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  if (!ca_file.empty()) {
    if (Status s = CheckReadable(ca_file, ca_field); !s.ok()) return s;
    if (SSL_CTX_load_verify_locations(native, ca_file.c_str(), nullptr) != 1) {
      return OpenSslFailure(ca_field, ca_file, "no PEM CA certificate could be loaded");
    }
  } else if (verify && SSL_CTX_set_default_verify_paths(native) != 1) {
    return Status::InvalidArgument(ca_field + ": the system CA store cannot be loaded (" + TakeOpenSslError() +
                                   "); set a CA file");
  }
  SSL_CTX_set_verify(native, verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, nullptr);
  return ctx;
}

bool PrepareClientConnection(SSL* ssl, const std::string& host, bool verify) {
  boost::system::error_code ec;
  boost::asio::ip::make_address(host, ec);
  const bool is_ip = !ec;
  if (!is_ip && SSL_set_tlsext_host_name(ssl, host.c_str()) != 1) return false;
  if (!verify) return true;
  // Checked by OpenSSL during chain verification, so a mismatch fails the handshake with
  // X509_V_ERR_HOSTNAME_MISMATCH / X509_V_ERR_IP_ADDRESS_MISMATCH as its verification result.
  if (is_ip) return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str()) == 1;
  SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  return SSL_set1_host(ssl, host.c_str()) == 1;
}

std::string VerifyFailure(SSL* ssl) {
  const long result = SSL_get_verify_result(ssl);
  if (result == X509_V_OK) return "";
  return X509_verify_cert_error_string(result);
}

}  // namespace prefix_router::http
