#include "plugins/shared/sandbox/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "grpo/sdk/log.h"

namespace grpo_sandbox {

namespace {

constexpr const char* kParentName = "grpo-code";
// v2 only: where this process moves itself when its own cgroup must become a parent.
constexpr const char* kHostGroupName = "grpo-code-host";

bool read_text(const std::string& path, std::string* out) {
  std::ifstream f(path);
  if (!f) return false;
  std::ostringstream s;
  s << f.rdbuf();
  *out = s.str();
  return true;
}

std::string read_text(const std::string& path) {
  std::string s;
  read_text(path, &s);
  return s;
}

// One write(2) of `text` (cgroup files take each write as one command); 0 or errno.
int write_text(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const ssize_t w = write(fd, text.data(), text.size());
  const int err = w == static_cast<ssize_t>(text.size()) ? 0 : (w < 0 ? errno : EIO);
  close(fd);
  return err;
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep)) out.push_back(part);
  return out;
}

std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

bool has_word(const std::string& list, const std::string& word) {
  for (const std::string& w : words(list))
    if (w == word) return true;
  return false;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mount_path(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s.find_first_not_of("01234567", i + 1) >= i + 4) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// A cgroup's directory under a mount of its hierarchy whose root is `mount_root`, or "" when
// the cgroup lies outside that mount (a container that bind-mounts only a sub-tree).
std::string dir_under(const std::string& mount_point, const std::string& mount_root, const std::string& cgroup) {
  if (mount_root == "/") return cgroup == "/" ? mount_point : mount_point + cgroup;
  if (cgroup == mount_root) return mount_point;
  if (cgroup.compare(0, mount_root.size(), mount_root) == 0 && cgroup.size() > mount_root.size() &&
      cgroup[mount_root.size()] == '/')
    return mount_point + cgroup.substr(mount_root.size());
  return "";
}

std::uint64_t number_after(const std::string& text, const std::string& key) {
  for (const std::string& line : split(text, '\n')) {
    const std::vector<std::string> w = words(line);
    if (w.size() == 2 && w[0] == key) return std::strtoull(w[1].c_str(), nullptr, 10);
  }
  return 0;
}

std::vector<pid_t> pids_in(const std::string& procs_file) {
  std::vector<pid_t> pids;
  for (const std::string& w : words(read_text(procs_file))) pids.push_back(static_cast<pid_t>(std::atol(w.c_str())));
  return pids;
}

// mkdir that accepts an existing directory.
int make_dir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return 0;
  return errno;
}

std::string errno_text(int err) { return std::strerror(err); }

// Leaves "<pid>-<tag>.<slot>-<counter>" of processes that no longer exist. Only empty leaves are
// removed (rmdir refuses the others): a leaf of another pid namespace that looks dead from
// here but holds processes is left alone.
void remove_stale_leaves(const std::string& parent) {
  DIR* d = opendir(parent.c_str());
  if (!d) return;
  std::vector<std::string> stale;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    const std::vector<std::string> parts = split(name, '-');
    if (parts.size() != 3 || parts[0].empty() || parts[0].find_first_not_of("0123456789") != std::string::npos)
      continue;
    const pid_t pid = static_cast<pid_t>(std::atol(parts[0].c_str()));
    if (pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH) stale.push_back(parent + "/" + name);
  }
  closedir(d);
  for (const std::string& dir : stale) rmdir(dir.c_str());
}

// The cgroup path of this process in each hierarchy, as /proc/self/cgroup names it.
struct OwnPaths {
  std::string v2, v1_memory, v1_pids;
};

OwnPaths own_paths(const std::string& proc_self_cgroup) {
  OwnPaths own;
  for (const std::string& line : split(proc_self_cgroup, '\n')) {
    const std::size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (id == "0" && controllers.empty()) own.v2 = path;
    for (const std::string& c : split(controllers, ',')) {
      if (c == "memory") own.v1_memory = path;
      if (c == "pids") own.v1_pids = path;
    }
  }
  return own;
}

