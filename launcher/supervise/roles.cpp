#include "launcher/supervise/roles.h"

#include <sys/wait.h>

#include "env/text.h"
#include "launcher/supervise/describe.h"

namespace ddl::launcher {

std::vector<RoleView> role_views(const WorkerGroup& group) {
  std::vector<RoleView> views;
  for (const auto& p : group.processes()) {
    const bool exited_zero =
        p->started && !p->running && WIFEXITED(p->status) && WEXITSTATUS(p->status) == 0;
    views.push_back(RoleView{p->role, p->running, exited_zero});
  }
  return views;
}

ServersAfterTrainers::ServersAfterTrainers(std::optional<std::chrono::milliseconds> grace,
                                           std::chrono::milliseconds kill_timeout)
    : grace_(grace), kill_timeout_(kill_timeout) {}

ServersVerdict ServersAfterTrainers::check(const std::vector<RoleView>& group) const {
  ServersVerdict v;
  int trainers = 0;
  int others_running = 0;
  for (const RoleView& p : group) {
    if (p.role == env::Role::kTrainer) {
      if (!p.exited_zero) return v;
      ++trainers;
    } else {
      others_running += p.running;
    }
  }
  if (trainers == 0 || others_running == 0) return v;
  v.action = grace_ ? ServersVerdict::Action::kGrace : ServersVerdict::Action::kStopNow;
  v.trainers = trainers;
  v.running = others_running;
  return v;
}

std::string ServersAfterTrainers::grace_line(const ServersVerdict& verdict) const {
  return "all " + std::to_string(verdict.trainers) + " trainer(s) exited with code 0; " +
         std::to_string(verdict.running) + " server(s) have " +
         env::seconds_text(grace_.value_or(std::chrono::milliseconds(0))) + " s to exit";
}

std::string ServersAfterTrainers::stop(const std::vector<RoleView>& group,
                                       const ServersVerdict& verdict) {
  stopped_ = StoppedServers{};
  for (const RoleView& p : group) {
    if (!p.running || p.role == env::Role::kTrainer) continue;
    ++(p.role == env::Role::kHeterTrainer ? stopped_.heter_workers : stopped_.servers);
  }
  if (stopped_.total() == 0) return "";
  stopped_.paddle = verdict.action == ServersVerdict::Action::kStopNow;
  if (stopped_.paddle) {
    // Paddle's words (1.8's launch_ps; the fleet launcher's when there are heter workers), on
    // stderr where Paddle's tests look for them.
    return stopped_.heter_workers > 0
               ? "all workers exit, going to finish parameter server and heter_worker."
               : "all workers exit, going to finish parameter server";
  }
  return "all " + std::to_string(verdict.trainers) + " trainer(s) exited with code 0 and " +
         std::to_string(stopped_.total()) + " server(s) are still running " +
         env::seconds_text(grace_.value_or(std::chrono::milliseconds(0))) +
         " s later (--server_grace): stopping them (SIGTERM, SIGKILL after " +
         env::seconds_text(kill_timeout_) + " s); the job succeeds";
}

std::vector<std::string> ServersAfterTrainers::success_lines(const std::string& after) const {
  std::vector<std::string> lines;
  if (stopped_.total() == 0) return lines;
  if (stopped_.paddle && stopped_.heter_workers > 0) lines.push_back("all heter_worker are killed");
  if (stopped_.paddle && stopped_.servers > 0) lines.push_back("all parameter server are killed");
  lines.push_back("job succeeded" + after + ": every trainer exited with code 0; " +
                  std::to_string(stopped_.total()) + " server(s) were stopped after them");
  return lines;
}

}  // namespace ddl::launcher
