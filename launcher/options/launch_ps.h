// `launch_ps`: `launch` under the name of Paddle 1.8's `python -m paddle.distributed.launch_ps`
// (python/paddle/distributed/launch_ps.py), the parameter-server launcher of that release. Its
// command lines keep their meaning: without flags it runs 2 servers at 127.0.0.1:6170, 6171 and
// 2 trainers, writing serverlog.N and workerlog.N to ./logs; `--endpoints` is the server list
// (our --servers). Every other flag is launch's own.
#pragma once

#include <string>
#include <vector>

namespace ddl::launcher {

// True when the program was started as `launch_ps` (argv[0]'s file name).
bool started_as_launch_ps(const std::string& argv0);

// launch_ps's command line (argv[0] first) as launch's: `--endpoints` renamed to `--servers`, and
// launch_ps's defaults put in front for what the command line does not give (--server_num=2
// unless --servers, --worker_num=2, --log_dir=logs, --started_port=6170 unless --servers; with
// --servers, --workers naming --node_ip (127.0.0.1) once per trainer, as launch_ps starts them
// here).
// Throws OptionsError as launch's parsing does for an unknown flag.
std::vector<std::string> launch_ps_arguments(const std::vector<std::string>& argv);

}  // namespace ddl::launcher
