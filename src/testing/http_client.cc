#include "testing/http_client.h"

namespace prefix_router::testing {
namespace net = http::net;
namespace beast = http::beast;
namespace bhttp = http::bhttp;
using Clock = std::chrono::steady_clock;
using tcp = http::tcp;

namespace {

template <typename Fields>
std::string FieldValue(const Fields& fields, std::string_view name) {
  auto it = fields.find(name);
  return it == fields.end() ? std::string() : std::string(it->value());
}

}  // namespace

ClientRequest MakeRequest(bhttp::verb method, std::string_view target, std::string body, const Headers& headers) {
  ClientRequest req{method, target, 11};
  req.set(bhttp::field::host, "127.0.0.1");
  for (const auto& [name, value] : headers) req.insert(name, value);
  req.body() = std::move(body);
  if (!req.body().empty() || method == bhttp::verb::post) req.prepare_payload();
  return req;
}

std::string ClientResponse::Header(std::string_view name) const { return FieldValue(message, name); }
bool ClientResponse::HasHeader(std::string_view name) const { return message.find(name) != message.end(); }
std::string StreamedResponse::Header(std::string_view name) const { return FieldValue(head, name); }

HttpClient::HttpClient(uint16_t port, std::chrono::milliseconds timeout) : port_(port), timeout_(timeout) {}
HttpClient::~HttpClient() { Close(); }

// Starts one asynchronous operation (with the stream's deadline set) and runs the private
// io_context until it completes: synchronous use with a timeout.
template <typename Start>
beast::error_code HttpClient::Run(Start&& start) {
  beast::error_code result = net::error::operation_aborted;
  stream_->expires_after(timeout_);
  start([&result](beast::error_code ec, auto&&...) { result = ec; });
  ioc_.restart();
  ioc_.run();
  return result;
}

beast::error_code HttpClient::Connect() {
  if (connected()) return {};
  stream_ = std::make_unique<beast::tcp_stream>(ioc_);
  buffer_.clear();
  ++connects_;
  const tcp::endpoint endpoint(net::ip::make_address("127.0.0.1"), port_);
  beast::error_code ec = Run([&](auto handler) { stream_->async_connect(endpoint, std::move(handler)); });
  if (ec) {
    stream_.reset();
    return ec;
  }
  stream_->socket().set_option(tcp::no_delay(true), ec);
  return {};
}

bool HttpClient::connected() const { return stream_ && stream_->socket().is_open(); }

beast::error_code HttpClient::Send(const ClientRequest& request) {
  if (beast::error_code ec = Connect()) return ec;
  beast::error_code ec = Run([&](auto handler) { bhttp::async_write(*stream_, request, std::move(handler)); });
  sent_at_ = Clock::now();
  return ec;
}

ClientResponse HttpClient::Read() {
  ClientResponse res;
  if (!stream_) {
    res.error = net::error::not_connected;
    return res;
  }
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(64u << 20);
  res.error = Run([&](auto handler) { bhttp::async_read(*stream_, buffer_, parser, std::move(handler)); });
  res.message = parser.release();
  if (res.error || !res.message.keep_alive()) Close();
  return res;
}

ClientResponse HttpClient::RoundTrip(const ClientRequest& request) {
  const beast::error_code wec = Send(request);
  if (wec && !stream_) {
    ClientResponse res;
    res.error = wec;
    return res;
  }
  ClientResponse res = Read();
  if (res.error && wec) res.error = wec;
  return res;
}

StreamedResponse HttpClient::ReadStreamed(const std::function<bool(const StreamedResponse&)>& on_piece) {
  StreamedResponse out;
  out.sent_at = sent_at_;
  if (!stream_) {
    out.error = net::error::not_connected;
    out.done_at = Clock::now();
    return out;
  }
  bhttp::response_parser<bhttp::buffer_body> parser;
  parser.body_limit(boost::none);
  out.error = Run([&](auto handler) { bhttp::async_read_header(*stream_, buffer_, parser, std::move(handler)); });
  if (out.error) {
    out.done_at = Clock::now();
    Close();
    return out;
  }
  out.status = parser.get().result_int();
  out.head = parser.get().base();
  char buf[64 * 1024];
  while (!parser.is_done()) {
    parser.get().body().data = buf;
    parser.get().body().size = sizeof(buf);
    beast::error_code ec =
        Run([&](auto handler) { bhttp::async_read_some(*stream_, buffer_, parser, std::move(handler)); });
    if (ec == bhttp::error::need_buffer) ec = {};
    const size_t got = sizeof(buf) - parser.get().body().size;
    if (got > 0) {
      out.pieces.push_back({Clock::now(), std::string(buf, got)});
      out.body.append(buf, got);
    }
    if (ec) {
      out.error = ec;
      break;
    }
    if (got > 0 && on_piece && !on_piece(out)) break;
  }
  out.complete = parser.is_done();
  out.done_at = Clock::now();
  // Stopped early by `on_piece`: the connection stays as it is; the caller decides when to leave.
  if (out.error || (out.complete && !parser.get().keep_alive())) Close();
  return out;
}

void HttpClient::Close() {
  if (!stream_) return;
  beast::error_code ignored;
  stream_->socket().close(ignored);
  stream_.reset();
  ioc_.restart();
  ioc_.poll();  // let the cancelled deadline timer's handler run
}

ClientResponse Fetch(uint16_t port, const ClientRequest& request) {
  HttpClient client(port);
  return client.RoundTrip(request);
}

ClientResponse Get(uint16_t port, std::string_view target) {
  return Fetch(port, MakeRequest(bhttp::verb::get, target));
}

ClientResponse Post(uint16_t port, std::string_view target, std::string body, const Headers& headers) {
  Headers all = headers;
  all.emplace_back("Content-Type", "application/json");
  return Fetch(port, MakeRequest(bhttp::verb::post, target, std::move(body), all));
}

double MetricSum(uint16_t port, std::string_view prefix) {
  const ClientResponse r = Get(port, "/metrics");
  const std::string& text = r.body();
  double sum = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    if (line.starts_with(prefix)) {
      const size_t space = line.rfind(' ');
      if (space != std::string_view::npos) sum += std::stod(std::string(line.substr(space + 1)));
    }
    pos = end + 1;
  }
  return sum;
}

double Metric(uint16_t port, std::string_view series) {
  const ClientResponse r = Get(port, "/metrics");
  const std::string& text = r.body();
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    if (line.size() > series.size() && line.starts_with(series) && line[series.size()] == ' ') {
      return std::stod(std::string(line.substr(series.size() + 1)));
    }
    pos = end + 1;
  }
  return -1;
}

}  // namespace prefix_router::testing
