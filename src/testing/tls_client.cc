#include "testing/tls_client.h"

#include <openssl/x509.h>

#include "http/tls.h"

namespace prefix_router::testing {
namespace net = http::net;
namespace beast = http::beast;
namespace bhttp = http::bhttp;

TlsClient::TlsClient(uint16_t port, std::string ca_file, std::string host, std::chrono::milliseconds timeout)
    : port_(port), host_(std::move(host)), timeout_(timeout) {
  auto ctx = http::MakeClientTlsContext(ca_file, true, "test");
  if (ctx.ok()) context_ = *ctx;
}

TlsClient::~TlsClient() { Close(); }

template <typename Start>
beast::error_code TlsClient::Run(Start&& start) {
  beast::error_code result = net::error::operation_aborted;
  beast::get_lowest_layer(*stream_).expires_after(timeout_);
  start([&result](beast::error_code ec, auto&&...) { result = ec; });
  ioc_.restart();
  ioc_.run();
  return result;
}

beast::error_code TlsClient::Connect() {
  if (stream_) return {};
  if (!context_) return net::error::no_protocol_option;
  stream_ = std::make_unique<http::TlsStream>(ioc_, *context_);
  buffer_.clear();
  ++connects_;
  http::PrepareClientConnection(stream_->native_handle(), host_, true);
  const http::tcp::endpoint endpoint(net::ip::make_address("127.0.0.1"), port_);
  beast::error_code ec =
      Run([&](auto handler) { beast::get_lowest_layer(*stream_).async_connect(endpoint, std::move(handler)); });
  if (!ec) {
    ec = Run([&](auto handler) { stream_->async_handshake(net::ssl::stream_base::client, std::move(handler)); });
  }
  if (ec) {
    stream_.reset();
    return ec;
  }
  if (X509* cert = SSL_get1_peer_certificate(stream_->native_handle())) {
    char line[256];
    X509_NAME_oneline(X509_get_subject_name(cert), line, sizeof(line));
    peer_subject_ = line;
    peer_serial_ = ASN1_INTEGER_get(X509_get_serialNumber(cert));
    X509_free(cert);
  }
  return {};
}

ClientResponse TlsClient::RoundTrip(const ClientRequest& request) {
  ClientResponse res;
  if ((res.error = Connect())) return res;
  res.error = Run([&](auto handler) { bhttp::async_write(*stream_, request, std::move(handler)); });
  if (res.error) return res;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(64u << 20);
  res.error = Run([&](auto handler) { bhttp::async_read(*stream_, buffer_, parser, std::move(handler)); });
  res.message = parser.release();
  if (res.error || !res.message.keep_alive()) Close();
  return res;
}

void TlsClient::Close() {
  if (!stream_) return;
  beast::error_code ignored;
  beast::get_lowest_layer(*stream_).socket().shutdown(http::tcp::socket::shutdown_both, ignored);
  beast::get_lowest_layer(*stream_).close();
  stream_.reset();
}

}  // namespace prefix_router::testing
