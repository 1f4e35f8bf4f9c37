// Ranks as threads of one process: all_gather through shared pointers and two barriers.
//   arrive 1: every rank has published its send buffer (its stream synchronized on CUDA);
//   copy: each rank copies the others' buffers into its own recv;
//   arrive 2: nobody reuses its send buffer before every peer has read it.
// The barrier can be aborted (a rank that failed before its exchange must not leave the others
// waiting forever): then every waiting and later call throws.
#include <condition_variable>
#include <exception>
#include <mutex>
#include <vector>

#include "attnserve/communicator.h"

namespace attnserve {

namespace {

// A reusable barrier with abort (std::barrier has none).
class AbortableBarrier {
 public:
  explicit AbortableBarrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(m_);
    ATTNSERVE_CHECK(!aborted_, "InProcessGroup: the group was aborted (a rank failed)");
    const int64_t gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
    ATTNSERVE_CHECK(generation_ != gen, "InProcessGroup: the group was aborted (a rank failed)");
  }
  void abort() {
    std::lock_guard<std::mutex> lock(m_);
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_, arrived_ = 0;
  int64_t generation_ = 0;
  bool aborted_ = false;
};

}  // namespace

struct InProcessGroup::State {
  explicit State(int n, Device d) : world_size(n), device(d), slots(size_t(n)), sync(n) {}
  struct Slot {
    const void* send = nullptr;
    std::size_t bytes = 0;
  };
  int world_size;
  Device device;
  std::vector<Slot> slots;
  AbortableBarrier sync;
  std::mutex claim;
  std::vector<bool> claimed = std::vector<bool>(size_t(world_size), false);
};

namespace {

TensorView bytes_view(const void* p, std::size_t n, Device d) {
  return TensorView::contiguous(const_cast<void*>(p), DType::u8, {int64_t(n)}, d);
}

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(InProcessGroup::State& g, int rank) : g_(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return g_.world_size; }

  void all_gather(const void* send, void* recv, std::size_t bytes, Stream stream) override {
    exchange(send, recv, bytes, /*chunk_of_peer=*/false, stream);
  }
  void all_to_all(const void* send, void* recv, std::size_t bytes, Stream stream) override {
    exchange(send, recv, bytes, /*chunk_of_peer=*/true, stream);
  }

 private:
  // recv chunk r = rank r's send (all_gather), or chunk `rank_` of rank r's send (all_to_all).
  void exchange(const void* send, void* recv, std::size_t bytes, bool chunk_of_peer, Stream stream) {
    if (g_.device.is_cuda()) stream_synchronize(stream);  // the send buffer is complete
    g_.slots[size_t(rank_)] = {send, bytes};
    g_.sync.arrive_and_wait();
    bool same = true;
    for (const auto& s : g_.slots) same = same && s.bytes == bytes;
    std::exception_ptr failed;
    if (same) {
      try {
        uint8_t* out = static_cast<uint8_t*>(recv);
        for (int r = 0; r < g_.world_size; ++r) {
          uint8_t* dst = out + std::size_t(r) * bytes;
          const uint8_t* src =
              static_cast<const uint8_t*>(g_.slots[size_t(r)].send) + (chunk_of_peer ? std::size_t(rank_) * bytes : 0);
          if (src == dst || bytes == 0) continue;  // in place
          copy_async(bytes_view(dst, bytes, g_.device), bytes_view(src, bytes, g_.device), stream);
        }
        if (g_.device.is_cuda()) stream_synchronize(stream);
      } catch (...) {
        failed = std::current_exception();
      }
    }
    g_.sync.arrive_and_wait();  // every rank passes both barriers, also when failing
    ATTNSERVE_CHECK(same, "InProcessGroup: the ranks passed different byte counts to one exchange (rank ", rank_, ": ",
                    bytes, ")");
    if (failed) std::rethrow_exception(failed);
  }

  InProcessGroup::State& g_;
  int rank_;
};

}  // namespace

InProcessGroup::InProcessGroup(int world_size, Device device) {
  ATTNSERVE_CHECK(world_size >= 1, "InProcessGroup: world_size must be >= 1, got ", world_size);
  state_ = std::make_unique<State>(world_size, device);
}
InProcessGroup::~InProcessGroup() = default;

void InProcessGroup::abort() { state_->sync.abort(); }

int InProcessGroup::world_size() const { return state_->world_size; }
Device InProcessGroup::device() const { return state_->device; }

std::unique_ptr<Communicator> InProcessGroup::communicator(int rank) {
  ATTNSERVE_CHECK(rank >= 0 && rank < state_->world_size, "InProcessGroup::communicator: rank ", rank,
                  " is outside [0, ", state_->world_size, ")");
  std::lock_guard<std::mutex> lock(state_->claim);
  ATTNSERVE_CHECK(!state_->claimed[size_t(rank)], "InProcessGroup::communicator: rank ", rank, " was already taken");
  state_->claimed[size_t(rank)] = true;
  return std::make_unique<InProcessCommunicator>(*state_, rank);
}

}  // namespace attnserve