// A working leaf can be created, limited and removed under `support`'s parents.
std::string probe(const CgroupSupport& support) {
  std::string error;
  std::unique_ptr<CgroupLeaf> leaf = CgroupLeaf::create(support, 0, 64ull << 20, 8, &error);
  if (!leaf) return error;
  leaf->finish();
  return "";
}

// cgroup v2. The no-internal-processes rule: a cgroup other than the root may hold processes
// or have controllers enabled for its children (cgroup.subtree_control), never both. This
// process lives in its own cgroup, so that cgroup cannot hand memory and pids to leaves
// beside it. When this process is the only one there (a systemd unit or scope with
// Delegate=yes, a container's own cgroup), it moves itself into a child group
// "grpo-code-host", which empties its cgroup, and then enables memory and pids for the
// children: the "grpo-code" parent of the leaves and its own group become siblings. When other
// processes share the cgroup (a login shell's scope), they are not moved: v2 is reported
// unusable with that reason. The root cgroup is exempt from the rule and needs no move.
std::string try_v2(std::string own, std::string own_path, CgroupSupport* out) {
  if (own.empty()) return "no cgroup v2 hierarchy holds this process";
  // Moved already, by another plugin's copy of this library (each plugin links its own): the
  // leaves' parent is the sibling of this process's group, as it would be after a move here.
  const std::string host_suffix = std::string("/") + kHostGroupName;
  if (own_path.size() > host_suffix.size() &&
      own_path.compare(own_path.size() - host_suffix.size(), host_suffix.size(), host_suffix) == 0) {
    own.resize(own.size() - host_suffix.size());
    own_path.resize(own_path.size() - host_suffix.size());
  }
  std::string controllers;
  if (!read_text(own + "/cgroup.controllers", &controllers)) return "cannot read " + own + "/cgroup.controllers";
  if (!has_word(controllers, "memory") || !has_word(controllers, "pids")) {
    std::string offered = words(controllers).empty() ? std::string("none") : controllers;
    while (!offered.empty() && offered.back() == '\n') offered.pop_back();
    return "the v2 hierarchy at " + own + " offers controllers: " + offered + " (memory and pids are needed)";
  }
  const std::string subtree = own + "/cgroup.subtree_control";
  if (!has_word(read_text(subtree), "memory") || !has_word(read_text(subtree), "pids")) {
    int err = write_text(subtree, "+memory +pids");
    if (err == EBUSY) {
      const std::vector<pid_t> procs = pids_in(own + "/cgroup.procs");
      if (procs.size() != 1 || procs[0] != getpid())
        return own + " holds " + std::to_string(procs.size()) +
               " processes besides the leaves it would need, and cgroup v2 lets a cgroup hold processes or "
               "give controllers to children, not both; start the program in a cgroup of its own with memory "
               "and pids delegated (e.g. systemd-run --scope -p Delegate=yes ...)";
      const std::string host = own + "/" + kHostGroupName;
      if ((err = make_dir(host)) != 0) return "cannot create " + host + ": " + errno_text(err);
      if ((err = write_text(host + "/cgroup.procs", std::to_string(getpid()))) != 0)
        return "cannot move this process into " + host + ": " + errno_text(err);
      if ((err = write_text(subtree, "+memory +pids")) != 0) {
        write_text(own + "/cgroup.procs", std::to_string(getpid()));  // back where it was
        rmdir(host.c_str());
        return "cannot enable memory and pids in " + subtree + ": " + errno_text(err);
      }
      ::grpo::sdk::log_info("sandbox: moved this process into " + host +
                            " so that its cgroup can give memory and pids limits to sandbox leaves");
    } else if (err != 0) {
      return "cannot enable memory and pids in " + subtree + ": " + errno_text(err) +
             (err == EACCES || err == EPERM ? " (the cgroup is not delegated to this user)" : "");
    }
  }
  const std::string parent = own + "/" + kParentName;
  int err = make_dir(parent);
  if (err != 0) return "cannot create " + parent + ": " + errno_text(err);
  remove_stale_leaves(parent);
  if ((err = write_text(parent + "/cgroup.subtree_control", "+memory +pids")) != 0)
    return "cannot enable memory and pids in " + parent + "/cgroup.subtree_control: " + errno_text(err);
  CgroupSupport s;
  s.kind = CgroupSupport::Kind::kV2;
  s.memory_parent = s.pids_parent = parent;
  s.memory_parent_path = s.pids_parent_path = (own_path == "/" ? "" : own_path) + "/" + kParentName;
  if (const std::string why = probe(s); !why.empty()) return "a test leaf under " + parent + " failed: " + why;
  *out = s;
  return "";
}

