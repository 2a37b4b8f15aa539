// Rank/world discovery: each launcher's variables and defaults, the auto-detection order, forced launchers,
// validation messages, and Slurm host lists. The environment is a fake map; expected values follow the rules
// in world.h, written out by hand.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/dist/world.h"

namespace {

using namespace grpo::core::dist;
using Env = std::map<std::string, std::string>;

EnvLookup fake(const Env& vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// The message of the std::invalid_argument that discover_world throws ("" when it does not throw).
std::string error_of(const Env& vars, const std::string& launcher = "auto") {
  try {
    discover_world(fake(vars), launcher);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---- none and auto without any launcher ----

TEST(DiscoverWorld, EmptyEnvironmentIsSingleProcess) {
  const WorldInfo w = discover_world(fake({}));
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.world_size, 1);
  EXPECT_EQ(w.local_rank, 0);
  EXPECT_EQ(w.local_world_size, 1);
  EXPECT_EQ(w.master_addr, "127.0.0.1");
  EXPECT_EQ(w.master_port, 29500);
  EXPECT_EQ(w.launcher, "none");
  EXPECT_FALSE(w.distributed());
}

TEST(DiscoverWorld, NoneIgnoresTheEnvironment) {
  const WorldInfo w = discover_world(fake({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.0.0.1"},
                                           {"MASTER_PORT", "1234"}, {"OMPI_COMM_WORLD_SIZE", "2"}}),
                                     "none");
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.world_size, 1);
  EXPECT_EQ(w.master_addr, "127.0.0.1");
  EXPECT_EQ(w.master_port, 29500);
  EXPECT_EQ(w.launcher, "none");
}

TEST(DiscoverWorld, NoneIgnoresEvenInvalidValues) {
  EXPECT_NO_THROW(discover_world(fake({{"RANK", "x"}, {"MASTER_PORT", "70000"}}), "none"));
}

TEST(DiscoverWorld, UnknownLauncherIsRejected) {
  EXPECT_EQ(error_of({}, "foo"), "dist.launcher 'foo': expected auto, torchrun, slurm, mpi or none");
  EXPECT_TRUE(contains(error_of({}, "torchrn"), "did you mean 'torchrun'?"));
}

// ---- torchrun ----

TEST(DiscoverWorld, TorchrunFullSet) {
  const WorldInfo w = discover_world(fake({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                                           {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"},
                                           {"MASTER_PORT", "29501"}}));
  EXPECT_EQ(w.rank, 1);
  EXPECT_EQ(w.world_size, 4);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 2);
  EXPECT_EQ(w.master_addr, "10.0.0.1");
  EXPECT_EQ(w.master_port, 29501);
  EXPECT_EQ(w.launcher, "torchrun");
  EXPECT_TRUE(w.distributed());
}

TEST(DiscoverWorld, TorchrunDefaultsLocalToGlobalAndPortTo29500) {
  const WorldInfo w = discover_world(fake({{"RANK", "2"}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "h"}}));
  EXPECT_EQ(w.local_rank, 2);
  EXPECT_EQ(w.local_world_size, 3);
  EXPECT_EQ(w.master_port, 29500);
}

TEST(DiscoverWorld, TorchrunSingleRankDefaultsMasterAddr) {
  const WorldInfo w = discover_world(fake({{"RANK", "0"}, {"WORLD_SIZE", "1"}}));
  EXPECT_EQ(w.launcher, "torchrun");
  EXPECT_EQ(w.master_addr, "127.0.0.1");
  EXPECT_FALSE(w.distributed());
}

TEST(DiscoverWorld, TorchrunMultiRankRequiresMasterAddr) {
  const std::string e = error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  EXPECT_TRUE(contains(e, "MASTER_ADDR is not set")) << e;
  EXPECT_TRUE(contains(e, "WORLD_SIZE=2")) << e;
}

TEST(DiscoverWorld, TorchrunDetectedByEitherVariable) {
  // Either one marks torchrun; the other is then missing and named.
  EXPECT_EQ(error_of({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}), "torchrun launcher: RANK is not set");
  EXPECT_EQ(error_of({{"RANK", "0"}}), "torchrun launcher: WORLD_SIZE is not set");
}

TEST(DiscoverWorld, ForcedTorchrunNamesMissingVariable) {
  EXPECT_EQ(error_of({}, "torchrun"), "torchrun launcher: RANK is not set");
}

TEST(DiscoverWorld, IntegersAreParsedStrictly) {
  const Env base = {{"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}};
  auto with = [&](const std::string& name, const std::string& value) {
    Env env = base;
    env[name] = value;
    if (!env.count("RANK")) env["RANK"] = "0";
    return error_of(env);
  };
  EXPECT_EQ(with("RANK", "x"), "RANK='x': expected an integer >= 0");
  EXPECT_EQ(with("RANK", "1x"), "RANK='1x': expected an integer >= 0");
  EXPECT_EQ(with("RANK", " 1"), "RANK=' 1': expected an integer >= 0");
  EXPECT_EQ(with("RANK", "+1"), "RANK='+1': expected an integer >= 0");
  EXPECT_EQ(with("RANK", ""), "RANK='': expected an integer >= 0");
  EXPECT_EQ(with("RANK", "1.0"), "RANK='1.0': expected an integer >= 0");
  EXPECT_EQ(with("RANK", "-1"), "RANK=-1: expected an integer >= 0");
  EXPECT_EQ(with("RANK", "99999999999999999999999"), "RANK='99999999999999999999999': expected an integer >= 0");
  EXPECT_EQ(with("RANK", "4294967296"), "RANK=4294967296: expected an integer in 0..2147483647");
  EXPECT_EQ(with("WORLD_SIZE", "0"), "WORLD_SIZE=0: expected an integer >= 1");
  EXPECT_EQ(with("LOCAL_RANK", "a"), "LOCAL_RANK='a': expected an integer >= 0");
  EXPECT_EQ(with("LOCAL_WORLD_SIZE", "0"), "LOCAL_WORLD_SIZE=0: expected an integer >= 1");
}

TEST(DiscoverWorld, RankMustBeBelowWorldSize) {
  EXPECT_EQ(error_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}}), "RANK=4 is not below WORLD_SIZE=4");
}

