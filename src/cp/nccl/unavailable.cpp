// Builds without NCCL (ATTNSERVE_NCCL=OFF, or AUTO with no NCCL found): NcclCommunicator fails with
// a clear error. Compiled only when src/cp/nccl/communicator.cpp is not (CMakeLists.txt).
#include "attnserve/communicator.h"

namespace attnserve {
namespace {
[[noreturn]] void unavailable() {
  ATTNSERVE_FAIL("NcclCommunicator: attnserve was built without NCCL (configure with -DATTNSERVE_NCCL=ON and ",
                 "NCCL's headers and library; see docs/context_parallel.md)");
}
}  // namespace

bool nccl_available() { return false; }
NcclCommunicator::NcclCommunicator(ncclComm*) { unavailable(); }
NcclCommunicator::NcclCommunicator(ncclComm*, bool) { unavailable(); }
std::unique_ptr<NcclCommunicator> NcclCommunicator::create(const NcclUniqueId&, int, int) { unavailable(); }
NcclUniqueId NcclCommunicator::new_unique_id() { unavailable(); }
NcclCommunicator::~NcclCommunicator() = default;
void NcclCommunicator::all_gather(const void*, void*, std::size_t, Stream) { unavailable(); }
void NcclCommunicator::all_to_all(const void*, void*, std::size_t, Stream) { unavailable(); }
}  // namespace attnserve
