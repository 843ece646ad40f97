#include "launcher/options/command_line.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "launcher/options/values.h"

namespace ddl::launcher {
namespace {

[[noreturn]] void unknown(const std::string& typed) {
  throw OptionsError("unknown option '" + typed + "' (see launch --help)");
}

[[noreturn]] void needs_value(const std::string& typed) {
  throw OptionsError("option '" + typed + "' needs a value (see launch --help)");
}

// Reads argv from `i` up to WORKER into `flags`; returns the index of WORKER (or argc).
class ArgvReader {
 public:
  ArgvReader(int argc, const char* const argv[], GivenFlags& flags,
             std::vector<TypedSpelling>& typed)
      : argc_(argc), argv_(argv), flags_(flags), typed_(typed) {}

  int read() {
    int i = 1;
    while (i < argc_) {
      const std::string a = argv_[i];
      if (a == "--") return i + 1;
      if (a.size() < 2 || a[0] != '-') return i;  // the first positional: WORKER
      i = a[1] == '-' ? read_long(a, i + 1) : read_short(a, i + 1);
    }
    return i;
  }

 private:
  // -h, -m, and -r/-t with their value as the next word, glued ("-r3") or after '='.
  int read_short(const std::string& a, int next) {
    const FlagSpec* f = find_short_flag(a[1]);
    if (f == nullptr) unknown(a);
    typed_.push_back(TypedSpelling{f, std::string(1, a[1])});
    if (!f->takes_value()) {
      if (a.size() > 2) unknown(a);
      flags_.add(*f, f->name, f->arity == Arity::kBoolean ? "true" : "");
      return next;
    }
    if (a.size() > 2) {
      flags_.add(*f, f->name, a.substr(a[2] == '=' ? 3 : 2));
      return next;
    }
    if (next >= argc_) needs_value(a);
    flags_.add(*f, f->name, argv_[next]);
    return next + 1;
  }

  int read_long(const std::string& a, int next) {
    std::string name = a.substr(2);
    const std::size_t eq = name.find('=');
    const std::optional<std::string> value =
        eq == std::string::npos ? std::nullopt : std::optional(name.substr(eq + 1));
    if (value) name = name.substr(0, eq);
    const std::optional<FlagMatch> match = find_flag(name);
    if (!match) unknown(a);
    const FlagSpec& f = *match->spec;
    typed_.push_back(TypedSpelling{&f, name});
    if (f.is_refused()) {
      throw OptionsError("--" + f.name + " (" + launcher_name(f.also_in.front()) +
                         "'s): " + f.refused);
    }
    if (f.arity == Arity::kSwitch) {
      // --quiet=true / --quiet=false are read as their words say; any other value is an error.
      const std::optional<bool> on = value ? bool_word(*value) : std::optional(true);
      if (!on) throw OptionsError("option '" + a + "' takes no value (see launch --help)");
      if (*on) flags_.add(f, match->spelling, "");
      return next;
    }
    if (value) {
      flags_.add(f, match->spelling, *value);
      return next;
    }
    if (f.arity == Arity::kValue) {
      if (next >= argc_) needs_value(a);
      flags_.add(f, match->spelling, argv_[next]);
      return next + 1;
    }
    // A boolean alone, or in Paddle's space form: --print_config False.
    if (next < argc_ && is_boolean_word(argv_[next])) {
      flags_.add(f, match->spelling, argv_[next]);
      return next + 1;
    }
    flags_.add(f, match->spelling, "true");
    return next;
  }

  int argc_;
  const char* const* argv_;
  GivenFlags& flags_;
  std::vector<TypedSpelling>& typed_;
};

// torchrun's PET_<FLAG> and Paddle 2.x's PADDLE_<FLAG> defaults (see parse_options in
// options.h), each variable's name and the spelling it stands for from the flag table.
class EnvironmentDefaults {
 public:
  EnvironmentDefaults(const env::EnvMap& env, GivenFlags& flags, std::vector<std::string>& used)
      : env_(env), flags_(flags), used_(used) {}

  void add_all() {
    const GivenFlags command_line = flags_;
    add_torchrun(command_line);
    add_paddle();
  }

