// The layout rules of src/cuda (README "Layout"), checked on the source tree: an arch leaf
// (src/cuda/<op>/sm80, src/cuda/<op>/sm90) never includes the other arch's files, and every CUDA
// op's front has its plan as host code; the backends size workspaces from plans, not fake arguments.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
const fs::path kSrc = fs::path(ATTNSERVE_SOURCE_DIR) / "src";

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

bool is_source(const fs::path& p) {
  const std::string e = p.extension().string();
  return e == ".h" || e == ".cuh" || e == ".cu" || e == ".cpp" || e == ".inc";
}

TEST(SourceLayout, ArchLeavesNeverIncludeEachOther) {
  int leaves = 0;
  for (const auto& entry : fs::recursive_directory_iterator(kSrc / "cuda")) {
    if (!entry.is_regular_file() || !is_source(entry.path())) continue;
    const std::string path = entry.path().generic_string();
    const bool sm80 = path.find("/sm80/") != std::string::npos, sm90 = path.find("/sm90/") != std::string::npos;
    if (!sm80 && !sm90) continue;
    ++leaves;
    const std::string other = sm80 ? "sm90/" : "sm80/";
    for (const std::string& l : lines_of(entry.path()))
      if (l.rfind("#include", 0) == 0) EXPECT_EQ(l.find(other), std::string::npos) << path << ": " << l;
  }
  EXPECT_GT(leaves, 20);
}

TEST(SourceLayout, OpsWithPlansKeepThemInTheirFront) {
  for (const char* op : {"attention", "mla", "sparse_mla", "indexer", "topk"}) {
    EXPECT_TRUE(fs::exists(kSrc / "cuda" / op / "plan.h")) << op;
    EXPECT_TRUE(fs::exists(kSrc / "cuda" / op / "plan.cpp")) << op;
    for (const std::string& l : lines_of(kSrc / "cuda" / op / "plan.cpp"))  // host code: no CUDA headers
      if (l.rfind("#include", 0) == 0) EXPECT_EQ(l.find(".cuh"), std::string::npos) << op << ": " << l;
  }
}

TEST(SourceLayout, BackendsBuildNoFakeArguments) {
  for (const auto& entry : fs::directory_iterator(kSrc / "backend"))
    for (const std::string& l : lines_of(entry.path()))
      EXPECT_EQ(l.find("shape_only"), std::string::npos) << entry.path() << ": " << l;
}

}  // namespace