TEST(DiscoverWorld, LocalRankMustBeBelowLocalWorldSize) {
  EXPECT_EQ(error_of({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"},
                      {"MASTER_ADDR", "h"}}),
            "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2");
}

TEST(DiscoverWorld, LocalWorldSizeCannotExceedWorldSize) {
  EXPECT_EQ(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}}),
            "LOCAL_WORLD_SIZE=4 is above WORLD_SIZE=2");
}

TEST(DiscoverWorld, MasterPortIsValidated) {
  const Env base = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}};
  Env env = base;
  env["MASTER_PORT"] = "70000";
  EXPECT_EQ(error_of(env), "MASTER_PORT=70000: expected a port in 1..65535");
  env["MASTER_PORT"] = "0";
  EXPECT_EQ(error_of(env), "MASTER_PORT=0: expected a port in 1..65535");
  env["MASTER_PORT"] = "80a";
  EXPECT_EQ(error_of(env), "MASTER_PORT='80a': expected a port in 1..65535");
  env["MASTER_PORT"] = "65535";
  EXPECT_EQ(discover_world(fake(env)).master_port, 65535);
}

TEST(DiscoverWorld, EmptyMasterAddrIsRejected) {
  EXPECT_EQ(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", ""}}),
            "MASTER_ADDR='': expected the host name or address of rank 0");
}

// ---- OpenMPI ----

Env ompi(const std::string& rank, const std::string& size, const std::string& local_rank,
         const std::string& local_size) {
  return {{"OMPI_COMM_WORLD_RANK", rank},
          {"OMPI_COMM_WORLD_SIZE", size},
          {"OMPI_COMM_WORLD_LOCAL_RANK", local_rank},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", local_size}};
}

TEST(DiscoverWorld, OpenMpi) {
  Env env = ompi("3", "4", "1", "2");
  env["MASTER_ADDR"] = "node01";
  const WorldInfo w = discover_world(fake(env));
  EXPECT_EQ(w.launcher, "mpi");
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.world_size, 4);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 2);
  EXPECT_EQ(w.master_addr, "node01");
  EXPECT_EQ(w.master_port, 29500);
  env["MASTER_PORT"] = "1234";
  EXPECT_EQ(discover_world(fake(env)).master_port, 1234);
}

