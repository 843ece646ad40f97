#include "launcher/supervise/peers.h"

namespace ddl::launcher {

void ExternalStop::request(int exit_code, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (request_) return;
  // A job stopped from outside never ends as a success (exit code 0 would report one).
  request_.emplace(exit_code == 0 ? 1 : exit_code, reason);
  if (wake_) wake_();
}

std::optional<std::pair<int, std::string>> ExternalStop::requested() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return request_;
}

void ExternalStop::generation_failed(Generation generation, int exit_code,
                                     const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failed_.emplace(generation.index(), std::make_pair(exit_code, reason)).second) return;
  if (wake_) wake_();
}

std::optional<std::pair<int, std::string>> ExternalStop::generation_failure(
    Generation generation) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = failed_.find(generation.index());
  if (it == failed_.end()) return std::nullopt;
  return it->second;
}

void ExternalStop::generation_succeeded(Generation generation) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!succeeded_.insert(generation.index()).second) return;
  if (wake_) wake_();
}

bool ExternalStop::succeeded(Generation generation) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return succeeded_.count(generation.index()) > 0;
}

void ExternalStop::set_waker(std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(mutex_);
  wake_ = std::move(wake);
  if (wake_ && request_) wake_();
}

}  // namespace ddl::launcher
