// A made-up train_mnist job fed to a RunReport the way the supervisor feeds one: 2 ranks, 3
// epochs of 600 batches (a progress line every 20), a failure of rank 1 halfway through epoch 1
// and a second generation that resumes there and finishes epochs 1 and 2.
#pragma once

#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "launcher/report/run_report.h"

namespace ddl::testing {

using launcher::RunReport;
using launcher::WallClock;

// A wait status as waitpid() reports it.
inline int exited_with(int code) { return (code & 0xff) << 8; }
inline int killed_by(int signo) { return signo & 0x7f; }

inline WallClock::time_point at_seconds(WallClock::time_point t0, double seconds) {
  return t0 + std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
}

constexpr int kSyntheticBatches = 600;
constexpr int kSyntheticInterval = 20;

inline std::string progress_line(int epoch, int batch, double loss) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "epoch: %d, batch: %d, loss is: [%.6f]", epoch, batch, loss);
  return buf;
}

// Progress lines of one rank for batches [from, to) of `epoch`, and, when the epoch is finished,
// its mean-loss and accuracy lines.
inline void synthetic_epoch(RunReport& report, int rank, int epoch, int from, int to) {
  const std::string name = "rank " + std::to_string(rank);
  for (int batch = from; batch < to; batch += kSyntheticInterval) {
    const double step = epoch * kSyntheticBatches + batch;
    const double loss = 2.2 * std::exp(-step / 250.0) + 0.06 +
                        0.05 * std::sin(step / 17.0 + rank) * std::exp(-step / 900.0);
    report.process_line(name, progress_line(epoch, batch, loss));
    report.process_line(name, "a line that is only counted");
  }
  if (to == kSyntheticBatches) {
    char buf[128];
    const double mean_loss = 0.1 + 0.4 * std::exp(-epoch);
    const double rate = 850.0 - 35 * rank + 10 * epoch;
    std::snprintf(buf, sizeof(buf), "epoch: %d, mean loss: %.6f, images/s: %.1f", epoch, mean_loss,
                  rate);
    report.process_line(name, buf);
    const int correct[] = {9512, 9701, 9788};
    std::snprintf(buf, sizeof(buf), "epoch: %d, test accuracy: %.4f (%d/10000)", epoch,
                  correct[epoch % 3] / 10000.0, correct[epoch % 3]);
    report.process_line(name, buf);
  }
}

inline RunReport synthetic_report(WallClock::time_point t0) {
  RunReport report({"job-42", "/opt/ddl/bin/train_mnist", 0, 1});
  auto at = [&](double s) { return at_seconds(t0, s); };
  // Generation 0: epoch 0, then half of epoch 1; rank 1 fails, rank 0 is stopped.
  report.generation_started(0, at(0), 2);
  for (int rank = 0; rank < 2; ++rank) {
    report.process_started("rank " + std::to_string(rank), false, rank, 0, 4100 + rank, at(0.05));
  }
  for (int rank = 0; rank < 2; ++rank) {
    synthetic_epoch(report, rank, 0, 0, kSyntheticBatches);
    synthetic_epoch(report, rank, 1, 0, kSyntheticBatches / 2);
  }
  report.process_exited("rank 1", 0, exited_with(1), {41.5, 301234}, at(19.2));
  report.process_exited("rank 0", 0, killed_by(SIGTERM), {42.25, 298765}, at(19.6));
  report.generation_ended(0, at(19.6), "restart: rank 1 exited with code 1");
  // Generation 1 resumes in the middle of epoch 1 and finishes epoch 2.
  report.generation_started(1, at(20.1), 2);
  for (int rank = 0; rank < 2; ++rank) {
    report.process_started("rank " + std::to_string(rank), false, rank, 1, 4200 + rank, at(20.15));
  }
  for (int rank = 0; rank < 2; ++rank) {
    synthetic_epoch(report, rank, 1, kSyntheticBatches / 2, kSyntheticBatches);
    synthetic_epoch(report, rank, 2, 0, kSyntheticBatches);
  }
  report.process_exited("rank 0", 1, exited_with(0), {60.5, 310000}, at(48.0));
  report.process_exited("rank 1", 1, exited_with(0), {59.75, 309000}, at(48.1));
  report.generation_ended(1, at(48.1), "succeeded");
  report.job_ended(at(48.2), 0, "job succeeded after 1 restart");
  return report;
}

}  // namespace ddl::testing