 private:
  // The variable of `flag` whose name starts with `prefix` ("PET_", "PADDLE_", "TORCH").
  const FlagVariable& variable_of(const std::string& flag, const std::string& prefix) const {
    for (const FlagVariable& v : launcher::flag(flag).variables) {
      if (v.name.rfind(prefix, 0) == 0) return v;
    }
    throw std::logic_error("flag --" + flag + " has no " + prefix + " variable");
  }
  // The value of `flag`'s `prefix` variable, when it is set.
  std::optional<std::string> lookup(const std::string& flag, const std::string& prefix) const {
    return env::lookup(env_, variable_of(flag, prefix).name);
  }
  bool is_set(const std::string& flag, const std::string& prefix) const {
    return lookup(flag, prefix).has_value();
  }
  bool has_value(const std::string& flag, const std::string& prefix) const {
    const auto value = lookup(flag, prefix);
    return value && !value->empty();
  }
  // `flag` from its `prefix` variable when that is set and not empty (noted in `used_`).
  void add(const std::string& flag, const std::string& prefix) {
    if (!has_value(flag, prefix)) return;
    const FlagVariable& v = variable_of(flag, prefix);
    const std::string value = *lookup(flag, prefix);
    used_.push_back(v.name + "=" + value);
    const std::optional<FlagMatch> match = find_flag(v.spelling);
    flags_.add(*match->spec, match->spelling, value, v.name);
  }

  void add_torchrun(const GivenFlags& given) {
    // The nodes: only when the command line does not describe them in Paddle's spelling.
    const bool paddle_nodes = given.has("cluster_node_ips") || given.has("node_ip") ||
                              given.has("master") || given.has("standalone");
    if (!paddle_nodes) {
      for (const char* flag : {"nnodes", "node_rank"}) {
        if (!given.has(flag)) add(flag, "PET_");
      }
      add_torchrun_master(given);
    }
    if (!given.has("nproc_per_node") && !given.has("selected_gpus")) add("nproc_per_node", "PET_");
    for (const std::string& flag : others_with("PET_")) {
      if (!given.has(flag)) add(flag, "PET_");
    }
    // torch elastic's own variables (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE,
    // TORCH_ELASTIC_SHUTDOWN_TIMEOUT), after the PET_ ones.
    for (const std::string& flag : others_with("TORCH")) {
      if (!flags_.has(flag)) add(flag, "TORCH");
    }
  }

  // The flags that describe the nodes and the ranks per node: their variables apply by the
  // rules above and below (one spelling of the nodes wins), not one by one.
  static bool describes_nodes(const std::string& flag) {
    for (const char* f : {"nnodes", "node_rank", "master_addr", "master_port", "rdzv_endpoint",
                          "master", "cluster_node_ips", "nproc_per_node", "selected_gpus"}) {
      if (flag == f) return true;
    }
    return false;
  }
  // Every other flag the table gives a `prefix` variable, in the table's order.
  static std::vector<std::string> others_with(const std::string& prefix) {
    std::vector<std::string> out;
    for (const FlagSpec& f : flag_table()) {
      for (const FlagVariable& v : f.variables) {
        if (v.name.rfind(prefix, 0) == 0 && !describes_nodes(f.name)) out.push_back(f.name);
      }
    }
    return out;
  }

  // Node 0 by --master_addr/--master_port (torchrun's static backend) or --rdzv_endpoint (c10d);
  // when the variables give both, the backend decides which one is meant.
  void add_torchrun_master(const GivenFlags& given) {
    if (given.has("master_addr") || given.has("master_port")) {
      for (const char* flag : {"master_addr", "master_port"}) {
        if (!given.has(flag)) add(flag, "PET_");
      }
      return;
    }
    if (given.has("rdzv_endpoint")) return;
    const std::string backend = given.has("rdzv_backend")
                                    ? given.value("rdzv_backend")
                                    : lookup("rdzv_backend", "PET_").value_or("static");
    const bool has_master = is_set("master_addr", "PET_") || is_set("master_port", "PET_");
    if (is_set("rdzv_endpoint", "PET_") && (backend == "c10d" || !has_master)) {
      add("rdzv_endpoint", "PET_");
    } else {
      add("master_addr", "PET_");
      add("master_port", "PET_");
    }
  }