TEST(DiscoverWorld, OpenMpiRequiresMasterAddrWhenDistributed) {
  const std::string e = error_of(ompi("0", "2", "0", "2"));
  EXPECT_TRUE(contains(e, "MASTER_ADDR is not set")) << e;
  EXPECT_TRUE(contains(e, "mpirun -x MASTER_ADDR=<host of rank 0>")) << e;
}

TEST(DiscoverWorld, OpenMpiSingleRankDefaultsMasterAddr) {
  const WorldInfo w = discover_world(fake(ompi("0", "1", "0", "1")));
  EXPECT_EQ(w.launcher, "mpi");
  EXPECT_EQ(w.master_addr, "127.0.0.1");
}

TEST(DiscoverWorld, OpenMpiValidation) {
  Env env = ompi("2", "2", "0", "1");
  env["MASTER_ADDR"] = "h";
  EXPECT_EQ(error_of(env), "OMPI_COMM_WORLD_RANK=2 is not below OMPI_COMM_WORLD_SIZE=2");
  env = ompi("0", "2", "1", "1");
  env["MASTER_ADDR"] = "h";
  EXPECT_EQ(error_of(env), "OMPI_COMM_WORLD_LOCAL_RANK=1 is not below OMPI_COMM_WORLD_LOCAL_SIZE=1");
  env = ompi("z", "2", "0", "1");
  EXPECT_EQ(error_of(env), "OMPI_COMM_WORLD_RANK='z': expected an integer >= 0");
}

TEST(DiscoverWorld, OpenMpiMissingVariablesAreNamed) {
  EXPECT_EQ(error_of({{"OMPI_COMM_WORLD_SIZE", "2"}}), "mpi launcher: OMPI_COMM_WORLD_RANK is not set");
  EXPECT_EQ(error_of({}, "mpi"), "mpi launcher: OMPI_COMM_WORLD_RANK is not set");
  Env env = ompi("0", "2", "0", "2");
  env.erase("OMPI_COMM_WORLD_LOCAL_SIZE");
  EXPECT_EQ(error_of(env), "mpi launcher: OMPI_COMM_WORLD_LOCAL_SIZE is not set");
}

// ---- Slurm ----

Env srun_step() {
  return {{"SLURM_PROCID", "5"},          {"SLURM_STEP_NUM_TASKS", "8"},
          {"SLURM_LOCALID", "1"},         {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
          {"SLURM_NTASKS", "16"},         {"SLURM_NTASKS_PER_NODE", "8"},
          {"SLURM_STEP_NODELIST", "node[03-04]"}, {"SLURM_JOB_NODELIST", "node[01-04]"},
          {"SLURM_NODELIST", "other1"}};
}

TEST(DiscoverWorld, SlurmStep) {
  const WorldInfo w = discover_world(fake(srun_step()));
  EXPECT_EQ(w.launcher, "slurm");
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.world_size, 8);  // the step's, not the job's SLURM_NTASKS
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 4);
  EXPECT_EQ(w.master_addr, "node03");  // the step's first node
  EXPECT_EQ(w.master_port, 29500);
}

TEST(DiscoverWorld, SlurmMasterFromEnvironmentWins) {
  Env env = srun_step();
  env["MASTER_ADDR"] = "10.1.2.3";
  env["MASTER_PORT"] = "31000";
  const WorldInfo w = discover_world(fake(env));
  EXPECT_EQ(w.master_addr, "10.1.2.3");
  EXPECT_EQ(w.master_port, 31000);
}

TEST(DiscoverWorld, SlurmNodelistFallbacks) {
  Env env = srun_step();
  env.erase("SLURM_STEP_NODELIST");
  EXPECT_EQ(discover_world(fake(env)).master_addr, "node01");
  env.erase("SLURM_JOB_NODELIST");
  EXPECT_EQ(discover_world(fake(env)).master_addr, "other1");
  env.erase("SLURM_NODELIST");
  const std::string e = error_of(env);
  EXPECT_TRUE(contains(e, "MASTER_ADDR is not set")) << e;
  EXPECT_TRUE(contains(e, "SLURM_STEP_NODELIST")) << e;
}

