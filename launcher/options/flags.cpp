#include "launcher/options/flags.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "env/text.h"
#include "launcher/options/values.h"
#include "logging/log.h"

namespace ddl::launcher {
namespace {

// One entry of the table, declared in one expression (cf. torchrun's parser.add_argument and
// ABSL_FLAG): Flag("name").value("N").help("...")...
class Flag {
 public:
  explicit Flag(std::string name) { spec_.name = std::move(name); }
  Flag& value(std::string value_name) {
    spec_.arity = Arity::kValue;
    spec_.value_name = std::move(value_name);
    return *this;
  }
  Flag& switch_() {
    spec_.arity = Arity::kSwitch;
    return *this;
  }
  Flag& boolean(std::string default_text) {
    spec_.arity = Arity::kBoolean;
    spec_.value_name = "BOOL";
    spec_.type = ValueType::kBool;
    spec_.default_text = std::move(default_text);
    return *this;
  }
  Flag& short_name(char c) {
    spec_.short_name = c;
    return *this;
  }
  Flag& integer(long long min, long long max) {
    spec_.type = ValueType::kInt;
    spec_.min = min;
    spec_.max = max;
    return *this;
  }
  Flag& seconds(bool allow_zero) {
    spec_.type = ValueType::kSeconds;
    spec_.allow_zero = allow_zero;
    return *this;
  }
  Flag& name_value() {
    spec_.type = ValueType::kName;
    return *this;
  }
  Flag& choice(std::vector<std::string> choices, std::string expected) {
    spec_.type = ValueType::kChoice;
    spec_.choices = std::move(choices);
    spec_.expected = std::move(expected);
    return *this;
  }
  Flag& default_is(std::string text) {
    spec_.default_text = std::move(text);
    return *this;
  }
  Flag& alias(std::string name, Dialect origin, bool reported = false) {
    spec_.aliases.push_back(Spelling{std::move(name), {origin}, reported});
    return *this;
  }
  Flag& alias(std::string name, std::initializer_list<Dialect> origins, bool reported = false) {
    spec_.aliases.push_back(Spelling{std::move(name), origins, reported});
    return *this;
  }
  Flag& also_in(std::initializer_list<Dialect> origins) {
    spec_.also_in.insert(spec_.also_in.end(), origins.begin(), origins.end());
    return *this;
  }
  // PET_<NAME> (torchrun): stands for the flag under its own name.
  Flag& pet() {
    std::string var = "PET_" + spec_.name;
    std::transform(var.begin(), var.end(), var.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    spec_.variables.push_back(FlagVariable{var, spec_.name});
    return *this;
  }
  // Another variable that stands for the flag (PADDLE_..., FLAGS_..., TORCHELASTIC_...), given
  // under `spelling` (default: the flag's name).
  Flag& variable(std::string variable, std::string spelling = "") {
    spec_.variables.push_back(
        FlagVariable{std::move(variable), spelling.empty() ? spec_.name : std::move(spelling)});
    return *this;
  }
  Flag& group(FlagGroup g) {
    spec_.group = g;
    return *this;
  }
  Flag& help(std::string text) {
    spec_.help = std::move(text);
    return *this;
  }
  Flag& doc(std::string text) {
    spec_.doc = std::move(text);
    return *this;
  }
  // A flag of `origin` that launch refuses with the one-line error `why`.
  Flag& refused(std::string why, Dialect origin = Dialect::kTorchrun) {
    spec_.refused = std::move(why);
    spec_.group = FlagGroup::kCompatibility;
    spec_.also_in = {origin};
    return *this;
  }
  // Its spellings do not tell whose command line this is (see FlagSpec::marks_dialect).
  Flag& any_dialect() {
    spec_.marks_dialect = false;
    return *this;
  }
  Flag& config(std::function<std::optional<std::string>(const LaunchOptions&)> f) {
    spec_.config = std::move(f);
    return *this;
  }
  FlagSpec done() { return std::move(spec_); }

 private:
  FlagSpec spec_;
};

std::string or_none(const std::optional<std::string>& v) { return v.value_or("None"); }
std::string or_none(const std::optional<int>& v) { return v ? std::to_string(*v) : "None"; }
std::string python_bool(bool v) { return v ? "True" : "False"; }

// Fields printed only for a parameter-server job: a collective job's block stays as it was.
std::function<std::optional<std::string>(const LaunchOptions&)> ps_only(
    std::function<std::string(const LaunchOptions&)> f) {
  return [f = std::move(f)](const LaunchOptions& o) -> std::optional<std::string> {
    if (!o.ps_job()) return std::nullopt;
    return f(o);
  };
}

std::vector<FlagSpec> workers_and_devices() {
  std::vector<FlagSpec> t;
  t.push_back(
      Flag("selected_gpus")
          .value("0,1,...")
          .group(FlagGroup::kWorkers)
          .alias("gpus", Dialect::kFleetrun, true)
          .alias("devices", Dialect::kPaddle2, true)
          .also_in({Dialect::kPaddle18})
          .variable("PADDLE_DEVICES", "devices")
          .help("GPU ids, one worker per id; each worker gets FLAGS_selected_gpus=<id>")
          .doc("one worker per id; that worker gets `FLAGS_selected_gpus=<id>`. Ids are distinct "
               "non-negative integers; with `CUDA_VISIBLE_DEVICES` set they are the machine's "
               "and each worker gets the id's position in that list (an id not in it is an "
               "error). The GPUs need not exist for `launch`: the worker decides.")
          .config([](const LaunchOptions& o) -> std::optional<std::string> {
            if (!o.selected_gpus_given.empty()) return env::join(o.selected_gpus_given, ",");
            return o.selected_gpus.empty() ? "None" : env::join(o.selected_gpus, ",");
          })
          .done());
  t.push_back(
      Flag("nproc_per_node")
          .value("N|auto|cpu|gpu")
          .group(FlagGroup::kWorkers)
          .also_in({Dialect::kTorchrun, Dialect::kFleetrun, Dialect::kPaddle2})
          .pet()
          .variable("PADDLE_NPROC_PER_NODE")
          .default_is("the number of selected GPUs, else 1")
          .help("workers on this node when no GPUs are selected")
          .doc("workers on this node (CPU slots); must agree with `--selected_gpus`. torchrun's "
               "words: `gpu` one worker per visible GPU (`/dev/nvidiaN`, narrowed by "
               "`CUDA_VISIBLE_DEVICES`; none is an error), `cpu` one per usable core, `auto` "
               "`gpu` when there are GPUs, else `cpu`; with GPUs each worker gets one, as with "
               "`--selected_gpus=0,1,...` (`xpu` is an error).")
          .config([](const LaunchOptions& o) {
            return std::optional(std::to_string(o.nproc_per_node));
          })
          .done());
  t.push_back(
      Flag("backend")
          .value("NAME")
          .group(FlagGroup::kWorkers)
          .also_in({Dialect::kFleetrun})
          .variable("PADDLE_DISTRI_BACKEND")
          .default_is("auto")
          .help("auto, gloo (CPU workers, Gloo) or nccl (one GPU per worker, NCCL); given to the "
                "workers as PADDLE_DISTRI_BACKEND")
          .doc("the fleet launcher's collective backend, given to every trainer as "
               "`PADDLE_DISTRI_BACKEND`: `gloo` runs `--nproc_per_node` CPU workers (GPUs given "
               "with it are an error); `nccl` one worker per GPU (`--gpus`, else every visible "
               "GPU; none is an error); `auto` nccl with GPUs, else gloo. Paddle's `bkcl`, `hccl`, "
               "`cncl`, `heter` and `xccl` name devices launch cannot drive: a one-line error; any "
               "other value is Paddle's `ValueError`; with a parameter-server job anything but "
               "`auto` is Paddle's `AssertionError`. Exit 2 for each.")
          .config([](const LaunchOptions& o) { return std::optional(o.backend.value_or("auto")); })
          .done());
  t.push_back(Flag("module")
                  .switch_()
                  .short_name('m')
                  .group(FlagGroup::kWorkers)
                  .also_in({Dialect::kTorchrun})
                  .help("run WORKER as a Python module: PYTHON -u -m WORKER")
                  .done());
  t.push_back(
      Flag("no_python")
          .switch_()
          .group(FlagGroup::kWorkers)
          .also_in({Dialect::kTorchrun})
          .help("run WORKER itself even when it ends in .py")
          .doc("run WORKER itself, whatever its name. Without it a WORKER ending in `.py` runs as "
               "`python3 -u SCRIPT ARGS` (the `python3` first on PATH), as under torchrun and "
               "Paddle; the script needs neither the exec bit nor a shebang. Workers get "
               "`PYTHONUNBUFFERED=1` unless the caller set it.")
          .done());
  t.push_back(
      Flag("run_path")
          .switch_()
          .group(FlagGroup::kWorkers)
          .also_in({Dialect::kTorchrun})
          .help("run WORKER as a Python script whatever its name (PYTHON -u WORKER); wins over "
                "--no_python")
          .doc("WORKER is a script whatever its name: `python3 -u WORKER` in a fresh process (not "
               "`runpy` inside the agent); wins over `--no_python`, and `--module` with it is an "
               "error.")
          .done());
  t.push_back(
      Flag("python")
          .value("PROGRAM")
          .group(FlagGroup::kWorkers)
          .default_is("python3 on PATH")
          .help("the interpreter for .py scripts and -m; scripts run as PYTHON -u SCRIPT, as "
                "torchrun and Paddle run them")
          .doc("the interpreter for `.py` scripts and `-m`; an error with `--no_python`.")
          .done());
  t.push_back(
      Flag("bind")
          .value("MODE")
          .group(FlagGroup::kWorkers)
          .choice({"none", "core", "numa"}, "expected none, core or numa")
          .default_is("none")
          .help("pin each local process to CPUs: core = its own equal share of the CPUs launch "
                "may use, numa = the CPUs of one NUMA node (processes spread over the nodes)")
          .doc("pin each of this node's processes to CPUs before it starts (`sched_setaffinity`, "
               "as `taskset` or `numactl --cpunodebind` would): `core` gives each process its own "
               "contiguous, equal share of the CPUs `launch` may use (sharing only when there are "
               "more processes than CPUs); `numa` gives each the CPUs of one NUMA node, the "
               "processes spread over the nodes in local rank order. See "
               "[cpu-binding.md](cpu-binding.md).")
          .config([](const LaunchOptions& o) { return std::optional(cpu_bind_name(o.bind)); })
          .done());
  t.push_back(
      Flag("numa_binding")
          .value("MODE")
          .group(FlagGroup::kWorkers)
          .choice({"node", "socket", "exclusive", "core-complex"},
                  "expected node, socket, exclusive or core-complex")
          .also_in({Dialect::kTorchrun})
          .help("pin each worker to CPUs near its GPU: its NUMA node, socket, an exclusive share "
                "of the node's cores, or one core complex (torchrun's modes)")
          .doc("torchrun's: pin each worker to CPUs near its GPU (the NUMA node of the GPU's PCI "
               "device, from nvidia-smi and /sys): `node` every CPU of that node; `socket` every "
               "CPU of the node's socket; `exclusive` the node's physical cores split evenly "
               "among the node's GPUs; `core-complex` one group of cores sharing an L3 cache. "
               "Only CPUs `launch` may use count; it needs GPUs, and is an error with `--bind`. "
               "See [cpu-binding.md](cpu-binding.md).")
          .config([](const LaunchOptions& o) { return std::optional(or_none(o.numa_binding)); })
          .done());
  t.push_back(
      Flag("virtual_local_rank")
          .switch_()
          .group(FlagGroup::kWorkers)
          .also_in({Dialect::kTorchrun})
          .help("each worker sees only its own GPU, as device 0, and gets LOCAL_RANK=0")
          .doc("each worker gets `LOCAL_RANK=0` and `CUDA_VISIBLE_DEVICES` narrowed to its own GPU "
               "(the caller's `CUDA_VISIBLE_DEVICES` entry at its GPU index, else the index; a "
               "CPU worker's entry at its local rank, as torchrun does), so that code written "
               "for one GPU finds its device at index 0. The device variables say the same: "
               "`FLAGS_selected_gpus=0`, `PADDLE_LOCAL_DEVICE_IDS=0`, every "
               "`PADDLE_WORLD_DEVICE_IDS` entry 0. The rank's place on the node stays in "
               "`PADDLE_LOCAL_RANK`, its log stays `workerlog.N`.")
          .config([](const LaunchOptions& o) {
            return std::optional(python_bool(o.virtual_local_rank));
          })
          .done());
  return t;
}

std::vector<FlagSpec> logs_and_console() {
  std::vector<FlagSpec> t;
  t.push_back(
      Flag("log_dir")
          .value("DIR")
          .group(FlagGroup::kLogs)
          .also_in({Dialect::kTorchrun, Dialect::kPaddle18, Dialect::kPaddle2})
          .pet()
          .variable("PADDLE_LOG_DIR")
          .help("write rank N's stdout+stderr to DIR/workerlog.N (created if missing)")
          .doc("rank N's stdout+stderr go to `DIR/workerlog.N`, N the global rank (truncated at "
               "job start, DIR created if missing); this node's local rank 0 is echoed to the "
               "console unless `--quiet`. Without it every rank prints to the console, each line "
               "prefixed `[rank N] `, whole lines only. With Paddle 2.x's flags DIR is Paddle "
               "2.x's log folder (default `log`): `workerlog.N`/`serverlog.N` by local index and "
               "the launcher's own `JOB_ID.POD.log`; see [Whose flags](#whose-flags-the-dialect).")
          .config([](const LaunchOptions& o) { return std::optional(or_none(o.log_dir)); })
          .done());
  t.push_back(
      Flag("quiet")
          .switch_()
          .group(FlagGroup::kLogs)
          .help("with --log_dir: do not echo rank 0 to the console")
          .config([](const LaunchOptions& o) { return std::optional(python_bool(o.quiet)); })
          .done());
  t.push_back(Flag("log_level")
                  .value("LEVEL")
                  .group(FlagGroup::kLogs)
                  .any_dialect()
                  .also_in({Dialect::kPaddle2})
                  .variable("PADDLE_LOG_LEVEL")
                  .default_is("info")
                  .help("debug|info|warn|error or 10|20|30|40 (also passed to workers)")
                  .doc("`debug|info|warn|error`, or Paddle's 10/20/30/40; passed to the workers as "
                       "`DDL_LOG_LEVEL`.")
                  .config([](const LaunchOptions& o) {
                    return std::optional(std::to_string(logging::paddle_level(o.log_level)));
                  })
                  .done());
  t.push_back(
      Flag("log_overwrite")
          .boolean("true")
          .group(FlagGroup::kLogs)
          .any_dialect()
          .also_in({Dialect::kPaddle2})
          .variable("PADDLE_LOG_OVERWRITE")
          .default_is("true; false with Paddle's flags")
          .help("truncate the logs at job start; false appends to them")
          .doc("truncate the logs at job start; `false` appends to existing logs, as every Paddle "
               "launcher opens them (1.8, the fleet launcher and 2.x: two launchers of one job "
               "started in one folder then share `log/workerlog.0` there), and so it is the "
               "default with Paddle's flags.")
          .config(
              [](const LaunchOptions& o) { return std::optional(python_bool(o.log_overwrite)); })
          .done());
  t.push_back(
      Flag("enable_gpu_log")
          .boolean("true")
          .group(FlagGroup::kLogs)
          .also_in({Dialect::kPaddle2})
          .help("with GPUs and a log folder, write LOG_DIR/JOB_ID.gpu.log from nvidia-smi every "
                "30 s")
          .doc("with GPUs and a log folder, `LOG_DIR/<job_id>.gpu.log` holds what Paddle 2.x's "
               "watcher writes: the GPUs (`nvidia-smi --query-gpu=index,uuid,driver_version,...`), "
               "the processes on them, then every 30 s each GPU's utilization and memory, while "
               "the job runs. Nothing without GPUs, without `nvidia-smi` (one warning) or with "
               "`false`.")
          .config(
              [](const LaunchOptions& o) { return std::optional(python_bool(o.enable_gpu_log)); })
          .done());
  t.push_back(Flag("local_ranks_filter")
                  .value("0,1,...")
                  .group(FlagGroup::kLogs)
                  .also_in({Dialect::kTorchrun})
                  .default_is("local rank 0 with --log_dir, every rank without")
                  .help("show only these local ranks' lines on the console")
                  .done());
  for (const std::string stream : {"stdout", "stderr"}) {
    t.push_back(
        Flag("duplicate_" + stream + "_filters")
            .value("TEXT,...")
            .group(FlagGroup::kLogs)
            .also_in({Dialect::kTorchrun})
            .pet()
            .help("with --log_dir, copy the console's lines containing any TEXT to "
                  "LOG_DIR/filtered_" +
                  stream + ".log")
            .doc("torchrun's filtered copy of the console: with `--log_dir`, every line shown on "
                 "the console (the ranks `--local_ranks_filter`/`--tee` show, with their prefix) "
                 "that contains any of the comma-separated TEXTs (`,,` is a comma) is also "
                 "appended to `LOG_DIR/filtered_" +
                 stream +
                 ".log`. A rank's stdout and stderr "
                 "share one pipe here, so both filters see both streams. Without `--log_dir` "
                 "nothing is copied (a warning says so).")
            .done());
  }
  t.push_back(
      Flag("log_line_prefix_template")
          .value("TEMPLATE")
          .group(FlagGroup::kLogs)
          .also_in({Dialect::kTorchrun})
          .pet()
          .variable("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE")
          .help("put TEMPLATE before every console line of a worker: ${rank}, ${local_rank}, "
                "${role_name}, ${hostname} are replaced")
          .doc("every line a worker shows on the console starts with TEMPLATE, in which "
               "`${rank}` (or `$rank`), `${local_rank}`, `${role_name}` and `${hostname}` are "
               "replaced, `$$` is a `$` and anything else stays as typed (Python's "
               "`Template.safe_substitute`, as torchrun does); instead of `[rank N] `. "
               "`TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE` stands for it.")
          .config([](const LaunchOptions& o) {
            return std::optional(or_none(o.log_line_prefix_template));
          })
          .done());
  t.push_back(
      Flag("tee")
          .value("SPEC")
          .short_name('t')
          .group(FlagGroup::kLogs)
          .also_in({Dialect::kTorchrun})
          .help("with --log_dir, also show these local ranks on the console: 0 none, 1|2|3 all, "
                "or per rank 0:3,1:0")
          .doc("with `--log_dir`, also show these local ranks on the console: 0 none, 1, 2 or 3 "
               "all, or per rank `0:3,1:0`; each line is behind `[rank N] ` when more than one "
               "rank is shown.")
          .done());
  t.push_back(
      Flag("redirects")
          .value("SPEC")
          .short_name('r')
          .group(FlagGroup::kLogs)
          .also_in({Dialect::kTorchrun})
          .help("accepted and checked (0-3 or 0:3,1:0); with --log_dir both streams always go to "
                "the rank's log file")
          .done());
  t.push_back(
      Flag("print_config")
          .boolean("true")
          .group(FlagGroup::kLogs)
          .any_dialect()
          .also_in({Dialect::kPaddle18})
          .help("print the configuration and each rank's environment")
          .doc("print the `Configuration Arguments` block and the environment of this node's "
               "first rank, then of every other rank what differs from it (the job secret "
               "hidden). Also Paddle's space form `--print_config False`.")
          .config([](const LaunchOptions& o) { return std::optional(python_bool(o.print_config)); })
          .done());
  t.push_back(
      Flag("report")
          .boolean("true")
          .group(FlagGroup::kLogs)
          .help("write LOG_DIR/report.json and LOG_DIR/report.html (per rank: exit, CPU, memory, "
                "training curves; the generations)")
          .doc("write LOG_DIR/report.json and LOG_DIR/report.html (per rank: exit, CPU, memory, "
               "training curves; the generations); with Paddle 2.x's flags in the sibling folder "
               "LOG_DIR.launch/, so that LOG_DIR holds what Paddle 2.x's does.")
          .done());
  return t;
}

std::vector<FlagSpec> nodes() {
  std::vector<FlagSpec> t;
  t.push_back(
      Flag("cluster_node_ips")
          .value("ip1,ip2,...")
          .group(FlagGroup::kNodes)
          .alias("ips", {Dialect::kFleetrun, Dialect::kPaddle2}, true)
          .also_in({Dialect::kPaddle18})
          .variable("PADDLE_IPS", "ips")
          .default_is("127.0.0.1, or Slurm's node list")
          .help("addresses (IPv4 or host names) of all nodes; ranks are node-major in this order")
          .doc("every node's address (IPv4 or host name); ranks are node-major in list order. "
               "Inside a Slurm allocation the default is Slurm's node list.")
          .config([](const LaunchOptions& o) {
            return std::optional(env::join(o.cluster_node_ips, ","));
          })
          .done());
  t.push_back(
      Flag("node_ip")
          .value("IP")
          .group(FlagGroup::kNodes)
          .alias("host", Dialect::kPaddle2)
          .also_in({Dialect::kPaddle18})
          .default_is("127.0.0.1")
          .help("this node's address, one of --cluster_node_ips")
          .doc("this node's address: one of `--cluster_node_ips`; with `--nnodes` the address "
               "its workers are reached at (default: found by routing towards `--master_addr`).")
          .config([](const LaunchOptions& o) { return std::optional(o.node_ip); })
          .done());
  t.push_back(Flag("local_addr")
                  .value("HOST")
                  .group(FlagGroup::kNodes)
                  .also_in({Dialect::kTorchrun})
                  .pet()
                  .help("this node's address (the same as --node_ip)")
                  .done());
  t.push_back(
      Flag("nnodes")
          .value("N|MIN:MAX")
          .group(FlagGroup::kNodes)
          .also_in({Dialect::kTorchrun, Dialect::kPaddle2})
          .pet()
          .variable("PADDLE_NNODES")
          .help("number of nodes (with --node_rank, --master_addr); MIN:MAX for an elastic job "
                "that runs on any number of nodes in between")
          .doc("the node count (torchrun's spelling of a multi-node job, with `--node_rank` and "
               "`--master_addr`), or an elastic range `MIN:MAX`; see "
               "[Multi-node jobs](multi-node.md).")
          .config([](const LaunchOptions& o) -> std::optional<std::string> {
            if (o.elastic()) return std::to_string(*o.min_nnodes) + ":" + std::to_string(*o.nnodes);
            return or_none(o.nnodes);
          })
          .done());
  t.push_back(
      Flag("node_rank")
          .value("K")
          .integer(0, kMaxNodes - 1)
          .group(FlagGroup::kNodes)
          .alias("rank", Dialect::kPaddle2, true)
          .also_in({Dialect::kTorchrun})
          .pet()
          .variable("PADDLE_RANK", "rank")
          .help("this node's index, 0..nnodes-1")
          .doc("this node's index, 0..nnodes-1. Without it, `--rdzv_backend=c10d` or `--master` "
               "number the nodes in the order their launchers reach node 0, and an etcd control "
               "plane (`--rdzv_backend=etcd`, `--master=etcd://`) in the order they reach etcd.")
          .config([](const LaunchOptions& o) { return std::optional(or_none(o.node_rank)); })
          .done());
  t.push_back(
      Flag("master_addr")
          .value("HOST")
          .group(FlagGroup::kNodes)
          .also_in({Dialect::kTorchrun})
          .pet()
          .help("node 0's address (hosts the control store)")
          .doc("node 0's address; the workers see `MASTER_ADDR`/`MASTER_PORT` as given (rank 0's "
               "store); in a multi-node job launch's control store is on the next port.")
          .config([](const LaunchOptions& o) { return std::optional(or_none(o.master_addr)); })
          .done());
  t.push_back(
      Flag("master_port")
          .value("P")
          .integer(1, 65535)
          .group(FlagGroup::kNodes)
          .also_in({Dialect::kTorchrun})
          .pet()
          .default_is("started_port-1, else 29500")
          .help("multi-node: port of the control store on node 0; with --master_addr and no "
                "--started_port it is rank 0's MASTER_PORT and the control store takes the next "
                "port")
          .config([](const LaunchOptions& o) { return std::optional(or_none(o.master_port)); })
          .done());
  t.push_back(
      Flag("use_paddlecloud")
          .switch_()
          .group(FlagGroup::kNodes)
          .also_in({Dialect::kPaddle18})
          .help("take the nodes from PaddleCloud's PADDLE_TRAINERS, POD_IP, PADDLE_TRAINER_ID "
                "(when PADDLE_TRAINERS_NUM is not 1); the fleet launcher's automatic switch does "
                "the same without the flag")
          .doc("take the node list, this node and its rank from PaddleCloud's variables "
               "(`PADDLE_TRAINERS`, `POD_IP`, `PADDLE_TRAINER_ID`) and the endpoints from "
               "`DISTRIBUTED_TRAINER_ENDPOINTS` (with `TRAINER_PORTS_NUM`), else `PADDLE_PORT`, "
               "else port 6170, when `PADDLE_TRAINERS_NUM` is not 1 (as Paddle 1.8); every node "
               "starts its trainers without talking to the others. Without the flag the same "
               "happens when all three variables are set (the fleet launcher's switch); see "
               "[Multi-node jobs](multi-node.md#paddlecloud).")
          .config(
              [](const LaunchOptions& o) { return std::optional(python_bool(o.use_paddlecloud)); })
          .done());
  t.push_back(Flag("require_secret")
                  .switch_()
                  .group(FlagGroup::kNodes)
                  .help("refuse a multi-node job without DDL_JOB_SECRET (as DDL_REQUIRE_SECRET=1)")
                  .doc("refuse to start a multi-node job unless `DDL_JOB_SECRET` is set (exit 2), "
                       "instead of running it unauthenticated as torchrun and Paddle do; "
                       "`DDL_REQUIRE_SECRET=1` in the environment does the same for a whole site.")
                  .done());
  t.push_back(
      Flag("master")
          .value("HOST:PORT")
          .group(FlagGroup::kNodes)
          .also_in({Dialect::kPaddle2})
          .variable("PADDLE_MASTER")
          .help("node 0's HOST:PORT, the same as --master_addr HOST --master_port PORT; or "
                "etcd://HOST[:PORT][,HOST[:PORT]...], an etcd cluster as the control plane")
          .doc("node 0's `HOST:PORT` (also `http://HOST:PORT`), the same as `--master_addr HOST "
               "--master_port PORT`; or `etcd://HOST[:PORT][,HOST[:PORT]...]` (`etcd://` once, "
               "port default 2379): the job's control plane is that etcd cluster, which numbers "
               "the nodes unless `--rank` is given, as `--rdzv_backend=etcd` does; see "
               "[Multi-node jobs](multi-node.md), section *etcd control plane*.")
          .done());
  t.push_back(
      Flag("rank_mapping_file")
          .value("FILE")
          .group(FlagGroup::kNodes)
          .also_in({Dialect::kFleetrun})
          .help("with --enable_auto_mapping: a JSON file naming every node and its ranks, "
                "{\"ip_ranks\": [{\"ip\": \"10.0.0.1\", \"ranks\": [0, 1]}, ...]}")
          .doc("with `--enable_auto_mapping`: a JSON file naming every node and the global ranks "
               "it runs, `{\"ip_ranks\": [{\"ip\": \"10.0.0.1\", \"ranks\": [0, 1]}, "
               "{\"ip\": \"10.0.0.2\", \"ranks\": [2, 3, 4]}]}`. The nodes are the job's nodes "
               "in order (`--cluster_node_ips` is not used); a node's ranks are its workers in "
               "local rank order, the i-th on device i (or the i-th of `--selected_gpus`). The "
               "ranks must be 0..N-1, each once. It must be a regular file of at most 1 MiB (a "
               "FIFO, a device or a larger file is refused). See "
               "[multi-node.md](multi-node.md#rank-mapping).")
          .config(
              [](const LaunchOptions& o) { return std::optional(or_none(o.rank_mapping_file)); })
          .done());
  t.push_back(
      Flag("enable_auto_mapping")
          .boolean("false")
          .group(FlagGroup::kNodes)
          .also_in({Dialect::kFleetrun})
          .help("place the ranks as --rank_mapping_file says")
          .doc("place the ranks as `--rank_mapping_file` says (Paddle's `--enable_auto_mapping "
               "true`). Unlike Paddle's, `false` turns it off.")
          .config([](const LaunchOptions& o) {
            return std::optional(python_bool(o.enable_auto_mapping));
          })
          .done());
  return t;
}

// Multi-node jobs, continued: the rendezvous, ports and the names workers are told.
// A job on several hosts started from one terminal (launcher/fanout/fanout.h).
std::vector<FlagSpec> hosts() {
  std::vector<FlagSpec> t;
  t.push_back(
      Flag("hostfile")
          .value("FILE")
          .group(FlagGroup::kNodes)
          .help("start the job on every host of FILE from here (DeepSpeed's format: HOST "
                "slots=N per line), the others over ssh")
          .doc("the job's hosts, one per line as DeepSpeed and MPI write them (`worker-1 "
               "slots=4`; `#` comments and blank lines skipped; anything else is an error naming "
               "the line). This machine is the first host, node 0; `launch` starts the other "
               "hosts' launchers over OpenSSH and shows every node's lines here behind `HOST: `; "
               "see [One terminal, many hosts](multi-node.md#one-terminal-many-hosts). It must be "
               "a regular file of at most 1 MiB.")
          .done());
  t.push_back(Flag("hosts")
                  .value("H:N,...")
                  .short_name('H')
                  .group(FlagGroup::kNodes)
                  .help("the same as --hostfile, as a list: h1:4,h2:4 (horovodrun's -H)")
                  .doc("the job's hosts as a list, `h1:4,h2:4` (a host alone has one slot), as "
                       "horovodrun's `-H` spells it; otherwise as `--hostfile`.")
                  .done());
  t.push_back(
      Flag("include")
          .value("H[:S,...]@...")
          .group(FlagGroup::kNodes)
          .help("with --hostfile/--hosts: only these hosts (and slots), DeepSpeed's spelling")
          .doc("with `--hostfile`/`--hosts`: only these hosts, separated by `@`, each optionally "
               "with `:` and the slots (device indices) to use, `worker-1:0,2@worker-2`, as "
               "DeepSpeed spells it. Chosen slots become that host's `--selected_gpus`.")
          .done());
  t.push_back(Flag("exclude")
                  .value("H[:S,...]@...")
                  .group(FlagGroup::kNodes)
                  .help("with --hostfile/--hosts: not these hosts (or slots)")
                  .doc("with `--hostfile`/`--hosts`: leave out these hosts, or only these slots "
                       "of them (`worker-1:1@worker-3`), DeepSpeed's spelling.")
                  .done());
  t.push_back(Flag("num_nodes")
                  .value("N")
                  .integer(1, 100000)
                  .group(FlagGroup::kNodes)
                  .help("with --hostfile/--hosts: the first N hosts only")
                  .done());
  t.push_back(Flag("num_gpus")
                  .value("N")
                  .integer(1, 100000)
                  .group(FlagGroup::kNodes)
                  .help("with --hostfile/--hosts: the first N slots of each host only")
                  .done());
  t.push_back(Flag("ssh_port")
                  .value("P")
                  .integer(1, 65535)
                  .group(FlagGroup::kNodes)
                  .help("with --hostfile/--hosts: ssh's port on the other hosts (ssh -p)")
                  .done());
  t.push_back(
      Flag("forward_env")
          .value("NAME,...")
          .group(FlagGroup::kNodes)
          .help("with --hostfile/--hosts: also give these variables of this shell to every host")
          .doc("with `--hostfile`/`--hosts`: these variables of this shell also reach every "
               "host's launcher (and its workers), over ssh's input, as do `DDL_JOB_SECRET` and "
               "the `NAME=VALUE` lines of `.deepspeed_env` (this folder's, else `$HOME`'s).")
          .done());
  t.push_back(
      Flag("exit_with_stdin")
          .switch_()
          .group(FlagGroup::kNodes)
          .help("stop the job when standard input closes (how --hostfile's nodes follow it)")
          .doc("stop the job, as SIGTERM does, when the launcher's standard input reaches its "
               "end: the nodes `--hostfile` starts over ssh run so, so that a node whose ssh "
               "connection or first host goes away stops its workers.")
          .done());
  return t;
}

std::vector<FlagSpec> rendezvous() {
  std::vector<FlagSpec> t;
  t.push_back(
      Flag("rdzv_endpoint")
          .value("HOST[:PORT]")
          .group(FlagGroup::kNodes)
          .also_in({Dialect::kTorchrun})
          .pet()
          .help("node 0's HOST[:PORT] (port default 29400), the same as --master_addr HOST "
                "--master_port PORT; with --rdzv_backend=etcd the etcd cluster's "
                "HOST[:PORT][,HOST[:PORT]...] (port default 2379)")
          .doc("node 0's address and the control store's port (default 29400), the same as "
               "`--master_addr HOST --master_port PORT` (giving both is an error); `MASTER_PORT` "
               "is then a free port of rank 0, as torchrun's c10d gives. With "
               "`--rdzv_backend=etcd` or `etcd-v2` (where it is required): the etcd cluster's "
               "client endpoints, `HOST[:PORT][,HOST[:PORT]...]`, each also `http://HOST:PORT`, "
               "port default 2379; `--master_addr`/`--master_port` are then an error.")
          .config([](const LaunchOptions& o) {
            // What the rendezvous reaches, as torchrun resolves it: the etcd members, else node
            // 0's HOST:PORT (the static backend's master_addr:master_port included).
            if (o.etcd()) return std::optional(env::join_endpoints(o.etcd()->endpoints));
            if (!o.master_addr) return std::optional<std::string>("None");
            return std::optional(*o.master_addr + ":" + std::to_string(o.workers_master_port()));
          })
          .done());
  t.push_back(
      Flag("rdzv_backend")
          .value("NAME")
          .group(FlagGroup::kNodes)
          .also_in({Dialect::kTorchrun})
          .pet()
          .choice({"c10d", "static", "etcd", "etcd-v2"},
                  "expected c10d, static, etcd or etcd-v2 (c10d and static: node 0 hosts the "
                  "control store; etcd and etcd-v2: an etcd cluster does)")
          .help("c10d or static: the control store on node 0; etcd or etcd-v2: an etcd cluster "
                "(--rdzv_endpoint) is the control plane")
          .doc("`c10d` or `static`: node 0's launcher hosts the control store (`c10d` numbers "
               "the nodes when `--node_rank` is not given). `etcd` or `etcd-v2` (torchrun's two "
               "etcd backends; both mean the same here, over etcd's v3 API): the etcd cluster "
               "named by `--rdzv_endpoint` is the job's control plane and numbers the nodes "
               "unless `--node_rank` is given; see "
               "[Multi-node jobs](multi-node.md), section *etcd control plane*.")
          .done());
  t.push_back(Flag("rdzv_id")
                  .value("ID")
                  .name_value()
                  .group(FlagGroup::kNodes)
                  .also_in({Dialect::kTorchrun})
                  .pet()
                  .default_is("DDL_JOB_ID, else a random one")
                  .help("the job's id, given to workers as TORCHELASTIC_RUN_ID")
                  .config([](const LaunchOptions& o) { return std::optional(or_none(o.rdzv_id)); })
                  .done());
  t.push_back(
      Flag("rdzv_conf")
          .value("KEY=VALUE,...")
          .group(FlagGroup::kNodes)
          .also_in({Dialect::kTorchrun})
          .pet()
          .help("last_call_timeout=S (elastic jobs: seconds to wait for more nodes once MIN have "
                "joined, default 30); etcd: protocol=https, cacert=, cert=, key=, username=, "
                "password=")
          .doc("`last_call_timeout=S`: in an elastic job, seconds to wait for more nodes once MIN "
               "have joined (default 30). With etcd (`--rdzv_backend=etcd|etcd-v2`, "
               "`--master=etcd://`): `protocol=https` for TLS, `cacert=` (or `ca_cert=`) the CA "
               "of the members' certificates, `cert=`/`key=` (or `ssl_cert=`/`ssl_cert_key=`) "
               "this client's certificate and key, `username=` (or `user=`) and `password=` "
               "for etcd's authentication. Other keys are an error.")
          .done());
  t.push_back(
      Flag("standalone")
          .switch_()
          .group(FlagGroup::kNodes)
          .also_in({Dialect::kTorchrun})
          .help("a single-node job with its own rendezvous (the default here; multi-node flags "
                "are then an error)")
          .doc("a single-node job with its own rendezvous: multi-node flags with it are an error "
               "and `PET_` node variables are ignored.")
          .done());
  t.push_back(
      Flag("started_port")
          .value("P")
          .integer(1, 65535)
          .group(FlagGroup::kNodes)
          .alias("start_port", Dialect::kPaddle2)
          .also_in({Dialect::kPaddle18})
          .variable("PADDLE_START_PORT")
          .variable("FLAGS_START_PORT")
          .default_is("FLAGS_START_PORT, else free ports (one node), else 6070 (several nodes "
                      "without DDL_JOB_SECRET; 6170 in PaddleCloud)")
          .help("endpoints are node_ip:P, P+1, ...; without it free ports are picked and, "
                "between nodes, exchanged through the control store (with DDL_JOB_SECRET) or "
                "Paddle's fixed default is used")
          .doc("every node's workers listen on `node_ip:P, P+1, ...`. Unset: `FLAGS_START_PORT` "
               "(the fleet launcher's variable) when set; else a single node picks free ports, a "
               "multi-node job with `DDL_JOB_SECRET` exchanges free ports through the control "
               "store, and one without a secret uses Paddle's fixed default, 6070 (6170, or "
               "`PADDLE_PORT`, in PaddleCloud); see [Multi-node jobs](multi-node.md).")
          .config([](const LaunchOptions& o) { return std::optional(or_none(o.started_port)); })
          .done());
  t.push_back(Flag("role")
                  .value("NAME")
                  .name_value()
                  .group(FlagGroup::kNodes)
                  .also_in({Dialect::kTorchrun})
                  .pet()
                  .default_is("default")
                  .help("the workers' ROLE_NAME")
                  .config([](const LaunchOptions& o) { return std::optional(o.role); })
                  .done());
  t.push_back(
      Flag("sort_ip")
          .boolean("false")
          .group(FlagGroup::kNodes)
          .also_in({Dialect::kPaddle2})
          .variable("PADDLE_SORT_IP")
          .help("number the nodes of a control-store job by their addresses (IPv4 order)")
          .doc("in a job whose nodes meet through a control plane (`--master`, `--rdzv_endpoint`, "
               "etcd), the ranks follow the nodes' addresses, IPv4 addresses in numeric order, "
               "then host names (as Paddle 2.x's master sorts its peers): the node with the "
               "lowest address runs ranks 0..n-1, whichever launcher came first.")
          .config([](const LaunchOptions& o) { return std::optional(python_bool(o.sort_ip)); })
          .done());
  t.push_back(
      Flag("elastic_timeout")
          .value("S")
          .seconds(true)
          .group(FlagGroup::kNodes)
          .also_in({Dialect::kPaddle2})
          .variable("PADDLE_ELASTIC_TIMEOUT")
          .default_is("30")
          .help("elastic jobs: seconds to wait for more nodes once MIN have joined")
          .doc("Paddle 2.x's spelling of `--rdzv_conf last_call_timeout=S`: in an elastic job "
               "(`--nnodes=MIN:MAX`), once MIN nodes have joined, how long to wait for more "
               "before starting; giving both is an error.")
          .config([](const LaunchOptions& o) {
            return std::optional(env::seconds_text(o.last_call_timeout));
          })
          .done());
  t.push_back(
      Flag("job_id")
          .value("NAME")
          .name_value()
          .group(FlagGroup::kNodes)
          .also_in({Dialect::kPaddle2})
          .variable("PADDLE_JOB_ID")
          .default_is("default")
          .help("the job's name, given to workers as PADDLE_JOB_ID")
          .doc("given to the workers as `PADDLE_JOB_ID`. It does not name launch's store job: "
               "that is `DDL_JOB_ID`. In Paddle 2.x's log folder it names launch's own log, "
               "`<job_id>.<pod>.log`, with every character outside `[A-Za-z0-9._-]` (and a "
               "leading `.`) written `_`, so that the file stays in the folder.")
          .config(
              [](const LaunchOptions& o) { return std::optional(o.job_id.value_or("default")); })
          .done());
  t.push_back(
      Flag("elastic_server")
          .value("HOST:PORT")
          .group(FlagGroup::kNodes)
          .also_in({Dialect::kFleetrun})
          .variable("PADDLE_ELASTIC_SERVER")
          .help("Paddle's elastic mode: the etcd server (with --job_id and --np) through which "
                "the nodes gather")
          .doc("the fleet launcher's elastic mode: the etcd server (`HOST:PORT`, also a list) "
               "through which the nodes find each other, as launch's etcd control plane. On "
               "when a job id (`--job_id`, `PADDLE_ELASTIC_JOB_ID`) and `--np` are given too; "
               "Kubernetes' `PADDLE_ELASTIC_ETCD_SERVICE_HOST`/`_PORT` stand for it. See "
               "[Multi-node jobs](multi-node.md), section *Paddle's elastic variables*.")
          .done());
  t.push_back(
      Flag("np")
          .value("N|MIN:MAX")
          .group(FlagGroup::kNodes)
          .also_in({Dialect::kFleetrun})
          .variable("PADDLE_ELASTIC_NP")
          .help("Paddle's elastic mode: the number of nodes, N (fault tolerance) or MIN:MAX "
                "(elastic)")
          .doc("the fleet launcher's elastic mode (with `--elastic_server` and a job id): the "
               "number of nodes. `N` is a fixed count (Paddle's fault-tolerance level 1: a "
               "failure restarts the job, a lost node is waited for); `MIN:MAX` an elastic job "
               "(level 2), as `--nnodes=MIN:MAX`, waiting `PADDLE_ELASTIC_TIMEOUT` (default "
               "120 s) for more than MIN nodes.")
          .done());
  t.push_back(Flag("rendezvous_timeout")
                  .value("S")
                  .seconds(false)
                  .group(FlagGroup::kNodes)
                  .default_is("300")
                  .help("seconds the workers may take to find each other")
                  .config([](const LaunchOptions& o) {
                    return std::optional(env::seconds_text(
                        o.rendezvous_timeout.value_or(env::kDefaultRendezvousTimeout)));
                  })
                  .done());
  return t;
}

std::vector<FlagSpec> failures() {
  std::vector<FlagSpec> t;
  t.push_back(
      Flag("max_restarts")
          .value("N")
          .integer(0, kMaxRestartsLimit)
          .group(FlagGroup::kFailures)
          .alias("max_restart", Dialect::kPaddle2)
          .also_in({Dialect::kTorchrun})
          .pet()
          .variable("PADDLE_MAX_RESTART")
          .default_is("0")
          .help("after a worker fails anywhere in the job (or the hang guard fires), stop every "
                "node's workers and start them all again, up to N times")
          .doc("after a failure anywhere in the job, stop every node's workers and start them "
               "all again, up to N times (Paddle 2.x's default is 3); see "
               "[Failure semantics](failures.md).")
          .config(
              [](const LaunchOptions& o) { return std::optional(std::to_string(o.max_restarts)); })
          .done());
  t.push_back(
      Flag("elastic_level")
          .value("N")
          .integer(-1, 1000)
          .group(FlagGroup::kFailures)
          .also_in({Dialect::kPaddle2})
          .variable("PADDLE_ELASTIC_LEVEL")
          .help("Paddle 2.x: -1 or 0, a failure ends the job; 1 (or more), restart the job up to "
                "--max_restart times (Paddle's default 3)")
          .doc("Paddle 2.x's fault-tolerance level: `-1` (its default) and `0` end the job at the "
               "first failure whatever `--max_restart` says (with a warning when it says more "
               "than 0), as Paddle's controller stops its pod; `1` or more restart the whole job "
               "after a failure, up to `--max_restart` times, 3 when not given (Paddle's "
               "default).")
          .config([](const LaunchOptions& o) -> std::optional<std::string> {
            return o.elastic_level ? std::to_string(*o.elastic_level) : "None";
          })
          .done());
  t.push_back(
      Flag("no_progress_restarts")
          .value("N")
          .integer(0, kMaxRestartsLimit)
          .group(FlagGroup::kFailures)
          .default_is("0, off")
          .help("stop restarting (exit code 93) once N failed generations in a row reported no "
                "checkpoint (or step) past the last one")
          .doc("stop restarting once N failed generations in a row made no progress: no "
               "checkpoint past the last one written (or, from workers that report no "
               "checkpoints, no step past the furthest reached), as the ranks report them on "
               "`DDL_PROGRESS_FD`; the job then exits 93, which a scheduler script can tell from a "
               "failure worth requeueing. See "
               "[Failure semantics](failures.md#no-progress-exit-code-93).")
          .config([](const LaunchOptions& o) {
            return std::optional(std::to_string(o.no_progress_restarts));
          })
          .done());
  t.push_back(
      Flag("hang_timeout")
          .value("S")
          .seconds(true)
          .group(FlagGroup::kFailures)
          .default_is("0, off")
          .help("fail the job when no rank has printed anything for S seconds; exit code 124")
          .config([](const LaunchOptions& o) -> std::optional<std::string> {
            return o.hang_timeout.count() == 0 ? "None" : env::seconds_text(o.hang_timeout);
          })
          .done());
  t.push_back(
      Flag("straggler")
          .value("MODE")
          .choice({"off", "warn", "evict"}, "expected off, warn or evict")
          .group(FlagGroup::kFailures)
          .default_is("warn")
          .help("warn: name a rank (or node) whose own step time (reported on DDL_PROGRESS_FD) "
                "is --straggler_ratio times the others' median; evict: an elastic job also goes "
                "on without a slow node; off: neither")
          .doc("`warn`: name a rank whose own time per step (from the steps workers report on "
               "`DDL_PROGRESS_FD`) stays `--straggler_ratio` times the other ranks' median, and a "
               "node whose ranks do against the other nodes, in the console, the log and the run "
               "report; `evict`: the same, and an elastic job (`--nnodes=MIN:MAX`, a restart "
               "left) re-forms without a slow node; `off`: neither. See "
               "[Failure semantics](failures.md#stragglers-and-the-step-timeout).")
          .config([](const LaunchOptions& o) {
            return std::optional(std::string(!o.pace.stragglers ? "off"
                                             : o.pace.evict     ? "evict"
                                                                : "warn"));
          })
          .done());
  t.push_back(
      Flag("straggler_ratio")
          .value("R")
          .group(FlagGroup::kFailures)
          .default_is("1.5")
          .help("how many times the other ranks' median step time makes a rank a straggler (> 1)")
          .config([](const LaunchOptions& o) {
            return std::optional(number_text(o.pace.straggler_ratio));
          })
          .done());
  t.push_back(
      Flag("step_timeout_factor")
          .value("K")
          .group(FlagGroup::kFailures)
          .default_is("4")
          .help("fail the job (exit code 124) when a rank that reports its steps finishes none for "
                "K times the job's median step time (0: off)")
          .config([](const LaunchOptions& o) {
            return std::optional(number_text(o.pace.step_timeout_factor));
          })
          .done());
  t.push_back(Flag("step_timeout_floor")
                  .value("S")
                  .seconds(true)
                  .group(FlagGroup::kFailures)
                  .default_is("10")
                  .help("the step timeout is never shorter than S seconds")
                  .config([](const LaunchOptions& o) {
                    return std::optional(env::seconds_text(o.pace.step_timeout_floor));
                  })
                  .done());
  t.push_back(
      Flag("preflight")
          .value("MODE")
          .choice({"auto", "off", "on"}, "expected auto, off or on")
          .group(FlagGroup::kFailures)
          .default_is("auto")
          .help("on: before each generation of a multi-node job, measure every node's compute "
                "and links and name a node far below the others (a fixed job stops, an elastic "
                "one goes on without it); auto: on when the nodes are on several machines")
          .doc("`on`: before each generation of a multi-node job starts its workers, every node "
               "measures its compute (a matmul) and its links to the others (in log2 N rounds of "
               "pairs); a node whose matmul is below the median divided by `--preflight_ratio`, "
               "whose best link is a tenth of the median, or that cannot be reached, is named. A "
               "job with a fixed `--nnodes` then stops; an elastic one with restarts left goes on "
               "without it. About 0.25 s per generation. `auto` (the default): on when the "
               "generation's nodes are on more than one machine (their addresses differ and are "
               "not all loopback), off for nodes that share one, whose numbers would only measure "
               "each other. See [Failure semantics](failures.md#the-pre-flight-check).")
          .config([](const LaunchOptions& o) {
            return std::optional(std::string(preflight_mode_name(o.preflight.mode)));
          })
          .done());
  t.push_back(
      Flag("preflight_ratio")
          .value("R")
          .group(FlagGroup::kFailures)
          .default_is("2")
          .help("a node whose matmul rate is below the nodes' median divided by R is named by "
                "the pre-flight check (> 1; links: 10)")
          .config(
              [](const LaunchOptions& o) { return std::optional(number_text(o.preflight.ratio)); })
          .done());
  t.push_back(
      Flag("kill_timeout")
          .value("S")
          .seconds(true)
          .group(FlagGroup::kFailures)
          .alias("shutdown_timeout", Dialect::kTorchrun)
          .variable("PET_SHUTDOWN_TIMEOUT", "shutdown_timeout")
          .variable("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "shutdown_timeout")
          .default_is("10")
          .help("seconds between SIGTERM and SIGKILL when stopping workers")
          .doc("grace between SIGTERM and SIGKILL when stopping workers (torchrun's default is "
               "30). `TORCH_ELASTIC_SHUTDOWN_TIMEOUT` stands for it, as for torchrun's "
               "`--shutdown-timeout`.")
          .config([](const LaunchOptions& o) {
            return std::optional(env::seconds_text(o.kill_timeout));
          })
          .done());
  return t;
}

std::vector<FlagSpec> parameter_servers() {
  std::vector<FlagSpec> t;
  t.push_back(
      Flag("server_num")
          .value("S")
          .integer(1, kMaxProcessesPerRole)
          .group(FlagGroup::kParameterServer)
          .also_in({Dialect::kFleetrun})
          .help("parameter-server job: S servers per node (trainers: --worker_num)")
          .config(ps_only([](const LaunchOptions& o) { return std::to_string(o.server_num); }))
          .done());
  t.push_back(
      Flag("worker_num")
          .value("W")
          .integer(1, kMaxProcessesPerRole)
          .group(FlagGroup::kParameterServer)
          .alias("trainer_num", Dialect::kPaddle2)
          .also_in({Dialect::kFleetrun})
          .default_is("--nproc_per_node, else 1")
          .help("parameter-server job: W trainers per node; needs --server_num or --servers")
          .config(ps_only([](const LaunchOptions& o) { return std::to_string(o.worker_num); }))
          .done());
  t.push_back(Flag("servers")
                  .value("ip:port,...")
                  .group(FlagGroup::kParameterServer)
                  .also_in({Dialect::kFleetrun})
                  .help("parameter-server job: every server's endpoint; this node starts those on "
                        "--node_ip (with --workers)")
                  .config(ps_only([](const LaunchOptions& o) -> std::string {
                    return o.servers.empty() ? "None" : env::join_endpoints(o.servers);
                  }))
                  .done());
  t.push_back(Flag("workers")
                  .value("ip:port,...")
                  .group(FlagGroup::kParameterServer)
                  .alias("trainers", Dialect::kPaddle2)
                  .also_in({Dialect::kFleetrun})
                  .help("parameter-server job: every trainer's endpoint; this node starts those on "
                        "--node_ip (with --servers)")
                  .config(ps_only([](const LaunchOptions& o) -> std::string {
                    return o.workers.empty() ? "None" : env::join_endpoints(o.workers);
                  }))
                  .done());
  t.push_back(
      Flag("gloo_port")
          .value("P")
          .integer(1, 65535)
          .group(FlagGroup::kParameterServer)
          .alias("http_port", Dialect::kFleetrun)
          .also_in({Dialect::kPaddle2})
          .variable("PADDLE_GLOO_PORT")
          .default_is("6767")
          .help("parameter-server job: the port of Gloo's HTTP store on the first server's host "
                "(PADDLE_GLOO_HTTP_ENDPOINT)")
          .doc("parameter-server job: every process gets `PADDLE_GLOO_HTTP_ENDPOINT=<first "
               "server's host>:P`, with `PADDLE_GLOO_RENDEZVOUS=3` and `PADDLE_GLOO_FS_PATH` (a "
               "fresh path, not created), as Paddle's launchers hand Paddle's role maker its Gloo "
               "rendezvous; the role maker of server 0 serves that store. The fleet launcher's "
               "`--http_port` is the same; where it picks a free port without the flag, launch "
               "uses Paddle 2.x's 6767 on every node alike.")
          .config(ps_only([](const LaunchOptions& o) { return std::to_string(o.gloo_port); }))
          .done());
  t.push_back(
      Flag("with_gloo")
          .value("N")
          .integer(0, 9)
          .group(FlagGroup::kParameterServer)
          .also_in({Dialect::kPaddle2})
          .variable("PADDLE_WITH_GLOO")
          .default_is("1 (Paddle 2.x), 0 (the fleet launcher)")
          .help("parameter-server job: PADDLE_WITH_GLOO for every process")
          .doc("parameter-server job: `PADDLE_WITH_GLOO` for every process (0: Paddle's role "
               "maker builds no Gloo context). Paddle 2.x's default is 1, the fleet launcher's "
               "0.")
          .config(ps_only([](const LaunchOptions& o) { return std::to_string(o.with_gloo); }))
          .done());
  t.push_back(Flag("server_grace")
                  .value("S")
                  .seconds(true)
                  .group(FlagGroup::kParameterServer)
                  .default_is("none: stopped at once, as Paddle's")
                  .help("parameter-server job: once this node's trainers all exited 0, seconds its "
                        "servers (and heter workers) may take to exit before they are stopped")
                  .config(ps_only([](const LaunchOptions& o) -> std::string {
                    return o.server_grace ? env::seconds_text(*o.server_grace) : "None";
                  }))
                  .done());
  t.push_back(
      Flag("heter_worker_num")
          .value("N[;N...]")
          .group(FlagGroup::kParameterServer)
          .also_in({Dialect::kFleetrun, Dialect::kPaddle2})
          .help("parameter-server job: heter workers per node in each heter stage (2, 3, ...)")
          .doc("parameter-server job: heter workers (`TRAINING_ROLE=HETER_TRAINER`, logs "
               "`heterlog.N`) per node in each heter stage, stages separated by `;` (`2`, "
               "`2;1`); with `--servers`/`--workers` it must agree with `--heter_workers`.")
          .config(ps_only([](const LaunchOptions& o) -> std::string {
            if (o.heter.empty()) return "None";
            std::string out;
            for (const auto& stage : o.heter) {
              out += (out.empty() ? "" : ";") + std::to_string(stage.count);
            }
            return out;
          }))
          .done());
  t.push_back(
      Flag("heter_workers")
          .value("ip:port,...[;...]")
          .group(FlagGroup::kParameterServer)
          .also_in({Dialect::kFleetrun, Dialect::kPaddle2})
          .help("parameter-server job: every heter worker's endpoint, stages separated by ';' "
                "(with --servers/--workers)")
          .config(ps_only([](const LaunchOptions& o) -> std::string {
            std::string out;
            for (const auto& stage : o.heter) {
              out += (out.empty() ? "" : ";") + env::join_endpoints(stage.endpoints);
            }
            return out;
          }))
          .done());
  t.push_back(
      Flag("heter_devices")
          .value("DEV[;DEV...]")
          .group(FlagGroup::kParameterServer)
          .also_in({Dialect::kFleetrun, Dialect::kPaddle2})
          .default_is("gpu in every stage")
          .help("parameter-server job: each heter stage's device type (HETER_DEVICE_TYPE), e.g. "
                "gpu;xpu")
          .config(ps_only([](const LaunchOptions& o) -> std::string {
            std::string out;
            for (const auto& stage : o.heter) out += (out.empty() ? "" : ";") + stage.device;
            return out;
          }))
          .done());
  t.push_back(
      Flag("run_mode")
          .value("MODE")
          .group(FlagGroup::kParameterServer)
          .also_in({Dialect::kFleetrun, Dialect::kPaddle2})
          .default_is("collective")
          .help("collective, ps or ps-heter (ps without counts: 1 server and 1 trainer, as "
                "Paddle 2.x)")
          .doc("`collective`, `ps` or `ps-heter` (the fleet launcher's: needs heter workers). "
               "`ps` without `--server_num`/`--servers` runs 1 server and 1 trainer per node, and "
               "given `--run_mode`, `--trainer_num` defaults to 1 whatever `--nproc_per_node` or "
               "`--devices` say (both unused then, with a warning), as Paddle 2.x's ps "
               "controller; `rpc` is an error.")
          .done());
  return t;
}

std::vector<FlagSpec> compatibility() {
  std::vector<FlagSpec> t;
  t.push_back(
      Flag("monitor_interval")
          .value("S")
          .seconds(true)
          .group(FlagGroup::kCompatibility)
          .also_in({Dialect::kTorchrun})
          .help("accepted (seconds >= 0); worker exits are noticed at once here, not by polling")
          .done());
  t.push_back(Flag("start_method")
                  .value("NAME")
                  .group(FlagGroup::kCompatibility)
                  .also_in({Dialect::kTorchrun})
                  .choice({"spawn", "fork", "forkserver"}, "expected spawn, fork or forkserver")
                  .default_is("spawn")
                  .help("spawn|fork|forkserver, accepted; every worker is a fresh process (exec)")
                  .done());
  t.push_back(Flag("event_log_handler")
                  .value("NAME")
                  .group(FlagGroup::kCompatibility)
                  .also_in({Dialect::kTorchrun})
                  .help("only 'null' (launch has no event handlers)")
                  .doc("only `null` (torchrun's default); others are an error.")
                  .done());
  t.push_back(
      Flag("signals_to_handle")
          .value("LIST")
          .group(FlagGroup::kCompatibility)
          .also_in({Dialect::kTorchrun})
          .help("only its default SIGTERM,SIGINT,SIGHUP,SIGQUIT, which launch always forwards "
                "(SIGUSR1 dumps stacks)")
          .done());
  t.push_back(
      Flag("legacy")
          .boolean("true")
          .group(FlagGroup::kCompatibility)
          .also_in({Dialect::kPaddle2})
          .default_is("false")
          .help("Paddle 2.x: true runs the command line as its legacy launcher (the fleet "
                "launcher's) would")
          .doc("Paddle 2.x's switch to its legacy launcher: `true` makes the command line the "
               "fleet launcher's (its dialect: `FLAGS_selected_gpus` set on CPU trainers, logs "
               "named by global rank, no `JOB_ID.POD.log`); see "
               "[Whose flags](#whose-flags-the-dialect).")
          .done());
  const std::string auto_tuner =
      "needs Paddle's auto-parallel tuner (paddle.distributed.auto_tuner, which runs trial jobs "
      "under Paddle's own launcher to choose a parallel strategy); launch has none: run the "
      "chosen configuration without it";
  t.push_back(Flag("auto_tuner_json").value("FILE").refused(auto_tuner, Dialect::kPaddle2).done());
  t.push_back(
      Flag("auto_cluster_config").value("BOOL").refused(auto_tuner, Dialect::kPaddle2).done());
  const std::string other_devices =
      "launch drives CUDA GPUs (--devices/--gpus/--selected_gpus) and CPUs only; Kunlun XPUs and "
      "Ascend NPUs are not supported";
  t.push_back(Flag("xpus").value("0,1,...").refused(other_devices, Dialect::kPaddle2).done());
  t.push_back(Flag("npus").value("0,1,...").refused(other_devices, Dialect::kPaddle2).done());
  t.push_back(Flag("elastic_pre_hook")
                  .value("CMD")
                  .refused("the fleet launcher's shell command before each start of an elastic "
                           "job is not run by launch; run it at the top of WORKER (each restart "
                           "runs WORKER again)",
                           Dialect::kFleetrun)
                  .done());
  const std::string shared_log =
      "not supported: a rank's stdout and stderr share one log here (filter LOG_DIR/workerlog.N)";
  t.push_back(Flag("logs_specs")
                  .value("NAME")
                  .refused("a Python entry point of torchrun's logging; launch writes "
                           "LOG_DIR/workerlog.N itself")
                  .done());
  t.push_back(Flag("auto_parallel_config")
                  .value("FILE")
                  .refused("needs Paddle's auto-parallel tuner (paddle.distributed.auto_parallel, "
                           "which searches a parallel strategy by running the job under Paddle's "
                           "own launcher); launch has none: run the tuned job without it",
                           Dialect::kPaddle2)
                  .done());
  t.push_back(Flag("help")
                  .switch_()
                  .short_name('h')
                  .group(FlagGroup::kGeneral)
                  .help("print this help")
                  .done());
  t.push_back(
      Flag("version").switch_().group(FlagGroup::kGeneral).help("print the version").done());
  return t;
}

std::vector<FlagSpec> make_table() {
  std::vector<FlagSpec> table;
  for (auto part : {workers_and_devices(), logs_and_console(), nodes(), hosts(), rendezvous(),
                    failures(), parameter_servers(), compatibility()}) {
    for (FlagSpec& f : part) table.push_back(std::move(f));
  }
  return table;
}

std::string underscores(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

}  // namespace

const char* launcher_name(Dialect dialect) {
  switch (dialect) {
    case Dialect::kOurs:
      return "launch";
    case Dialect::kTorchrun:
      return "torchrun";
    case Dialect::kPaddle18:
      return "Paddle 1.8";
    case Dialect::kFleetrun:
      return "fleetrun";
    case Dialect::kPaddle2:
      return "Paddle 2.x";
  }
  return "";
}

const char* group_title(FlagGroup group) {
  switch (group) {
    case FlagGroup::kWorkers:
      return "Workers and devices";
    case FlagGroup::kLogs:
      return "Logs and console";
    case FlagGroup::kNodes:
      return "Multi-node jobs";
    case FlagGroup::kFailures:
      return "Failures and restarts";
    case FlagGroup::kParameterServer:
      return "Parameter servers";
    case FlagGroup::kCompatibility:
      return "Other launchers' flags (compatibility only)";
    case FlagGroup::kGeneral:
      return "General";
  }
  return "";
}

const std::vector<FlagSpec>& flag_table() {
  static const std::vector<FlagSpec> table = make_table();
  return table;
}

std::optional<FlagMatch> find_flag(const std::string& typed) {
  const std::string name = underscores(typed);
  for (const FlagSpec& f : flag_table()) {
    if (f.name == name) return FlagMatch{&f, f.name};
    for (const Spelling& s : f.aliases) {
      if (s.name == name) return FlagMatch{&f, s.reported ? s.name : f.name};
    }
  }
  return std::nullopt;
}

const FlagSpec* find_short_flag(char c) {
  for (const FlagSpec& f : flag_table()) {
    if (f.short_name == c) return &f;
  }
  return nullptr;
}

const FlagSpec& flag(const std::string& name) {
  for (const FlagSpec& f : flag_table()) {
    if (f.name == name) return f;
  }
  throw std::logic_error("no flag '" + name + "' in the flag table");
}

std::vector<Dialect> spelling_origins(const FlagSpec& spec, const std::string& typed) {
  const std::string name = underscores(typed);
  std::vector<Dialect> origins;
  if (name == spec.name || (name.size() == 1 && name[0] == spec.short_name)) {
    origins.push_back(Dialect::kOurs);
    origins.insert(origins.end(), spec.also_in.begin(), spec.also_in.end());
  }
  for (const Spelling& s : spec.aliases) {
    if (s.name == name) origins.insert(origins.end(), s.origins.begin(), s.origins.end());
  }
  if (name == typed) return origins;
  // The dash form: torchrun's, when torchrun has the name.
  const bool torchrun =
      std::find(origins.begin(), origins.end(), Dialect::kTorchrun) != origins.end();
  return torchrun ? std::vector<Dialect>{Dialect::kOurs, Dialect::kTorchrun}
                  : std::vector<Dialect>{Dialect::kOurs};
}

std::vector<std::string> reported_spellings(const FlagSpec& spec) {
  std::vector<std::string> names{spec.name};
  for (const Spelling& s : spec.aliases) {
    if (s.reported) names.push_back(s.name);
  }
  return names;
}

}  // namespace ddl::launcher
