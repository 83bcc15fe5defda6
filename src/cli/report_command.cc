// `prefix-router report`: one comparison table and one HTML report from several results files
// (docs/results-format.md), so that runs made by different commands (simulate runs with different
// key normalisations, a prefix-length sweep's best run beside the peers, demo and simulate) are
// read side by side. Nothing is recomputed: the figures are the files' own.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "report/report.h"
#include "report/results.h"

namespace prefix_router::cli {
namespace {

struct ReportArgs {
  std::vector<std::string> inputs;
  std::string out;
  std::string json;
  std::string title = "prefix-router results";
  std::vector<std::string> notes;
};

int Run(const ReportArgs& a) {
  std::vector<report::RunResult> runs;
  for (const std::string& path : a.inputs) {
    Result<std::string> text = report::ReadFile(path);
    if (!text.ok()) {
      std::cerr << "prefix-router report: " << text.status().message() << "\n";
      return 1;
    }
    Result<std::vector<report::RunResult>> parsed = report::ParseResultsJson(*text);
    if (!parsed.ok()) {
      std::cerr << "prefix-router report: " << path << ": " << parsed.status().message() << "\n";
      return 2;
    }
    for (auto& r : *parsed) runs.push_back(std::move(r));
  }
  std::cout << report::ComparisonTable(runs);
  std::cout << fmt::format("{} run(s) from {} file(s).\n", runs.size(), a.inputs.size());
  if (!a.json.empty()) {
    if (Status s = report::WriteFile(a.json, report::ResultsJson(runs)); !s.ok()) {
      std::cerr << "prefix-router report: " << s.message() << "\n";
      return 1;
    }
  }
  if (!a.out.empty()) {
    report::ReportOptions ro;
    ro.title = a.title;
    ro.notes = a.notes;
    ro.notes.push_back("Made by: " + CommandLine());
    if (Status s = report::WriteFile(a.out, report::ReportHtml(runs, ro)); !s.ok()) {
      std::cerr << "prefix-router report: " << s.message() << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace

void AddReportCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<ReportArgs>();
  CLI::App* cmd =
      app.add_subcommand("report",
                         "Read results files written by simulate, bench or demo (--json) and print one comparison "
                         "table of all their runs; with --out, write one self-contained HTML report of them. Runs "
                         "of the same workload and fleet size are compared in one block, labelled by the settings "
                         "that differ. Exit 1 when a file cannot be read or written, 2 when one is not a results "
                         "file.");
  cmd->add_option("results", a->inputs, "Results files (JSON, docs/results-format.md)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--out", a->out, "Write the HTML report here");
  cmd->add_option("--json", a->json, "Write all the runs as one results file");
  cmd->add_option("--title", a->title, "The report's title")->capture_default_str();
  cmd->add_option("--note", a->notes, "A paragraph under the title (how the runs were made); repeatable");
  cmd->callback([a, exit_code] { *exit_code = Run(*a); });
}

}  // namespace prefix_router::cli