// cgroup v1: groups under this process's own memory and pids cgroups; v1 has no rule
// against processes beside child groups, so nothing moves.
std::string try_v1(const CgroupDirs& dirs, const OwnPaths& own, CgroupSupport* out) {
  if (dirs.v1_memory.empty()) return "no cgroup v1 memory hierarchy holds this process";
  if (dirs.v1_pids.empty()) return "no cgroup v1 pids hierarchy holds this process";
  CgroupSupport s;
  s.kind = CgroupSupport::Kind::kV1;
  s.memory_parent = dirs.v1_memory + "/" + kParentName;
  s.pids_parent = dirs.v1_pids + "/" + kParentName;
  s.memory_parent_path = (own.v1_memory == "/" ? "" : own.v1_memory) + "/" + kParentName;
  s.pids_parent_path = (own.v1_pids == "/" ? "" : own.v1_pids) + "/" + kParentName;
  for (const std::string& parent : {s.memory_parent, s.pids_parent}) {
    if (const int err = make_dir(parent); err != 0) return "cannot create " + parent + ": " + errno_text(err);
    remove_stale_leaves(parent);
  }
  if (const std::string why = probe(s); !why.empty()) return "a test leaf failed: " + why;
  *out = s;
  return "";
}

CgroupSupport detect() {
  const std::string proc_cgroup = read_text("/proc/self/cgroup");
  const CgroupDirs dirs = locate_cgroup_dirs(read_text("/proc/self/mountinfo"), proc_cgroup);
  const OwnPaths own = own_paths(proc_cgroup);
  CgroupSupport s;
  const std::string v2 = try_v2(dirs.v2, own.v2, &s);
  if (v2.empty()) {
    s.reason = "leaves under " + s.memory_parent;
    return s;
  }
  const std::string v1 = try_v1(dirs, own, &s);
  if (v1.empty()) {
    s.reason = "leaves under " + s.memory_parent + " and " + s.pids_parent + " (cgroup v2 not used: " + v2 + ")";
    return s;
  }
  s = CgroupSupport{};
  s.reason = "cgroup v2: " + v2 + "; cgroup v1: " + v1;
  return s;
}

// SIGKILL to `pid` if it is still a process of the leaf. The pidfd pins the process: a pid
// read from cgroup.procs that was freed and reused meanwhile is not in the leaf and is spared.
void kill_if_in_leaf(pid_t pid, const std::vector<std::string>& leaf_paths) {
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_send_signal)
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) {
    if (errno == ENOSYS) kill(pid, SIGKILL);  // before Linux 5.3: the pid as read
    return;
  }
  bool member = false;  // a line "<id>:<controllers>:<leaf path>"
  for (const std::string& line : split(read_text("/proc/" + std::to_string(pid) + "/cgroup"), '\n'))
    for (const std::string& path : leaf_paths) {
      const std::size_t at = line.size() - path.size();
      member = member || (line.size() > path.size() && line.compare(at, path.size(), path) == 0 && line[at - 1] == ':');
    }
  if (member) syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0);
  close(fd);
#else
  (void)leaf_paths;
  kill(pid, SIGKILL);
#endif
}

}  // namespace

