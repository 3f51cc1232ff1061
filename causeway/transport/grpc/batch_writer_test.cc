// BatchWriter's bound on what it holds: past it a post waits for room as
// long as its limit says, then the writer gives up on the stream.
#include <string>

#include "causeway/base/mutex.h"
#include "causeway/transport/grpc/cluster.pb.h"
#include "causeway/transport/grpc/grpc_common.h"
#include "gtest/gtest.h"

namespace causeway::grpc_transport {
namespace {

using Writer = BatchWriter<cluster::DataBatch, cluster::DataMessage>;

cluster::DataMessage Piece(size_t bytes) {
  cluster::DataMessage m;
  m.mutable_piece()->set_data(std::string(bytes, 'x'));
  return m;
}

// A stream whose peer reads only when let: each write waits for a permit.
class Gate {
 public:
  bool Write(const cluster::DataBatch& batch) {
    MutexLock lock(&mu_);
    ++started_;
    mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return permits_ > 0; });
    --permits_;
    written_ += batch.messages_size();
    return true;
  }
  void Permit(int n) {
    MutexLock lock(&mu_);
    permits_ += n;
  }
  // Waits until the writer thread is inside a write: what is posted after
  // this stays queued.
  void AwaitStarted(int n) {
    MutexLock lock(&mu_);
    mu_.Await([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return started_ >= n; });
  }
  int written() {
    MutexLock lock(&mu_);
    return written_;
  }

 private:
  Mutex mu_;
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  int permits_ ABSL_GUARDED_BY(mu_) = 0;
  int written_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(BatchWriterTest, APostPastTheLimitThatMayNotWaitGivesUpTheStream) {
  Gate gate;
  {
    Writer writer([&](const cluster::DataBatch& b) { return gate.Write(b); },
                  WriterLimit{1000, absl::ZeroDuration()});
    ASSERT_TRUE(writer.Post(Piece(100)));
    gate.AwaitStarted(1);  // the first is being written; the rest queue
    EXPECT_TRUE(writer.Post(Piece(400)));
    EXPECT_TRUE(writer.Post(Piece(400)));
    EXPECT_GT(writer.stats().queued_bytes, 800);
    EXPECT_FALSE(writer.overflowed());
    EXPECT_FALSE(writer.Post(Piece(400)));  // would pass 1000
    EXPECT_TRUE(writer.overflowed());
    EXPECT_TRUE(writer.broken());
    EXPECT_EQ(writer.stats().queued_bytes, 0);  // dropped
    EXPECT_FALSE(writer.Post(Piece(1)));
    gate.Permit(100);
  }
  EXPECT_EQ(gate.written(), 1);
}

TEST(BatchWriterTest, APostPastTheLimitWaitsForTheWriterToMakeRoom) {
  Gate gate;
  Writer writer([&](const cluster::DataBatch& b) { return gate.Write(b); },
                WriterLimit{1000, absl::Seconds(60)});
  ASSERT_TRUE(writer.Post(Piece(100)));
  gate.AwaitStarted(1);
  ASSERT_TRUE(writer.Post(Piece(900)));
  // Over the limit: the post waits until the writer takes the queue, which
  // it does once the peer reads the first batch.
  std::thread reader([&] { gate.Permit(2); });
  EXPECT_TRUE(writer.Post(Piece(900)));
  reader.join();
  EXPECT_FALSE(writer.overflowed());
  gate.Permit(100);
  writer.Close();
  EXPECT_EQ(gate.written(), 3);
}

TEST(BatchWriterTest, AwaitBelowTimesOutWhileThePeerDoesNotRead) {
  Gate gate;
  Writer writer([&](const cluster::DataBatch& b) { return gate.Write(b); });
  ASSERT_TRUE(writer.Post(Piece(10)));
  gate.AwaitStarted(1);
  ASSERT_TRUE(writer.Post(Piece(5000)));
  EXPECT_FALSE(writer.AwaitBelow(1000, absl::Milliseconds(50)));
  gate.Permit(100);
  EXPECT_TRUE(writer.AwaitBelow(1000, absl::Seconds(60)));
  // Urgent messages (heartbeats) are not held to the limit.
  Writer tiny([&](const cluster::DataBatch& b) { return gate.Write(b); },
              WriterLimit{1, absl::ZeroDuration()});
  EXPECT_TRUE(tiny.PostUrgent(Piece(10)));
  EXPECT_TRUE(tiny.PostUrgent(Piece(10)));
  EXPECT_FALSE(tiny.overflowed());
}

}  // namespace
}  // namespace causeway::grpc_transport
