// The exchanges of context-parallel attention: an all-gather (and an all-to-all) of bytes over the
// ranks of a group.
//   InProcessGroup     ranks as threads of one process (tests, CPU); host or device memory
//   NcclCommunicator   NCCL (ncclAllGather on the engine's ncclComm_t); built with ATTNSERVE_NCCL
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "attnserve/runtime.h"

struct ncclComm;  // NCCL's opaque communicator: ncclComm_t is ncclComm*

namespace attnserve {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // recv[r * bytes .. (r + 1) * bytes) = rank r's `send` (bytes each, the same on every rank).
  // In place when send == recv + rank * bytes. Ordered on `stream` after the work already enqueued
  // there; no allocation. Every rank of the group must call it, in the same order.
  virtual void all_gather(const void* send, void* recv, std::size_t bytes, Stream stream) = 0;
  // recv[r * bytes .. (r + 1) * bytes) = rank r's send[rank * bytes .. (rank + 1) * bytes): chunk j of
  // `send` goes to rank j. Not in place (send and recv must not overlap). Same ordering rules.
  virtual void all_to_all(const void* send, void* recv, std::size_t bytes, Stream stream) = 0;
};

// Ranks as threads: each thread takes communicator(rank) and calls all_gather with its own buffers.
// Each call blocks until every rank has arrived (two barriers); on CUDA it synchronizes the caller's
// stream first and copies with cudaMemcpyAsync, so it is not graph-capturable (a test vehicle for
// the op logic on one GPU; the engine's path is NCCL). A rank whose byte count differs from the
// others' fails on every rank (no rank is left waiting); so does every rank after abort().
class InProcessGroup {
 public:
  InProcessGroup(int world_size, Device device = Device::cpu());
  ~InProcessGroup();
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  int world_size() const;
  Device device() const;
  std::unique_ptr<Communicator> communicator(int rank);  // once per rank
  // Fails every waiting and later all_gather of the group (call it when a rank fails before its
  // exchange, or the others wait forever).
  void abort();

  struct State;  // internal (src/cp/in_process.cpp)

 private:
  std::unique_ptr<State> state_;
};

// NCCL's unique id (ncclUniqueId, 128 bytes): made on one rank, sent to the others by the engine.
using NcclUniqueId = std::array<uint8_t, 128>;

bool nccl_available();  // built with NCCL (ATTNSERVE_NCCL)

class NcclCommunicator final : public Communicator {
 public:
  // Borrows the engine's communicator (not destroyed here).
  explicit NcclCommunicator(ncclComm* comm);
  // Creates (and owns) a communicator on the current CUDA device: ncclCommInitRank.
  static std::unique_ptr<NcclCommunicator> create(const NcclUniqueId& id, int rank, int world_size);
  static NcclUniqueId new_unique_id();  // ncclGetUniqueId
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  // ncclAllGather(send, recv, bytes, ncclUint8, comm, stream): stream-ordered, capturable in a CUDA
  // graph, no allocation. Device memory only.
  void all_gather(const void* send, void* recv, std::size_t bytes, Stream stream) override;
  // One NCCL group of ncclSend / ncclRecv pairs (graph-capturable, no allocation).
  void all_to_all(const void* send, void* recv, std::size_t bytes, Stream stream) override;
  ncclComm* comm() const { return comm_; }

 private:
  NcclCommunicator(ncclComm* comm, bool owned);
  ncclComm* comm_ = nullptr;
  bool owned_ = false;
  int rank_ = 0, world_size_ = 1;
};

}  // namespace attnserve
