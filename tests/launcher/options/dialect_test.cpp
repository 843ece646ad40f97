// Whose flags a command line uses (LaunchOptions::dialect), --backend, --legacy and the Paddle
// flags launch refuses (--auto_parallel_config, --auto_tuner_json, ...).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "launcher/options/flags.h"
#include "launcher/options/options.h"
#include "tests/launcher/options/parse_args.h"

namespace ddl::launcher {
namespace {

Dialect dialect(std::vector<std::string> args, const env::EnvMap& env = {}) {
  args.push_back("train.py");
  return parse(args, env).dialect;
}

TEST(Dialect, ASpellingOnlyOneLauncherHasDecides) {
  EXPECT_EQ(dialect({"--devices=0,1"}), Dialect::kPaddle2);
  EXPECT_EQ(dialect({"--job_id", "test1", "--log_dir", "x"}), Dialect::kPaddle2);
  EXPECT_EQ(dialect({"--master=127.0.0.1:6170", "--nnodes=2"}), Dialect::kPaddle2);
  EXPECT_EQ(dialect({"--start_port=6170"}), Dialect::kPaddle2) << "an alias counts as typed";
  EXPECT_EQ(dialect({"--host=127.0.0.1"}), Dialect::kPaddle2);
  EXPECT_EQ(dialect({"--gpus=0,1"}), Dialect::kFleetrun);
  EXPECT_EQ(dialect({"--server_num=1", "--worker_num=2"}), Dialect::kFleetrun);
  EXPECT_EQ(dialect({"--backend=gloo"}), Dialect::kFleetrun);
  EXPECT_EQ(dialect({"--selected_gpus=0,1", "--log_dir=x"}), Dialect::kPaddle18);
  EXPECT_EQ(dialect({"--cluster_node_ips=127.0.0.1", "--node_ip=127.0.0.1"}), Dialect::kPaddle18);
  EXPECT_EQ(dialect({"--nnodes=1", "--node_rank=0", "--master_addr=127.0.0.1"}),
            Dialect::kTorchrun);
  EXPECT_EQ(dialect({"--standalone", "--nproc_per_node=2"}), Dialect::kTorchrun);
  EXPECT_EQ(dialect({"-m"}), Dialect::kTorchrun) << "a one-letter option is its flag's";
}

TEST(Dialect, DashFormsAreTorchrunsOnly) {
  EXPECT_EQ(dialect({"--nproc-per-node=2"}), Dialect::kTorchrun);
  EXPECT_EQ(dialect({"--log-dir=x"}), Dialect::kTorchrun);
  EXPECT_EQ(dialect({"--nproc_per_node=2"}), Dialect::kOurs) << "torchrun and Paddle 2.x";
  EXPECT_EQ(dialect({"--selected-gpus=0"}), Dialect::kOurs) << "no launcher but ours has it";
}

TEST(Dialect, SharedSpellingsDecideOnlyWhenOneLauncherHasThemAll) {
  EXPECT_EQ(dialect({}), Dialect::kOurs);
  EXPECT_EQ(dialect({"--log_dir=x"}), Dialect::kOurs) << "torchrun, 1.8 and 2.x";
  EXPECT_EQ(dialect({"--log_dir=x", "--nproc_per_node=2"}), Dialect::kOurs);
  EXPECT_EQ(dialect({"--quiet", "--hang_timeout=5", "--report=false"}), Dialect::kOurs);
  EXPECT_EQ(dialect({"--max_restarts=1", "--log_dir=x"}), Dialect::kTorchrun);
}

TEST(Dialect, LoggingAndPrintingFlagsSayNothing) {
  EXPECT_EQ(dialect({"--log_level=debug", "--nproc_per_node=2"}), Dialect::kOurs);
  EXPECT_EQ(dialect({"--print_config=false", "--log_overwrite=false"}), Dialect::kOurs);
  EXPECT_EQ(dialect({"--print_config=false", "--nnodes=1", "--master_addr=127.0.0.1"}),
            Dialect::kTorchrun);
}

TEST(Dialect, MixesFollowThePrecedence) {
  // Paddle 2.x > fleetrun > Paddle 1.8 > torchrun: each newer Paddle launcher accepts the older
  // ones' spellings.
  EXPECT_EQ(dialect({"--job_id=ps2", "--server_num=2", "--trainer_num=2"}), Dialect::kPaddle2);
  EXPECT_EQ(dialect({"--gpus=0", "--job_id=a"}), Dialect::kPaddle2);
  EXPECT_EQ(dialect({"--selected_gpus=0", "--backend=nccl"}), Dialect::kFleetrun);
  EXPECT_EQ(dialect({"--selected_gpus=0", "--rdzv_id=x"}), Dialect::kPaddle18);
  EXPECT_EQ(dialect({"--devices=0", "--rdzv_id=x"}), Dialect::kPaddle2);
}

TEST(Dialect, VariablesDecideWhenTheCommandLineDoesNot) {
  EXPECT_EQ(dialect({}, {{"PADDLE_MASTER", "127.0.0.1:6170"}, {"PADDLE_NNODES", "1"}}),
            Dialect::kPaddle2);
  EXPECT_EQ(dialect({}, {{"PET_NPROC_PER_NODE", "2"}}), Dialect::kTorchrun);
  EXPECT_EQ(dialect({"--gpus=0"}, {{"PADDLE_JOB_ID", "x"}}), Dialect::kFleetrun)
      << "the command line first";
  EXPECT_EQ(dialect({}, {{"FLAGS_selected_gpus", "0"}}), Dialect::kOurs) << "not a flag's";
}

TEST(Dialect, ShownByPrintConfig) {
  EXPECT_NE(describe_options(parse({"--devices=0", "w"})).find("dialect: paddle2\n"),
            std::string::npos);
  EXPECT_NE(describe_options(parse({"w"})).find("dialect: launch\n"), std::string::npos);
}

TEST(Dialect, Paddle2sLogFolderDefaultsToLog) {
  const LaunchOptions o = parse({"--job_id=test1", "train.py"});
  EXPECT_EQ(o.log_dir, "log");
  EXPECT_TRUE(o.paddle2_log_folder());
  EXPECT_EQ(parse({"--job_id=test1", "--log_dir=/tmp/x", "train.py"}).log_dir, "/tmp/x");
  // The fleet launcher's default is ./log too (its launch.py), but not Paddle 2.x's folder.
  EXPECT_EQ(parse({"--gpus=0", "train.py"}).log_dir, "log");
  EXPECT_FALSE(parse({"--gpus=0", "train.py"}).paddle2_log_folder());
  EXPECT_FALSE(parse({"--gpus=0", "--log_dir=x", "train.py"}).paddle2_log_folder());
  EXPECT_FALSE(parse({"--selected_gpus=0", "train.py"}).log_dir) << "Paddle 1.8: the console";
  EXPECT_FALSE(parse({"--nproc_per_node=2", "train.py"}).log_dir) << "launch's own";
}

TEST(Backend, ValuesLaunchRuns) {
  const LaunchOptions none = parse({"w"});
  EXPECT_FALSE(none.backend);
  EXPECT_EQ(none.resolved_backend(), "gloo");

  const LaunchOptions gloo = parse({"--backend=gloo", "--nproc_per_node=3", "w"});
  EXPECT_EQ(gloo.backend, "gloo");
  EXPECT_EQ(gloo.nproc_per_node, 3);
  EXPECT_TRUE(gloo.selected_gpus.empty());
  EXPECT_EQ(gloo.resolved_backend(), "gloo");

  const LaunchOptions nccl = parse({"--backend", "nccl", "--gpus=0,1", "w"});
  EXPECT_EQ(nccl.selected_gpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(nccl.resolved_backend(), "nccl");

  MachineCounts two_gpus;
  two_gpus.gpus = 2;
  const LaunchOptions all = parse({"--backend=nccl", "w"}, {}, two_gpus);
  EXPECT_EQ(all.selected_gpus, (std::vector<int>{0, 1})) << "every visible GPU, as Paddle";
  EXPECT_EQ(all.nproc_per_node, 2);

  EXPECT_EQ(parse({"--backend=auto", "w"}).resolved_backend(), "gloo");
  EXPECT_EQ(parse({"--backend=auto", "--gpus=3", "w"}).resolved_backend(), "nccl");
  EXPECT_EQ(parse({"--backend=auto", "--server_num=1", "w"}).backend, "auto");
  EXPECT_NE(describe_options(gloo).find("backend: gloo\n"), std::string::npos);
  EXPECT_NE(describe_options(none).find("backend: auto\n"), std::string::npos);
}

TEST(Backend, BadValuesAreOneLineErrorsNamingPaddlesErrorType) {
  const std::string bad = error_of({"--backend=mpi", "w"});
  EXPECT_EQ(bad.rfind("--backend='mpi': ValueError: ", 0), 0u) << bad;
  EXPECT_NE(bad.find("'nccl', 'gloo', 'bkcl', 'auto'"), std::string::npos) << bad;
  EXPECT_EQ(bad.find('\n'), std::string::npos) << bad;

  for (const std::string device : {"bkcl", "hccl", "cncl", "xccl", "heter"}) {
    const std::string e = error_of({"--backend=" + device, "w"});
    EXPECT_EQ(e.rfind("--backend='" + device + "': that backend drives ", 0), 0u) << e;
    EXPECT_NE(e.find("which launch cannot"), std::string::npos) << e;
  }
  const std::string ps = error_of({"--backend=gloo", "--server_num=1", "w"});
  EXPECT_NE(ps.find("AssertionError: with a backend other than 'auto' the run mode must be "
                    "collective"),
            std::string::npos)
      << ps;
  EXPECT_NE(error_of({"--backend=gloo", "--gpus=0", "w"}).find("gloo runs CPU workers"),
            std::string::npos);
  EXPECT_NE(error_of({"--backend=nccl", "w"}).find("nccl needs GPUs"), std::string::npos);
  MachineCounts two_gpus;
  two_gpus.gpus = 2;
  EXPECT_NE(error_of({"--backend=nccl", "--nproc_per_node=3", "w"}, {}, two_gpus)
                .find("one worker per GPU"),
            std::string::npos);
}

TEST(AutoParallelConfig, RefusedNamingWhatItNeeds) {
  const std::string e = error_of({"--auto_parallel_config", "cfg.json", "w"});
  EXPECT_EQ(e.rfind("--auto_parallel_config (Paddle 2.x's): needs Paddle's auto-parallel tuner", 0),
            0u)
      << e;
  try {
    parse({"--auto_parallel_config=cfg.json", "w"});
    FAIL() << "accepted";
  } catch (const OptionsError& error) {
    EXPECT_EQ(error.exit_code(), 2);
  }
}

TEST(Paddle2Flags, LegacyTrueIsTheFleetLaunchersCommandLine) {
  EXPECT_EQ(dialect({"--legacy=true", "--job_id=x"}), Dialect::kFleetrun);
  EXPECT_EQ(dialect({"--legacy", "False", "--job_id=x"}), Dialect::kPaddle2);
  EXPECT_EQ(parse({"--legacy=1", "w"}).log_dir, "log") << "the fleet launcher's default";
  EXPECT_FALSE(parse({"--legacy=1", "w"}).paddle2_log_folder());
}

// The rest of Paddle 2.x's launcher (launch/context/args_envs.py) and the fleet launcher's.
TEST(Paddle2Flags, TheRestOfPaddlesSurface) {
  // Logs: every Paddle launcher appends; launch's own spelling and torchrun's truncate.
  EXPECT_FALSE(parse({"--job_id=j", "w"}).log_overwrite);
  EXPECT_FALSE(parse({"--gpus=0", "w"}).log_overwrite);
  EXPECT_FALSE(parse({"--selected_gpus=0", "w"}).log_overwrite);
  EXPECT_TRUE(parse({"--nproc_per_node=2", "w"}).log_overwrite);
  EXPECT_TRUE(parse({"--nproc-per-node=2", "w"}).log_overwrite);
  EXPECT_TRUE(parse({"--job_id=j", "--log_overwrite=true", "w"}).log_overwrite);
  EXPECT_TRUE(parse({"--job_id=j", "w"}, {{"PADDLE_LOG_OVERWRITE", "1"}}).log_overwrite);
  // --sort_ip, --enable_gpu_log.
  EXPECT_TRUE(parse({"--sort_ip", "true", "--master=10.0.0.1:8090", "--nnodes=2", "w"}).sort_ip);
  EXPECT_FALSE(parse({"--job_id=j", "w"}).sort_ip);
  EXPECT_TRUE(parse({"--job_id=j", "w"}).enable_gpu_log);
  EXPECT_FALSE(parse({"--enable_gpu_log=False", "w"}).enable_gpu_log);
  EXPECT_EQ(dialect({"--enable_gpu_log=0"}), Dialect::kPaddle2);
  // --elastic_level: <= 0 ends the job at a failure, >= 1 restarts (Paddle's default 3 times).
  LaunchOptions o = parse({"--elastic_level=1", "w"});
  EXPECT_EQ(o.elastic_level, 1);
  EXPECT_EQ(o.max_restarts, 3);
  EXPECT_EQ(parse({"--elastic_level=1", "--max_restart=7", "w"}).max_restarts, 7);
  o = parse({"--elastic_level=0", "--max_restart=2", "w"});
  EXPECT_EQ(o.max_restarts, 0);
  ASSERT_EQ(o.warnings.size(), 1u);
  EXPECT_NE(o.warnings[0].find("--max_restart=2 is not used"), std::string::npos) << o.warnings[0];
  EXPECT_EQ(
      parse({"w"}, {{"PADDLE_ELASTIC_LEVEL", "-1"}, {"PADDLE_MAX_RESTART", "2"}}).max_restarts, 0);
  EXPECT_NE(error_of({"--elastic_level=-2", "w"}).find("--elastic_level='-2'"), std::string::npos);
  // --elastic_timeout is --rdzv_conf last_call_timeout in Paddle's spelling.
  EXPECT_EQ(parse({"--elastic_timeout=12", "w"}).last_call_timeout, std::chrono::seconds(12));
  EXPECT_NE(
      error_of({"--elastic_timeout=12", "--rdzv_conf=last_call_timeout=3", "w"}).find("give one"),
      std::string::npos);
  // Gloo for a parameter-server job: Paddle 2.x's --with_gloo (default 1) and --gloo_port, the
  // fleet launcher's --http_port and PADDLE_WITH_GLOO (default 0).
  o = parse({"--server_num=1", "--trainer_num=1", "--gloo_port=7001", "w"});
  EXPECT_EQ(o.gloo_port, 7001);
  EXPECT_EQ(o.with_gloo, 1);
  o = parse({"--server_num=1", "--worker_num=1", "--http_port=7002", "w"});
  EXPECT_EQ(o.dialect, Dialect::kFleetrun);
  EXPECT_EQ(o.gloo_port, 7002);
  EXPECT_EQ(o.with_gloo, 0);
  EXPECT_EQ(parse({"--server_num=1", "--worker_num=1", "w"}, {{"PADDLE_WITH_GLOO", "1"}}).with_gloo,
            1);
  EXPECT_NE(error_of({"--gloo_port=0", "w"}).find("--gloo_port='0'"), std::string::npos);
  // PADDLE_DISTRI_BACKEND is the fleet launcher's --backend default.
  o = parse({"w"}, {{"PADDLE_DISTRI_BACKEND", "gloo"}});
  EXPECT_EQ(o.backend, "gloo");
  EXPECT_EQ(o.dialect, Dialect::kFleetrun);
  EXPECT_EQ(parse({"--backend=auto", "w"}, {{"PADDLE_DISTRI_BACKEND", "gloo"}}).backend, "auto");
}

TEST(Paddle2Flags, AutoTunerAndOtherDevicesAreRefusedNamingWhy) {
  EXPECT_EQ(
      error_of({"--auto_tuner_json=t.json", "w"}).rfind("--auto_tuner_json (Paddle 2.x's): ", 0),
      0u);
  EXPECT_NE(error_of({"--auto_cluster_config", "1", "w"}).find("auto-parallel tuner"),
            std::string::npos);
  EXPECT_NE(error_of({"--xpus=0,1", "w"}).find("XPUs"), std::string::npos);
  EXPECT_NE(error_of({"--npus=0", "w"}).find("NPUs"), std::string::npos);
}

TEST(SpellingOrigins, FromTheFlagTable) {
  const FlagSpec& gpus = flag("selected_gpus");
  EXPECT_EQ(spelling_origins(gpus, "selected_gpus"),
            (std::vector<Dialect>{Dialect::kOurs, Dialect::kPaddle18}));
  EXPECT_EQ(spelling_origins(gpus, "devices"), (std::vector<Dialect>{Dialect::kPaddle2}));
  EXPECT_EQ(spelling_origins(gpus, "gpus"), (std::vector<Dialect>{Dialect::kFleetrun}));
  EXPECT_EQ(spelling_origins(flag("nproc_per_node"), "nproc-per-node"),
            (std::vector<Dialect>{Dialect::kOurs, Dialect::kTorchrun}));
  EXPECT_EQ(spelling_origins(flag("module"), "m"),
            (std::vector<Dialect>{Dialect::kOurs, Dialect::kTorchrun}));
}

}  // namespace
}  // namespace ddl::launcher