TEST(DiscoverWorld, SlurmTasksPerNodeFallbacks) {
  Env env = srun_step();
  env.erase("SLURM_STEP_TASKS_PER_NODE");
  EXPECT_EQ(discover_world(fake(env)).local_world_size, 8);  // SLURM_NTASKS_PER_NODE
  env.erase("SLURM_NTASKS_PER_NODE");
  env["SLURM_LOCALID"] = "0";
  EXPECT_EQ(discover_world(fake(env)).local_world_size, 1);
  env["SLURM_LOCALID"] = "1";
  const std::string e = error_of(env);
  EXPECT_TRUE(contains(e, "SLURM_LOCALID=1 is not below local world size 1")) << e;
}

TEST(DiscoverWorld, SlurmTasksPerNodeForms) {
  Env env = srun_step();
  env["SLURM_LOCALID"] = "0";
  env["SLURM_STEP_TASKS_PER_NODE"] = "2";
  EXPECT_EQ(discover_world(fake(env)).local_world_size, 2);
  env["SLURM_STEP_TASKS_PER_NODE"] = "3,2(x2),1";
  EXPECT_EQ(discover_world(fake(env)).local_world_size, 3);  // first integer without SLURM_NODEID
  env["SLURM_NODEID"] = "2";
  EXPECT_EQ(discover_world(fake(env)).local_world_size, 2);  // nodes: 3,2,2,1
  env["SLURM_NODEID"] = "3";
  EXPECT_EQ(discover_world(fake(env)).local_world_size, 1);
  env["SLURM_NODEID"] = "4";
  EXPECT_TRUE(contains(error_of(env), "SLURM_NODEID=4 is beyond the 4 nodes")) << error_of(env);
  env.erase("SLURM_NODEID");
  env["SLURM_STEP_TASKS_PER_NODE"] = "4(2)";
  EXPECT_EQ(error_of(env), "SLURM_STEP_TASKS_PER_NODE='4(2)': expected task counts such as 4 or 4(x2),3");
  env["SLURM_STEP_TASKS_PER_NODE"] = "";
  EXPECT_EQ(error_of(env), "SLURM_STEP_TASKS_PER_NODE='': expected task counts such as 4 or 4(x2),3");
}

TEST(DiscoverWorld, SlurmValidationNamesSlurmVariables) {
  Env env = srun_step();
  env["SLURM_PROCID"] = "8";
  EXPECT_EQ(error_of(env), "SLURM_PROCID=8 is not below SLURM_STEP_NUM_TASKS=8");
  env = srun_step();
  env["SLURM_LOCALID"] = "4";
  EXPECT_EQ(error_of(env), "SLURM_LOCALID=4 is not below SLURM_STEP_TASKS_PER_NODE='4(x2)' (4 tasks on node 0)");
  env = srun_step();
  env["SLURM_PROCID"] = "x";
  EXPECT_EQ(error_of(env), "SLURM_PROCID='x': expected an integer >= 0");
}

TEST(DiscoverWorld, SlurmBatchScriptIsNotAStep) {
  // Inside sbatch but outside srun: SLURM_PROCID and SLURM_NTASKS exist, SLURM_STEP_NUM_TASKS does not.
  Env env = srun_step();
  env.erase("SLURM_STEP_NUM_TASKS");
  env["SLURM_PROCID"] = "0";
  env["SLURM_LOCALID"] = "0";
  EXPECT_EQ(discover_world(fake(env)).launcher, "none");
  // Forced, the job's SLURM_NTASKS stands in for the step's task count.
  const WorldInfo w = discover_world(fake(env), "slurm");
  EXPECT_EQ(w.launcher, "slurm");
  EXPECT_EQ(w.world_size, 16);
}

TEST(DiscoverWorld, ForcedSlurmNamesMissingVariables) {
  EXPECT_TRUE(contains(error_of({}, "slurm"), "slurm launcher: SLURM_PROCID is not set"));
  EXPECT_TRUE(contains(error_of({{"SLURM_PROCID", "0"}}, "slurm"),
                       "slurm launcher: SLURM_STEP_NUM_TASKS is not set (nor SLURM_NTASKS)"));
  EXPECT_TRUE(contains(error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}, "slurm"),
                       "slurm launcher: SLURM_LOCALID is not set"));
}