CgroupDirs locate_cgroup_dirs(const std::string& mountinfo, const std::string& proc_self_cgroup) {
  const OwnPaths own = own_paths(proc_self_cgroup);
  CgroupDirs dirs;
  for (const std::string& line : split(mountinfo, '\n')) {
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    const std::vector<std::string> w = words(line);
    std::size_t dash = 6;
    while (dash < w.size() && w[dash] != "-") ++dash;
    if (dash + 3 >= w.size()) continue;
    const std::string root = unescape_mount_path(w[3]), point = unescape_mount_path(w[4]), type = w[dash + 1];
    const std::string& super = w[dash + 3];
    if (type == "cgroup2" && dirs.v2.empty() && !own.v2.empty()) dirs.v2 = dir_under(point, root, own.v2);
    if (type != "cgroup") continue;
    for (const std::string& opt : split(super, ',')) {
      if (opt == "memory" && dirs.v1_memory.empty() && !own.v1_memory.empty())
        dirs.v1_memory = dir_under(point, root, own.v1_memory);
      if (opt == "pids" && dirs.v1_pids.empty() && !own.v1_pids.empty())
        dirs.v1_pids = dir_under(point, root, own.v1_pids);
    }
  }
  return dirs;
}

const char* cgroup_kind_name(CgroupSupport::Kind kind) {
  switch (kind) {
    case CgroupSupport::Kind::kV2: return "cgroup v2";
    case CgroupSupport::Kind::kV1: return "cgroup v1";
    case CgroupSupport::Kind::kNone: break;
  }
  return "none";
}

const CgroupSupport& cgroup_support() {
  static const CgroupSupport support = detect();
  return support;
}

std::unique_ptr<CgroupLeaf> CgroupLeaf::create(const CgroupSupport& support, unsigned slot,
                                               std::uint64_t memory_bytes, std::uint64_t max_processes,
                                               std::string* error) {
  static std::atomic<std::uint64_t> counter{0};
  // Every plugin that links this library has its own counter: a random tag per copy keeps
  // the names of two plugins' leaves (code_exec's and python_reward's) apart.
  static const std::string tag = [] {
    std::random_device rd;
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(rd()));
    return std::string(buf);
  }();
  if (support.kind == CgroupSupport::Kind::kNone) {
    *error = "no cgroup support";
    return nullptr;
  }
  std::unique_ptr<CgroupLeaf> leaf(new CgroupLeaf);
  leaf->kind_ = support.kind;
  const std::string name =
      std::to_string(getpid()) + "-" + tag + "." + std::to_string(slot) + "-" + std::to_string(counter.fetch_add(1));
  const bool v2 = support.kind == CgroupSupport::Kind::kV2;
  leaf->dirs_.push_back(support.memory_parent + "/" + name);
  leaf->paths_.push_back(support.memory_parent_path + "/" + name);
  if (!v2) {
    leaf->dirs_.push_back(support.pids_parent + "/" + name);
    leaf->paths_.push_back(support.pids_parent_path + "/" + name);
  }
  auto fail = [&](const std::string& what, int err) {
    *error = what + ": " + errno_text(err);
    leaf->finish();
    return nullptr;
  };
  for (std::size_t i = 0; i < leaf->dirs_.size(); ++i) {
    if (mkdir(leaf->dirs_[i].c_str(), 0755) != 0) {
      const int err = errno;
      const std::string dir = leaf->dirs_[i];
      leaf->dirs_.resize(i);  // finish() removes only what was created
      return fail("cannot create " + dir, err);
    }
  }
  const std::string& mem = leaf->dirs_[0];
  const std::string& pids = leaf->dirs_.back();
  const std::string bytes = std::to_string(memory_bytes);
  struct Setting {
    std::string file, value;
    bool optional;  // absent on some kernels or configurations
  };
  std::vector<Setting> settings;
  if (v2) {
    // swap.max 0: memory.max alone would let the program spill past it into swap.
    // oom.group: an OOM kill takes the whole program, not one process of it.
    settings = {{mem + "/memory.max", bytes, false},
                {mem + "/memory.swap.max", "0", true},
                {mem + "/memory.oom.group", "1", true}};
  } else {
    // memsw (memory + swap) after limit_in_bytes: the kernel keeps memsw >= the memory limit.
    settings = {{mem + "/memory.limit_in_bytes", bytes, false}, {mem + "/memory.memsw.limit_in_bytes", bytes, true}};
  }
  settings.push_back({pids + "/pids.max", std::to_string(max_processes), false});
  for (const Setting& s : settings) {
    if (s.optional && !exists(s.file)) continue;
    if (const int err = write_text(s.file, s.value); err != 0)
      return fail("cannot write " + s.value + " to " + s.file, err);
  }
  for (const std::string& dir : leaf->dirs_) {
    const int fd = open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return fail("cannot open " + dir + "/cgroup.procs", errno);
    leaf->procs_fds_.push_back(fd);
  }
  return leaf;
}

