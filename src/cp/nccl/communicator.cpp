// NcclCommunicator: the all-gather of context-parallel attention on NCCL (built with ATTNSERVE_NCCL).
// ncclAllGather is stream-ordered, allocates nothing per call and can be captured in a CUDA graph.
#include <cstring>

#include <nccl.h>

#include "attnserve/communicator.h"

namespace attnserve {
namespace {

void check_nccl(ncclResult_t r, const char* what) {
  ATTNSERVE_CHECK(r == ncclSuccess, "NCCL: ", what, " failed: ", ncclGetErrorString(r));
}

static_assert(sizeof(ncclUniqueId) == std::tuple_size_v<NcclUniqueId>, "ncclUniqueId is 128 bytes");

}  // namespace

bool nccl_available() { return true; }

NcclCommunicator::NcclCommunicator(ncclComm* comm) : NcclCommunicator(comm, false) {}

NcclCommunicator::NcclCommunicator(ncclComm* comm, bool owned) : comm_(comm), owned_(owned) {
  ATTNSERVE_CHECK(comm != nullptr, "NcclCommunicator: the communicator is null");
  check_nccl(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
  check_nccl(ncclCommCount(comm_, &world_size_), "ncclCommCount");
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(const NcclUniqueId& id, int rank, int world_size) {
  ATTNSERVE_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "NcclCommunicator::create: rank ", rank,
                  " is outside [0, world_size = ", world_size, ")");
  ncclUniqueId uid;
  std::memcpy(&uid, id.data(), sizeof(uid));
  ncclComm_t comm = nullptr;
  check_nccl(ncclCommInitRank(&comm, world_size, uid, rank), "ncclCommInitRank");
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, true));
}

NcclUniqueId NcclCommunicator::new_unique_id() {
  ncclUniqueId uid;
  check_nccl(ncclGetUniqueId(&uid), "ncclGetUniqueId");
  NcclUniqueId out;
  std::memcpy(out.data(), &uid, sizeof(uid));
  return out;
}

NcclCommunicator::~NcclCommunicator() {
  if (owned_ && comm_) ncclCommDestroy(comm_);
}

void NcclCommunicator::all_gather(const void* send, void* recv, std::size_t bytes, Stream stream) {
  check_nccl(ncclAllGather(send, recv, bytes, ncclUint8, comm_, static_cast<cudaStream_t>(stream.handle)),
             "ncclAllGather");
}

void NcclCommunicator::all_to_all(const void* send, void* recv, std::size_t bytes, Stream stream) {
  const auto st = static_cast<cudaStream_t>(stream.handle);
  const auto* src = static_cast<const uint8_t*>(send);
  auto* dst = static_cast<uint8_t*>(recv);
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  for (int r = 0; r < world_size_; ++r) {
    check_nccl(ncclSend(src + std::size_t(r) * bytes, bytes, ncclUint8, r, comm_, st), "ncclSend");
    check_nccl(ncclRecv(dst + std::size_t(r) * bytes, bytes, ncclUint8, r, comm_, st), "ncclRecv");
  }
  check_nccl(ncclGroupEnd(), "ncclGroupEnd");
}

}  // namespace attnserve
