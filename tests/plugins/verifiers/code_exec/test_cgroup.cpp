// Where the sandbox looks for this process's cgroups (plugins/verifiers/code_exec/cgroup.h):
// /proc/self/mountinfo and /proc/self/cgroup as three kinds of host write them. The expected
// directories are worked out by hand from the kernel's formats (Documentation/filesystems/
// proc.rst for mountinfo, admin-guide/cgroup-v2.rst for /proc/PID/cgroup).
#include <gtest/gtest.h>

#include "plugins/shared/sandbox/cgroup.h"

namespace {

using grpo_sandbox::CgroupDirs;
using grpo_sandbox::locate_cgroup_dirs;

// A hybrid host (this project's CI machines): v1 controllers, v2 mounted at .../unified.
constexpr const char* kHybridMountinfo =
    "25 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "33 31 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
constexpr const char* kHybridCgroup =
    "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/fddb\n2:cpu,cpuacct:/\n0::/\n";

TEST(CodeExecCgroup, HybridHostFindsV1MemoryAndPidsAndTheV2Mount) {
  const CgroupDirs d = locate_cgroup_dirs(kHybridMountinfo, kHybridCgroup);
  EXPECT_EQ(d.v1_memory, "/sys/fs/cgroup/memory/process_api/fddb");
  EXPECT_EQ(d.v1_pids, "/sys/fs/cgroup/pids");
  EXPECT_EQ(d.v2, "/sys/fs/cgroup/unified");
}

TEST(CodeExecCgroup, UnifiedHostFindsItsOwnV2Cgroup) {
  // systemd on cgroup v2 only, optional fields before the separator, a service's cgroup.
  const CgroupDirs d = locate_cgroup_dirs(
      "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 master:1 - cgroup2 cgroup2 "
      "rw,nsdelegate,memory_recursiveprot\n",
      "0::/system.slice/grpo-train.service\n");
  EXPECT_EQ(d.v2, "/sys/fs/cgroup/system.slice/grpo-train.service");
  EXPECT_EQ(d.v1_memory, "");
  EXPECT_EQ(d.v1_pids, "");
}

TEST(CodeExecCgroup, ASubtreeMountMapsPathsBelowItsRootAndNothingElse) {
  // A container given only its own sub-tree (mount root /docker/abc), and a mount point whose
  // name has a space (mountinfo writes it as \040).
  const std::string mountinfo =
      "50 40 0:26 /docker/abc /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n"
      "51 40 0:32 /docker/abc /mnt/cg\\040v1 rw - cgroup cgroup rw,memory\n";
  CgroupDirs d = locate_cgroup_dirs(mountinfo, "4:memory:/docker/abc/job\n0::/docker/abc\n");
  EXPECT_EQ(d.v2, "/sys/fs/cgroup");
  EXPECT_EQ(d.v1_memory, "/mnt/cg v1/job");
  EXPECT_EQ(d.v1_pids, "");  // no pids hierarchy mounted
  // A cgroup outside the mounted sub-tree, or one that merely shares its prefix, is not there.
  d = locate_cgroup_dirs(mountinfo, "4:memory:/docker/abcdef\n0::/other\n");
  EXPECT_EQ(d.v2, "");
  EXPECT_EQ(d.v1_memory, "");
}

}  // namespace
