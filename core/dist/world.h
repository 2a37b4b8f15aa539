// Which rank this process is, and how many there are, read from the variables a launcher sets.
//
// Supported launchers and their variables:
//   torchrun (and `grpo-run --nproc`): RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
//   OpenMPI (`mpirun`): OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK/_LOCAL_SIZE; MASTER_ADDR must be exported to the
//     ranks by hand (`mpirun -x MASTER_ADDR=<host of rank 0>`), MASTER_PORT optionally.
//   Slurm (`srun`): SLURM_PROCID, SLURM_STEP_NUM_TASKS (or SLURM_NTASKS), SLURM_LOCALID,
//     SLURM_STEP_TASKS_PER_NODE (or SLURM_NTASKS_PER_NODE); the rendezvous host defaults to the first node of
//     the step. The port defaults to 29500, which collides when two jobs share a node: on shared nodes set
//     MASTER_PORT yourself, e.g. `export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))`.
//
// In "auto" mode the first launcher whose variables are present wins, in the order torchrun > OpenMPI > Slurm
// (torchrun started by srun sets RANK for its children, and those must win over the srun step's SLURM_*).
// Slurm counts only inside an `srun` step (SLURM_STEP_NUM_TASKS set): an sbatch script itself is not a step,
// so a plain `grpo-run` there stays single-process.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace grpo::core::dist {

struct WorldInfo {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string launcher = "none";  // which launcher's variables were used: "torchrun", "slurm", "mpi", "none"
  bool distributed() const { return world_size > 1; }
  std::string describe() const;  // e.g. "rank 1 of 4 (local 1 of 2), rendezvous 10.0.0.1:29500, launcher torchrun"
};

// Looks up one environment variable; std::nullopt when it is not set. Tests pass a fake.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// getenv-based.
EnvLookup process_environment();

// launcher: "auto" | "torchrun" | "slurm" | "mpi" | "none" ("none": a single process, whatever the environment
// says). A forced launcher whose variables are missing is an error naming the missing variable. Every error
// is std::invalid_argument naming the variable, its value and what was expected.
WorldInfo discover_world(const EnvLookup& env, const std::string& launcher = "auto");

// The first host of a Slurm hostlist expression: "node[01-04,07],gpu3" -> "node01", "a,b" -> "a",
// "gpu-[3-5]" -> "gpu-3", "x[007]" -> "x007", "rack[1-2]-n[5-6]" -> "rack1-n5". "" for an empty list.
// Throws std::invalid_argument for an unbalanced bracket.
std::string first_slurm_host(const std::string& nodelist);

}  // namespace grpo::core::dist
