#include "core/dist/world.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <vector>

#include "core/util/strings.h"

namespace grpo::core::dist {

namespace {

constexpr int kDefaultPort = 29500;
constexpr const char* kDefaultAddr = "127.0.0.1";

// A value together with where it came from, so a consistency error can name what the user has to fix:
// "RANK=4" for a variable, "local world size 1 (... not set)" for a default.
struct Field {
  int value = 0;
  std::string origin;
};

bool is_set(const EnvLookup& env, const std::string& name) { return env(name).has_value(); }

// Strict: the whole text must be a decimal integer (no sign other than '-', no spaces, no trailing junk).
std::optional<long long> parse_integer(std::string_view text) {
  long long value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

bool is_digits(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

Field parse_count(const std::string& name, const std::string& text, int min) {
  const auto value = parse_integer(text);
  if (!value || *value < min) {
    const std::string shown = value ? text : "'" + text + "'";
    throw std::invalid_argument(name + "=" + shown + ": expected an integer >= " + std::to_string(min));
  }
  if (*value > INT_MAX) {
    throw std::invalid_argument(name + "=" + text + ": expected an integer in " + std::to_string(min) + ".." +
                                std::to_string(INT_MAX));
  }
  return {static_cast<int>(*value), name + "=" + text};
}

int parse_port(const std::string& name, const std::string& text) {
  const auto value = parse_integer(text);
  if (!value || *value < 1 || *value > 65535) {
    const std::string shown = value ? text : "'" + text + "'";
    throw std::invalid_argument(name + "=" + shown + ": expected a port in 1..65535");
  }
  return static_cast<int>(*value);
}

std::string require(const EnvLookup& env, const std::string& launcher, const std::string& name,
                    const std::string& hint = "") {
  auto value = env(name);
  if (!value) throw std::invalid_argument(launcher + " launcher: " + name + " is not set" + hint);
  return *value;
}

int port_from(const EnvLookup& env) {
  const auto text = env("MASTER_PORT");
  return text ? parse_port("MASTER_PORT", *text) : kDefaultPort;
}

// MASTER_ADDR when set (it must not be empty); the caller decides the default.
std::optional<std::string> master_addr_from(const EnvLookup& env) {
  auto addr = env("MASTER_ADDR");
  if (addr && trim(*addr).empty()) {
    throw std::invalid_argument("MASTER_ADDR='" + *addr + "': expected the host name or address of rank 0");
  }
  return addr;
}

// The cross-field rules every launcher's numbers must satisfy.
void check_consistent(const Field& rank, const Field& world, const Field& local_rank, const Field& local_world) {
  if (rank.value >= world.value) throw std::invalid_argument(rank.origin + " is not below " + world.origin);
  if (local_rank.value >= local_world.value) {
    throw std::invalid_argument(local_rank.origin + " is not below " + local_world.origin);
  }
  if (local_world.value > world.value) {
    throw std::invalid_argument(local_world.origin + " is above " + world.origin);
  }
}

WorldInfo assemble(const std::string& launcher, const Field& rank, const Field& world, const Field& local_rank,
                   const Field& local_world, std::string master_addr, int master_port) {
  check_consistent(rank, world, local_rank, local_world);
  WorldInfo info;
  info.rank = rank.value;
  info.world_size = world.value;
  info.local_rank = local_rank.value;
  info.local_world_size = local_world.value;
  info.master_addr = std::move(master_addr);
  info.master_port = master_port;
  info.launcher = launcher;
  return info;
}

WorldInfo from_torchrun(const EnvLookup& env) {
  const std::string who = "torchrun";
  const Field rank = parse_count("RANK", require(env, who, "RANK"), 0);
  const Field world = parse_count("WORLD_SIZE", require(env, who, "WORLD_SIZE"), 1);
  Field local_rank{rank.value,
                   "local rank " + std::to_string(rank.value) + " (LOCAL_RANK is not set; defaults to RANK)"};
  if (auto text = env("LOCAL_RANK")) local_rank = parse_count("LOCAL_RANK", *text, 0);
  Field local_world{world.value, "local world size " + std::to_string(world.value) +
                                     " (LOCAL_WORLD_SIZE is not set; defaults to WORLD_SIZE)"};
  if (auto text = env("LOCAL_WORLD_SIZE")) local_world = parse_count("LOCAL_WORLD_SIZE", *text, 1);
  auto addr = master_addr_from(env);
  if (!addr) {
    // A default host is only safe when there is nobody to meet.
    if (world.value > 1) {
      throw std::invalid_argument("torchrun launcher: MASTER_ADDR is not set (required when " + world.origin +
                                  ")");
    }
    addr = kDefaultAddr;
  }
  return assemble(who, rank, world, local_rank, local_world, *addr, port_from(env));
}

WorldInfo from_openmpi(const EnvLookup& env) {
  const std::string who = "mpi";
  const Field rank = parse_count("OMPI_COMM_WORLD_RANK", require(env, who, "OMPI_COMM_WORLD_RANK"), 0);
  const Field world = parse_count("OMPI_COMM_WORLD_SIZE", require(env, who, "OMPI_COMM_WORLD_SIZE"), 1);
  const Field local_rank =
      parse_count("OMPI_COMM_WORLD_LOCAL_RANK", require(env, who, "OMPI_COMM_WORLD_LOCAL_RANK"), 0);
  const Field local_world =
      parse_count("OMPI_COMM_WORLD_LOCAL_SIZE", require(env, who, "OMPI_COMM_WORLD_LOCAL_SIZE"), 1);
  auto addr = master_addr_from(env);
  if (!addr) {
    // mpirun has no notion of a rendezvous host, and does not forward the caller's variables by default.
    if (world.value > 1) {
      throw std::invalid_argument("mpi launcher: MASTER_ADDR is not set (required when " + world.origin +
                                  "); pass it with `mpirun -x MASTER_ADDR=<host of rank 0>`");
    }
    addr = kDefaultAddr;
  }
  return assemble(who, rank, world, local_rank, local_world, *addr, port_from(env));
}

// The task count of node `node` in a Slurm tasks-per-node expression such as "4(x2),3" (= 4,4,3).
Field slurm_tasks_on_node(const std::string& name, const std::string& text, int node) {
  const auto bad = [&] {
    return std::invalid_argument(name + "='" + text + "': expected task counts such as 4 or 4(x2),3");
  };
  int first_node_of_entry = 0;
  std::string_view rest = text;
  while (true) {
    const std::size_t comma = rest.find(',');
    std::string_view entry = rest.substr(0, comma);
    std::string_view count_text = entry;
    long long repeat = 1;
    if (const std::size_t paren = entry.find('('); paren != std::string_view::npos) {
      count_text = entry.substr(0, paren);
      std::string_view times = entry.substr(paren + 1);
      if (!starts_with(times, "x") || !ends_with(times, ")")) throw bad();
      times = times.substr(1, times.size() - 2);
      const auto parsed = is_digits(times) ? parse_integer(times) : std::nullopt;
      if (!parsed || *parsed < 1) throw bad();
      repeat = *parsed;
    }
    const auto count = is_digits(count_text) ? parse_integer(count_text) : std::nullopt;
    if (!count || *count < 1 || *count > INT_MAX) throw bad();
    if (node < first_node_of_entry + repeat) {
      const std::string origin = is_digits(text) ? name + "=" + text
                                                 : name + "='" + text + "' (" + std::to_string(*count) +
                                                       " tasks on node " + std::to_string(node) + ")";
      return {static_cast<int>(*count), origin};
    }
    first_node_of_entry += static_cast<int>(std::min<long long>(repeat, INT_MAX - first_node_of_entry));
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  throw std::invalid_argument("SLURM_NODEID=" + std::to_string(node) + " is beyond the " +
                              std::to_string(first_node_of_entry) + " nodes of " + name + "='" + text + "'");
}

WorldInfo from_slurm(const EnvLookup& env) {
  const std::string who = "slurm";
  const std::string not_in_step = " (not inside an srun step?)";
  const Field rank = parse_count("SLURM_PROCID", require(env, who, "SLURM_PROCID", not_in_step), 0);
  Field world;
  if (auto text = env("SLURM_STEP_NUM_TASKS")) {
    world = parse_count("SLURM_STEP_NUM_TASKS", *text, 1);
  } else if (auto ntasks = env("SLURM_NTASKS")) {
    world = parse_count("SLURM_NTASKS", *ntasks, 1);
  } else {
    throw std::invalid_argument("slurm launcher: SLURM_STEP_NUM_TASKS is not set (nor SLURM_NTASKS)" + not_in_step);
  }
  const Field local_rank = parse_count("SLURM_LOCALID", require(env, who, "SLURM_LOCALID", not_in_step), 0);

  // Nodes may run different task counts ("2,3"); pick this node's when Slurm says which node this is.
  int node = 0;
  if (auto text = env("SLURM_NODEID")) node = parse_count("SLURM_NODEID", *text, 0).value;
  Field local_world{1, "local world size 1 (neither SLURM_STEP_TASKS_PER_NODE nor SLURM_NTASKS_PER_NODE is set)"};
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"}) {
    if (auto text = env(name)) {
      local_world = slurm_tasks_on_node(name, *text, node);
      break;
    }
  }

  auto addr = master_addr_from(env);
  if (!addr) {
    for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
      if (auto list = env(name)) {
        const std::string host = first_slurm_host(*list);
        if (host.empty()) throw std::invalid_argument(std::string(name) + "='" + *list + "': expected a host list");
        addr = host;
        break;
      }
    }
  }
  if (!addr) {
    if (world.value > 1) {
      throw std::invalid_argument(
          "slurm launcher: MASTER_ADDR is not set and neither SLURM_STEP_NODELIST, SLURM_JOB_NODELIST nor "
          "SLURM_NODELIST is (required when " + world.origin + ")");
    }
    addr = kDefaultAddr;
  }
  // 29500 by default like torchrun; jobs sharing a node must set MASTER_PORT themselves (see world.h).
  return assemble(who, rank, world, local_rank, local_world, *addr, port_from(env));
}

}  // namespace

std::string WorldInfo::describe() const {
  // An IPv6 address needs brackets to keep its colons apart from the port's.
  const bool ipv6 = master_addr.find(':') != std::string::npos;
  const std::string host = ipv6 ? "[" + master_addr + "]" : master_addr;
  return "rank " + std::to_string(rank) + " of " + std::to_string(world_size) + " (local " +
         std::to_string(local_rank) + " of " + std::to_string(local_world_size) + "), rendezvous " + host + ":" +
         std::to_string(master_port) + ", launcher " + launcher;
}

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (!value) return std::nullopt;
    return std::string(value);
  };
}

