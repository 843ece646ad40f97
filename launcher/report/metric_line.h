// The training-metric lines of train_mnist's output (the formats are listed in run_report.h),
// recognised without regular expressions: the report looks at every output line of every process,
// and most lines are rejected by their first few characters.
#pragma once

#include <string_view>

namespace ddl::launcher {

struct MetricLine {
  enum class Kind {
    kNone,          // not a metric line (only counted)
    kMalformed,     // starts with "epoch: " but matches no format
    kProgress,      // epoch, batch, loss
    kAccuracy,      // epoch, accuracy, correct, total
    kEpochSummary,  // epoch, mean_loss, images_per_sec
  };
  Kind kind = Kind::kNone;
  long epoch = 0;
  long batch = 0;
  double loss = 0;
  double accuracy = 0;  // a ratio: correct / total when total > 0, else the printed figure
  long correct = 0;
  long total = 0;
  double mean_loss = 0;
  double images_per_sec = 0;
};

// Leading spaces and tabs and one trailing '\r' are ignored. Numbers may be in any form strtod
// reads in the C locale ("nan" and "inf" included); epochs, batches and counts must be >= 0.
MetricLine parse_metric_line(std::string_view line);

}  // namespace ddl::launcher