  // Paddle 2.x's launcher reads PADDLE_<NAME> for its flags (launch/context/args_envs.py);
  // Kubeflow's PaddleJob sets PADDLE_MASTER, PADDLE_NNODES and PADDLE_JOB_ID. Only for flags
  // still absent, after the PET_ ones.
  void add_paddle() {
    const bool nodes_given = flags_.has("cluster_node_ips") || flags_.has("node_ip") ||
                             flags_.has("master") || flags_.has("master_addr") ||
                             flags_.has("master_port") || flags_.has("rdzv_endpoint") ||
                             flags_.has("standalone");
    if (!nodes_given) {
      add("master", "PADDLE_");
      if (!flags_.has("nnodes")) add("nnodes", "PADDLE_");
      if (!flags_.has("node_rank")) add("node_rank", "PADDLE_");
      if (!flags_.has("master") && !flags_.has("nnodes")) add("cluster_node_ips", "PADDLE_");
    }
    if (!flags_.has("nproc_per_node") && !flags_.has("selected_gpus")) {
      if (has_value("selected_gpus", "PADDLE_")) {
        add("selected_gpus", "PADDLE_");
      } else {
        add("nproc_per_node", "PADDLE_");
      }
    }
    for (const std::string& flag : others_with("PADDLE_")) {
      if (!flags_.has(flag)) add(flag, "PADDLE_");
    }
    // The fleet launcher's first port (launch_utils.py, cloud_utils.py), after Paddle 2.x's.
    if (!flags_.has("started_port")) add("started_port", "FLAGS_");
  }

  const env::EnvMap& env_;
  GivenFlags& flags_;
  std::vector<std::string>& used_;
};

}  // namespace

void GivenFlags::add(const FlagSpec& spec, const std::string& spelling, std::string value,
                     std::string variable) {
  flags_[spec.name].push_back(GivenFlag{spelling, std::move(value), std::move(variable)});
}

std::optional<std::string> GivenFlags::variable_of(const std::string& flag,
                                                   const std::string& value) const {
  for (const auto& [name, given] : flags_) {
    for (const GivenFlag& g : given) {
      if ((name == flag || g.spelling == flag) && g.value == value && !g.variable.empty()) {
        return g.variable;
      }
    }
  }
  return std::nullopt;
}

bool GivenFlags::has(const std::string& name) const {
  flag(name);  // a name of the table (std::logic_error otherwise)
  return flags_.count(name) > 0;
}

std::optional<GivenFlag> GivenFlags::get(const std::string& name) const {
  flag(name);
  const auto it = flags_.find(name);
  if (it == flags_.end()) return std::nullopt;
  // The spellings given, in the table's order (the flag's name first).
  std::vector<std::string> spellings;
  for (const std::string& s : reported_spellings(flag(name))) {
    for (const GivenFlag& g : it->second) {
      if (g.spelling == s) {
        spellings.push_back(s);
        break;
      }
    }
  }
  if (spellings.size() > 1) {
    throw OptionsError("--" + spellings[0] + " and its alias --" + spellings[1] +
                       " were both given");
  }
  return it->second.back();
}

const FlagSpec& GivenFlags::typed(const std::string& name, ValueType type) {
  const FlagSpec& f = flag(name);
  if (f.type != type) throw std::logic_error("--" + name + " is read as another type");
  return f;
}

std::optional<int> GivenFlags::integer(const std::string& name) const {
  const FlagSpec& f = typed(name, ValueType::kInt);
  const auto g = get(name);
  if (!g) return std::nullopt;
  return parse_int_flag(g->spelling, g->value, static_cast<int>(f.min), static_cast<int>(f.max));
}

std::optional<std::chrono::milliseconds> GivenFlags::seconds(const std::string& name) const {
  const FlagSpec& f = typed(name, ValueType::kSeconds);
  const auto g = get(name);
  if (!g) return std::nullopt;
  return parse_seconds(g->spelling, g->value, f.allow_zero);
}

bool GivenFlags::boolean(const std::string& name) const {
  const FlagSpec& f = typed(name, ValueType::kBool);
  const auto g = get(name);
  return g ? parse_bool(g->spelling, g->value) : parse_bool(f.name, f.default_text);
}

std::optional<std::string> GivenFlags::name_value(const std::string& name) const {
  typed(name, ValueType::kName);
  const auto g = get(name);
  if (!g) return std::nullopt;
  return parse_name(g->spelling, g->value);
}

std::optional<std::string> GivenFlags::choice(const std::string& name) const {
  const FlagSpec& f = typed(name, ValueType::kChoice);
  const auto g = get(name);
  if (!g) return std::nullopt;
  if (std::find(f.choices.begin(), f.choices.end(), g->value) == f.choices.end()) {
    bad_value(g->spelling, g->value, f.expected);
  }
  return g->value;
}

CommandLine read_command_line(int argc, const char* const argv[], const env::EnvMap& env) {
  CommandLine out;
  int worker = ArgvReader(argc, argv, out.flags, out.typed).read();
  for (; worker < argc; ++worker) out.worker.emplace_back(argv[worker]);
  EnvironmentDefaults(env, out.flags, out.from_environment).add_all();
  return out;
}

}  // namespace ddl::launcher
