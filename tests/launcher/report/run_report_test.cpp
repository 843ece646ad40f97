// The run report in this process: the metric-line parser, what the report keeps per process and
// generation (restarts keyed right, the loss curve bounded), report.json's contents, writing the
// two files atomically with errors that name the file, and the page's escaping.
#include "launcher/report/run_report.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "launcher/report/html.h"
#include "launcher/report/metric_line.h"
#include "tests/launcher/report/synthetic_job.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace ddl::launcher {
namespace {

using nlohmann::json;
using testing::at_seconds;
using testing::contains;
using testing::count;
using testing::exited_with;
using testing::killed_by;
using testing::read_file;
using testing::TempDir;
using Kind = MetricLine::Kind;

const WallClock::time_point kT0 = WallClock::time_point(std::chrono::seconds(1714564800));

RunReport small_report() { return RunReport({"job-1", "hello_worker", 0, 1}); }

// The one process named `name` in `report`'s JSON.
json process_of(const json& report, const std::string& name) {
  for (const json& p : report.at("processes")) {
    if (p.at("name") == name) return p;
  }
  ADD_FAILURE() << "no process " << name << " in " << report.dump();
  return json();
}

// --- parsing ----------------------------------------------------------------------------------

TEST(MetricLine, Progress) {
  const MetricLine m = parse_metric_line("epoch: 2, batch: 340, loss is: [0.123456]");
  EXPECT_EQ(m.kind, Kind::kProgress);
  EXPECT_EQ(m.epoch, 2);
  EXPECT_EQ(m.batch, 340);
  EXPECT_DOUBLE_EQ(m.loss, 0.123456);
  // train_mnist prints %.8g: exponents appear for small losses.
  EXPECT_DOUBLE_EQ(parse_metric_line("epoch: 0, batch: 0, loss is: [1.5e-05]").loss, 1.5e-05);
}

TEST(MetricLine, AccuracyAsRatioAndAsPercentage) {
  const MetricLine ratio = parse_metric_line("epoch: 0, test accuracy: 0.9712 (9712/10000)");
  EXPECT_EQ(ratio.kind, Kind::kAccuracy);
  EXPECT_EQ(ratio.epoch, 0);
  EXPECT_DOUBLE_EQ(ratio.accuracy, 0.9712);
  EXPECT_EQ(ratio.correct, 9712);
  EXPECT_EQ(ratio.total, 10000);
  const MetricLine percent = parse_metric_line("epoch: 4, test accuracy: 97.12% (9712/10000)");
  EXPECT_EQ(percent.kind, Kind::kAccuracy);
  EXPECT_EQ(percent.epoch, 4);
  EXPECT_DOUBLE_EQ(percent.accuracy, 0.9712);
  // Without a test set the counts say nothing; the printed figure stands.
  EXPECT_DOUBLE_EQ(parse_metric_line("epoch: 0, test accuracy: 50% (0/0)").accuracy, 0.5);
}

TEST(MetricLine, EpochSummary) {
  const MetricLine m = parse_metric_line("epoch: 1, mean loss: 0.0876, images/s: 1234.5");
  EXPECT_EQ(m.kind, Kind::kEpochSummary);
  EXPECT_EQ(m.epoch, 1);
  EXPECT_DOUBLE_EQ(m.mean_loss, 0.0876);
  EXPECT_DOUBLE_EQ(m.images_per_sec, 1234.5);
}

TEST(MetricLine, LeadingWhitespaceAndCarriageReturnAreIgnored) {
  EXPECT_EQ(parse_metric_line("  \tepoch: 0, batch: 10, loss is: [2.3]").kind, Kind::kProgress);
  EXPECT_EQ(parse_metric_line("epoch: 0, batch: 10, loss is: [2.3]\r").kind, Kind::kProgress);
}

TEST(MetricLine, OtherLinesAreNotMetrics) {
  for (const char* line : {"", "hello", "[rank 0] epoch: 0, batch: 0, loss is: [1]",
                           "epoch:0, batch: 0, loss is: [1]", "{\"rank\": 0}"}) {
    EXPECT_EQ(parse_metric_line(line).kind, Kind::kNone) << line;
  }
}

TEST(MetricLine, MalformedMetricLinesAreRecognisedAsSuch) {
  for (const char* line : {"epoch: x, batch: 0, loss is: [1]", "epoch: -1, batch: 0, loss is: [1]",
                           "epoch: 0, batch: 0, loss is: [1", "epoch: 0, batch: 0, loss is: [1] ",
                           "epoch: 0, batch: 0, loss is: [abc]", "epoch: 0, batch: , loss is: [1]",
                           "epoch: 0, test accuracy: 0.9 (9/10", "epoch: 0, test accuracy: (9/10)",
                           "epoch: 0, mean loss: 0.1, images/s:", "epoch: 0, something else",
                           "epoch: 99999999999999999999999, batch: 0, loss is: [1]"}) {
    EXPECT_EQ(parse_metric_line(line).kind, Kind::kMalformed) << line;
  }
}

// --- what the report keeps --------------------------------------------------------------------

TEST(RunReport, CountsEveryLineAndParsesTheMetricOnes) {
  RunReport report = small_report();
  report.generation_started(0, kT0, 1);
  report.process_started("rank 0", false, 0, 0, 100, kT0);
  report.process_line("rank 0", "starting");
  report.process_line("rank 0", "epoch: 0, batch: 0, loss is: [2.30]");
  report.process_line("rank 0", "epoch: 0, batch: 10, loss is: [oops]");
  report.process_line("rank 0", "epoch: 0, batch: 20, loss is: [1.10]");
  report.process_line("rank 0", "epoch: 0, mean loss: 1.5, images/s: 900");
  report.process_line("rank 0", "epoch: 0, test accuracy: 0.9000 (9000/10000)");
  const json p = process_of(report.to_json(), "rank 0");
  EXPECT_EQ(p["lines"], 6);
  EXPECT_EQ(p["metric_lines"], 4);
  EXPECT_EQ(p["malformed_metric_lines"], 1);
  EXPECT_EQ(p["loss"]["seen"], 2);
  EXPECT_EQ(p["loss"]["points"], json::parse("[[0,0,0,2.3],[0,0,20,1.1]]"));
  ASSERT_EQ(p["epochs"].size(), 1u);
  EXPECT_EQ(p["epochs"][0]["generation"], 0);
  EXPECT_EQ(p["epochs"][0]["epoch"], 0);
  EXPECT_EQ(p["epochs"][0]["mean_loss"], 1.5);
  EXPECT_EQ(p["epochs"][0]["images_per_sec"], 900.0);
  EXPECT_EQ(p["epochs"][0]["accuracy"], 0.9);
  EXPECT_EQ(p["epochs"][0]["correct"], 9000);
  EXPECT_EQ(p["mean_images_per_sec"], 900.0);
}

TEST(RunReport, RestartedGenerationsKeyTheirEpochsApart) {
  const json report = testing::synthetic_report(kT0).to_json();
  const json p = process_of(report, "rank 1");
  EXPECT_EQ(p["generations"], json::parse("[0, 1]"));
  // Generation 0 finished epoch 0 only; generation 1 resumed in epoch 1 and finished 1 and 2.
  std::vector<std::pair<int, int>> keys;
  for (const json& e : p["epochs"]) keys.emplace_back(e["generation"], e["epoch"]);
  EXPECT_EQ(keys, (std::vector<std::pair<int, int>>{{0, 0}, {1, 1}, {1, 2}}));
  // Loss points carry the generation that printed them.
  int in_generation[2] = {0, 0};
  for (const json& point : p["loss"]["points"]) ++in_generation[point[0].get<int>()];
  EXPECT_EQ(in_generation[0], 30 + 15);  // a line every 20 of 600 batches, then half an epoch
  EXPECT_EQ(in_generation[1], 15 + 30);
  const json first_of_gen1 = p["loss"]["points"][45];
  EXPECT_EQ(first_of_gen1, json::parse("[1, 1, 300, " + first_of_gen1[3].dump() + "]"));
  // The same epoch run again in a later generation is a record of its own.
  RunReport again = small_report();
  for (int g = 0; g < 2; ++g) {
    again.process_started("rank 0", false, 0, g, 10 + g, kT0);
    again.process_line("rank 0", "epoch: 3, mean loss: " + std::to_string(g + 1) + ", images/s: 5");
  }
  const json twice = process_of(again.to_json(), "rank 0")["epochs"];
  ASSERT_EQ(twice.size(), 2u);
  EXPECT_EQ(twice[0]["mean_loss"], 1.0);
  EXPECT_EQ(twice[1]["mean_loss"], 2.0);
  EXPECT_EQ(twice[1]["generation"], 1);
}

TEST(RunReport, JsonHoldsJobGenerationsAndRuns) {
  const json report = testing::synthetic_report(kT0).to_json();
  EXPECT_EQ(report["format"], kReportFormat);
  EXPECT_EQ(report["version"], kReportVersion);
  const json& job = report["job"];
  EXPECT_EQ(job["job_id"], "job-42");
  EXPECT_EQ(job["worker"], "/opt/ddl/bin/train_mnist");
  EXPECT_EQ(job["node_rank"], 0);
  EXPECT_EQ(job["nnodes"], 1);
  EXPECT_EQ(job["exit_code"], 0);
  EXPECT_EQ(job["summary"], "job succeeded after 1 restart");
  EXPECT_EQ(job["start"], "2024-05-01T12:00:00.000Z");
  EXPECT_EQ(job["start_ms"], 1714564800000LL);
  EXPECT_EQ(job["end"], "2024-05-01T12:00:48.200Z");
  EXPECT_DOUBLE_EQ(job["duration_s"].get<double>(), 48.2);

  ASSERT_EQ(report["generations"].size(), 2u);
  const json& g0 = report["generations"][0];
  EXPECT_EQ(g0["generation"], 0);
  EXPECT_EQ(g0["world_size"], 2);
  EXPECT_EQ(g0["outcome"], "restart: rank 1 exited with code 1");
  EXPECT_DOUBLE_EQ(g0["duration_s"].get<double>(), 19.6);
  EXPECT_EQ(report["generations"][1]["outcome"], "succeeded");

  const json r0 = process_of(report, "rank 0");
  EXPECT_EQ(r0["role"], "rank");
  EXPECT_EQ(r0["index"], 0);
  ASSERT_EQ(r0["runs"].size(), 2u);
  const json& killed = r0["runs"][0]["exit"];
  EXPECT_EQ(killed["text"], "was killed by SIGTERM (exit code 143)");
  EXPECT_EQ(killed["code"], 143);
  EXPECT_EQ(killed["signal"], SIGTERM);
  EXPECT_EQ(killed["signal_name"], "SIGTERM");
  EXPECT_EQ(r0["runs"][0]["pid"], 4100);
  EXPECT_EQ(r0["runs"][1]["pid"], 4200);
  EXPECT_EQ(r0["runs"][1]["start"], "2024-05-01T12:00:20.150Z");
  EXPECT_EQ(r0["exit"]["text"], "exited with code 0");  // the latest run's
  EXPECT_EQ(r0["exit"]["code"], 0);
  EXPECT_TRUE(r0["exit"]["signal"].is_null());
  EXPECT_DOUBLE_EQ(r0["cpu_seconds"].get<double>(), 42.25 + 60.5);  // summed over runs
  EXPECT_EQ(r0["peak_rss_kib"], 310000);                            // the largest run's
  EXPECT_EQ(r0["runs"][0]["peak_rss_kib"], 298765);
  const json r1 = process_of(report, "rank 1");
  EXPECT_EQ(r1["runs"][0]["exit"]["text"], "exited with code 1");
  EXPECT_EQ(r1["runs"][0]["exit"]["code"], 1);
  // Rank 1's rate: 850 - 35 + 10 * epoch over its three finished epochs.
  EXPECT_DOUBLE_EQ(r1["mean_images_per_sec"].get<double>(), 825.0);
  EXPECT_EQ(r1["lines"], 2 * (30 + 15 + 15 + 30) + 3 * 2);
}

// The pace and start-up phases the launcher learns from the progress messages: per run, and the
// slowest process per phase of each generation, in report.json and report.html.
TEST(RunReport, StartUpByPhasePaceAndStragglers) {
  RunReport report({"job", "train_mnist", 0, 1});
  report.generation_started(0, kT0, 2);
  const auto spawn = std::chrono::milliseconds(2);
  report.process_started("rank 0", false, 0, 0, 100, kT0 + spawn);
  report.process_started("rank 1", false, 1, 0, 101, kT0 + 2 * spawn);
  RunPace fast;
  fast.steps = 300;
  fast.last_step = 300;
  fast.step_seconds = 0.018;
  fast.own_seconds = 0.016;
  fast.phases = {{"store", 0.9}, {"communicator", 1.0}};
  fast.first_step_seconds = 1.1;
  RunPace slow = fast;
  slow.phases = {{"store", 1.5}, {"communicator", 1.6}};
  slow.first_step_seconds = 1.2;
  slow.straggler = true;
  report.process_pace("rank 0", 0, fast);
  report.process_pace("rank 1", 0, slow);
  report.straggler(kT0 + std::chrono::seconds(3), "rank 1", true, "straggler: rank 1 takes ...");
  for (int step = 3; step <= 10; ++step) {
    report.process_step("rank 0", step, 0.016);
    report.process_step("rank 1", step, 0.032);
  }
  const json j = report.to_json();
  const json& run1 = j["processes"][1]["runs"][0];
  EXPECT_NEAR(run1["startup"]["spawn_s"].get<double>(), 0.004, 1e-9);
  EXPECT_NEAR(run1["startup"]["store_s"].get<double>(), 1.504, 1e-9);
  EXPECT_NEAR(run1["startup"]["first_step_s"].get<double>(), 1.204, 1e-9);
  EXPECT_EQ(run1["pace"]["steps"], 300);
  EXPECT_EQ(run1["pace"]["straggler"], true);
  const json& slowest = j["generations"][0]["startup"];
  EXPECT_EQ(slowest["store"]["process"], "rank 1");
  EXPECT_EQ(slowest["communicator"]["process"], "rank 1");
  EXPECT_EQ(slowest["spawn"]["process"], "rank 1");
  EXPECT_NEAR(slowest["first_step"]["seconds"].get<double>(), 1.204, 1e-9);
  EXPECT_EQ(j["stragglers"][0]["process"], "rank 1");
  EXPECT_EQ(j["stragglers"][0]["named"], true);
  const std::string html = report.to_html();
  EXPECT_TRUE(contains(html, "<h2>Start-up by phase</h2>")) << html;
  EXPECT_TRUE(contains(html,
                       "<th class=\"num\">spawn</th><th class=\"num\">store</th><th "
                       "class=\"num\">communicator</th><th class=\"num\">first step</th>"))
      << html;
  EXPECT_TRUE(contains(html, "<strong>1.504 s</strong>")) << html;
  EXPECT_TRUE(contains(html, "<h2>Stragglers</h2>")) << html;
  EXPECT_EQ(j["processes"][1]["step_times"]["points"].size(), 8u);
  EXPECT_EQ(j["processes"][1]["step_times"]["points"][0], json({0, 3, 0.032}));
  EXPECT_TRUE(contains(html, "<figcaption>Own time per step</figcaption>")) << html;
  EXPECT_TRUE(contains(html, "own time per step (ms)")) << html;
  // A process that reported nothing: spawn only, and no pace.
  RunReport quiet({"job", "hello", 0, 1});
  quiet.generation_started(0, kT0, 1);
  quiet.process_started("rank 0", false, 0, 0, 7, kT0 + spawn);
  const json q = quiet.to_json();
  EXPECT_TRUE(q["processes"][0]["runs"][0]["pace"].is_null());
  EXPECT_EQ(q["processes"][0]["runs"][0]["startup"].size(), 1u);
  EXPECT_TRUE(q["stragglers"].empty());
}

// The loss chart's fractional epochs: from the batches per epoch the worker reported ("epoch E B"
// on DDL_PROGRESS_FD), else estimated from the progress lines (largest batch + log interval).
TEST(RunReport, TheLossChartTakesTheReportedBatchesPerEpoch) {
  auto two_epochs = [](std::optional<std::int64_t> said) {
    RunReport report({"job", "train_mnist", 0, 1});
    report.generation_started(0, kT0, 2);
    report.process_started("rank 0", false, 0, 0, 100, kT0);
    // A 2-rank job's 300 batches per epoch, printed every 200 (train_mnist's default).
    for (int epoch = 0; epoch < 2; ++epoch) {
      for (int batch : {0, 200}) {
        report.process_line("rank 0", "epoch: " + std::to_string(epoch) +
                                          ", batch: " + std::to_string(batch) + ", loss is: [0.5]");
      }
    }
    RunPace pace;
    pace.steps = 600;
    pace.batches_per_epoch = said;
    report.process_pace("rank 0", 0, pace);
    return report;
  };
  const RunReport said = two_epochs(300);
  EXPECT_EQ(said.to_json()["processes"][0]["runs"][0]["pace"]["batches_per_epoch"], 300);
  EXPECT_TRUE(contains(said.to_html(), "batch / 300 batches per epoch")) << said.to_html();
  const RunReport guessed = two_epochs(std::nullopt);
  EXPECT_TRUE(guessed.to_json()["processes"][0]["runs"][0]["pace"]["batches_per_epoch"].is_null());
  EXPECT_TRUE(contains(guessed.to_html(), "batch / 400 batches per epoch"));
}

// The pre-flight checks (--preflight): report.json's preflight[] and report.html's table.
TEST(RunReport, PreflightChecksAreKeptWithTheirNumbers) {
  RunReport report({"job", "train_mnist", 0, 3});
  PreflightNumbers check;
  check.generation = 0;
  check.seconds = 0.41;
  check.outcome = "the pre-flight check of generation 0 named node 2: ...";
  check.nodes = {{0, 17.3, 1463.0, 1350.0, ""},
                 {1, 13.6, 1288.0, 1463.0, ""},
                 {2, 1.2, std::nullopt, 2.5, "its matmul runs at 1.2 GFLOP/s"}};
  report.preflight(check);
  const json j = report.to_json();
  ASSERT_EQ(j["preflight"].size(), 1u);
  EXPECT_EQ(j["preflight"][0]["nodes"][2]["named"], "its matmul runs at 1.2 GFLOP/s");
  EXPECT_TRUE(j["preflight"][0]["nodes"][2]["best_out_mbs"].is_null());
  EXPECT_DOUBLE_EQ(j["preflight"][0]["nodes"][0]["gflops"].get<double>(), 17.3);
  const std::string html = report.to_html();
  EXPECT_TRUE(contains(html, "<h2>Pre-flight checks</h2>")) << html;
  EXPECT_TRUE(contains(html, "<strong>its matmul runs at 1.2 GFLOP/s</strong>")) << html;
  EXPECT_TRUE(contains(html, "<td class=\"num\">failed</td>")) << html;
  for (int i = 0; i < 100; ++i) report.preflight(check);
  EXPECT_EQ(report.to_json()["preflight"].size(), kMaxPreflightChecks);
}

TEST(RunReport, ProcessesAreOrderedRanksThenServers) {
  RunReport report = small_report();
  report.process_started("server 1", true, 1, 0, 1, kT0);
  report.process_started("rank 10", false, 10, 0, 2, kT0);
  report.process_started("server 0", true, 0, 0, 3, kT0);
  report.process_started("rank 2", false, 2, 0, 4, kT0);
  const json j = report.to_json();
  std::vector<std::string> names;
  for (const json& p : j["processes"]) names.push_back(p["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"rank 2", "rank 10", "server 0", "server 1"}));
  EXPECT_EQ(process_of(report.to_json(), "server 0")["role"], "server");
}

TEST(RunReport, EventsOutOfOrderAreRecordedNotThrown) {
  RunReport report = small_report();
  report.generation_started(2, kT0, 4);
  report.process_line("rank 3", "epoch: 0, batch: 0, loss is: [1]");  // never started
  report.process_exited("rank 3", 2, killed_by(SIGKILL), {1.0, 10}, kT0);
  report.generation_ended(5, kT0, "hung: no output for 60 s");  // never started
  const json j = report.to_json();
  const json p = process_of(j, "rank 3");
  EXPECT_EQ(p["index"], 3);
  EXPECT_EQ(p["role"], "rank");
  EXPECT_EQ(p["loss"]["points"][0][0], 2);  // the latest generation the report knew of
  ASSERT_EQ(p["runs"].size(), 1u);
  EXPECT_TRUE(p["runs"][0]["start"].is_null());
  EXPECT_EQ(p["exit"]["text"], "was killed by SIGKILL (exit code 137)");
  ASSERT_EQ(j["generations"].size(), 2u);
  EXPECT_TRUE(j["generations"][1]["start"].is_null());
  EXPECT_EQ(j["generations"][1]["outcome"], "hung: no output for 60 s");
  EXPECT_TRUE(j["job"]["exit_code"].is_null());
  EXPECT_TRUE(j["job"]["end"].is_null());
  // A running process has no exit yet.
  report.process_started("rank 0", false, 0, 2, 9, kT0);
  EXPECT_TRUE(process_of(report.to_json(), "rank 0")["exit"].is_null());
  EXPECT_FALSE(report.to_html().empty());
}

TEST(RunReport, LossCurveStaysBoundedEvenlySampledAndEndsAtTheLatestPoint) {
  RunReport report = small_report();
  report.process_started("rank 0", false, 0, 0, 1, kT0);
  const int lines = 100003;
  for (int i = 0; i < lines; ++i) {
    report.process_line("rank 0", testing::progress_line(i / 1000, i % 1000, 1.0 / (1 + i)));
  }
  const json loss = process_of(report.to_json(), "rank 0")["loss"];
  EXPECT_EQ(loss["seen"], lines);
  const json& points = loss["points"];
  ASSERT_LE(points.size(), kMaxLossPoints + 1);
  ASSERT_GE(points.size(), kMaxLossPoints / 2);
  auto ordinal = [](const json& p) { return p[1].get<int>() * 1000 + p[2].get<int>(); };
  EXPECT_EQ(ordinal(points.front()), 0);
  EXPECT_EQ(ordinal(points.back()), lines - 1);
  const long long stride = loss["stride"];
  EXPECT_GT(stride, 1);
  for (std::size_t i = 0; i + 1 < points.size(); ++i) {
    EXPECT_EQ(ordinal(points[i]), static_cast<long long>(i) * stride) << "point " << i;
    if (ordinal(points[i]) != static_cast<long long>(i) * stride) break;
  }
  // Exactly at the bound nothing is thinned yet.
  RunReport exact = small_report();
  for (std::size_t i = 0; i < kMaxLossPoints; ++i) {
    exact.process_line("rank 0", testing::progress_line(0, static_cast<int>(i), 1));
  }
  EXPECT_EQ(process_of(exact.to_json(), "rank 0")["loss"]["points"].size(), kMaxLossPoints);
}

TEST(RunReport, EpochRecordsAreBounded) {
  RunReport report = small_report();
  const std::size_t epochs = kMaxEpochRecords + 10;
  for (std::size_t e = 0; e < epochs; ++e) {
    report.process_line("rank 0", "epoch: " + std::to_string(e) + ", mean loss: 1, images/s: 2");
  }
  const json p = process_of(report.to_json(), "rank 0");
  EXPECT_EQ(p["epochs"].size(), kMaxEpochRecords);
  EXPECT_EQ(p["dropped_epoch_lines"], 10);
  EXPECT_EQ(p["metric_lines"], static_cast<long long>(epochs));
}

// --- writing and reading ----------------------------------------------------------------------

TEST(RunReport, WritesBothFilesAndNothingElse) {
  TempDir dir("ddl_report");
  const RunReport report = testing::synthetic_report(kT0);
  report.write(dir.str());
  EXPECT_EQ(dir.entries(), (std::set<std::string>{"report.html", "report.json"}));
  const json back = RunReport::read_json(dir.file("report.json"));
  EXPECT_EQ(back, json::parse(report.to_json().dump()));
  EXPECT_EQ(read_file(dir.file("report.html")), report.to_html());
  struct stat st {};
  ASSERT_EQ(::stat(dir.file("report.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST(RunReport, RewritingReplacesTheFilesByRename) {
  TempDir dir("ddl_report");
  RunReport report = small_report();
  report.write(dir.str());
  // A reader holding the old file keeps reading the old report whole.
  std::ifstream old_reader(dir.file("report.json"));
  struct stat before {};
  ASSERT_EQ(::stat(dir.file("report.json").c_str(), &before), 0);
  report.job_ended(kT0, 3, "rank 1 exited with code 3");
  report.write(dir.str());
  struct stat after {};
  ASSERT_EQ(::stat(dir.file("report.json").c_str(), &after), 0);
  EXPECT_NE(before.st_ino, after.st_ino);
  std::string old_text((std::istreambuf_iterator<char>(old_reader)), {});
  EXPECT_TRUE(json::parse(old_text)["job"]["exit_code"].is_null());
  EXPECT_EQ(RunReport::read_json(dir.file("report.json"))["job"]["exit_code"], 3);
  EXPECT_EQ(dir.entries(), (std::set<std::string>{"report.html", "report.json"}));
}

TEST(RunReport, WriteErrorsNameTheFileAndTheReason) {
  TempDir dir("ddl_report");
  const RunReport report = small_report();
  const std::string missing = dir.file("no/such/dir");
  try {
    report.write(missing);
    FAIL() << "wrote into " << missing;
  } catch (const ReportError& e) {
    EXPECT_TRUE(contains(e.what(), missing + "/report.json")) << e.what();
    EXPECT_TRUE(contains(e.what(), "No such file or directory")) << e.what();
  }
  // A file where the folder should be.
  { std::ofstream(dir.file("plain")) << "x"; }
  try {
    report.write(dir.file("plain"));
    FAIL() << "wrote into a regular file";
  } catch (const ReportError& e) {
    EXPECT_TRUE(contains(e.what(), dir.file("plain") + "/report.json")) << e.what();
    EXPECT_TRUE(contains(e.what(), "Not a directory")) << e.what();
  }
  // The rename fails (a folder is in the way): the temporary file goes, the folder stays.
  std::filesystem::create_directories(dir.file("out/report.html/keep"));
  try {
    report.write(dir.file("out"));
    FAIL() << "renamed over a folder";
  } catch (const ReportError& e) {
    EXPECT_TRUE(contains(e.what(), dir.file("out") + "/report.html")) << e.what();
    EXPECT_TRUE(contains(e.what(), "renaming")) << e.what();
  }
  std::set<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("out"))) {
    left.insert(e.path().filename().string());
  }
  EXPECT_EQ(left, (std::set<std::string>{"report.html", "report.json"}));
  EXPECT_TRUE(std::filesystem::is_directory(dir.file("out/report.html/keep")));
}

TEST(RunReport, ReadJsonRejectsWhatIsNotAReport) {
  TempDir dir("ddl_report");
  auto expect_error = [](const std::string& path, const std::string& part) {
    try {
      RunReport::read_json(path);
      ADD_FAILURE() << "read " << path;
    } catch (const ReportError& e) {
      EXPECT_TRUE(contains(e.what(), path)) << e.what();
      EXPECT_TRUE(contains(e.what(), part)) << e.what();
    }
  };
  expect_error(dir.file("absent.json"), "No such file");
  { std::ofstream(dir.file("text.json")) << "not json"; }
  expect_error(dir.file("text.json"), "not valid JSON");
  { std::ofstream(dir.file("other.json")) << R"({"format": "something else"})"; }
  expect_error(dir.file("other.json"), "not a run report");
  {
    std::ofstream(dir.file("future.json")) << R"({"format": "ddlaunch-run-report", "version": 99})";
  }
  expect_error(dir.file("future.json"), "version 99");
}

// --- the page ---------------------------------------------------------------------------------

TEST(HtmlEscape, EscapesMarkupAndReplacesBrokenText) {
  EXPECT_EQ(html_escape("<a href=\"x\">&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;");
  EXPECT_EQ(html_escape("tab\tnew\nline"), "tab\tnew\nline");
  EXPECT_EQ(html_escape(std::string("bell\x07", 5)), "bell\xEF\xBF\xBD");
  EXPECT_EQ(html_escape("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  EXPECT_EQ(html_escape("\xC3"), "\xEF\xBF\xBD");                                  // cut short
  EXPECT_EQ(html_escape("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong '/'
  EXPECT_EQ(html_escape("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(html_escape("\xFF"), "\xEF\xBF\xBD");
}

TEST(RunReportHtml, TextFromTheJobIsEscaped) {
  const std::string evil = "<script>alert('x')</script>";
  RunReport report({"job-<b>", "/bin/<img src=x>", 0, 1});
  report.generation_started(0, kT0, 1);
  report.process_started("rank 0", false, 0, 0, 1, kT0);
  report.process_line("rank 0", evil);
  report.process_line("rank 0", "epoch: 0, batch: 0, loss is: [" + evil + "]");
  report.process_exited("rank 0", 0, exited_with(1), {}, at_seconds(kT0, 1));
  report.generation_ended(0, at_seconds(kT0, 1), "rank 0 exited with code 1: " + evil);
  report.job_ended(at_seconds(kT0, 1), 1, "last line: " + evil + " \xFF");
  const std::string html = report.to_html();
  EXPECT_FALSE(contains(html, "<script")) << html;
  EXPECT_FALSE(contains(html, "<b>"));
  EXPECT_FALSE(contains(html, "<img"));
  EXPECT_TRUE(contains(html, "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
  EXPECT_TRUE(contains(html, "job-&lt;b&gt;"));
  EXPECT_TRUE(contains(html, "\xEF\xBF\xBD"));
  // Bytes that are not UTF-8 do not stop report.json either.
  TempDir dir("ddl_report");
  report.write(dir.str());
  const json back = RunReport::read_json(dir.file("report.json"));
  EXPECT_EQ(back["job"]["summary"], "last line: " + evil + " \xEF\xBF\xBD");
}

TEST(RunReportHtml, WithoutMetricsShowsTableAndTimelineAndSaysSo) {
  RunReport report = small_report();
  report.generation_started(0, kT0, 2);
  for (int r = 0; r < 2; ++r) {
    report.process_started("rank " + std::to_string(r), false, r, 0, 10 + r, kT0);
    report.process_line("rank " + std::to_string(r), "hello from rank " + std::to_string(r));
    report.process_exited("rank " + std::to_string(r), 0, exited_with(0), {0.01, 2048},
                          at_seconds(kT0, 0.4));
  }
  report.generation_ended(0, at_seconds(kT0, 0.4), "succeeded");
  report.job_ended(at_seconds(kT0, 0.5), 0, "job succeeded");
  const std::string html = report.to_html();
  EXPECT_TRUE(contains(html, "No training metrics in the output"));
  EXPECT_TRUE(contains(html, "id=\"processes\""));
  EXPECT_EQ(count(html, "<td class=\"name\">rank "), 2);
  EXPECT_TRUE(contains(html, "timeline of generations and processes"));
  EXPECT_EQ(count(html, "class=\"run\""), 2);
  EXPECT_FALSE(contains(html, "<polyline"));
  EXPECT_TRUE(contains(html, "2.0 MiB"));
  EXPECT_TRUE(contains(html, "exited with code 0"));
  EXPECT_TRUE(contains(html, "<!DOCTYPE html>"));
  // Self-contained: the only URL is the SVG namespace, which is a name, not something fetched.
  EXPECT_EQ(count(html, "http"), count(html, "xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_FALSE(contains(html, "<script"));
}

TEST(RunReportHtml, WithMetricsDrawsEveryRank) {
  const std::string html = testing::synthetic_report(kT0).to_html();
  EXPECT_FALSE(contains(html, "No training metrics"));
  for (const char* rank : {"rank 0", "rank 1"}) {
    const std::string series = std::string("class=\"series\" data-name=\"") + rank + "\"";
    // Loss: generation 0 and generation 1 (dashed); accuracy: one line.
    EXPECT_EQ(count(html, series), 3) << rank;
    EXPECT_EQ(count(html, std::string("class=\"bar\" data-name=\"") + rank + "\""), 1) << rank;
  }
  EXPECT_EQ(count(html, "stroke-dasharray=\"7 4\""), 2);
  EXPECT_EQ(count(html, "class=\"generation\""), 2);
  EXPECT_EQ(count(html, "class=\"run\""), 4);
  EXPECT_TRUE(contains(html, "restart: rank 1 exited with code 1"));
  EXPECT_TRUE(contains(html, "97.88%"));
  EXPECT_TRUE(contains(html, "Throughput (this node: 1,685 images/s)"));
}

}  // namespace
}  // namespace ddl::launcher
