// `launch_ps`: Paddle 1.8's parameter-server launcher's command line as launch's
// (launcher/options/launch_ps.h).
#include "launcher/options/launch_ps.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "launcher/options/options.h"

namespace ddl::launcher {
namespace {

using Args = std::vector<std::string>;

TEST(LaunchPs, TheProgramNameDecides) {
  EXPECT_TRUE(started_as_launch_ps("launch_ps"));
  EXPECT_TRUE(started_as_launch_ps("/opt/ddl/bin/launch_ps"));
  EXPECT_FALSE(started_as_launch_ps("/opt/ddl/bin/launch"));
  EXPECT_FALSE(started_as_launch_ps("launch_ps.sh"));
}

TEST(LaunchPs, NoFlagsArePaddle18sDefaults) {
  EXPECT_EQ(launch_ps_arguments({"launch_ps", "train.py", "--lr", "1"}),
            (Args{"launch_ps", "--server_num=2", "--worker_num=2", "--log_dir=logs",
                  "--started_port=6170", "train.py", "--lr", "1"}));
}

TEST(LaunchPs, GivenFlagsKeepTheirValues) {
  EXPECT_EQ(launch_ps_arguments({"launch_ps", "--worker_num", "3", "--log_dir=out",
                                 "--start_port=7000", "--server_num=1", "train.py"}),
            (Args{"launch_ps", "--worker_num", "3", "--log_dir=out", "--start_port=7000",
                  "--server_num=1", "train.py"}));
}

TEST(LaunchPs, EndpointsAreTheServerList) {
  EXPECT_EQ(launch_ps_arguments({"launch_ps", "--endpoints", "a:1,b:2", "train.py"}),
            (Args{"launch_ps", "--workers=127.0.0.1,127.0.0.1", "--log_dir=logs", "--servers",
                  "a:1,b:2", "train.py"}));
  EXPECT_EQ(
      launch_ps_arguments({"launch_ps", "--endpoints=a:1", "--worker_num=3", "--node_ip=10.0.0.2",
                           "train.py", "--endpoints"}),
      (Args{"launch_ps", "--workers=10.0.0.2,10.0.0.2,10.0.0.2", "--log_dir=logs", "--servers=a:1",
            "--worker_num=3", "--node_ip=10.0.0.2", "train.py", "--endpoints"}))
      << "the worker's own arguments are left alone";
}

TEST(LaunchPs, UnknownFlagsAreLaunchsError) {
  EXPECT_THROW(launch_ps_arguments({"launch_ps", "--no_such_flag=1", "train.py"}), OptionsError);
}

}  // namespace
}  // namespace ddl::launcher