TEST(DiscoverWorld, SlurmSingleTaskWithoutNodelistDefaultsMasterAddr) {
  const WorldInfo w =
      discover_world(fake({{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "1"}, {"SLURM_LOCALID", "0"}}));
  EXPECT_EQ(w.launcher, "slurm");
  EXPECT_EQ(w.master_addr, "127.0.0.1");
  EXPECT_EQ(w.local_world_size, 1);
}

// ---- precedence ----

TEST(DiscoverWorld, TorchrunWinsOverMpiAndSlurm) {
  Env env = srun_step();
  for (const auto& [k, v] : ompi("1", "2", "1", "2")) env[k] = v;
  env["RANK"] = "0";
  env["WORLD_SIZE"] = "1";
  const WorldInfo w = discover_world(fake(env));
  EXPECT_EQ(w.launcher, "torchrun");
  EXPECT_EQ(w.world_size, 1);
}

TEST(DiscoverWorld, MpiWinsOverSlurm) {
  Env env = srun_step();
  for (const auto& [k, v] : ompi("1", "2", "1", "2")) env[k] = v;
  env["MASTER_ADDR"] = "h";
  const WorldInfo w = discover_world(fake(env));
  EXPECT_EQ(w.launcher, "mpi");
  EXPECT_EQ(w.rank, 1);
}

TEST(DiscoverWorld, ForcedLauncherOverridesPrecedence) {
  Env env = srun_step();
  env["RANK"] = "0";
  env["WORLD_SIZE"] = "1";
  EXPECT_EQ(discover_world(fake(env), "slurm").launcher, "slurm");
}

// ---- describe, process_environment ----

TEST(WorldInfo, Describe) {
  WorldInfo w;
  w.rank = 1;
  w.world_size = 4;
  w.local_rank = 1;
  w.local_world_size = 2;
  w.master_addr = "10.0.0.1";
  w.launcher = "torchrun";
  EXPECT_EQ(w.describe(), "rank 1 of 4 (local 1 of 2), rendezvous 10.0.0.1:29500, launcher torchrun");
  w.master_addr = "::1";
  EXPECT_EQ(w.describe(), "rank 1 of 4 (local 1 of 2), rendezvous [::1]:29500, launcher torchrun");
}

TEST(ProcessEnvironment, ReadsGetenv) {
  setenv("GRPO_TEST_WORLD_VAR", "abc", 1);
  unsetenv("GRPO_TEST_WORLD_UNSET");
  const EnvLookup env = process_environment();
  EXPECT_EQ(env("GRPO_TEST_WORLD_VAR"), std::optional<std::string>("abc"));
  EXPECT_EQ(env("GRPO_TEST_WORLD_UNSET"), std::nullopt);
  unsetenv("GRPO_TEST_WORLD_VAR");
}

// ---- first_slurm_host ----

TEST(FirstSlurmHost, Forms) {
  EXPECT_EQ(first_slurm_host("node[01-04,07],gpu3"), "node01");
  EXPECT_EQ(first_slurm_host("a,b"), "a");
  EXPECT_EQ(first_slurm_host("gpu-[3-5]"), "gpu-3");
  EXPECT_EQ(first_slurm_host("x[007]"), "x007");
  EXPECT_EQ(first_slurm_host("single"), "single");
  EXPECT_EQ(first_slurm_host("n[2,5-6]"), "n2");
  EXPECT_EQ(first_slurm_host("rack[1-2]-n[5-6]"), "rack1-n5");
  EXPECT_EQ(first_slurm_host("node[1-2]-ib,z"), "node1-ib");
  EXPECT_EQ(first_slurm_host(" host7 "), "host7");
  EXPECT_EQ(first_slurm_host(""), "");
}

TEST(FirstSlurmHost, MalformedIsRejected) {
  EXPECT_THROW(first_slurm_host("node[01-04"), std::invalid_argument);
  EXPECT_THROW(first_slurm_host("node01]"), std::invalid_argument);
  EXPECT_THROW(first_slurm_host("node[]"), std::invalid_argument);
  EXPECT_THROW(first_slurm_host("node[[1]]"), std::invalid_argument);
}

}  // namespace