WorldInfo discover_world(const EnvLookup& env, const std::string& launcher) {
  static const std::vector<std::string> kLaunchers = {"auto", "torchrun", "slurm", "mpi", "none"};
  if (launcher == "none") return WorldInfo{};
  if (launcher == "torchrun") return from_torchrun(env);
  if (launcher == "mpi") return from_openmpi(env);
  if (launcher == "slurm") return from_slurm(env);
  if (launcher != "auto") {
    throw std::invalid_argument("dist.launcher '" + launcher + "': expected auto, torchrun, slurm, mpi or none" +
                                did_you_mean(launcher, kLaunchers));
  }
  // torchrun first: when srun starts torchrun, its children carry both, and RANK is the one that is per process.
  if (is_set(env, "WORLD_SIZE") || is_set(env, "RANK")) return from_torchrun(env);
  if (is_set(env, "OMPI_COMM_WORLD_SIZE")) return from_openmpi(env);
  // Only inside an srun step: an sbatch script has SLURM_PROCID too, but is a single process.
  if (is_set(env, "SLURM_PROCID") && is_set(env, "SLURM_STEP_NUM_TASKS")) return from_slurm(env);
  return WorldInfo{};
}

std::string first_slurm_host(const std::string& nodelist) {
  const auto unbalanced = [&] {
    return std::invalid_argument("Slurm node list '" + nodelist + "': unbalanced '[' ... ']'");
  };
  const std::string_view list = trim(nodelist);
  std::string host;
  std::size_t i = 0;
  while (i < list.size() && list[i] != ',') {
    if (list[i] == ']') throw unbalanced();
    if (list[i] != '[') {
      host += list[i++];
      continue;
    }
    const std::size_t close = list.find(']', i);
    if (close == std::string_view::npos) throw unbalanced();
    const std::string_view ranges = list.substr(i + 1, close - i - 1);
    if (ranges.find('[') != std::string_view::npos) throw unbalanced();
    // The first range's start, written as-is so zero padding ("007") survives.
    const std::string_view first = trim(ranges.substr(0, ranges.find_first_of(",-")));
    if (first.empty()) {
      throw std::invalid_argument("Slurm node list '" + nodelist + "': empty range in '[" + std::string(ranges) +
                                  "]'");
    }
    host += first;
    i = close + 1;
  }
  return std::string(trim(host));
}

}  // namespace grpo::core::dist
