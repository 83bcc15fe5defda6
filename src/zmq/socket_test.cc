#include "zmq/socket.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace prefix_router::zmq {
namespace {

using std::chrono::milliseconds;

Socket OpenOrDie(Context& ctx, SocketType t) {
  Result<Socket> s = Socket::Open(ctx, t);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(*s);
}

// A PUB bound on an ephemeral loopback port reaches a SUB connected to ZMQ_LAST_ENDPOINT, with
// all three frames intact (vLLM's topic / seq / payload shape). PUB drops messages sent before
// the subscription arrives, so the test publishes until one is received, within a bound.
TEST(ZmqSocket, PubSubOnLoopback) {
  Context ctx;
  Socket pub = OpenOrDie(ctx, SocketType::kPub);
  ASSERT_TRUE(pub.Bind("tcp://127.0.0.1:*").ok());
  Result<std::string> ep = pub.LastEndpoint();
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->rfind("tcp://127.0.0.1:", 0), 0u) << *ep;
  Socket sub = OpenOrDie(ctx, SocketType::kSub);
  ASSERT_TRUE(sub.Subscribe("kv").ok());
  ASSERT_TRUE(sub.Connect(*ep).ok());
  std::string payload("\x00\x01\xff", 3);
  Result<Message> got = Status::Unavailable("none yet");
  for (int i = 0; i < 200 && !got.ok(); ++i) {
    ASSERT_TRUE(pub.Send({"other", "x", "y"}, milliseconds(100)).ok());  // filtered out
    ASSERT_TRUE(pub.Send({"kv-events", std::string(8, '\0'), payload}, milliseconds(100)).ok());
    got = sub.Recv(milliseconds(10));
  }
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 3u);
  EXPECT_EQ((*got)[0], "kv-events");
  EXPECT_EQ((*got)[1], std::string(8, '\0'));
  EXPECT_EQ((*got)[2], payload);
}

// REQ -> ROUTER -> REQ on inproc: the ROUTER sees [identity, "", request] and answers through the
// identity, which is the replay socket's protocol.
TEST(ZmqSocket, RouterRequestReply) {
  Context ctx;
  Socket router = OpenOrDie(ctx, SocketType::kRouter);
  ASSERT_TRUE(router.Bind("inproc://replay").ok());
  Socket req = OpenOrDie(ctx, SocketType::kReq);
  ASSERT_TRUE(req.Connect("inproc://replay").ok());
  ASSERT_TRUE(req.Send({"start"}, milliseconds(1000)).ok());
  Result<Message> in = router.Recv(milliseconds(1000));
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  ASSERT_EQ(in->size(), 3u);
  EXPECT_EQ((*in)[1], "");
  EXPECT_EQ((*in)[2], "start");
  ASSERT_TRUE(router.Send({(*in)[0], "", "a", "b"}, milliseconds(1000)).ok());
  Result<Message> out = req.Recv(milliseconds(1000));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, (Message{"a", "b"}));
}

// Nothing to read within the timeout is Unavailable, and it takes about the timeout.
TEST(ZmqSocket, RecvTimesOut) {
  Context ctx;
  Socket sub = OpenOrDie(ctx, SocketType::kSub);
  ASSERT_TRUE(sub.Bind("inproc://quiet").ok());
  auto start = std::chrono::steady_clock::now();
  Result<Message> r = sub.Recv(milliseconds(30));
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(25));
  EXPECT_EQ(sub.Recv(milliseconds(0)).status().code(), StatusCode::kUnavailable);
}

// A message with more frames than allowed is consumed whole and refused; the next one is read.
TEST(ZmqSocket, TooManyFramesRefused) {
  Context ctx;
  Socket a = OpenOrDie(ctx, SocketType::kPair);
  Socket b = OpenOrDie(ctx, SocketType::kPair);
  ASSERT_TRUE(a.Bind("inproc://pair").ok());
  ASSERT_TRUE(b.Connect("inproc://pair").ok());
  ASSERT_TRUE(a.Send({"1", "2", "3", "4"}, milliseconds(1000)).ok());
  ASSERT_TRUE(a.Send({"x"}, milliseconds(1000)).ok());
  EXPECT_EQ(b.Recv(milliseconds(1000), 3).status().code(), StatusCode::kResourceExhausted);
  Result<Message> next = b.Recv(milliseconds(1000), 3);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, Message{"x"});
}

// PollIn reports which sockets are readable, and none after a timeout.
TEST(ZmqSocket, PollInSeveral) {
  Context ctx;
  Socket a1 = OpenOrDie(ctx, SocketType::kPair), a2 = OpenOrDie(ctx, SocketType::kPair);
  Socket b1 = OpenOrDie(ctx, SocketType::kPair), b2 = OpenOrDie(ctx, SocketType::kPair);
  ASSERT_TRUE(a1.Bind("inproc://p1").ok());
  ASSERT_TRUE(a2.Bind("inproc://p2").ok());
  ASSERT_TRUE(b1.Connect("inproc://p1").ok());
  ASSERT_TRUE(b2.Connect("inproc://p2").ok());
  Socket* readers[] = {&b1, &b2};
  Result<std::vector<bool>> none = PollIn(readers, milliseconds(5));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, (std::vector<bool>{false, false}));
  ASSERT_TRUE(a2.Send({"hi"}, milliseconds(1000)).ok());
  Result<std::vector<bool>> one = PollIn(readers, milliseconds(1000));
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, (std::vector<bool>{false, true}));
}

// Bad endpoints and closed sockets are errors, not crashes; a moved-from socket is closed.
TEST(ZmqSocket, ErrorsAreStatuses) {
  Context ctx;
  Socket s = OpenOrDie(ctx, SocketType::kPub);
  EXPECT_FALSE(s.Bind("nonsense").ok());
  EXPECT_FALSE(s.Bind("tcp://256.0.0.1:1").ok());
  EXPECT_FALSE(s.Connect("bogus://x").ok());
  ASSERT_TRUE(s.Bind("tcp://127.0.0.1:*").ok());
  Socket other = OpenOrDie(ctx, SocketType::kPub);
  EXPECT_FALSE(other.Bind(*s.LastEndpoint()).ok());  // address in use
  Socket moved = std::move(s);
  EXPECT_TRUE(moved.is_open());
  EXPECT_FALSE(s.is_open());  // NOLINT(bugprone-use-after-move): the contract under test
  EXPECT_EQ(s.Send({"x"}, milliseconds(0)).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(s.Recv(milliseconds(0)).ok());
}

}  // namespace
}  // namespace prefix_router::zmq