CgroupLeaf::~CgroupLeaf() { finish(); }

void CgroupLeaf::close_fds() {
  for (int fd : procs_fds_) close(fd);
  procs_fds_.clear();
}

CgroupLeaf::Outcome CgroupLeaf::finish() {
  if (finished_) return outcome_;
  finished_ = true;
  close_fds();
  if (dirs_.empty()) return outcome_;
  const std::string& mem = dirs_[0];
  // When bwrap is reaped, the kernel is already killing the program's pid namespace (its init
  // died); this makes sure, and waits until the leaf is empty so that it can be removed.
  if (kind_ == CgroupSupport::Kind::kV2 && exists(mem + "/cgroup.kill")) write_text(mem + "/cgroup.kill", "1");
  for (int round = 0; round < 2000; ++round) {  // 2 s at most
    bool empty = true;
    for (const std::string& dir : dirs_)
      for (pid_t pid : pids_in(dir + "/cgroup.procs")) {
        empty = false;
        kill_if_in_leaf(pid, paths_);
      }
    if (empty) break;
    usleep(1000);
  }
  if (kind_ == CgroupSupport::Kind::kV2) {
    outcome_.oom_killed = number_after(read_text(mem + "/memory.events"), "oom_kill") > 0;
    outcome_.peak_bytes = std::strtoull(read_text(mem + "/memory.peak").c_str(), nullptr, 10);
  } else {
    const std::string oom = read_text(mem + "/memory.oom_control");
    if (oom.find("oom_kill ") != std::string::npos) {
      outcome_.oom_killed = number_after(oom, "oom_kill") > 0;
    } else {  // before Linux 4.13: the limit was hit (the kernel then reclaims or kills)
      outcome_.oom_killed = std::strtoull(read_text(mem + "/memory.failcnt").c_str(), nullptr, 10) > 0;
    }
    const std::string memsw = mem + "/memory.memsw.max_usage_in_bytes";
    outcome_.peak_bytes =
        std::strtoull(read_text(exists(memsw) ? memsw : mem + "/memory.max_usage_in_bytes").c_str(), nullptr, 10);
  }
  // rmdir fails with EBUSY until the last killed process is gone from the leaf.
  for (const std::string& dir : dirs_) {
    int err = 0;
    for (int round = 0; round < 1000; ++round) {  // 1 s at most
      err = rmdir(dir.c_str()) == 0 || errno == ENOENT ? 0 : errno;
      if (err != EBUSY) break;
      usleep(1000);
    }
    if (err != 0)
      ::grpo::sdk::log_warn("sandbox: could not remove the cgroup leaf " + dir + ": " + errno_text(err) +
                            " (the first verifier start-up after this process ends removes it)");
  }
  return outcome_;
}

bool enter_cgroup_leaf(const int* fds, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i)
    if (write(fds[i], "0", 1) != 1) return false;
  return true;
}

}  // namespace grpo_sandbox
