// TLS contexts (OpenSSL through Asio) for both sides of the gateway: the client listener's
// server context (certificate chain and key from PEM files) and the client contexts of https
// upstreams (peer verification against a CA file or the system store).
//
// A context is built once and shared read-only by the connections made with it (OpenSSL's
// SSL_CTX is safe to share once configured). Replacing the listener's certificate means building
// a new context and handing it to the Server: connections already open keep the context they
// started with. Errors name the configuration field and the file, with OpenSSL's reason, and
// never include key material.
//
// Thread-safety: the functions are; a returned context must not be reconfigured once shared.
#pragma once

#include <boost/asio/ssl.hpp>

#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace prefix_router::http {

namespace ssl = boost::asio::ssl;

// A server context: TLS 1.2 at least, the certificate chain (leaf first) and its private key,
// checked to match. `field` prefixes messages ("tls" gives "tls.cert_file: ...").
Result<std::shared_ptr<ssl::context>> MakeServerTlsContext(const std::string& cert_file, const std::string& key_file,
                                                           std::string_view field = "tls");

// A client context for https upstreams: TLS 1.2 at least; with `verify`, the peer's chain must
// lead to a CA in `ca_file` (PEM, one or more certificates) or, when it is empty, the system
// store. Host name verification is per connection (it needs the host): see VerifyHost.
// `field` prefixes messages ("upstream_tls.ca_file: ...").
Result<std::shared_ptr<ssl::context>> MakeClientTlsContext(const std::string& ca_file, bool verify,
                                                           std::string_view field = "upstream_tls");

// Sets SNI (for a DNS name; RFC 6066 forbids IP literals there) and, with `verify`, the check
// that the peer's certificate names `host` (a DNS name or an IP address, against its SANs) on a
// connection about to shake hands. False when OpenSSL refused a setting.
bool PrepareClientConnection(SSL* ssl, const std::string& host, bool verify);

// Why a handshake failed as the peer's certificate goes: OpenSSL's verification result
// ("certificate has expired", "hostname mismatch", ...), or "" when verification passed or did
// not run.
std::string VerifyFailure(SSL* ssl);

// The last OpenSSL error's reason ("" when none), and clears the queue.
std::string TakeOpenSslError();

}  // namespace prefix_router::http
